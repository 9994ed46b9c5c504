"""Predict, per GPU rank, the memory figures vLLM prints at start-up, and decide fit / no fit.

Pure functions, no Pulumi and no I/O, so the same code runs in ``pulumi preview`` (the program and
the dynamic provider), in the ``size`` command and in the accuracy bench. The accounting follows
vLLM's own start-up profiling (``docs/sizing.md``)::

    requested      R  = total x gpu_memory_utilization
    available_kv      = R - weights - activation_peak - non_torch   (- cuda_graphs where reserved)
    num_blocks        = floor(available_kv / bytes per block over the rank's layers/groups)

Activation, non-torch and CUDA-graph terms depend on the vLLM release (``versions``); they are
the approximate part.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, Field

from tkf_infra.sizing.arch import Arch, parallelism_problems, parse_arch, pp_layer_ranges
from tkf_infra.sizing.facts import ModelFacts
from tkf_infra.sizing.gpus import GpuSpec
from tkf_infra.sizing.kv import KvLayout, kv_elem_bytes, kv_layout, largest_fitting_len
from tkf_infra.sizing.params import GIB, SizingError, SizingParams
from tkf_infra.sizing.versions import VersionProfile, parse_vllm_version, version_profile
from tkf_infra.sizing.weights import QuantScheme, checkpoint_bytes, quant_scheme, weights_bytes_per_rank

DEFAULT_BLOCK_SIZE = 16


class Estimate(BaseModel):
    """Per-rank prediction in the units vLLM prints (GiB), plus the verdict and the way out."""

    model: str
    gpu: str
    vllm_profile: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    total_gib: float
    requested_gib: float
    weights_gib: float
    activation_gib: float
    non_torch_gib: float
    cuda_graph_gib: float
    cuda_graph_reserved: bool
    available_kv_gib: float
    kv_bytes_per_token: float
    num_blocks: int
    kv_cache_tokens: int
    need_per_request_gib: float
    max_concurrency: float
    fits: bool
    problems: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    max_fitting_model_len: int | None = None
    cpu: bool = False


def _act_bytes(arch: Arch, params: SizingParams) -> float:
    """vLLM's dtype resolution: fp32 checkpoints are downcast to bf16 under ``auto``."""
    dtype = params.dtype.lower()
    if dtype in ("float32", "fp32", "float"):
        return 4.0
    return 2.0


def _defaults(gpu: GpuSpec | None, params: SizingParams, max_len: int) -> tuple[int, int]:
    large = gpu.large_defaults if gpu else False
    seqs = params.max_num_seqs or (1024 if large else 256)
    mnbt = params.max_num_batched_tokens or (8192 if large else 2048)
    return seqs, max(mnbt, 1)


def _activation_gib(arch: Arch, prof: VersionProfile, seqs: int, mnbt: int, tp: int,
                    act_bytes: float, q: QuantScheme) -> float:  # fmt: skip
    vocab = arch.vocab or 0
    sampler = prof.sampler_bytes_per_element * min(seqs, mnbt) * vocab
    moe = 0.0
    if arch.is_moe and q.name != "mxfp4" and arch.moe_intermediate:
        # Fused-MoE intermediate caches over one profiling batch (chunked at 32768 tokens).
        m = min(mnbt, 32768) * arch.experts_per_tok
        n = 2 * arch.moe_intermediate / tp
        moe = m * (n + n / 2 + arch.hidden) * act_bytes
    return prof.activation_base_gib + (sampler + moe) / GIB


def _graph_gib(arch: Arch, layers_rank: int, tp: int, enforce_eager: bool) -> float:
    """CUDA-graph pool size; observed 0.65-1.8 GiB in v0.19 logs, growing with layers, higher for MoE."""
    if enforce_eager:
        return 0.0
    g = 0.40 + 0.016 * layers_rank - (0.15 if tp == 2 else 0.24 if tp > 2 else 0.0)
    if arch.is_moe:
        g += 1.0
    return max(g, 0.1)


