"""The way out of a no-fit: the smallest tensor parallelism that fits, the longest context that fits.

A refusal a user cannot act on is only half a check; every message ends with what would fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tkf_infra.sizing.estimate import Estimate, estimate
from tkf_infra.sizing.facts import ModelFacts
from tkf_infra.sizing.gpus import GpuSpec
from tkf_infra.sizing.params import SizingError, SizingParams


@dataclass(frozen=True)
class Suggestion:
    """Ways out of a no-fit: smallest TP that fits, largest maxModelLen that fits at this TP."""

    tensor_parallel_size: int | None
    max_model_len: int | None

    def text(self) -> str:
        parts = []
        if self.tensor_parallel_size:
            parts.append(f"fits with tensorParallelSize {self.tensor_parallel_size}")
        if self.max_model_len:
            parts.append(f"maxModelLen <= {self.max_model_len}")
        return (
            ", or ".join(parts) if parts else "no tensorParallelSize up to the limit fits; use a larger GPU"
        )


def suggest(facts: ModelFacts | dict[str, Any], gpu: GpuSpec, params: SizingParams, max_tp: int = 8,
            current: Estimate | None = None) -> Suggestion:  # fmt: skip
    """Smallest power-of-two-or-divisor TP (<= max_tp) that fits, and the largest fitting maxModelLen."""
    cur = current or estimate(facts, gpu, params)
    best_tp: int | None = None
    for tp in range(1, max_tp + 1):
        if tp == params.tensor_parallel_size:
            if cur.fits:
                best_tp = tp
                break
            continue
        try:
            est = estimate(facts, gpu, params.model_copy(update={"tensor_parallel_size": tp}))
        except SizingError:
            continue
        if est.fits:
            best_tp = tp
            break
    fit_len: int | None = None
    only_kv = all(p.startswith("needs ") for p in cur.problems)
    if cur.max_fitting_model_len and only_kv:
        trial = estimate(facts, gpu, params.model_copy(update={"max_model_len": cur.max_fitting_model_len}))
        fit_len = cur.max_fitting_model_len if trial.fits else None
    return Suggestion(best_tp, fit_len)


def fit_message(est: Estimate, sugg: Suggestion | None) -> str:
    """One line a user can act on: model, numbers, and the way out."""
    reasons = "; ".join(est.problems)
    way = f"; {sugg.text()}" if sugg else ""
    return f"model {est.model}: {reasons}{way}"
