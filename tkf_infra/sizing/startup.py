"""vLLM's start-up checks on one release row's figures, and the doubts the bound subtracts.

Why apart from `estimate`: the checks read only the figures (weights, activation, non-torch, graphs,
the KV need of one request, the sampler warm-up after allocation) and are what a refusal's message
quotes; each names the estimate and the bound, because the verdict is taken on the bound.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel

from tkf_infra.sizing.gpus import GpuSpec
from tkf_infra.sizing.params import GIB, SizingParams

#: First release with --kv-cache-memory-bytes (CacheConfig.kv_cache_memory_bytes, vllm/config/cache.py@v0.10.2;
#: `determine_available_memory` returns it after the profile run, vllm/v1/worker/gpu_worker.py@v0.10.2:235-252,
#: and @v0.32.0:649-675). The start-up check that `gpu_memory_utilization x total` is free still runs
#: (gpu_worker.py@v0.10.2:176-186, vllm/v1/worker/utils.py@v0.32.0:761-770).
KV_CACHE_MEMORY_BYTES_SINCE = (0, 10, 2)


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
    lora: float = 0.0
    """LoRA's slots, metadata and workspace on the limiting rank (tkf_infra/sizing/lora.py)."""
    lora_host: float = 0.0


def budget_problems(run: RowRun, gpu: GpuSpec, params: SizingParams, avail: float, avail_low: float,
                    max_len: int, requested: float, *, spare_gib: float | None = None) -> list[str]:
    """vLLM's start-up checks, judged on the bound; each message gives the estimate and the bound.

    `spare_gib`: memory besides the freed activation the post-allocation warm-up may use (default:
    all of the GPU outside the budget; on a time-sliced share only what its own budget leaves)."""
    total, u = gpu.memory_gib, params.gpu_memory_utilization
    problems = []
    if run.context > total - requested + 1e-9:
        problems.append(
            f"gpuMemoryUtilization {u:.2f} asks for {requested:.2f} GiB but only about "
            f"{total - run.context:.2f} GiB of the {total:.2f} GiB is free when vLLM starts; "
            f"use gpuMemoryUtilization <= {math.floor((total - run.context) / total * 100) / 100:.2f}"
        )
    both = f"{avail_low:.2f} GiB (conservative bound; estimate {avail:.2f} GiB)"
    if avail_low <= 0:
        problems.append(
            f"no memory left for the KV cache (bound {avail_low:.2f} GiB, estimate {avail:.2f} GiB): "
            f"{run.weights:.1f} GiB of weights + {run.activation:.2f} GiB activation + "
            f"{run.non_torch:.2f} GiB non-torch"
            + (f" + {run.graphs:.2f} GiB CUDA graphs" if run.reserved else "")
            + f" against the {requested:.1f} GiB budget ({u:.2f} x {total:.2f} GiB)"
        )
    elif run.need > avail_low * GIB:
        problems.append(
            f"needs {run.need / GIB:.1f} GiB KV cache for maxModelLen {max_len} but only {both} is left after "
            f"{run.weights:.1f} GiB of weights on one {gpu.name} at utilization {u:.2f}"
        )
    if not problems and not run.layout.v0:  # V0 warms no sampler after allocating the cache
        rows = min(run.seqs, run.mnbt)
        if spare_gib is None:
            headroom = (total - run.context - requested) + run.activation - (0.0 if run.reserved else run.graphs)
        else:
            headroom = spare_gib + run.activation
        warm = run.warmup
        if warm > headroom:
            problems.append(
                f"the sampler warm-up with {rows} dummy requests needs about {warm:.2f} GiB but only "
                f"{headroom:.2f} GiB stays free after weights, KV cache and CUDA graphs on one {gpu.name}; vLLM "
                "would fail with 'CUDA out of memory occurred when warming up sampler' - lower maxNumSeqs or "
                "gpuMemoryUtilization"
            )
    return problems


def pinned_kv_problems(pinned: int, left_low_gib: float, version: tuple[int, int, int] | None, row: str) -> list[str]:
    """--kv-cache-memory-bytes: the release must have it and the budget's bound must hold that cache."""
    if version is None or version < KV_CACHE_MEMORY_BYTES_SINCE or "(V0" in row:
        shown = ".".join(map(str, version)) if version else "an unknown release"
        return [f"kvCacheMemoryBytes needs vLLM >= 0.10.2 (V1 engine) but the image runs {shown}; pin "
                "serving.vllmImage to a release that has --kv-cache-memory-bytes, e.g. vllm/vllm-openai:v0.11.0"]
    if pinned > left_low_gib * GIB:
        return [f"kvCacheMemoryBytes {pinned} ({pinned / GIB:.2f} GiB) is more than the {max(left_low_gib, 0):.2f} "
                "GiB the memory budget leaves for the KV cache after weights, activations and graphs (conservative "
                "bound); lower kvCacheMemoryBytes or raise the budget"]
    return []
