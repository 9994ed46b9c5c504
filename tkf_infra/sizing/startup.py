"""vLLM's start-up checks on one release row's figures, and the doubts the bound subtracts.

Why apart from `estimate`: the checks read only the figures (weights, activation, non-torch, graphs,
the KV need of one request, the sampler warm-up after allocation) and are what a refusal's message
quotes; each names the estimate and the bound, because the verdict is taken on the bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from tkf_infra.sizing.gpus import GpuSpec
from tkf_infra.sizing.params import GIB, SizingParams

#: First release with --kv-cache-memory-bytes (CacheConfig.kv_cache_memory_bytes, vllm/config/cache.py@v0.10.2;
#: `determine_available_memory` returns it after the profile run, vllm/v1/worker/gpu_worker.py@v0.10.2:235-252,
#: and @v0.32.0:649-675). The start-up check that `gpu_memory_utilization x total` is free still runs
#: (gpu_worker.py@v0.10.2:176-186, vllm/v1/worker/utils.py@v0.32.0:761-770).
KV_CACHE_MEMORY_BYTES_SINCE = (0, 10, 2)


#: Releases whose start-up check under pipeline parallelism is not per stage: `get_kv_cache_configs` checks
#: one max-length request over the global KV cache groups, every layer of every stage, against the smallest
#: worker's memory (vllm/v1/core/kv_cache_utils.py@v0.14.0:1511-1525, @v0.15.0:1513-1527, @v0.16.0:1513-1527,
#: "using min across all workers"). Per worker, each with its own layers, up to 0.13 (@v0.13.0:1336-1341,
#: @v0.11.0:1240-1244) and again from 0.17 (@v0.17.0:1568-1577, @v0.32.0:2638-2648, projected groups;
#: vllm/v1/core/kv_cache_planning.py@v0.33.0:1550-1560).
PP_WHOLE_MODEL_CHECK = ((0, 14, 0), (0, 16, 99))
#: From 0.29 the start-up check plans against usable blocks: one block of the pool (the null block
#: BlockPool holds back) comes off the memory first (vllm/v1/core/kv_cache_utils.py@v0.29.0:2316-2322,
#: @v0.32.0:2627-2632; kv_cache_planning.py@v0.33.0:1533-1543); 0.28 compares the whole memory (@v0.28.0:2189-2197).
NULL_BLOCK_RESERVED_SINCE = (0, 29, 0)


class Doubt(BaseModel):
    """One reason the bound sits below the estimate: how much KV memory it may cost, and the fix."""

    term: str
    gib: float
    pin: str


class RowRun(BaseModel):
    """What one release row predicts for the limiting rank (GiB), with its doubts and problems."""

    row: str
    seqs: int
    mnbt: int
    block: int
    weights: float
    activation: float
    non_torch: float
    graphs: float
    reserved: bool
    available: float
    layout: Any
    layout_low: Any
    """The layout the bound is taken on (hybrid models: prefix caching assumed on unless known)."""
    need: float
    per_token: float
    doubts: list[Doubt]
    problems: list[str]
    context: float
    warmup: float
    warmup_reuse: float | None = None
    """The part of the profiled activation the post-allocation warm-up finds freed (None: all of it)."""
    need_whole: float = 0.0
    """Bytes one max-length request needs over every layer of the model (vLLM's global KV cache groups)."""
    least_available: float = 0.0
    """The smallest available KV memory over the pipeline stages (GiB, central)."""
    lora: float = 0.0
    """LoRA's slots, metadata and workspace on the limiting rank (tkf_infra/sizing/lora.py)."""
    lora_host: float = 0.0
    sampler_state: float = 0.0
    """Model runner V2's penalty state on the limiting rank, non-KV memory (overheads.v2_sampler_state_gib)."""
    receive_buffers: float = 0.0
    """A non-first pipeline stage's receive buffers on the limiting rank (overheads.pp_receive_buffers_gib)."""


#: How every tight reason begins (`Estimate.tight`; they are also among the warnings, which reports pick them from).
TIGHT_PREFIX = "tight: "


@dataclass
class Findings:
    """What the start-up checks found: refusals (a check fails on the estimate) and tight margins (it passes on the
    estimate and fails on the conservative bound)."""

    refusals: list[str] = field(default_factory=list)
    tight: list[str] = field(default_factory=list)

    def add(self, other: Findings) -> None:
        self.refusals += other.refusals
        self.tight += other.tight


def top_doubt(doubts: list[Doubt]) -> str:
    """The largest doubt and what would pin it, for a tight verdict's message."""
    sized = [d for d in doubts if d.gib > 0]
    if not sized:
        return "the doubts listed in uncertainty"
    top = max(sized, key=lambda d: d.gib)
    return f"the largest doubt is {top.term} ({top.gib:.2f} GiB); to remove it: {top.pin}"


def _tight(check: str, estimate: str, bound: str, doubts: list[Doubt]) -> str:
    return (f"{TIGHT_PREFIX}{check}: the estimate passes ({estimate}) but the conservative bound does not ({bound}); "
            f"{top_doubt(doubts)}. It deploys; a strict stack or the policy pack's fit-verdict rule refuses it")


def budget_problems(run: RowRun, gpu: GpuSpec, params: SizingParams, avail: float, avail_low: float,
                    max_len: int, requested: float, doubts: list[Doubt], *, spare_gib: float | None = None,
                    version: tuple[int, int, int] | None = None, cotenant: float = 0.0) -> Findings:
    """vLLM's start-up checks on the estimate (refusals) and on the bound (tight); each message gives both.

    `spare_gib`: memory besides the freed activation the post-allocation warm-up may use (default:
    all of the GPU outside the budget; on a time-sliced share only what its own budget leaves).
    `version`: the release (None: unknown, checked as the strictest); from `NULL_BLOCK_RESERVED_SINCE` one block
    comes off the memory before the max-length check. `cotenant`: what other processes on the GPU may take from
    this budget (already out of `avail`), named in the message."""
    total, u = gpu.memory_gib, params.gpu_memory_utilization
    found = Findings()
    null_block = not run.layout.v0 and (version is None or version >= NULL_BLOCK_RESERVED_SINCE)
    need = run.need + (run.layout_low.bytes_per_block if null_block else 0.0)
    if run.context > total - requested + 1e-9:
        found.refusals.append(
            f"gpuMemoryUtilization {u:.2f} asks for {requested:.2f} GiB but only about "
            f"{total - run.context:.2f} GiB of the {total:.2f} GiB is free when vLLM starts; "
            f"use gpuMemoryUtilization <= {math.floor((total - run.context) / total * 100) / 100:.2f}"
        )
    both = f"{avail_low:.2f} GiB (conservative bound; estimate {avail:.2f} GiB)"
    if avail <= 0:
        found.refusals.append(
            f"no memory left for the KV cache (estimate {avail:.2f} GiB, bound {avail_low:.2f} GiB): "
            f"{run.weights:.1f} GiB of weights + {run.activation:.2f} GiB activation + "
            f"{run.non_torch:.2f} GiB non-torch"
            + (f" + {run.graphs:.2f} GiB CUDA graphs" if run.reserved else "")
            + (f" + {run.sampler_state:.2f} GiB sampler state (model runner V2)" if run.sampler_state else "")
            + (f" + {run.receive_buffers:.2f} GiB pipeline receive buffers" if run.receive_buffers else "")
            + (f" + {cotenant:.2f} GiB other processes on the GPU may hold (see uncertainty)" if cotenant else "")
            + f" against the {requested:.1f} GiB budget ({u:.2f} x {total:.2f} GiB)"
        )
    elif need > avail * GIB:
        found.refusals.append(
            f"needs {need / GIB:.1f} GiB KV cache for maxModelLen {max_len} but only {both} is left after "
            f"{run.weights:.1f} GiB of weights on one {gpu.name} at utilization {u:.2f}"
        )
    elif need > avail_low * GIB:
        found.tight.append(_tight(
            f"one maxModelLen {max_len} request needs {need / GIB:.2f} GiB of KV cache on one {gpu.name} at "
            f"utilization {u:.2f}", f"{avail:.2f} GiB left, a margin of {avail - need / GIB:.2f} GiB",
            f"{avail_low:.2f} GiB", doubts))
    if not found.refusals and not run.layout.v0:  # V0 warms no sampler after allocating the cache
        found.refusals += warmup_problems(run, gpu, params, requested, spare_gib)
    return found


def warmup_problems(run: RowRun, gpu: GpuSpec, params: SizingParams, requested: float,
                    spare_gib: float | None) -> list[str]:
    """After allocating the KV cache vLLM warms the sampler up again: it must fit in what the budget leaves."""
    total = gpu.memory_gib
    rows = min(run.seqs, run.mnbt)
    reused = run.activation if run.warmup_reuse is None else run.warmup_reuse
    if spare_gib is None:
        headroom = (total - run.context - requested) + reused - (0.0 if run.reserved else run.graphs)
    else:
        headroom = spare_gib + reused
    warm = run.warmup
    if warm <= headroom:
        return []
    return [f"the sampler warm-up with {rows} dummy requests needs about {warm:.2f} GiB but only "
            f"{headroom:.2f} GiB stays free after weights, KV cache and CUDA graphs on one {gpu.name}; vLLM "
            "would fail with 'CUDA out of memory occurred when warming up sampler' - lower maxNumSeqs or "
            "gpuMemoryUtilization"]


def pinned_kv_problems(pinned: int, left_gib: float, left_low_gib: float, version: tuple[int, int, int] | None,
                       row: str, doubts: list[Doubt]) -> Findings:
    """--kv-cache-memory-bytes: the release must have it and the budget must hold that cache (estimate: refused;
    bound only: tight)."""
    if version is None or version < KV_CACHE_MEMORY_BYTES_SINCE or "(V0" in row:
        shown = ".".join(map(str, version)) if version else "an unknown release"
        return Findings([f"kvCacheMemoryBytes needs vLLM >= 0.10.2 (V1 engine) but the image runs {shown}; pin "
                         "serving.vllmImage to a release that has --kv-cache-memory-bytes, e.g. "
                         "vllm/vllm-openai:v0.11.0"])
    if pinned > left_gib * GIB:
        return Findings([f"kvCacheMemoryBytes {pinned} ({pinned / GIB:.2f} GiB) is more than the "
                         f"{max(left_gib, 0):.2f} GiB the memory budget leaves for the KV cache after weights, "
                         f"activations and graphs (estimate; bound {max(left_low_gib, 0):.2f} GiB); lower "
                         "kvCacheMemoryBytes or raise the budget"])
    if pinned > left_low_gib * GIB:
        return Findings(tight=[_tight(
            f"kvCacheMemoryBytes {pinned} ({pinned / GIB:.2f} GiB) against what the budget leaves for the KV cache",
            f"{left_gib:.2f} GiB left", f"{max(left_low_gib, 0):.2f} GiB", doubts)])
    return Findings()


def pp_whole_model_problems(run: RowRun, params: SizingParams, version: tuple[int, int, int] | None, gap_gib: float,
                            max_len: int, doubts: list[Doubt]) -> Findings:
    """0.14-0.16 under pipeline parallelism: the whole model's request against the smallest stage.

    An unknown release may be one of them, so it gets the check too (the product sizes unknown releases
    with the most conservative reading)."""
    first, last = PP_WHOLE_MODEL_CHECK
    if params.pipeline_parallel_size <= 1 or not (version is None or first <= version <= last):
        return Findings()
    left, left_low = run.least_available, run.least_available - gap_gib
    if run.need_whole <= left_low * GIB:
        return Findings()
    shown = ".".join(map(str, version)) if version else "an unknown release (it may be one)"
    check = (f"pipelineParallelSize {params.pipeline_parallel_size}: vLLM 0.14-0.16 (the image runs {shown}) checks "
             f"one maxModelLen {max_len} request's KV cache over every layer of the model, "
             f"{run.need_whole / GIB:.1f} GiB, against the smallest stage's memory, not stage by stage")
    if run.need_whole <= left * GIB:
        return Findings(tight=[_tight(check, f"{left:.2f} GiB", f"{max(left_low, 0.0):.2f} GiB", doubts)])
    return Findings([f"{check}: {max(left, 0.0):.2f} GiB (estimate; bound {max(left_low, 0.0):.2f} GiB); pin "
                     "serving.vllmImage to 0.17 or later (or 0.13 or earlier), or lower maxModelLen"])
