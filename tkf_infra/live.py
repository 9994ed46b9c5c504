"""What the fleet really has, as DCGM reports it through Prometheus, checked against the stack.

Why at preview: a pool configured as H100 whose nodes carry A100s, or a model asking vLLM for more
memory than a time-sliced GPU has free, would otherwise be found by vLLM at start-up, after the
weights were pulled. Problems are attributed to the models they would break, so the rest of the
fleet still deploys. Prometheus being unreachable is a warning: the configured facts are used.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tkf_infra.config import Catalog, NodePool
from tkf_infra.inventory import InventoryResult, confirm_pool, free_memory_bytes_per_gpu, products_match
from tkf_infra.sizing.gpus import lookup_gpu

GIB = 2**30


@dataclass
class LiveCheck:
    warnings: list[str] = field(default_factory=list)
    pool_errors: dict[str, list[str]] = field(default_factory=dict)
    model_problems: dict[str, str] = field(default_factory=dict)


def _pool_total_bytes(pool: NodePool) -> int | None:
    if pool.gpu_memory_gib:
        return int(pool.gpu_memory_gib * GIB)
    try:
        return lookup_gpu(pool.gpu_product or "").memory_bytes
    except KeyError:
        return None


def _pool_hosts(pool: NodePool, inventory: InventoryResult) -> list[str]:
    """The pool's nodes: its `nodes` list, else every node whose GPUs match the pool's product."""
    if pool.nodes:
        return list(pool.nodes)
    return [h for h in inventory.hostnames()
            if all(products_match(pool.gpu_product or "", r.product) for r in inventory.records_for(h))]


def check_against_inventory(catalog: Catalog, inventory: InventoryResult) -> LiveCheck:
    """Pool facts confirmed against DCGM; shared GPUs checked against their free memory."""
    result = LiveCheck(warnings=list(inventory.warnings))
    if not inventory.gpus:
        return result
    models = catalog.models
    replicas = catalog.settings.platform.gpu_operator.time_slicing_replicas
    for pool in catalog.pools:
        if pool.gpus_per_node == 0 or not pool.gpu_product:
            continue
        errors = confirm_pool(pool.name, pool.gpu_product, pool.gpus_per_node, list(pool.nodes) or None, inventory)
        if errors:
            result.pool_errors[pool.name] = errors
            for m in models:
                if m.node_pool == pool.name and not m.is_cpu:
                    result.model_problems[m.name] = (f"model {m.name}: not deployed because its node pool is wrong: "
                                                     f"{errors[0]}")
            continue
        if replicas <= 1:
            continue
        free = free_memory_bytes_per_gpu(_pool_hosts(pool, inventory), inventory)
        total = _pool_total_bytes(pool)
        if free is None or total is None:
            continue
        for m in models:
            if m.node_pool != pool.name or m.is_cpu:
                continue
            need = m.gpu_memory_utilization * total
            if need > free:
                result.model_problems[m.name] = (
                    f"model {m.name}: the GPUs of node pool '{pool.name}' are shared (time-slicing, {replicas} "
                    f"per GPU) and the fullest has {free / GIB:.1f} GiB free according to DCGM (Prometheus at "
                    f"{inventory.prometheus_url}), but gpuMemoryUtilization {m.gpu_memory_utilization:.2f} asks "
                    f"vLLM for {need / GIB:.1f} GiB of {total / GIB:.1f} GiB, and vLLM refuses to start when less "
                    f"is free. Lower gpuMemoryUtilization to at most {int(free / total * 100) / 100:.2f}, or free "
                    "the GPUs."
                )
    return result
