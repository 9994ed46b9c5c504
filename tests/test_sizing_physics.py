"""Each physics term against what vLLM printed (calibration case ids in the comments, figures in GiB/tokens).

The configs are the sourced copies under tests/data/calibration/configs (INDEX.json gives each source).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tkf_infra.config.flags import ServingSpec
from tkf_infra.sizing.arch import parse_arch
from tkf_infra.sizing.estimate import estimate
from tkf_infra.sizing.facts import resolve_text_config
from tkf_infra.sizing.gpus import lookup_gpu
from tkf_infra.sizing.kv import hybrid_block_size, kv_layout, recurrent_blocks
from tkf_infra.sizing.params import SizingError, SizingParams

DATA = Path(__file__).parent / "data"
H100 = lookup_gpu("H100-80GB")
EAGLE = {"method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}


def cfg(name: str) -> dict[str, Any]:
    for folder in (DATA / "calibration" / "configs", DATA / "models" / "configs"):
        if (folder / name).exists():
            data: dict[str, Any] = json.loads((folder / name).read_text())
            return data
    raise FileNotFoundError(name)


def P(version: str, **kw: Any) -> SizingParams:
    return SizingParams(vllm_version=version, **kw)


def test_gguf_q8_weights_and_tokens_on_a_laptop_gpu() -> None:
    # blog-llama3.2-3b-q8-gguf-rtx4070-8gb-10k-eager (vLLM 0.8.0-0.8.2 by its log lines, V0):
    # "Model loading took 3.2637 GB", "# cuda blocks: 1395" = 22,320 tokens.
    config = {**cfg("meta-llama__Llama-3.2-3B.json"), "quantization_config": {"quant_method": "gguf",
                                                                             "ggml_type": "Q8_0"}}
    est = estimate(config, lookup_gpu("RTX-4070-Laptop"),
                   P("0.8.2-v0", quantization="gguf", max_model_len=10000, enforce_eager=True))
    assert est.weights_gib == pytest.approx(3.26, rel=0.03)
    assert est.kv_cache_tokens == pytest.approx(22320, rel=0.02)
    assert est.kv_cache_tokens_bound <= 22320


def test_gguf_is_refused_where_the_release_dropped_its_loader() -> None:
    config = {**cfg("meta-llama__Llama-3.2-3B.json"), "quantization_config": {"quant_method": "gguf",
                                                                             "ggml_type": "Q8_0"}}
    est = estimate(config, H100, P("0.24.0", quantization="gguf", max_model_len=8192))
    assert any("'gguf' is not accepted by vLLM 0.24.0" in p for p in est.problems)


def test_a_gguf_without_its_file_type_cannot_be_sized() -> None:
    config = {**cfg("meta-llama__Llama-3.2-3B.json"), "quantization_config": {"quant_method": "gguf"}}
    with pytest.raises(SizingError, match="file type"):
        estimate(config, H100, P("0.8.2-v0", quantization="gguf", max_model_len=8192))


def test_compressed_tensors_w4a16_moe_on_a_3090() -> None:
    # vllm17327-qwen3-30b-a3b-w4a16-rtx3090-v0 (0.8.5, VLLM_USE_V1=0): weights 15.68, KV 5.34.
    est = estimate(cfg("nytopop__Qwen3-30B-A3B.w4a16.composed.json"), lookup_gpu("RTX-3090"),
                   P("0.8.5-v0", quantization="compressed-tensors", max_model_len=40960, max_num_seqs=8))
    assert est.weights_gib == pytest.approx(15.68, rel=0.02)
    assert est.available_kv_gib == pytest.approx(5.34, rel=0.03)


def test_auto_round_is_accepted_by_0_22_which_rewrites_it_to_inc() -> None:
    est = estimate(cfg("nvidia__Qwen3.6-27B-NVFP4.json"), lookup_gpu("RTX-3090"),
                   P("0.22.0", quantization="auto-round", tensor_parallel_size=2, max_model_len=32768))
    assert not any("not accepted" in p for p in est.problems)


def test_v07_mla_keeps_absorbed_matrices_beside_the_weights() -> None:
    # sagemaker-lmi-deepseek-coder-v2-lite-8xa100-40gb-tp8-8k (0.7.1): "model weights take 3.97GiB".
    config, gpu = cfg("deepseek-ai__DeepSeek-V2-Lite-Chat.json"), lookup_gpu("A100-SXM4-40GB")
    v07 = estimate(config, gpu, P("0.7.1", tensor_parallel_size=8, max_model_len=8192, dtype="float16"))
    v08 = estimate(config, gpu, P("0.8.5-v0", tensor_parallel_size=8, max_model_len=8192, dtype="float16"))
    assert v07.weights_gib == pytest.approx(3.97, rel=0.01)
    assert v08.weights_gib < v07.weights_gib - 0.2


def test_gemma3_scaled_rope_caches_count_as_weights() -> None:
    # llmd-v0.19-google-gemma-3-12b-it (0.19): "Model loading took 23.31 GiB"; the global rope's
    # cache is max_position x 8 rows (linear scaling) beside the local rope's.
    est = estimate(cfg("google__gemma-3-12b-it.json"), H100,
                   P("0.19.0", gpu_memory_utilization=0.95, max_model_len=8192, max_num_batched_tokens=8192))
    assert est.weights_gib == pytest.approx(23.31, rel=0.005)


def test_hybrid_gated_delta_net_block_and_tokens() -> None:
    # dualqwen-l40s-qwen3.5-9b (0.16.1 dev): "Setting attention block size to 1056 tokens",
    # 2.43 GiB available -> "GPU KV cache size: 39,072 tokens" (prefix caching on: mamba 'align').
    config = cfg("cyankiwi__Qwen3.5-9B-AWQ-BF16-INT8.composed.json")
    arch = parse_arch(resolve_text_config(config), config)
    block = hybrid_block_size(arch, tp=1, kv_bytes=1.0, act_bytes=2.0, spec_tokens=0, requested=None)
    assert block == 1056
    blocks, per_len = recurrent_blocks(arch, 0, True, all_mode=False, checkpoint_block=False)
    layout = kv_layout(arch, arch.layer_kinds, 1, 1.0, block, group_ratio=1.25, recurrent_blocks=blocks,
                       recurrent_per_len=per_len)
    n = layout.num_blocks(2.43 * 2**30)
    assert layout.tokens(n, 16384, 4096, from_concurrency=False) == 39072
    assert layout.concurrency(n, 16384, 4096) == pytest.approx(6.82, abs=0.01)


def test_hybrid_bound_assumes_prefix_caching_unless_told() -> None:
    config, gpu = cfg("cyankiwi__Qwen3.5-9B-AWQ-BF16-INT8.composed.json"), lookup_gpu("L40S")
    params = P("0.24.0", max_model_len=16384, kv_cache_dtype="fp8")
    default = estimate(config, gpu, params)  # 0.24: prefix caching off by default for hybrid models
    known_off = estimate(config, gpu, params, prefix_caching=False)
    assert default.max_concurrency == known_off.max_concurrency
    assert default.max_concurrency_bound < known_off.max_concurrency_bound
    assert any("prefix caching" in d.term for d in default.doubts)


def test_eagle_adds_its_draft_layer_to_weights_and_kv() -> None:
    # vllm19996-llama3.1-8b-eagle-h100-128k (0.9.1): 410,128 tokens = 33 layers of KV, not 32.
    config = cfg("meta-llama__Llama-3.1-8B-Instruct.json")
    plain = estimate(config, H100, P("0.9.1", max_model_len=131072))
    eagle = estimate(config, H100, P("0.9.1", max_model_len=131072, speculative_config=EAGLE))
    assert eagle.kv_cache_tokens == pytest.approx(410128, rel=0.002)
    assert eagle.weights_gib > plain.weights_gib
    ngram = estimate(config, H100, P("0.9.1", max_model_len=131072,
                                     speculative_config={"method": "ngram", "num_speculative_tokens": 3}))
    assert ngram.kv_cache_tokens == plain.kv_cache_tokens, "n-gram drafting needs no GPU memory"


def test_a_separate_draft_model_is_not_sized_silently() -> None:
    with pytest.raises(SizingError):
        estimate(cfg("meta-llama__Llama-3.1-8B-Instruct.json"), H100,
                 P("0.32.0", max_model_len=8192,
                   speculative_config={"model": "org/draft", "num_speculative_tokens": 2}))


def test_data_and_expert_parallel_split_only_the_experts() -> None:
    moe = cfg("Qwen__Qwen3-30B-A3B.json")
    tp1 = estimate(moe, H100, P("0.32.0", max_model_len=8192))
    tp2 = estimate(moe, H100, P("0.32.0", max_model_len=8192, tensor_parallel_size=2))
    dp2_ep = estimate(moe, H100, P("0.32.0", max_model_len=8192, data_parallel_size=2, enable_expert_parallel=True))
    assert tp2.weights_gib < dp2_ep.weights_gib < tp1.weights_gib  # experts halved, attention replicated
    assert dp2_ep.weights_gib == pytest.approx(tp1.weights_gib / 2, rel=0.1)
    dense = cfg("meta-llama__Llama-3.1-8B-Instruct.json")
    assert estimate(dense, H100, P("0.32.0", max_model_len=8192, data_parallel_size=2)).weights_gib == \
        estimate(dense, H100, P("0.32.0", max_model_len=8192)).weights_gib, "a dense DP replica holds it all"


def test_mxfp4_runs_from_ampere_and_is_refused_before() -> None:
    config = cfg("openai__gpt-oss-20b.json") | {"quantization_config": {"quant_method": "mxfp4"}}
    a100 = estimate(config, lookup_gpu("A100-80GB"), P("0.32.0", max_model_len=8192))
    v100 = estimate(config, lookup_gpu("V100-32GB"), P("0.32.0", max_model_len=8192))
    assert a100.fits and a100.weights_gib < 14
    assert any("needs compute capability 8.0 but V100-32GB is 7.0" in p for p in v100.problems)


def test_the_vision_encoder_is_counted_in_weights_and_activation() -> None:
    config = cfg("google__gemma-3-12b-it.json")
    text_only = {k: v for k, v in config.items() if k != "vision_config"}
    params = P("0.19.0", max_model_len=8192)
    with_tower, without = estimate(config, H100, params), estimate(text_only, H100, params)
    assert with_tower.weights_gib > without.weights_gib + 0.5
    assert any("without a vision_config" in w for w in without.warnings), "a tower we cannot see is said"


def test_a_silu_vision_tower_is_counted_with_its_gated_mlp() -> None:
    """LightOnOCR-2-1B (Qwen3 text + Pixtral tower, SwiGLU MLP): its model.safetensors is 2,011,367,489
    bytes (INDEX.json) and vLLM 0.15.1 printed 'Model loading took 1.88 GiB' (case vlmbench-lightonocr…)."""
    config = cfg("lightonai__LightOnOCR-2-1B.json")
    est = estimate(config, lookup_gpu("RTX-PRO-6000"), P("0.15.1", max_model_len=16384))
    assert est.weights_gib == pytest.approx(2_011_367_489 / 2**30, rel=0.01)
    gelu = {**config, "vision_config": {**config["vision_config"], "hidden_act": "gelu"}}
    two_projections = estimate(gelu, lookup_gpu("RTX-PRO-6000"), P("0.15.1", max_model_len=16384))
    # 24 layers x 1024 x 4096 x 2 bytes: the gate projection a GELU tower does not have
    assert est.weights_gib - two_projections.weights_gib == pytest.approx(24 * 1024 * 4096 * 2 / 2**30, rel=0.01)


def test_a_time_sliced_gpu_is_judged_with_the_other_tenants_memory_in_doubt() -> None:
    config, params = cfg("meta-llama__Llama-3.1-8B-Instruct.json"), P("0.32.0", max_model_len=8192,
                                                                      gpu_memory_utilization=0.45)
    whole = estimate(config, H100, params)
    shared = estimate(config, H100.model_copy(update={"shared": True}), params)
    assert shared.kv_cache_tokens == whole.kv_cache_tokens
    assert shared.available_kv_gib_bound < whole.available_kv_gib_bound - 30
    assert any("time-slicing" in d.term for d in shared.doubts)


def test_unified_memory_widens_the_bound() -> None:
    config, params = cfg("meta-llama__Llama-3.1-8B-Instruct.json"), P("0.32.0", max_model_len=8192)
    est = estimate(config, lookup_gpu("GB10"), params)
    assert est.available_kv_gib - est.available_kv_gib_bound >= 0.05 * 121.69
    assert any("unified memory" in d.term for d in est.doubts)


def test_fp32_serving_carries_its_own_doubt() -> None:
    # llmd-v0.19 Llama-3.1-8B dtype float32: activation 2.21 printed vs 1.89 for bf16; the bound holds.
    est = estimate(cfg("meta-llama__Llama-3.1-8B.json"), H100,
                   P("0.19.0", dtype="float32", gpu_memory_utilization=0.95, max_model_len=8192,
                     max_num_batched_tokens=8192))
    assert est.kv_cache_tokens_bound <= 175296


def test_speculative_config_accepts_only_methods_the_check_sizes() -> None:
    base = {"servedName": "m", "maxModelLen": 4096}
    ServingSpec.model_validate({**base, "speculativeConfig": {"method": "mtp", "num_speculative_tokens": 2}})
    for bad, why in (({"method": "medusa"}, "is not one the fit check sizes"),
                     ({"method": "eagle"}, "needs `model`"),
                     ({"method": "ngram", "num_speculative_tokens": 0}, "from 1 to 16"),
                     ({"method": "ngram", "prompt_lookup_max": 4}, "not supported")):
        with pytest.raises(ValueError, match=why):
            ServingSpec.model_validate({**base, "speculativeConfig": bad})


@settings(max_examples=40, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8]), len_=st.integers(1024, 131072), util=st.floats(0.5, 0.95),
       version=st.sampled_from(["0.7.1", "0.9.1", "0.11.0", "0.19.0", "0.22.0", "0.32.0", "latest"]),
       gpu=st.sampled_from(["H100-80GB", "L40S", "RTX-3090", "A100-40GB", "GB10"]))
def test_the_bound_never_exceeds_the_estimate_and_the_verdict_uses_it(tp: int, len_: int, util: float,
                                                                      version: str, gpu: str) -> None:
    est = estimate(cfg("meta-llama__Llama-3.1-8B-Instruct.json"), lookup_gpu(gpu),
                   P(version, tensor_parallel_size=tp, max_model_len=len_, gpu_memory_utilization=util))
    assert est.available_kv_gib_bound <= est.available_kv_gib
    assert est.kv_cache_tokens_bound <= est.kv_cache_tokens
    if est.verdict == "fits":  # the bound holds one request; tight: only the estimate does
        assert est.need_per_request_gib <= est.available_kv_gib_bound + 1e-9
    if est.fits:
        assert est.need_per_request_gib <= est.available_kv_gib + 1e-9
