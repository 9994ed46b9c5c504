"""Release rows read from the newest sources (issue 29): 0.32's and 0.33's sampler profiles, 0.33's batch tiers.

vLLM 0.32.0 and 0.33.0 run model runner V2 by default (vllm/config/vllm.py@v0.32.0:703-739,
@v0.33.0:731-767). At 0.32.0 its profile samples once without parameters ("the sampler may skip top_k,
top_p, and logprobs", vllm/v1/worker/gpu/model_runner.py@v0.32.0:972-983) while `warmup_kernels`, after
the KV cache is sized, turns every sampling feature on (vllm/v1/worker/gpu/warmup.py@v0.32.0:218-324);
0.33.0 adds that pass to the profile (model_runner.py@v0.33.0:993-1014) so the peak covers it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tkf_infra.sizing.estimate import estimate
from tkf_infra.sizing.gpus import lookup_gpu
from tkf_infra.sizing.params import SizingParams
from tkf_infra.sizing.versions import choose_version

CONFIGS = Path(__file__).parent / "data" / "calibration" / "configs"
H100 = lookup_gpu("H100-80GB")


def llama() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CONFIGS / "meta-llama__Llama-3.1-8B-Instruct.json").read_text())
    return data


def test_0_33_has_its_own_row_and_0_34_is_still_unknown() -> None:
    choice = choose_version("vllm/vllm-openai:v0.33.0")
    assert [r.name for r in choice.rows] == ["v0.33"] and choice.warning is None
    assert "newer than every release" in (choose_version("0.34.0").warning or "")


def test_on_0_32_the_warm_up_after_allocation_gets_only_the_profiled_peak_back() -> None:
    # 1024 warm-up rows x 128256 logits x 14.45 B = 1.77 GiB. V2's profile (0.26-0.32) sampled without parameters,
    # so the budget held only its forward peak (0.90 GiB, logits-only sampler): at 0.985 the warm-up has the 0.68
    # GiB outside the budget plus that peak, 1.58 GiB. 0.33's profile runs the full sampler (1.89 GiB held).
    params = {"max_model_len": 8192, "gpu_memory_utilization": 0.985}
    on_032 = estimate(llama(), H100, SizingParams(vllm_version="0.32.0", **params))
    on_033 = estimate(llama(), H100, SizingParams(vllm_version="0.33.0", **params))
    assert on_033.fits, on_033.problems
    assert not on_032.fits and "sampler warm-up with 1024 dummy requests" in on_032.problems[0]
    assert on_032.activation_gib < on_033.activation_gib - 0.9  # the profile held the logits, not the sampler
    # The same model at the default utilization leaves room outside the budget: all three start.
    for version in ("0.32.0", "0.33.0", "0.19.0"):
        assert estimate(llama(), H100, SizingParams(vllm_version=version, max_model_len=8192)).fits


def test_0_33_keeps_gb10_on_the_small_batch_tier() -> None:
    gb10 = lookup_gpu("GB10")
    on_033 = estimate(llama(), gb10, SizingParams(vllm_version="0.33.0", max_model_len=8192))
    on_032 = estimate(llama(), gb10, SizingParams(vllm_version="0.32.0", max_model_len=8192))
    assert (on_033.max_num_seqs, on_033.max_num_batched_tokens) == (256, 2048)  # arg_utils.py@v0.33.0:2958-2996
    assert (on_032.max_num_seqs, on_032.max_num_batched_tokens) == (1024, 8192)
    h100 = estimate(llama(), H100, SizingParams(vllm_version="0.33.0", max_model_len=8192))
    assert (h100.max_num_seqs, h100.max_num_batched_tokens) == (1024, 8192)


def test_0_14_to_0_16_check_the_whole_models_request_against_the_smallest_pipeline_stage() -> None:
    """kv_cache_utils.py@v0.14.0:1511-1525 (global groups against min(available_memory)); per worker at
    @v0.13.0:1336-1341 and @v0.17.0:1568-1577. Llama 3.1 8B at 131072 tokens on two RTX 3090 stages: 8 GiB
    per stage fits the ~12 GiB each has, the whole model's 16 GiB does not."""
    gpu = lookup_gpu("RTX-3090")

    def run(version: str, pp: int = 2) -> tuple[bool, list[str]]:
        est = estimate(llama(), gpu, SizingParams(vllm_version=version, pipeline_parallel_size=pp,
                                                  max_model_len=131072))
        return est.fits, est.problems

    for version in ("0.13.0", "0.17.0", "0.32.0"):
        assert run(version) == (True, []), version
    for version in ("0.14.0", "0.15.1", "0.16.0", "unknown"):
        fits, problems = run(version)
        assert not fits and "every layer of the model, 16.0 GiB" in problems[0], (version, problems)
    # Without pipeline parallelism the per-rank check is the only one (and 16 GiB does not fit one 3090).
    assert all("every layer" not in p for p in run("0.15.0", pp=1)[1])
    # A shorter context fits the whole-model check on 0.15 too.
    short = estimate(llama(), gpu, SizingParams(vllm_version="0.15.0", pipeline_parallel_size=2, max_model_len=65536))
    assert short.fits, short.problems


def test_from_0_29_one_block_comes_off_the_memory_before_the_max_length_check() -> None:
    """kv_cache_utils.py@v0.29.0:2316-2322 (the null block BlockPool holds back); not at @v0.28.0:2189-2197.
    Llama 3.1 8B at 8192 tokens needs exactly 1 GiB of KV cache on one rank (512 blocks x 2 MiB): a cache
    pinned to 1 GiB holds it on 0.28, not from 0.29 (511 usable blocks)."""
    params = {"max_model_len": 8192, "kv_cache_memory_bytes": 2**30}
    on_028 = estimate(llama(), H100, SizingParams(vllm_version="0.28.0", **params))
    assert on_028.fits and on_028.need_per_request_gib == 1.0, on_028.problems
    for version in ("0.29.0", "0.32.0", "0.33.0", "unknown"):
        later = estimate(llama(), H100, SizingParams(vllm_version=version, **params))
        assert not later.fits and any("maxModelLen 8192" in p for p in later.problems), (version, later.problems)
