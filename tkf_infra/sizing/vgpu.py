"""NVIDIA vGPU profiles: a VM's GPU named by its board and framebuffer ("NVIDIA A40-48Q", "GRID T4-16Q").

Why: on a VM with NVIDIA vGPU software, CUDA, nvidia-smi and so GPU feature discovery's
`nvidia.com/gpu.product` label name the vGPU type, not the board: `<board>-<framebuffer GB><series>`
with series A (virtual applications), B (virtual PC), C (compute) or Q (virtual workstation), an optional
display-head digit after B ("P40-2B4"), and for MIG-backed types `<board>-<slices>-<framebuffer><C>`
("A100-4-20C"). The guest sees only its framebuffer ("GRID P40-2B ... framebuffer=2048M" in `mdevctl
types`; vLLM printed total_gpu_memory=47.74GiB on an "NVIDIA A40-48Q", vllm-project/vllm#11230).

The framebuffer is the VM's own: other VMs on the board cannot allocate from it, so the GPU is not
`shared` in the fit check's sense (time-sliced compute does not change vLLM's memory profile). Its
CUDA total is derived conservatively from the framebuffer as for an unmeasured part, with the
board's ECC carve-out where the board ships with ECC on (whether the host turned ECC off is not in
the name), and never above the board's own total; `nodePools[].gpuMemoryGiB` pins the printed one.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from tkf_infra.sizing.gpu_spec import GpuSpec, derive_total_gib

_VGPU = re.compile(
    r"^(?:GRID[\s_-]+)?(?P<board>.+?)-(?:(?P<slices>\d)-)?(?P<fb>\d{1,3})(?P<series>[ABCQ])(?P<heads>\d)?"
    r"(?:[\s_-]+(?P<size>\d+)\s*GB)?$",
    re.IGNORECASE,
)


def vgpu_board(name: str) -> str | None:
    """The board part of a name shaped like a vGPU type ("NVIDIA A40" of "NVIDIA A40-48Q"), else None."""
    match = _VGPU.match(name.strip())
    return match.group("board") if match else None


def vgpu_spec(name: str, find: Callable[[str], GpuSpec | None]) -> GpuSpec | None:
    """The GpuSpec of a vGPU type name, sized by its framebuffer; None when `name` is not one.

    `find` resolves the board's part (`gpus.find_gpu`), so a name whose board is not a known part, or
    whose framebuffer is larger than the board, is not read as a vGPU type."""
    match = _VGPU.match(name.strip())
    if match is None:
        return None
    board = find(match.group("board"))
    fb = int(match.group("fb"))
    if board is None or not 0 < fb <= board.nominal_gib:
        return None
    if match.group("size") and int(match.group("size")) not in (fb, round(board.nominal_gib)):
        return None  # a written size that is neither the framebuffer nor the board's
    if match.group("slices") and match.group("series").upper() != "C":
        return None  # MIG-backed vGPU types are compute (C) types only
    profile = name.strip()
    if match.group("size"):
        profile = profile[: match.start("size")].rstrip(" _-")
    vgpu_type = re.sub(r"^(?:NVIDIA|GRID)[\s_-]+", "", profile, flags=re.IGNORECASE)
    slices = f"{match.group('slices')}-" if match.group("slices") else ""
    memory = min(derive_total_gib(fb, board.ecc_gddr), board.memory_gib)
    return board.model_copy(update={
        "name": f"{board.name}-vGPU-{slices}{fb}{match.group('series').upper()}{match.group('heads') or ''}",
        "memory_gib": memory, "nominal_gib": float(fb), "memory_measured": False,
        "memory_source": f"derived from the vGPU type {vgpu_type}'s {fb} GB framebuffer"
                         + (", ECC on" if board.ecc_gddr else ""),
        "product_labels": (re.sub(r"\s+", "-", profile),), "aliases": (), "cuda_name": profile,
        "interconnect": "pcie", "shared": False,
    })
