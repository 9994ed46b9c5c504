"""Each GPU pool's headroom at both ends of the autoscalers' ranges: the `poolHeadroom` output, the fleet
dashboard's pool panels (the metrics sidecar's facts) and the `report` page read the same figures."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tkf_infra.plan.fleet import FleetPlan


def pool_headroom(plan: FleetPlan) -> dict[str, Any]:
    """`poolHeadroom`: per GPU pool, the whole GPUs the deployed models take with every autoscaler at its
    minimum and at its maximum, and what is left at each end.

    Why both ends: the plan holds room for the maximum (or, under `serving.overcommit: allow`, the floor
    of the models named in its warnings), so `atMaximum.free` is what a new model can still count on, and
    is negative by exactly what the autoscalers may ask beyond the pool; `atMinimum.free` is what a quiet
    hour leaves idle. Models on part of a GPU (MIG, time-slicing) are counted by `sharedReplicas` only:
    their room is proven slice by slice in `gpuLayout`, not in whole GPUs.
    """
    out: dict[str, Any] = {}
    for name, pool in sorted(plan.pools.items()):
        if pool.gpu is None or pool.gpus_per_node == 0:
            continue
        total = pool.gpus_per_node * pool.node_count
        whole = {"atMinimum": 0, "atMaximum": 0}
        shared = {"atMinimum": 0, "atMaximum": 0}
        for m in plan.models:
            if m.pool is None or m.pool.name != name or m.entry.is_cpu:
                continue
            s = m.entry.scaling
            low, high = (s.min_replicas, s.max_replicas) if s is not None else (m.entry.replicas, m.entry.replicas)
            if m.share is not None:
                shared["atMinimum"] += low
                shared["atMaximum"] += high
            else:
                whole["atMinimum"] += low * m.entry.gpus
                whole["atMaximum"] += high * m.entry.gpus
        out[name] = {"gpus": total, **{end: {"gpus": used, "free": total - used} for end, used in whole.items()},
                     **({"sharedReplicas": shared} if any(shared.values()) else {})}
    return out
