"""bitsandbytes start-up rules read from every release that accepts it (tkf_infra/sizing/bnb.py cites the lines)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tkf_infra.sizing.estimate import estimate
from tkf_infra.sizing.gpus import lookup_gpu
from tkf_infra.sizing.params import SizingParams

CONFIGS = Path(__file__).parent / "data" / "calibration" / "configs"
A100 = lookup_gpu("A100-80GB")


def cfg(name: str, **quant: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CONFIGS / name).read_text())
    if quant:
        data["quantization_config"] = {"quant_method": "bitsandbytes", **quant}
    return data


LLAMA = "meta-llama__Llama-3.1-8B-Instruct.json"
MOE = "Qwen__Qwen3-30B-A3B.json"


def test_a_prequantized_checkpoint_is_refused_at_tp_above_one_with_pipeline_parallelism_as_the_way_out() -> None:
    four_bit = cfg(LLAMA, load_in_4bit=True)
    for version in ("0.6.3", "0.8.5", "0.17.0", "0.27.0", "unknown"):
        tp2 = estimate(four_bit, A100, SizingParams(vllm_version=version, tensor_parallel_size=2, max_model_len=8192))
        assert not tp2.fits and "tensor parallelism" in tp2.problems[0] and "pipelineParallelSize 2" in tp2.problems[0]
        pp2 = estimate(four_bit, A100, SizingParams(vllm_version=version, pipeline_parallel_size=2, max_model_len=8192))
        assert pp2.fits, (version, pp2.problems)


def test_in_flight_quantization_splits_by_tensor_parallelism() -> None:
    est = estimate(cfg(LLAMA), A100, SizingParams(vllm_version="0.17.0", tensor_parallel_size=2, max_model_len=8192,
                                                  quantization="bitsandbytes"))
    assert est.fits, est.problems


def test_a_prequantized_8_bit_moe_is_refused_from_0_10_1() -> None:
    eight = cfg(MOE, load_in_8bit=True)
    on_017 = estimate(eight, A100, SizingParams(vllm_version="0.17.0", max_model_len=8192))
    assert not on_017.fits and any("8-bit bitsandbytes checkpoint of a MoE" in p for p in on_017.problems)
    on_09 = estimate(eight, A100, SizingParams(vllm_version="0.9.2", max_model_len=8192))
    assert all("MoE" not in p for p in on_09.problems)
    four = estimate(cfg(MOE, load_in_4bit=True), A100, SizingParams(vllm_version="0.17.0", max_model_len=8192))
    assert all("MoE" not in p for p in four.problems)


def test_a_prequantized_8_bit_checkpoint_runs_without_cuda_graphs() -> None:
    params = SizingParams(vllm_version="0.24.0", max_model_len=8192)
    eight = estimate(cfg(LLAMA, load_in_8bit=True), A100, params)
    four = estimate(cfg(LLAMA, load_in_4bit=True), A100, params)
    assert eight.cuda_graph_gib == 0.0 and four.cuda_graph_gib > 0.0
