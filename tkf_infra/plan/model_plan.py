"""One model the plan deploys, as plain values: the type the fleet plan and admission both read.

Why its own module: `plan.fleet` builds these and `plan.admit_fleet` places them, so a home in either
made the two import each other (issue 41's circle); here it sits one floor below both.
"""

from __future__ import annotations

from dataclasses import dataclass

from tkf_infra.config import ModelEntry
from tkf_infra.plan.pools import PoolFacts
from tkf_infra.plan.share import Share
from tkf_infra.sizing.contract import FitInputs, FitResult
from tkf_infra.sizing.facts import ModelFacts


@dataclass(frozen=True)
class ModelPlan:
    """One model that will be deployed, with everything its resources need as plain values."""

    entry: ModelEntry
    facts: ModelFacts
    weight_bytes: int
    pool: PoolFacts | None
    fit_inputs: FitInputs
    fit: FitResult
    share: Share | None = None
    """The part of a GPU each replica gets (None: whole GPUs); `entry` then carries the share's vLLM flags."""
    refused_adapters: tuple[str, ...] = ()
    """Why each LoRA adapter left out of `entry` was (tkf_infra.plan.lora): fleet errors, the base deploys."""
