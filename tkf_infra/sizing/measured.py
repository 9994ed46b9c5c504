"""How wide each doubt of the bound is on a GPU family and release, where start-ups that print it measured it.

Why: the release table's doubts were sized on H100s (the 0.19 sweep) and, where nothing was measured, at the
widest reading of a term (model runner V2's unexplained non-KV use as the whole sampler warm-up its profile
leaves out; the CUDA-graph estimate as wholly in doubt). Applied at that width on every GPU, they left a tenth
of the KV cache on Ada and consumer Blackwell cards where vLLM then had more than the estimate (issue 40). A
doubt is as wide as the measurements of the case's own GPU family and release say; where none exists, the
term keeps the row's figure and its text says so (`note`), so a tight verdict names what would narrow it.

Families are the GPU architectures by compute capability (`family`): what changes the terms measured here
(NCCL's NVLink buffers, the all-reduce fusion workspace, the kernels a graph captures) changes with them.
Each measurement names the start-ups it was read from (the calibration case files, docs/sizing.md "The bound,
per GPU family and release") and the release rows it holds for: a row where the changelog (versions.py)
changes nothing of the term shares the measurement of the rows around it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tkf_infra.sizing.gpu_spec import GpuSpec

Term = Literal["graphs", "v2-gap", "non-torch-pcie"]

#: Architecture by compute capability (major, minor); a minor version absent here takes its major's.
_FAMILIES: dict[tuple[int, int | None], str] = {
    (7, 0): "Volta", (7, 2): "Volta (Jetson Xavier)", (7, 5): "Turing",
    (8, 0): "Ampere data-centre (A100/A800/A30)", (8, 6): "Ampere", (8, 7): "Ampere (Jetson Orin)", (8, 9): "Ada",
    (9, 0): "Hopper", (10, None): "Blackwell data-centre", (11, None): "Blackwell (Jetson Thor)",
    (12, None): "Blackwell",
}


def family(gpu: GpuSpec) -> str:
    """The GPU's architecture family, the unit doubts are measured in."""
    major, minor = gpu.cc
    return _FAMILIES.get((major, minor)) or _FAMILIES.get((major, None)) or f"compute capability {major}.{minor}"


@dataclass(frozen=True)
class Measured:
    """One doubt's width on some families and release rows, and the start-ups that measured it."""

    term: Term
    families: tuple[str, ...]
    rows: tuple[str, ...]
    """Release rows (`VersionRow.name`) it holds for."""
    width: float
    """GiB, or for `graphs` a fraction of the CUDA-graph term."""
    starts: str


_HOPPER_ADA_AMPERE = ("Hopper", "Ada", "Ampere", "Ampere data-centre (A100/A800/A30)")
_GRAPH_ROWS = ("v0.20", "v0.21-0.25", "v0.26", "v0.27", "v0.28", "v0.29", "v0.30-0.31", "v0.32", "v0.33")
_ADA_PCIE_ROWS = ("v0.11-0.16", "v0.17-0.19", "v0.20", "v0.21-0.25", "v0.26", "v0.27", "v0.28")

MEASURED: tuple[Measured, ...] = (
    Measured(
        "graphs", _HOPPER_ADA_AMPERE, _GRAPH_ROWS, 0.30,
        "the CUDA-graph term against what vLLM printed capturing its graphs ('Graph capturing finished ... took X "
        "GiB'): 29 H100 start-ups on 0.19 (the term between 0.85 and 2.0 times the capture), H100 on 0.20 (2.12 "
        "against 0.96, vLLM's own estimate 1.10: its estimate may run 15 % above the capture), H200 on 0.10, L40S "
        "on 0.11 (three), A10 (one): never below 0.85 of the capture, so at most 30 % below vLLM's estimate"),
    Measured(
        "v2-gap", ("Ada",), ("v0.28",), 0.5,
        "model runner V2 start-ups on 0.28.0 that printed their KV cache: L40S at TP 1 (Qwen3-14B bf16 and AWQ, "
        "utilization 0.9 and 0.95) and L4 at TP 2 and PP 2 (Qwen3-14B AWQ): the estimate at most 0.49 GiB above "
        "what vLLM printed"),
    Measured(
        "v2-gap", ("Blackwell",), ("v0.27",), 1.6,
        "RTX PRO 6000 on 0.27.1 (Qwen3-32B, utilization 0.426): 1.3-1.6 GiB of non-KV beyond every source term at "
        "TP 1 and PP 2, none at TP 2"),
    Measured(
        "non-torch-pcie", ("Ada",), _ADA_PCIE_ROWS, 0.3,
        "L40S at TP 2 on 0.11.2 (Qwen3 0.6B, 8B, 14B, 32B AWQ) and L4 at TP 2 on 0.28.0 (Qwen3-14B AWQ): no "
        "non-torch memory beyond the TP 1 figure; an Ada board never builds the all-reduce fusion workspace "
        "(0.17-0.28 add nothing else it would)"),
)


#: The rows whose activation uncertainty start-ups of a family measured (the rows' `calibration`): llm-d's H100 runs
#: and an L40S start-up on 0.11, the 0.19 H100 sweep. Elsewhere the row's figure is a reading, not a measurement.
ACTIVATION_MEASURED: dict[str, tuple[str, ...]] = {"v0.11-0.16": ("Hopper", "Ada"), "v0.17-0.19": ("Hopper",)}


def activation_note(gpu: GpuSpec, row: str) -> str:
    """What the activation doubt's width rests on for this GPU and row."""
    if family(gpu) in ACTIVATION_MEASURED.get(row, ()):
        return f"measured on {family(gpu)}"
    return note(gpu, row, "the row's figure")


def measured(term: Term, gpu: GpuSpec, row: str) -> Measured | None:
    """The measurement of `term` for this GPU's family on release row `row`, if any."""
    fam = family(gpu)
    return next((m for m in MEASURED if m.term == term and fam in m.families and row in m.rows), None)


def note(gpu: GpuSpec, row: str, what: str) -> str:
    """The words a doubt carries where its width was not measured on this family and release."""
    return f"not measured on {family(gpu)} at {row}: {what}"
