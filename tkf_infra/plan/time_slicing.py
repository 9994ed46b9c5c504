"""The time-slicing proof: a time-sliced pool holds its pods only if any N of them fit on one GPU.

Why a module of its own: unlike MIG (`tkf_infra.plan.layout`), time-slicing gives no memory
isolation and no placement to plan; the guarantee is arithmetic over the pool's pods, published as a
`PoolLayout` of kind "time-slicing" (its `proof` and its refusals) beside the MIG layouts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tkf_infra.plan.pool_layout import PoolLayout


@dataclass(frozen=True)
class SliceDemand:
    """One model's pods on a time-sliced pool: each takes one replica and `footprint_gib` of its GPU."""

    model: str
    pods: int
    footprint_gib: float


def prove_time_slicing(pool: str, gpu: str, replicas: int, gpus: int, total_gib: float,
                       demands: Sequence[SliceDemand]) -> PoolLayout:
    """Admit models, smallest footprint first, while any `replicas` pods on one GPU still fit in it.

    Why one replica per pod and "any N pods": the device plugin hands a request for several replicas
    out across physical GPUs (its default `distributed` policy, NVIDIA/k8s-device-plugin
    internal/rm/allocate.go), so a pod asking for k replicas would not hold k replicas of its own GPU.
    Each pod therefore takes one replica and carries its budget; which pods meet on a GPU is the
    scheduler's choice, so the worst case is the N largest. Smallest first admits the most models;
    the models refused are those whose share the worst case cannot hold."""
    admitted: list[float] = []
    refused: dict[str, str] = {}
    capacity = replicas * gpus
    for d in sorted(demands, key=lambda d: (d.footprint_gib, d.model)):
        trial = sorted(admitted + [d.footprint_gib] * d.pods, reverse=True)
        worst = sum(trial[:replicas])
        if worst > total_gib + 1e-6 or len(trial) > capacity:
            over = (f"the {replicas} largest would take {worst:.2f} GiB of the {total_gib:.2f} GiB GPU (missing "
                    f"{worst - total_gib:.2f} GiB)" if worst > total_gib + 1e-6
                    else f"{len(trial)} pods exceed the pool's {capacity} replicas")
            refused[d.model] = (f"model {d.model}: any {replicas} pods of node pool {pool} may share one {gpu}; "
                                f"with its {d.pods} pod(s) of {d.footprint_gib:.2f} GiB {over}. Use a smaller "
                                "slice:k, fewer replicas or another pool")
            continue
        admitted = trial
    worst = sum(admitted[:replicas])
    proof = (f"any {replicas} of the {len(admitted)} pod(s) on one {gpu} take at most {worst:.2f} of its "
             f"{total_gib:.2f} GiB (the {min(replicas, len(admitted))} largest budgets plus CUDA contexts)")
    return PoolLayout(pool, "time-slicing", gpu, (), refused, proof)
