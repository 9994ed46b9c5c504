"""vGPU types as the guest names them: sized by the VM's framebuffer on its board, never above it.

vllm-project/vllm#11230 (calibration case vllm11230-qwen2.5-72b-gptq-a40-FAIL): vLLM 0.6.4 printed
total_gpu_memory=47.74GiB on an "NVIDIA A40-48Q"; `mdevctl types` lists "GRID P40-2B ...
framebuffer=2048M", so the number in a type's name is its framebuffer in GB.
"""

from __future__ import annotations

import pytest

from tkf_infra.sizing.estimate import estimate
from tkf_infra.sizing.gpus import find_gpu, lookup_gpu
from tkf_infra.sizing.params import SizingParams


@pytest.mark.parametrize(("name", "board", "fb"), [
    ("NVIDIA A40-48Q", "A40", 48), ("NVIDIA A40-48Q 48GB", "A40", 48), ("NVIDIA-A40-24Q", "A40", 24),
    ("GRID T4-16Q", "T4", 16), ("NVIDIA A10-4B4", "A10", 4), ("NVIDIA L4-12C", "L4", 12),
    ("GRID A100-4-20C", "A100-40GB", 20), ("NVIDIA A40-24Q 48GB", "A40", 24),
])
def test_a_vgpu_type_is_its_framebuffer_on_its_board(name: str, board: str, fb: int) -> None:
    gpu = lookup_gpu(name)
    part = lookup_gpu(board)
    assert gpu.compute_capability == part.compute_capability and gpu.nominal_gib == fb
    assert gpu.memory_gib <= min(part.memory_gib, fb) and not gpu.memory_measured
    assert not gpu.shared  # the framebuffer is the VM's own: other VMs cannot allocate from it
    assert "vGPU" in gpu.name and "framebuffer" in gpu.memory_source


def test_the_a40_48q_total_stays_below_what_vllm_printed_on_one() -> None:
    assert lookup_gpu("NVIDIA A40-48Q").memory_gib <= 47.74


@pytest.mark.parametrize("name", [
    "NVIDIA A40-96Q",  # more framebuffer than the board has
    "GRID A100-4-20Q",  # MIG-backed types are compute (C) types only
    "FOO-48Q",  # no such board
    "NVIDIA A40-24Q 40GB",  # a written size that is neither the type's nor the board's
])
def test_a_name_that_only_looks_like_a_vgpu_type_is_an_unknown_gpu(name: str) -> None:
    with pytest.raises(KeyError, match="unknown GPU"):
        lookup_gpu(name)


def test_a_pre_volta_boards_vgpu_gets_the_pre_volta_reason() -> None:
    with pytest.raises(KeyError, match="Pascal"):
        lookup_gpu("GRID P40-24Q")


def test_real_part_names_are_never_read_as_vgpu_types() -> None:
    for name in ("RTX-A4000", "NVIDIA RTX A6000", "A100-80GB", "NVIDIA H100 80GB HBM3", "L40S"):
        spec = find_gpu(name)
        assert spec is not None and lookup_gpu(name).name == spec.name


def test_a_model_on_a_vgpu_is_sized_on_the_framebuffer() -> None:
    cfg = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
           "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
           "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}
    params = SizingParams(max_model_len=8192, vllm_version="0.19.0")
    small, whole = estimate(cfg, lookup_gpu("NVIDIA A40-12Q"), params), estimate(cfg, lookup_gpu("A40"), params)
    assert whole.fits and not small.fits  # 15 GiB of bf16 weights do not fit a 12 GB framebuffer
    assert small.total_gib < 12 and any("framebuffer" in d.term for d in small.doubts)