def estimate(facts: ModelFacts | dict[str, Any], gpu: GpuSpec | None, params: SizingParams,
             model: str = "") -> Estimate:  # fmt: skip
    """Predict what vLLM prints for ``params`` on ``gpu`` (None = CPU profile) and judge the fit."""
    config = facts.text_config() if isinstance(facts, ModelFacts) else facts
    name = model or (
        facts.repo if isinstance(facts, ModelFacts) else str(config.get("_name_or_path", "model"))
    )
    arch = parse_arch(config)
    tp, pp = params.tensor_parallel_size, params.pipeline_parallel_size
    version = parse_vllm_version(params.vllm_version)
    prof = version_profile(version)
    act_bytes = _act_bytes(arch, params)
    kv_bytes = kv_elem_bytes(params.kv_cache_dtype, act_bytes)
    block = params.block_size or DEFAULT_BLOCK_SIZE
    derived_len = arch.max_len
    max_len = params.max_model_len or derived_len
    if not max_len:
        raise SizingError("maxModelLen is not set and config.json has no max_position_embeddings")
    problems = parallelism_problems(arch, tp, pp) if gpu is not None else []
    warnings: list[str] = []
    if derived_len and max_len > derived_len:
        problems.append(
            f"maxModelLen {max_len} is longer than the model's {derived_len} positions (vLLM refuses it "
            f"unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1); use maxModelLen <= {derived_len}"
        )
    if arch.multimodal:
        warnings.append("multimodal model: vision/audio tower memory and encoder profiling are not modelled")

    if gpu is None:
        try:  # the weights still live in memory on CPU: report them, the fit is about KV space
            scheme = quant_scheme(arch, params.quantization, act_bytes)
            cpu_weights = sum(weights_bytes_per_rank(arch, 1, 1, scheme, act_bytes))
        except SizingError:
            cpu_weights = checkpoint_bytes(facts, act_bytes) if isinstance(facts, ModelFacts) else 0.0
        return _estimate_cpu(arch, name, params, max_len, kv_bytes, block, problems, warnings, prof,
                             cpu_weights / GIB)

    q = quant_scheme(arch, params.quantization, act_bytes)
    seqs, mnbt = _defaults(gpu, params, max_len)
    total = gpu.memory_gib
    u = params.gpu_memory_utilization
    requested = total * u
    try:
        weights = weights_bytes_per_rank(arch, tp, pp, q, act_bytes)
    except SizingError:
        # Config too thin for a tensor-by-tensor count: fall back to the checkpoint's own size.
        if not isinstance(facts, ModelFacts):
            raise
        total_bytes = checkpoint_bytes(facts, act_bytes)
        weights = [total_bytes / (tp * pp)] * pp
        warnings.append("weights estimated from the checkpoint size split evenly (config.json incomplete)")
    activation = _activation_gib(arch, prof, seqs, mnbt, tp, act_bytes, q)
    multi = tp * pp > 1
    non_torch = prof.non_torch_multi_gib if tp > 1 else prof.non_torch_tp1_gib
    context = prof.context_multi_gib if multi else prof.context_single_gib
    ranges = pp_layer_ranges(arch.layers, pp)

    # Every rank sizes its own KV; vLLM then uses the smallest block count of all ranks.
    best: tuple[int, KvLayout, float, float, float] | None = None
    for stage, rng in enumerate(ranges):
        layout = kv_layout(arch, rng, tp, kv_bytes, block)
        graphs = _graph_gib(arch, len(rng), tp, params.enforce_eager)
        avail = requested - weights[stage] / GIB - activation - non_torch
        if prof.graphs_reserved:
            avail -= graphs
        blocks = layout.num_blocks(avail * GIB)
        if best is None or blocks < best[0] or (blocks == best[0] and avail < best[2]):
            best = (blocks, layout, avail, weights[stage] / GIB, graphs)
    assert best is not None
    blocks, layout, avail, w_gib, graphs = best
    need = max(layout.need_per_request(max_len, mnbt) for layout in
               (kv_layout(arch, r, tp, kv_bytes, block) for r in ranges))  # fmt: skip
    per_token = layout.page_bytes * len(layout.kinds) / block

    if context > total - requested + 1e-9:
        problems.append(
            f"gpuMemoryUtilization {u:.2f} asks for {requested:.2f} GiB but only about "
            f"{total - context:.2f} GiB of the {total:.2f} GiB is free when vLLM starts; "
            "use gpuMemoryUtilization <= "
            f"{math.floor((total - context) / total * 100) / 100:.2f}"
        )
    if avail <= 0:
        problems.append(
            f"no memory left for the KV cache: {w_gib:.1f} GiB of weights + {activation:.2f} GiB "
            f"activation + {non_torch:.2f} GiB non-torch exceed the {requested:.1f} GiB budget "
            f"({u:.2f} x {total:.2f} GiB)"
        )
    elif need > avail * GIB:
        problems.append(
            f"needs {need / GIB:.1f} GiB KV cache for maxModelLen {max_len} but {avail:.1f} GiB "
            f"is left after {w_gib:.1f} GiB of weights on one {gpu.name} at utilization {u:.2f}"
        )
    # The sampler warm-up after KV allocation runs in what is left outside the KV cache.
    if not problems:
        headroom = (total - context - requested) + activation - (0.0 if prof.graphs_reserved else graphs)
        warm = prof.warmup_bytes_per_element * min(seqs, mnbt) * (arch.vocab or 0) / GIB
        if warm > headroom:
            problems.append(
                f"the sampler warm-up with {min(seqs, mnbt)} dummy requests needs about {warm:.2f} GiB "
                f"but only {headroom:.2f} GiB stays free after weights, KV cache and CUDA graphs on one "
                f"{gpu.name}; "
                "vLLM would fail with 'CUDA out of memory occurred when warming up sampler' - lower "
                "maxNumSeqs or gpuMemoryUtilization"
            )

    fit_len = (
        largest_fitting_len(layout, avail * GIB, mnbt, block, derived_len or max_len) if avail > 0 else 0
    )
    return Estimate(
        model=name, gpu=gpu.name, vllm_profile=prof.name, tensor_parallel_size=tp, pipeline_parallel_size=pp,
        max_model_len=max_len, max_num_seqs=seqs, max_num_batched_tokens=mnbt, block_size=block,
        total_gib=total, requested_gib=requested, weights_gib=w_gib, activation_gib=activation,
        non_torch_gib=non_torch, cuda_graph_gib=graphs, cuda_graph_reserved=prof.graphs_reserved,
        available_kv_gib=avail, kv_bytes_per_token=per_token, num_blocks=blocks,
        kv_cache_tokens=layout.tokens(blocks), need_per_request_gib=need / GIB,
        max_concurrency=layout.concurrency(blocks, max_len, mnbt), fits=not problems,
        problems=problems, warnings=warnings, max_fitting_model_len=fit_len,
    )  # fmt: skip


