"""Engine behaviour per architecture family, checked against real vLLM figures where we have them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tkf_infra.sizing.arch import parse_arch
from tkf_infra.sizing.estimate import estimate
from tkf_infra.sizing.facts import ModelFacts
from tkf_infra.sizing.gpus import lookup_gpu
from tkf_infra.sizing.params import SizingError, SizingParams
from tkf_infra.sizing.suggest import suggest
from tkf_infra.sizing.versions import parse_vllm_version

DATA = Path(__file__).parent / "data"


def P(**kw: Any) -> SizingParams:
    """Sizing params for the vLLM release the H100 calibration sweep ran (0.19.0)."""
    return SizingParams(**{"vllm_version": "0.19.0", **kw})

H100 = lookup_gpu("H100-80GB")
V019 = P(gpu_memory_utilization=0.95, max_model_len=8192, max_num_batched_tokens=8192)


def cfg(name: str) -> dict[str, Any]:
    for folder in (DATA / "models" / "configs", DATA / "calibration" / "configs"):
        path = folder / name
        if path.exists():
            data: dict[str, Any] = json.loads(path.read_text())
            return data
    raise FileNotFoundError(name)


def facts(name: str, repo: str = "org/model") -> ModelFacts:
    return ModelFacts(repo=repo, revision="0" * 40, config=cfg(name))


def test_dense_llama_matches_vllm_print() -> None:
    # vLLM 0.19 printed: weights 14.99 GiB, 476,016 KV tokens, 58.11x concurrency at 8192.
    est = estimate(facts("meta-llama__Llama-3.1-8B.json"), H100, V019)
    assert est.weights_gib == pytest.approx(14.99, abs=0.03)
    assert est.kv_cache_tokens == pytest.approx(476016, rel=0.01)
    assert est.max_concurrency == pytest.approx(58.11, rel=0.01)
    assert est.fits


def test_tp_halves_weights_and_kv_per_token() -> None:
    f = facts("meta-llama__Llama-3.1-8B.json")
    tp1 = estimate(f, H100, V019)
    tp2 = estimate(f, H100, V019.model_copy(update={"tensor_parallel_size": 2}))
    assert tp2.weights_gib == pytest.approx(7.51, abs=0.03)  # printed by vLLM 0.19
    assert tp2.kv_bytes_per_token == tp1.kv_bytes_per_token / 2


def test_pipeline_parallel_splits_layers() -> None:
    est = estimate(facts("meta-llama__Llama-3.1-8B.json"), H100, V019.model_copy(update={"pipeline_parallel_size": 2}))
    assert est.weights_gib == pytest.approx(7.51, abs=0.03)
    assert est.kv_bytes_per_token == 16 * 2 * 8 * 128 * 2


def test_qwen3_dense() -> None:
    est = estimate(facts("Qwen__Qwen3-8B.json"), H100, V019)
    assert est.weights_gib == pytest.approx(15.27, abs=0.05)
    assert est.kv_cache_tokens == pytest.approx(418688, rel=0.01)


def test_gemma2_sliding_window_groups() -> None:
    # Hybrid manager: 21 sliding + 21 full layers share blocks; vLLM printed 168,880 tokens, 20.60x.
    est = estimate(facts("google__gemma-2-9b-it.json"), H100, V019)
    assert est.kv_cache_tokens == pytest.approx(168880, rel=0.01)
    assert est.max_concurrency == pytest.approx(20.60, rel=0.01)


def test_sliding_window_costs_less_than_full_for_long_context() -> None:
    f = facts("google__gemma-2-9b-it.json")
    full_cfg = dict(f.config, sliding_window=None)
    p = V019.model_copy(update={"max_model_len": 8192, "max_num_batched_tokens": 2048})
    sliding = estimate(f, H100, p)
    full = estimate(ModelFacts(repo="org/full", revision="0" * 40, config=full_cfg), H100, p)
    assert sliding.need_per_request_gib < full.need_per_request_gib


def test_mla_latent_is_replicated_across_tp() -> None:
    f = facts("deepseek-ai__DeepSeek-V3.json")
    arch = parse_arch(f.text_config())
    assert arch.mla is not None
    per_rank_tp8 = estimate(f, lookup_gpu("H200"), P(tensor_parallel_size=8, max_model_len=8192))
    # 61 layers x (512 + 64) latent x 2 bytes, with no division by TP.
    assert per_rank_tp8.kv_bytes_per_token == 61 * 576 * 2


def test_moe_keeps_all_experts_resident() -> None:
    est = estimate(facts("Qwen__Qwen3-30B-A3B.json"), H100, V019)
    assert est.weights_gib == pytest.approx(56.88, abs=0.1)  # printed; not the 3B "active"
    assert est.kv_cache_tokens == pytest.approx(168288, rel=0.02)


def test_mixtral_moe_refuses_single_l4() -> None:
    est = estimate(
        facts("mistralai__Mixtral-8x7B-v0.1.json"), lookup_gpu("L4"), P(max_model_len=4096)
    )
    assert not est.fits
    assert "no memory left for the KV cache" in est.problems[0]


def test_gpt_oss_mxfp4_tp1_refused_like_vllm_did() -> None:
    # vLLM 0.19 at utilization 0.95 sized the KV cache and then ran out of memory in the sampler warm-up.
    f = facts("openai__gpt-oss-20b.json")
    est = estimate(f, H100, V019)
    assert est.weights_gib == pytest.approx(13.64, rel=0.03)
    assert not est.fits
    assert "sampler warm-up" in est.problems[0]
    ok = estimate(f, H100, V019.model_copy(update={"tensor_parallel_size": 2, "gpu_memory_utilization": 0.9}))
    assert ok.fits
    assert ok.kv_cache_tokens == pytest.approx(2591776, rel=0.02)


def test_awq_int4_weights_are_about_a_third_of_bf16() -> None:
    base = cfg("Qwen__Qwen2.5-7B-Instruct.json")
    awq = dict(base, quantization_config={"quant_method": "awq", "bits": 4, "group_size": 128})
    bf16 = estimate(ModelFacts(repo="q/bf16", revision="0" * 40, config=base), H100, V019)
    q4 = estimate(ModelFacts(repo="q/awq", revision="0" * 40, config=awq), H100, V019)
    # Embeddings and lm_head stay 16-bit, so 4-bit linears give ~0.36x, not 0.25x.
    assert 0.3 < q4.weights_gib / bf16.weights_gib < 0.42


def test_gptq_checkpoint_matches_vllm_print() -> None:
    gptq = V019.model_copy(update={"quantization": "gptq_marlin"})
    est = estimate(facts("meta-llama__Llama-3.1-8B.json"), H100, gptq)
    assert est.weights_gib == pytest.approx(5.38, rel=0.02)


def test_fp8_kv_cache_doubles_tokens() -> None:
    f = facts("meta-llama__Llama-3.1-8B.json")
    auto = estimate(f, H100, V019)
    fp8 = estimate(f, H100, V019.model_copy(update={"kv_cache_dtype": "fp8"}))
    assert fp8.kv_cache_tokens == pytest.approx(2 * auto.kv_cache_tokens, rel=0.001)
    assert fp8.kv_cache_tokens == pytest.approx(952032, rel=0.01)  # printed


def test_tied_embeddings_are_counted_once() -> None:
    base = cfg("Qwen__Qwen2.5-7B-Instruct.json")
    untied = estimate(ModelFacts(repo="q/u", revision="0" * 40, config={**base, "tie_word_embeddings": False}),
                      H100, V019)
    tied = estimate(ModelFacts(repo="q/t", revision="0" * 40, config={**base, "tie_word_embeddings": True}), H100, V019)
    emb_gib = base["vocab_size"] * base["hidden_size"] * 2 / 2**30
    assert untied.weights_gib - tied.weights_gib == pytest.approx(emb_gib, rel=0.01)


def test_multimodal_text_config_is_used() -> None:
    text = cfg("Qwen__Qwen3-8B.json")
    mm = {
        "model_type": "qwen3_vl",
        "architectures": ["X"],
        "text_config": text,
        "vision_config": {"depth": 2},
    }
    est = estimate(ModelFacts(repo="org/vl", revision="0" * 40, config=mm), H100, V019)
    plain = estimate(ModelFacts(repo="org/t", revision="0" * 40, config=text), H100, V019)
    assert est.kv_bytes_per_token == plain.kv_bytes_per_token
    assert any("multimodal" in w for w in est.warnings)


def test_tp_that_does_not_divide_heads_is_refused() -> None:
    # vLLM 0.19 stopped Qwen3-14B at TP5 with "AssertionError: 151936 is not divisible by 5".
    est = estimate(facts("Qwen__Qwen3-14B.json"), H100, V019.model_copy(update={"tensor_parallel_size": 5}))
    assert not est.fits
    assert any("151936 is not divisible by 5" in p for p in est.problems)
    llama = estimate(facts("meta-llama__Llama-3.1-8B.json"), H100, V019.model_copy(update={"tensor_parallel_size": 3}))
    assert any("does not divide the 32 attention heads" in p for p in llama.problems)


def test_replicated_kv_heads_when_fewer_than_tp() -> None:
    f = facts("meta-llama__Meta-Llama-3.1-70B.json")  # 8 KV heads
    tp8 = estimate(f, H100, P(tensor_parallel_size=8, max_model_len=8192))
    tp16 = estimate(f, H100, P(tensor_parallel_size=16, max_model_len=8192))
    # One KV head per rank either way: 80 layers x 2 x 1 x 128 x 2 bytes.
    assert tp8.kv_bytes_per_token == tp16.kv_bytes_per_token == 80 * 2 * 128 * 2


def test_no_fit_suggests_tp_and_max_len() -> None:
    f = facts("meta-llama__Meta-Llama-3.1-70B.json")
    p = P(max_model_len=131072, gpu_memory_utilization=0.9)
    est = estimate(f, H100, p)
    assert not est.fits
    s = suggest(f, H100, p, current=est)
    # 70B at bf16 is ~65.7 GiB per rank at TP2, leaving ~1.5 GiB for 20 GiB of KV: TP4 is the answer.
    assert s.tensor_parallel_size == 4
    assert not estimate(f, H100, p.model_copy(update={"tensor_parallel_size": 2})).fits
    assert estimate(f, H100, p.model_copy(update={"tensor_parallel_size": 4})).fits


def test_max_len_suggestion_is_block_multiple_that_fits() -> None:
    f = facts("Qwen__Qwen3-32B.json")
    p = P(max_model_len=40960, gpu_memory_utilization=0.9)
    est = estimate(f, lookup_gpu("L40S"), p)
    assert not est.fits
    s = suggest(f, lookup_gpu("L40S"), p, current=est)
    assert s.tensor_parallel_size is not None and s.tensor_parallel_size > 1
    if s.max_model_len:
        assert s.max_model_len % 16 == 0
        assert estimate(f, lookup_gpu("L40S"), p.model_copy(update={"max_model_len": s.max_model_len})).fits
        assert not estimate(f, lookup_gpu("L40S"), p.model_copy(update={"max_model_len": s.max_model_len + 16})).fits


def test_cpu_profile_checks_kv_space() -> None:
    f = facts("Qwen__Qwen3-8B.json")
    small = estimate(f, None, P(max_model_len=32768, cpu_kv_cache_gib=1))
    assert not small.fits
    assert "cpuKvCacheGiB" in small.problems[0]
    big = estimate(f, None, P(max_model_len=32768, cpu_kv_cache_gib=8))
    assert big.fits and big.cpu


def test_missing_config_field_is_named() -> None:
    with pytest.raises(SizingError, match="num_attention_heads"):
        thin = ModelFacts(repo="org/x", revision="0" * 40, config={"num_hidden_layers": 2, "hidden_size": 8})
        estimate(thin, H100, V019)


def test_version_from_image_tag() -> None:
    assert parse_vllm_version("vllm/vllm-openai:v0.11.0") == (0, 11, 0)
    assert parse_vllm_version("vllm/vllm-openai:latest") is None


def test_floating_tag_is_sized_with_the_most_conservative_release_and_says_so() -> None:
    f = facts("meta-llama__Llama-3.1-8B.json")
    latest = estimate(f, H100, V019.model_copy(update={"vllm_version": "vllm/vllm-openai:latest"}))
    pinned = [estimate(f, H100, V019.model_copy(update={"vllm_version": v})) for v in ("0.11.0", "0.19.0", "0.32.0")]
    assert latest.available_kv_gib <= min(p.available_kv_gib for p in pinned) + 1e-9
    assert any("names no release" in w and "pin serving.vllmImage" in w for w in latest.warnings)
    assert any("unknown vLLM release" in d.term for d in latest.doubts)


def test_graphs_reserved_from_v020_leave_less_kv() -> None:
    # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to 1 from vllm/envs.py@v0.20.0.
    f = facts("meta-llama__Llama-3.1-8B.json")
    old = estimate(f, H100, V019)
    new = estimate(f, H100, V019.model_copy(update={"vllm_version": "0.20.0"}))
    assert new.cuda_graph_reserved and not old.cuda_graph_reserved
    assert new.available_kv_gib == pytest.approx(old.available_kv_gib - new.cuda_graph_gib)


LLAMA = facts("meta-llama__Llama-3.1-8B.json")


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=1, max_value=8192), st.integers(min_value=1, max_value=8192))
def test_longer_max_model_len_never_fits_better(a: int, b: int) -> None:
    short, long_ = sorted((a * 16, b * 16))
    gpu = lookup_gpu("L4")
    e_short = estimate(LLAMA, gpu, P(max_model_len=short))
    e_long = estimate(LLAMA, gpu, P(max_model_len=long_))
    assert e_long.need_per_request_gib >= e_short.need_per_request_gib
    assert not (e_long.fits and not e_short.fits)


@settings(max_examples=20, deadline=None)
@given(st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4, 8]))
def test_more_tp_never_leaves_less_kv_per_rank(a: int, b: int) -> None:
    lo, hi = sorted((a, b))
    e_lo = estimate(LLAMA, H100, P(tensor_parallel_size=lo, max_model_len=8192))
    e_hi = estimate(LLAMA, H100, P(tensor_parallel_size=hi, max_model_len=8192))
    assert e_hi.kv_cache_tokens >= e_lo.kv_cache_tokens
