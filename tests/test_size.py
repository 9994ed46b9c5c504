"""``size`` command answers from the lock, offline."""

from __future__ import annotations

import json

from tkf_infra.planner import SizeParams, size_command

QWEN05 = "Qwen/Qwen2.5-0.5B-Instruct@7ae557604adf67be50417f59c2c2f167def9a775"
LLAMA70 = "meta-llama/Llama-3.3-70B-Instruct@6f6073b423013f6a7d4d9f39144961bfbfbc386b"


def test_small_model_fits_and_prints_table() -> None:
    text, code = size_command(SizeParams(model=QWEN05, gpu="L4", max_model_len=32768))
    assert code == 0
    assert "KV cache tokens" in text and "fits" in text
    assert "NVIDIA" not in text  # short GPU name shown


def test_big_model_suggests_smallest_tp() -> None:
    text, code = size_command(SizeParams(model=LLAMA70, gpu="NVIDIA-H100-80GB-HBM3", max_model_len=131072))
    assert code == 1
    assert "does NOT fit" in text
    assert "way out: fits with tensorParallelSize 4" in text


def test_json_output() -> None:
    out, code = size_command(
        SizeParams(model=LLAMA70, gpu="H100-80GB", tp=4, max_model_len=131072, as_json=True)
    )
    data = json.loads(out)
    assert code == 0 and data["fits"] is True
    assert data["tensor_parallel_size"] == 4
    assert data["kv_cache_tokens"] > 131072


def test_fp8_kv_gives_more_tokens() -> None:
    auto = json.loads(size_command(SizeParams(model=QWEN05, gpu="L4", as_json=True))[0])
    fp8 = json.loads(size_command(SizeParams(model=QWEN05, gpu="L4", kv_cache_dtype="fp8", as_json=True))[0])
    assert fp8["kv_cache_tokens"] > 1.9 * auto["kv_cache_tokens"]


def test_errors_are_actionable() -> None:
    text, code = size_command(SizeParams(model=QWEN05, gpu="H1000"))
    assert code == 2 and "unknown GPU 'H1000'" in text and "H100-80GB" in text
    text, code = size_command(SizeParams(model="org/missing@" + "0" * 40, gpu="L4"))
    assert code == 2 and "python -m tkf_infra lock org/missing@" in text
    text, code = size_command(SizeParams(model="Qwen/Qwen2.5-0.5B-Instruct", gpu="L4"))
    assert code == 2 and "REPO@REVISION" in text