def _estimate_cpu(arch: Arch, name: str, params: SizingParams, max_len: int, kv_bytes: float, block: int,
                  problems: list[str], warnings: list[str], prof: VersionProfile,
                  weights_gib: float) -> Estimate:  # fmt: skip
    """CPU profile: no GPU fit; the KV space (``cpuKvCacheGiB``) must hold one max-length request."""
    layout = kv_layout(arch, range(arch.layers), 1, kv_bytes, block)
    mnbt = params.max_num_batched_tokens or max_len
    space = (params.cpu_kv_cache_gib or 0.0) * GIB
    blocks = layout.num_blocks(space)
    need = layout.need_per_request(max_len, mnbt)
    if params.cpu_kv_cache_gib is None:
        problems.append("CPU serving needs cpuKvCacheGiB (VLLM_CPU_KVCACHE_SPACE) to be set")
    elif need > space:
        fit = largest_fitting_len(layout, space, mnbt, block, max_len)
        problems.append(
            f"needs {need / GIB:.2f} GiB KV cache for maxModelLen {max_len} but cpuKvCacheGiB is "
            f"{params.cpu_kv_cache_gib:g}; raise cpuKvCacheGiB to {math.ceil(need / GIB * 100) / 100:g} "
            f"or use maxModelLen <= {fit}"
        )
    return Estimate(
        model=name, gpu="cpu", vllm_profile=prof.name, tensor_parallel_size=1, pipeline_parallel_size=1,
        max_model_len=max_len, max_num_seqs=params.max_num_seqs or 256, max_num_batched_tokens=mnbt,
        block_size=block, total_gib=0.0, requested_gib=0.0, weights_gib=weights_gib, activation_gib=0.0,
        non_torch_gib=0.0, cuda_graph_gib=0.0, cuda_graph_reserved=False,
        available_kv_gib=space / GIB, kv_bytes_per_token=layout.page_bytes * len(layout.kinds) / block,
        num_blocks=blocks, kv_cache_tokens=layout.tokens(blocks), need_per_request_gib=need / GIB,
        max_concurrency=layout.concurrency(blocks, max_len, mnbt), fits=not problems, problems=problems,
        warnings=warnings, max_fitting_model_len=largest_fitting_len(layout, space, mnbt, block, max_len),
        cpu=True,
    )  # fmt: skip
