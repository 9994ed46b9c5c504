"""The way out of a no-fit: the smallest tensor parallelism that fits, the longest context that fits,
and, when only the doubt refuses a model, the input that would remove the doubt.

A refusal a user cannot act on is only half a check; every message ends with what would fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tkf_infra.sizing.estimate import UNIFIED_TIGHT
from tkf_infra.sizing.estimate import estimate as _estimate
from tkf_infra.sizing.estimate_result import Estimate
from tkf_infra.sizing.facts import ModelFacts
from tkf_infra.sizing.gpus import GpuSpec
from tkf_infra.sizing.params import SizingError, SizingParams


@dataclass(frozen=True)
class Suggestion:
    """Ways out of a no-fit: smallest TP that fits, largest maxModelLen that fits at this TP."""

    tensor_parallel_size: int | None
    max_model_len: int | None
    memory_helps: bool = True
    """False when even a GPU with a thousand times the memory would refuse the entry: the reasons are not
    about memory (a pipeline deeper than the model, a quantization the GPU or release refuses)."""

    def text(self) -> str:
        if not self.memory_helps:
            return "not a memory limit: no tensorParallelSize or larger GPU helps until the reasons given are fixed"
        parts = []
        if self.tensor_parallel_size:
            parts.append(f"fits with tensorParallelSize {self.tensor_parallel_size}")
        if self.max_model_len:
            parts.append(f"maxModelLen <= {self.max_model_len}")
        return (
            ", or ".join(parts) if parts else "no tensorParallelSize up to the limit fits; use a larger GPU"
        )


def suggest(facts: ModelFacts | dict[str, Any], gpu: GpuSpec, params: SizingParams, max_tp: int = 8,
            current: Estimate | None = None, prefix_caching: bool | None = None) -> Suggestion:
    """Smallest TP (<= max_tp) that fits, and the largest fitting maxModelLen (both judged on the bound: the way
    out of a refusal and of a tight verdict alike)."""

    def estimate(f: ModelFacts | dict[str, Any], g: GpuSpec, p: SizingParams) -> Estimate:
        return _estimate(f, g, p, prefix_caching=prefix_caching)

    cur = current or estimate(facts, gpu, params)
    best_tp: int | None = None
    for tp in range(1, max_tp + 1):
        if tp == params.tensor_parallel_size:
            if fits_here(cur):
                best_tp = tp
                break
            continue
        try:
            est = estimate(facts, gpu, params.model_copy(update={"tensor_parallel_size": tp}))
        except SizingError:
            continue
        if fits_here(est):
            best_tp = tp
            break
    if best_tp is None and not cur.cpu:
        roomy = gpu.with_memory(gpu.memory_gib * 1024, "what-if: memory is not the limit")
        try:
            if not estimate(facts, roomy, params).fits:
                return Suggestion(None, None, memory_helps=False)
        except SizingError:
            pass
    fit_len: int | None = None
    only_kv = all(p.startswith("needs ") for p in cur.problems)
    if cur.max_fitting_model_len and only_kv:
        trial = estimate(facts, gpu, params.model_copy(update={"max_model_len": cur.max_fitting_model_len}))
        fit_len = cur.max_fitting_model_len if fits_here(trial) else None
    return Suggestion(best_tp, fit_len)


def fits_here(est: Estimate) -> bool:
    """Whether an estimate is as good as this GPU allows: it fits on the bound, or (a unified-memory GPU, whose
    verdict is tight at best) it is tight for that reason alone."""
    return not est.problems and all(t == UNIFIED_TIGHT.format(gpu=est.gpu) for t in est.tight)


def doubt_text(est: Estimate) -> str | None:
    """What separates estimate and bound, largest first, and which input would remove the largest doubt."""
    if est.cpu:
        return None
    ranked = sorted(est.doubts, key=lambda d: -d.gib)
    sized = [d for d in ranked if d.gib > 0]
    notes = [d for d in ranked if d.gib == 0]
    if not sized and not notes:
        return None
    parts = [f"{d.term} {d.gib:.2f} GiB" for d in sized[:4]]
    head = (f"bound {est.kv_cache_tokens_bound:,} tokens ({est.available_kv_gib_bound:.2f} GiB) vs estimate "
            f"{est.kv_cache_tokens:,} ({est.available_kv_gib:.2f} GiB)")
    text = head + (": " + "; ".join(parts) if parts else "")
    if notes:
        text += "; also " + "; ".join(d.term for d in notes)
    pins = [d.pin for d in (sized[:1] + notes)]
    return text + "; to remove the doubt: " + "; ".join(dict.fromkeys(pins))


def fit_message(est: Estimate, sugg: Suggestion | None) -> str:
    """One line a user can act on: model, numbers (estimate and bound), the doubt and the way out; for a tight
    verdict, why it is tight (the margin and the doubt) and what would make it fit on the bound."""
    reasons = "; ".join(est.problems or est.tight)
    way = f"; {sugg.text()}" if sugg else ""
    doubt = ""
    if est.problems and est.available_kv_gib > 0 and est.bound_gap_gib > 0.005 and est.doubts:
        top = max(est.doubts, key=lambda d: d.gib)
        doubt = (f" (the estimate leaves {est.available_kv_gib:.2f} GiB / {est.kv_cache_tokens:,} tokens; the bound "
                 f"{est.available_kv_gib_bound:.2f} GiB mostly because of {top.term}: {top.pin})")
    return f"model {est.model}: {reasons}{doubt}{way}"
