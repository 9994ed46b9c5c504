"""How much of a GPU each model gets: a MIG slice, a time-sliced share, or whole GPUs — and the fit there.

Why in the plan: the share decides what the fit check sizes (a MIG device's memory, or a budget of
k/N of a time-sliced GPU) and what the pod requests, and the layout planner packs the shares of a
pool; all of it must be plain values at preview.

- **MIG** (`mig:<profile>`, or `auto` on a MIG pool): the model is sized on the MIG device (its
  memory, `tkf_infra.sizing.mig`), at its own gpuMemoryUtilization; `auto` takes the smallest
  profile it fits and records why each smaller one does not.
- **Time-sliced** (`slice:<k>`, or `auto` on a pool with N time-slicing replicas): no memory
  isolation, so the model is given a budget it cannot exceed — k/N of the GPU, less the CUDA
  context its process holds outside vLLM's budget — passed to vLLM as `--gpu-memory-utilization`
  (vLLM's start-up check that the budget is free) and `--kv-cache-memory-bytes` (the KV cache is
  then exactly the fit check's conservative bound, whatever co-tenants allocate while it profiles).
  The layout planner proves that any N pods landing on one GPU fit together.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from tkf_infra.config import ModelEntry
from tkf_infra.names import GPU_RESOURCE
from tkf_infra.plan.pools import PoolFacts
from tkf_infra.sizing.contract import FitInputs, FitResult, evaluate
from tkf_infra.sizing.estimate import estimate
from tkf_infra.sizing.mig import MigProfile, mig_gpu
from tkf_infra.sizing.params import GIB, MIB, SizingError
from tkf_infra.sizing.versions import choose_version

#: The highest gpuMemoryUtilization the catalog accepts (flags.py); a share never renders more.
MAX_UTILIZATION = 0.99


@dataclass(frozen=True)
class Share:
    """The part of a GPU one replica of a model gets (None on a ModelPlan: whole GPUs, as before)."""

    kind: str
    """"mig" or "slice"."""
    requested: str
    """`gpuShare` as written (`auto`, `mig:1g.20gb`, `slice:2`)."""
    memory_gib: float
    """Memory the model may use: the MIG device's, or k/N of the time-sliced GPU."""
    device_gib: float
    """What CUDA reports on the device vLLM sees (the MIG device, or the whole time-sliced GPU)."""
    profile: MigProfile | None = None
    slices: int = 0
    of: int = 0
    """k of N time-slicing replicas (kind "slice")."""
    utilization: float = 0.0
    kv_cache_memory_bytes: int = 0
    why: str = ""
    """How `auto` chose (each smaller candidate and why it does not fit)."""

    @property
    def resource(self) -> str:
        """The extended resource one replica requests (one unit)."""
        return self.profile.resource if self.profile is not None else GPU_RESOURCE

    @property
    def label(self) -> str:
        return f"mig:{self.profile.name}" if self.profile is not None else f"slice:{self.slices}"

    @property
    def budget_gib(self) -> float:
        """vLLM's memory budget: gpuMemoryUtilization x what CUDA reports on its device."""
        return self.utilization * self.device_gib

    def published(self) -> dict[str, Any]:
        """The share as the outputs show it (`endpoints[…].share`)."""
        out: dict[str, Any] = {"kind": self.kind, "requested": self.requested, "share": self.label,
                               "resource": self.resource, "memoryGiB": round(self.memory_gib, 2),
                               "gpuMemoryUtilization": self.utilization, "budgetGiB": round(self.budget_gib, 2)}
        if self.profile is not None:
            out["profile"] = self.profile.name
        if self.kind == "slice":
            out.update({"slices": self.slices, "of": self.of, "kvCacheMemoryBytes": self.kv_cache_memory_bytes})
        if self.why:
            out["why"] = self.why
        return out


@dataclass(frozen=True)
class Sized:
    """A model's share with the entry as served (share flags set), the fit inputs and the verdict."""

    share: Share | None
    entry: ModelEntry
    inputs: FitInputs
    fit: FitResult


class ShareProblem(ValueError):
    """The share cannot be used on the model's pool (catalog stage): the message names the fix."""


