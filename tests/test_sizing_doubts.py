"""The bound's doubts are as wide as what applies to the case at hand (issue 29), never narrower.

Figures from /work/shared/calibration/cases-public-logs.json (llm-d-benchmark's empirical table, vLLM
0.11.0 on an H100 with a 79.18 GiB CUDA total): Qwen3-32B printed weights 61.03, activation 5.64,
non-torch 0.14 and 4.45 GiB of KV cache at maxModelLen 16000, and failed at 32000. The config is
tests/data/sizing/Qwen__Qwen3-32B.json (a copy of the case file's config_file; not in the
config fuzz's folders: Qwen3-14B there has the same structure).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tkf_infra.sizing.estimate import estimate
from tkf_infra.sizing.gpus import lookup_gpu
from tkf_infra.sizing.overheads import Activation, activation_doubt
from tkf_infra.sizing.params import SizingParams
from tkf_infra.sizing.release_row import VersionRow
from tkf_infra.sizing.versions import ROWS, choose_version

CONFIGS = Path(__file__).parent / "data" / "sizing"
H100 = lookup_gpu("H100-80GB").with_memory(79.18, "printed in the case")


def qwen3_32b() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CONFIGS / "Qwen__Qwen3-32B.json").read_text())
    return data


def row(version: str) -> VersionRow:
    return choose_version(version).rows[0]


def act(base: float = 0.0, sampler: float = 0.0, forward: float = 0.0, moe: float = 0.0) -> Activation:
    peak = max(forward, sampler)
    return Activation(base=base, sampler=sampler, forward=forward, moe=moe, encoder=0.0, encoder_cache=0.0,
                      spec=0.0, total=base + peak + moe)


def test_the_0_19_row_keeps_one_doubt_for_the_whole_peak() -> None:
    # Its sampler-bound peaks printed up to 6.3 % above the sampler term (Llama 3.1 8B at PP 2, cases.json).
    assert row("0.19.0").sampler_uncertainty is None


@pytest.mark.parametrize("r", ROWS, ids=lambda r: r.name)
def test_a_row_without_a_measured_sampler_keeps_its_single_relative_doubt(r: VersionRow) -> None:
    a = act(base=0.1, sampler=2.0, forward=1.0, moe=0.5)
    if r.sampler_uncertainty is None:
        assert activation_doubt(a, r) == pytest.approx(r.activation_uncertainty * a.total)
    else:  # the sampler is the peak here: its own, smaller uncertainty applies to it
        assert activation_doubt(a, r) < r.activation_uncertainty * a.total


def test_the_doubt_of_a_maximum_is_the_maximum_of_the_upper_ends() -> None:
    r = row("0.11.0")  # 20 % on the forward pass, 4 % on the sampler warm-up
    assert r.sampler_uncertainty == 0.04 and r.activation_uncertainty == 0.2
    # Sampler-dominated (Qwen3 with 1024 warm-up rows): only the sampler's 4 % and the MoE workspace's 20 %.
    a = act(sampler=5.6, forward=1.3, moe=0.5)
    assert activation_doubt(a, r) == pytest.approx(0.04 * 5.6 + 0.2 * 0.5)
    # A forward pass close below the sampler can overtake it at its upper end: that end is the doubt.
    a = act(sampler=5.6, forward=5.0)
    assert activation_doubt(a, r) == pytest.approx(5.0 * 1.2 - 5.6)
    # Forward-dominated: the row's full relative doubt, as before.
    a = act(sampler=0.4, forward=3.0)
    assert activation_doubt(a, r) == pytest.approx(0.2 * 3.0)


def test_a_sampler_dominated_model_that_started_is_accepted_and_its_failed_twin_refused() -> None:
    base = {"tensor_parallel_size": 1, "gpu_memory_utilization": 0.9, "block_size": 128, "vllm_version": "0.11.0"}
    ok = estimate(qwen3_32b(), H100, SizingParams(max_model_len=16000, **base))
    assert ok.weights_gib == pytest.approx(61.03, abs=0.1) and ok.activation_gib == pytest.approx(5.64, abs=0.1)
    assert ok.available_kv_gib == pytest.approx(4.45, abs=0.1)
    assert ok.fits, ok.problems  # bound 3.98 GiB >= the 3.91 GiB one 16000-token request needs (4.45 printed)
    doubt = next(d for d in ok.doubts if d.term.startswith("activation peak"))
    assert doubt.gib < 0.2 * ok.activation_gib and doubt.gib >= 0.04 * ok.activation_gib - 0.01
    failed = estimate(qwen3_32b(), H100, SizingParams(max_model_len=32000, **base))
    assert not failed.fits and "maxModelLen 32000" in failed.problems[0]


def test_mxfp4_weights_carry_the_largest_measured_excess_of_the_moe_backends_layout() -> None:
    """gpt-oss-120b on one H100, vllm-project/vllm#27508 (release 0.10.2 or 0.11.0 by its log line, so sized as
    unknown): vLLM printed 1.71 GiB of KV cache at utilization 0.95 with 1024 batched tokens and refused
    131072 tokens; the bound must not claim more than vLLM had."""
    config = json.loads((Path(__file__).parent / "data" / "models" / "configs" / "openai__gpt-oss-120b.json")
                        .read_text())
    est = estimate(config, lookup_gpu("H100-80GB"), SizingParams(vllm_version="unknown", gpu_memory_utilization=0.95,
                                                                 max_num_batched_tokens=1024, max_model_len=131072))
    weights = next(d for d in est.doubts if "MXFP4" in d.term)
    assert weights.gib == pytest.approx(0.07 * est.weights_gib, rel=0.01)
    assert est.available_kv_gib_bound <= 1.71 and not est.fits


def test_a_float_ssm_state_is_sized_as_float32_as_vllm_resolves_it() -> None:
    """vLLM looks the SSM state's dtype up in STR_DTYPE_TO_TORCH_DTYPE, where "float" is float32
    (utils/torch_utils.py@v0.32.0:33-38): a config saying "float" holds 4-byte states, not the model's 2."""
    import json
    from pathlib import Path

    from tkf_infra.sizing.arch import parse_arch
    from tkf_infra.sizing.kv import recurrent_state_bytes

    path = Path(__file__).resolve().parent / "data" / "calibration" / "configs" / "nvidia__Qwen3.6-27B-NVFP4.json"
    config = json.loads(path.read_text())
    text = config.get("text_config", config)

    def state(dtype: str) -> float:
        text["mamba_ssm_dtype"] = dtype
        return recurrent_state_bytes(parse_arch(text, config), tp=1, act_bytes=2.0, spec_tokens=0)

    assert state("float") == state("float32") > state("bfloat16")
