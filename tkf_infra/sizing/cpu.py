"""The CPU profile: no GPU budget, a fixed KV space (``cpuKvCacheGiB`` = VLLM_CPU_KVCACHE_SPACE).

Why separate: on CPU vLLM does not profile memory at all; it allocates exactly the KV space it is
given, so the only fit question is whether one max-length request fits that space.
"""

from __future__ import annotations

import math
from typing import Any

from tkf_infra.sizing.arch import Arch
from tkf_infra.sizing.estimate_result import Estimate
from tkf_infra.sizing.facts import ModelFacts
from tkf_infra.sizing.kv import kv_elem_bytes, kv_layout, largest_fitting_len
from tkf_infra.sizing.params import DEFAULT_BLOCK_SIZE, GIB, SizingError, SizingParams, activation_bytes
from tkf_infra.sizing.rank_weights import deployment_weights
from tkf_infra.sizing.versions import VersionChoice
from tkf_infra.sizing.weights import checkpoint_bytes


def estimate_cpu(arch: Arch, facts: ModelFacts | dict[str, Any], name: str, params: SizingParams, max_len: int,
                 problems: list[str], warnings: list[str], choice: VersionChoice) -> Estimate:
    """The KV space must hold one max-length request; the weights are reported (they live in RAM)."""
    act_bytes = activation_bytes(params)
    try:
        weights = sum(deployment_weights(facts, arch, params).stages)
    except SizingError:
        weights = checkpoint_bytes(facts, act_bytes) if isinstance(facts, ModelFacts) else 0.0
    block = params.block_size or DEFAULT_BLOCK_SIZE
    kv_bytes = kv_elem_bytes(params.kv_cache_dtype, act_bytes)
    layout = kv_layout(arch, arch.layer_kinds, 1, kv_bytes, block, group_ratio=1.5)
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
    tokens = layout.tokens(blocks, max_len, mnbt, from_concurrency=False)
    conc = layout.concurrency(blocks, max_len, mnbt)
    per_token = layout.page_bytes * sum(1 for k in arch.layer_kinds if k.attention) / block
    return Estimate(
        model=name, gpu="cpu", vllm_profile="cpu", tensor_parallel_size=1, pipeline_parallel_size=1,
        max_model_len=max_len, max_num_seqs=params.max_num_seqs or 256, max_num_batched_tokens=mnbt,
        block_size=block, total_gib=0.0, requested_gib=0.0, weights_gib=weights / GIB, activation_gib=0.0,
        non_torch_gib=0.0, cuda_graph_gib=0.0, cuda_graph_reserved=False, available_kv_gib=space / GIB,
        kv_bytes_per_token=per_token, num_blocks=blocks, kv_cache_tokens=tokens, need_per_request_gib=need / GIB,
        max_concurrency=conc, available_kv_gib_bound=space / GIB, kv_cache_tokens_bound=tokens,
        max_concurrency_bound=conc, problems=problems, warnings=warnings,
        max_fitting_model_len=largest_fitting_len(layout, space, mnbt, block, max_len), cpu=True,
    )
