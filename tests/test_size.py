"""`python -m tkf_infra size` answers from the lock, offline, through the real command line."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tkf_infra.exit_codes import ExitCode
from tkf_infra.ops.cli import app

QWEN05 = "Qwen/Qwen2.5-0.5B-Instruct@7ae557604adf67be50417f59c2c2f167def9a775"
LLAMA70 = "meta-llama/Llama-3.3-70B-Instruct@6f6073b423013f6a7d4d9f39144961bfbfbc386b"


def size(*args: str) -> tuple[str, int]:
    result = CliRunner().invoke(app, ["size", *args])
    return result.output, result.exit_code


def test_small_model_fits_and_prints_table() -> None:
    text, code = size(QWEN05, "--gpu", "L4", "--max-model-len", "32768")
    assert code == ExitCode.OK
    assert "KV cache tokens" in text and "fits" in text
    assert "NVIDIA" not in text  # short GPU name shown


def test_big_model_suggests_smallest_tp() -> None:
    text, code = size(LLAMA70, "--gpu", "NVIDIA-H100-80GB-HBM3", "--max-model-len", "131072")
    assert code == ExitCode.REFUSED
    assert "does NOT fit" in text
    assert "way out: fits with tensorParallelSize 4" in text


def test_json_output() -> None:
    out, code = size(LLAMA70, "--gpu", "H100-80GB", "--tp", "4", "--max-model-len", "131072", "--json")
    data = json.loads(out)
    assert code == ExitCode.OK and data["fits"] is True
    assert data["tensor_parallel_size"] == 4
    assert data["kv_cache_tokens"] > 131072


def test_fp8_kv_gives_more_tokens() -> None:
    auto = json.loads(size(QWEN05, "--gpu", "L4", "--json")[0])
    fp8 = json.loads(size(QWEN05, "--gpu", "L4", "--kv-cache-dtype", "fp8", "--json")[0])
    assert fp8["kv_cache_tokens"] > 1.9 * auto["kv_cache_tokens"]


def test_errors_are_actionable() -> None:
    text, code = size(QWEN05, "--gpu", "H1000")
    assert code == ExitCode.USAGE and "unknown GPU 'H1000'" in text and "H100-80GB" in text
    text, code = size("org/missing@" + "0" * 40, "--gpu", "L4")
    assert code == ExitCode.USAGE and "python -m tkf_infra lock org/missing@" in text
    text, code = size("Qwen/Qwen2.5-0.5B-Instruct", "--gpu", "L4")
    assert code == ExitCode.USAGE and "REPO@REVISION" in text


def test_out_of_range_flags_are_refused_by_name_with_the_value_given() -> None:
    text, code = size(QWEN05, "--gpu", "L4", "--gpu-memory-utilization", "0", "--max-model-len", "0", "--pp", "0")
    assert code == ExitCode.USAGE and "Traceback" not in text
    assert "--gpu-memory-utilization 0.0: input should be greater than 0" in text
    assert "--max-model-len 0: input should be greater than or equal to 1" in text and "--pp 0:" in text
    text, code = size(QWEN05, "--gpu", "L4", "--gpu-memory-utilization", "1.5")
    assert code == ExitCode.USAGE and "less than or equal to 1" in text


def test_a_pre_volta_gpu_is_refused_with_the_reason() -> None:
    text, code = size(QWEN05, "--gpu", "Tesla P40")
    assert code == ExitCode.USAGE and "Pascal part" in text and "compute capability 7.0 or newer" in text


def test_a_pipeline_deeper_than_the_model_is_refused_not_exhausting_memory() -> None:
    text, code = size(QWEN05, "--gpu", "L4", "--pp", "1000000000")
    assert code == ExitCode.REFUSED and "pipelineParallelSize 1000000000 exceeds the 24 layers" in text
    assert "way out: not a memory limit: no tensorParallelSize or larger GPU helps until the reasons" in text


def test_a_memory_limit_still_gets_a_larger_gpu_as_its_way_out() -> None:
    text, code = size(LLAMA70, "--gpu", "RTX-2060", "--max-model-len", "8192")
    assert code == ExitCode.REFUSED and "way out: no tensorParallelSize up to the limit fits; use a larger GPU" in text


def test_decode_context_parallelism_multiplies_the_tokens_size_prints() -> None:
    """`--dcp` is the catalog's decodeContextParallelSize: an MLA model's ranks each keep 1/dcp of a request's
    tokens, so the cache holds dcp times as many from the same memory; a GQA model is refused by name."""
    r1 = "deepseek-ai/DeepSeek-R1@56d4cbbb4d29f4355bab4b9a39ccb717a14ad5ad"
    plain = json.loads(size(r1, "--gpu", "H200", "--tp", "8", "--max-model-len", "65536", "--json")[0])
    dcp = json.loads(size(r1, "--gpu", "H200", "--tp", "8", "--dcp", "8", "--max-model-len", "65536", "--json")[0])
    assert dcp["available_kv_gib"] == plain["available_kv_gib"]
    assert dcp["kv_cache_tokens"] == 8 * plain["kv_cache_tokens"]
    text, code = size(LLAMA70, "--gpu", "H100-80GB", "--tp", "4", "--dcp", "2", "--max-model-len", "8192")
    assert code == ExitCode.REFUSED and "multi-head latent attention models only" in text
