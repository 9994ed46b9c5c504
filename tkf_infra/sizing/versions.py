"""Which vLLM release runs, and the overhead constants that change between releases.

Activation peak, non-torch memory and CUDA-graph memory are how vLLM's own start-up profiling
budgets memory; each release does it a little differently, so the constants are per release range.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from tkf_infra.sizing.params import SizingError


def parse_vllm_version(text: str) -> tuple[int, int, int]:
    """Accept ``0.11.0``, ``v0.11.0`` or an image ref such as ``vllm/vllm-openai:v0.11.0``."""
    tag = text.rsplit(":", 1)[-1] if ":" in text else text
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", tag)
    if not match:
        raise SizingError(
            f"cannot read a vLLM version from {text!r}: pin the image to a release tag such as "
            "vllm/vllm-openai:v0.19.0 (a floating tag like 'latest' cannot be sized)"
        )
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


@dataclass(frozen=True)
class VersionProfile:
    """Constants that change between vLLM releases.

    ``sampler_bytes_per_element`` x max_num_seqs x vocab is the sampler's share of the profiled
    activation peak; ``warmup_bytes_per_element`` is what the sampler warm-up after KV allocation
    needs (fp32 logits + sorted values + int64 indices + probabilities + noise = 24 B).
    """

    name: str
    sampler_bytes_per_element: float
    activation_base_gib: float
    non_torch_tp1_gib: float
    non_torch_multi_gib: float
    context_single_gib: float
    context_multi_gib: float
    graphs_reserved: bool
    warmup_bytes_per_element: float = 24.0
    source: str = ""


# v0.19: fitted on the 29 H100 start-ups in tests/data/calibration (activation = 0.123 GiB +
# 14.45 B x seqs x vocab; non-torch 0.24-0.27 GiB at TP1, 2.06-2.21 GiB at TP>1; memory in use
# before vLLM's snapshot 0.51 GiB single-GPU, 1.43-1.55 GiB multi-GPU).
_V019 = VersionProfile(
    "v0.19-calibrated",
    14.45,
    0.123,
    0.25,
    2.15,
    0.51,
    1.55,
    False,
    source="fitted on vLLM 0.19.0 H100 start-up logs (llm-d-planner PR 205)",
)
# v0.11: sampler-dominated activation of ~39 B per element and non-torch 0.13 / 0.55 GiB, as
# reported by llm-d's H100 measurements (sizing reference, table b). Used for every release before
# 0.19 because it is the larger (safer) of the two measured profiles.
_V011 = VersionProfile(
    "v0.11-reference",
    39.0,
    0.0,
    0.13,
    0.55,
    0.51,
    1.55,
    False,
    source="llm-d empirical results for vLLM 0.11 (sizing reference table b)",
)


def version_profile(version: tuple[int, int, int]) -> VersionProfile:
    if version < (0, 19, 0):
        return _V011
    if version >= (0, 21, 0):
        # CUDA-graph memory is reserved out of the KV budget by default since v0.21.
        return replace(_V019, name="v0.21+-graphs-reserved", graphs_reserved=True)
    return _V019