def context_gib(vllm_version: str) -> float:
    """CUDA context a single-GPU vLLM process holds outside its budget (the largest candidate row's)."""
    return max(r.context_single_gib for r in choose_version(vllm_version).rows)


def slice_utilization(total_gib: float, k: int, n: int, vllm_version: str) -> float:
    """gpuMemoryUtilization of k/N of a GPU: the share less the process's own CUDA context, floored."""
    budget = k * total_gib / n - context_gib(vllm_version)
    return min(MAX_UTILIZATION, math.floor(budget / total_gib * 10_000) / 10_000)


def slice_fit(inputs: FitInputs, k: int, n: int, kv_bytes: int | None = None,
              explain: bool = True) -> tuple[float, int, FitInputs, FitResult]:
    """k of N replicas of the (time-sliced) GPU of `inputs`: (utilization, KV bytes, inputs, verdict).

    The KV cache is pinned at the bound of what the budget leaves once co-tenants cannot change it
    (`kv_bytes` when the entry sets kvCacheMemoryBytes itself). `explain`: as `evaluate`'s."""
    assert inputs.gpu is not None
    total = inputs.gpu.memory_gib
    u = slice_utilization(total, k, n, inputs.params.vllm_version)
    budgeted = inputs.model_copy(update={"params": inputs.params.model_copy(update={"gpu_memory_utilization": u}),
                                         "gpu": inputs.gpu.model_copy(update={"shared": False})})
    try:
        probe = estimate(budgeted.facts, budgeted.gpu, budgeted.params, model=inputs.model,
                         prefix_caching=inputs.params.enable_prefix_caching)
        # Graphs captured after the cache is allocated must fit in the share too (no memory outside it is ours).
        left = probe.available_kv_gib_bound - (0.0 if probe.cuda_graph_reserved else probe.cuda_graph_gib)
    except (SizingError, KeyError, ValueError):
        return u, 0, budgeted, evaluate(budgeted, explain)  # cannot size: the verdict says why
    kv = kv_bytes or max(int(left * GIB) // MIB * MIB, MIB)
    final = inputs.model_copy(update={"params": budgeted.params.model_copy(update={"kv_cache_memory_bytes": kv}),
                                      "gpu": inputs.gpu.model_copy(update={"shared": True})})
    return u, kv, final, evaluate(final, explain)


def mig_fit(inputs: FitInputs, profile: MigProfile, explain: bool = True) -> tuple[FitInputs, FitResult]:
    """The model on one MIG device of the board in `inputs`. `explain`: as `evaluate`'s."""
    assert inputs.gpu is not None
    final = inputs.model_copy(update={"gpu": mig_gpu(inputs.gpu, profile)})
    return final, evaluate(final, explain)


def size_slice(entry: ModelEntry, pool: PoolFacts, k: int, inputs: FitInputs, requested: str,
               explain: bool = True) -> Sized:
    """k of the pool's N replicas, with the entry as served (its budget flags set)."""
    u, kv, final, fit = slice_fit(inputs, k, pool.time_slices, entry.kv_cache_memory_bytes, explain)
    assert inputs.gpu is not None
    total = inputs.gpu.memory_gib
    served = entry.model_copy(update={"gpu_memory_utilization": u, "kv_cache_memory_bytes": kv})
    share = Share("slice", requested, k * total / pool.time_slices, total, slices=k, of=pool.time_slices,
                  utilization=u, kv_cache_memory_bytes=kv)
    return Sized(share, served, final, fit)


def size_mig(entry: ModelEntry, profile: MigProfile, inputs: FitInputs, requested: str,
             explain: bool = True) -> Sized:
    final, fit = mig_fit(inputs, profile, explain)
    assert final.gpu is not None
    share = Share("mig", requested, final.gpu.memory_gib, final.gpu.memory_gib, profile=profile,
                  utilization=entry.gpu_memory_utilization)
    return Sized(share, entry, final, fit)


def _first_fit(candidates: Iterable[Sized], what: str) -> Sized:
    """The smallest candidate that fits on the bound, with why each smaller one does not; failing that the
    smallest tight one (the estimate fits, the bound does not: it deploys with its warning); else the largest's
    refusal.

    Candidates are sized lazily, smallest first: sizing stops at the first that fits. Of one that does not
    fit only `problems` is read (never empty then) and the refusal is written here, so candidates are
    sized with `explain=False`: no way out (`suggest`) is computed for a message nobody reads."""
    skipped: list[str] = []
    tried: list[Sized] = []
    tight: Sized | None = None
    for c in candidates:
        tried.append(c)
        if c.fit.fits and c.share is not None and (c.fit.verdict == "fits" or tight is None):
            why = (f"smallest {what} that fits at maxModelLen {c.entry.max_model_len} and maxNumSeqs "
                   f"{c.entry.max_num_seqs} (bound {c.fit.kv_cache_tokens_bound:,} KV tokens, concurrency "
                   f"{c.fit.max_concurrency_bound:g}x)")
            why += "; " + "; ".join(skipped) if skipped else ""
            if c.fit.verdict == "fits":
                return replace(c, share=replace(c.share, why=why))
            tight = replace(c, share=replace(c.share, why=f"{why} (tight: no larger {what} fits on the bound)"))
        reason = (c.fit.problems or c.fit.tight or ("does not fit",))[0]
        skipped.append(f"{c.share.label if c.share else '?'} {'is tight' if c.fit.fits else 'does not fit'}: "
                       f"{reason}")
    if tight is not None:
        return tight
    last = tried[-1]
    labels = ", ".join(c.share.label for c in tried if c.share)
    largest = last.share.label if last.share else "?"
    message = (f"model {last.entry.name}: no {what} fits (tried {labels}); on the largest, {largest}: "
               f"{'; '.join(last.fit.problems) or last.fit.message}")
    return replace(last, fit=last.fit.model_copy(update={"fits": False, "verdict": "refuses", "message": message}))


def size_share(entry: ModelEntry, pool: PoolFacts | None, inputs: FitInputs) -> Sized:
    """The model's share on its pool and the fit there. Raises ShareProblem when the pool cannot give it."""
    kind, value = entry.share_request
    if pool is None or pool.gpu is None or entry.is_cpu or kind == "whole" or (
            kind == "auto" and (entry.gpus_per_node != 1 or entry.node_count != 1)):
        return Sized(None, entry, inputs, evaluate(inputs))
    board = pool.mig
    if kind == "mig":
        profile = board.profile(str(value)) if board is not None else None
        if board is None:
            raise ShareProblem(f"model {entry.name}: gpuShare {entry.gpu_share} needs a MIG pool but node pool "
                               f"{pool.name} is not one; set `mig: true` on a pool of MIG-capable GPUs (and "
                               "platform.gpuOperator.migStrategy: mixed) or use gpuShare whole")
        if profile is None:
            names = ", ".join(p.name for p in board.by_size())
            raise ShareProblem(f"model {entry.name}: gpuShare {entry.gpu_share}: {value} is not a MIG profile of "
                               f"{board.gpu} (node pool {pool.name}); use one of {names}, or auto")
        return size_mig(entry, profile, inputs, entry.gpu_share)
    if kind == "slice":
        k = int(value or 0)
        if pool.time_slices < 2:
            raise ShareProblem(f"model {entry.name}: gpuShare {entry.gpu_share} needs time-sliced GPUs but node pool "
                               f"{pool.name} is not time-sliced; set platform.gpuOperator.timeSlicingReplicas "
                               "(e.g. 4) or use gpuShare whole")
        if k > pool.time_slices:
            raise ShareProblem(f"model {entry.name}: gpuShare {entry.gpu_share} asks for {k} of the "
                               f"{pool.time_slices} time-slicing replicas of a GPU; use slice:1 to "
                               f"slice:{pool.time_slices}")
        return size_slice(entry, pool, k, inputs, entry.gpu_share)
    if board is not None:  # auto on a MIG pool
        return _first_fit((size_mig(entry, p, inputs, "auto", explain=False) for p in board.by_size()),
                          "MIG profile")
    if pool.time_slices > 1:  # auto on a time-sliced pool
        return _first_fit((size_slice(entry, pool, k, inputs, "auto", explain=False)
                           for k in range(1, pool.time_slices + 1)), "time-sliced share")
    return Sized(None, entry, inputs, evaluate(inputs))
