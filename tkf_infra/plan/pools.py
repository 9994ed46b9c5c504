"""What each node pool really is: its GPU, how many per node, and how pods land on it.

Why before any resource is registered: the fit check sizes against the pool's GPU at preview, so
the GPU must be a plain value, not an Output; and an EKS pool names an instance type, not a GPU,
so its facts come from EC2 — gathered once at the program's edge (`tkf_infra.program`) and handed
here as data. A pool whose facts do not hold together becomes a problem of that pool alone: its
models are left out, the rest of the fleet is planned.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tkf_infra.config import NodePool
from tkf_infra.names import GPU_PRODUCT_LABEL, GPU_TAINT_KEY, POOL_LABEL
from tkf_infra.sizing.ec2 import InstanceGpus
from tkf_infra.sizing.gpus import GPUS, GpuSpec, find_gpu, lookup_gpu, product_label, same_gpu
from tkf_infra.sizing.mig import MigBoard, mig_board

#: GPU feature discovery appends this to the product label when time-slicing shares the GPUs.
SHARED_SUFFIX = "-SHARED"


@dataclass(frozen=True)
class PoolFacts:
    """A node pool as the fleet uses it; plain values, known at preview."""

    pool: NodePool
    gpu: GpuSpec | None
    """None for a CPU pool."""
    gpus_per_node: int
    node_labels: dict[str, str] = field(default_factory=dict)
    """Labels the nodes carry (ours included where we manage the nodes)."""
    node_selector: dict[str, str] = field(default_factory=dict)
    taints: tuple[dict[str, str], ...] = ()
    tolerations: tuple[dict[str, Any], ...] = ()
    mig: MigBoard | None = None
    """The board's MIG profiles when the pool is partitioned with MIG (`nodePools[].mig`)."""
    time_slices: int = 0
    """Time-slicing replicas per GPU (platform.gpuOperator.timeSlicingReplicas) when above 1, else 0."""

    @property
    def name(self) -> str:
        return self.pool.name

    @property
    def node_count(self) -> int:
        return self.pool.node_count


class PoolProblem(ValueError):
    """A pool setting that cannot work; the message names the pool, the field and the fix."""


#: The lowest share of its nominal size CUDA reports on any part of the table is 0.8 (a 4 GB part less its
#: 0.8 GiB reservation, tkf_infra/sizing/gpus.py); an override below this share of the part names another part.
MIN_MEMORY_SHARE = 0.75


def _override_problem(pool: NodePool, gpu: GpuSpec, value: float) -> str | None:
    """`gpuMemoryGiB` must be a total a part of the pool's GPU can report: at most its size, not far below."""
    low, high = MIN_MEMORY_SHARE * gpu.nominal_gib, gpu.nominal_gib
    if low <= value <= high:
        return None
    side = "more" if value > high else "far less"
    near = sorted((g for g in GPUS if MIN_MEMORY_SHARE * g.nominal_gib <= value <= g.nominal_gib),
                  key=lambda g: (g.nominal_gib - value, g.name))[:4]
    others = f", or set gpuProduct to the part you have ({', '.join(g.name for g in near)})" if near else ""
    return (f"node pool {pool.name}: gpuMemoryGiB {value:g} is {side} than a {gpu.name} has ({gpu.nominal_gib:g} GB; "
            f"CUDA reports {gpu.memory_gib:g} GiB): no part of that name has it, so the fit check would size a GPU "
            f"the pool does not have; set gpuMemoryGiB to the total vLLM prints on these GPUs (between {low:g} and "
            f"{high:g}){others}")


def _with_override(pool: NodePool, gpu: GpuSpec, shared: bool = False) -> GpuSpec:
    if pool.gpu_memory_gib:
        if problem := _override_problem(pool, gpu, pool.gpu_memory_gib):
            raise PoolProblem(problem)
        gpu = gpu.with_memory(pool.gpu_memory_gib, f"nodePools[{pool.name}].gpuMemoryGiB override")
    if pool.interconnect:
        gpu = gpu.with_interconnect(pool.interconnect)
    if pool.unified_memory:
        gpu = gpu.model_copy(update={"unified_memory": True})
    return gpu.model_copy(update={"shared": True}) if shared else gpu


def _eks_gpu(pool: NodePool, info: InstanceGpus | None, shared: bool) -> tuple[GpuSpec | None, int]:
    """GPU spec and count of the pool's instance type, checked against what the pool declares."""
    itype = str(pool.instance_type)
    if info is None:
        raise PoolProblem(f"node pool {pool.name}: EC2 returned nothing for instanceType {itype!r}")
    if pool.gpus_per_node == 0:
        return None, 0
    if info.count == 0:
        raise PoolProblem(f"node pool {pool.name}: instanceType {itype} has no GPUs but gpusPerNode is "
                          f"{pool.gpus_per_node}; pick a GPU instance type (p4d, p5, g5, g6e …) or set gpusPerNode: "
                          "0 for a CPU pool")
    if info.gpu is None:
        raise PoolProblem(f"node pool {pool.name}: instanceType {itype} has {info.count} x {info.manufacturer} "
                          f"{info.gpu_name} ({info.memory_mib} MiB), which is not in the GPU table; add it to "
                          "tkf_infra/sizing/gpus.py")
    if pool.gpus_per_node != info.count:
        raise PoolProblem(f"node pool {pool.name}: gpusPerNode is {pool.gpus_per_node} but instanceType {itype} has "
                          f"{info.count} GPUs; set gpusPerNode: {info.count}")
    gpu = info.gpu
    named = find_gpu(pool.gpu_product) if pool.gpu_product else None
    if named is not None and not same_gpu(named.name, gpu.name):
        raise PoolProblem(f"node pool {pool.name}: gpuProduct {pool.gpu_product!r} but instanceType {itype} has "
                          f"{gpu.name}; drop gpuProduct (it is read from EC2) or fix it")
    return _with_override(pool, gpu, shared), info.count


def _mig_board(pool: NodePool, gpu: GpuSpec | None, mig_strategy: str, time_slices: int) -> MigBoard | None:
    """A MIG pool's board, after the rules that let the planner label each node with its geometry."""
    if not pool.mig:
        return None
    where = f"node pool {pool.name}: mig is true but"
    board = mig_board(gpu) if gpu is not None else None
    if board is None:
        raise PoolProblem(f"{where} {gpu.name if gpu else 'it has no GPU'} has no MIG profiles in "
                          "tkf_infra/sizing/mig.py (A100, H100, H200, B200 do); drop `mig` or use such a pool")
    if mig_strategy != "mixed":
        raise PoolProblem(f"{where} platform.gpuOperator.migStrategy is {mig_strategy!r}; set it to 'mixed' so each "
                          "slice is advertised as nvidia.com/mig-<profile> and one GPU can hold several profiles")
    if time_slices > 1:
        raise PoolProblem(f"{where} platform.gpuOperator.timeSlicingReplicas is {time_slices}: the device plugin "
                          "time-slices the whole GPUs of every node, a MIG pool's too; set it to 0 or drop `mig`")
    if pool.kind != "existing" or len(set(pool.nodes)) != pool.node_count:
        raise PoolProblem(f"{where} each node gets its own MIG geometry (label nvidia.com/mig.config), so the pool "
                          f"must be kind existing and list its {pool.node_count} node name(s) in `nodes` (it lists "
                          f"{len(set(pool.nodes))})")
    return board


def _same_part_selected(pool: NodePool, gpu: GpuSpec, given: str) -> None:
    """The GPU a pool is sized on and the GPU its selector picks are one part (and one MIG slice, if any).

    Why: the selector's `nvidia.com/gpu.product` is set from the sized GPU, so a different part in the
    pool's `labels` used to be replaced without a word — or, on nodes we label, written onto nodes of
    another part — while the fit check sized the other one. Parts are compared by `same_gpu` (the one
    naming source, tkf_infra/sizing/gpus.py); a MIG label (`…-MIG-1g.10gb`) is a slice, not its board."""
    where = f"node pool {pool.name}: labels {GPU_PRODUCT_LABEL} is {given!r}"
    sized = f"{'instanceType ' + str(pool.instance_type) if pool.kind == 'eks' else 'gpuProduct'} sizes {gpu.name}"
    if not same_gpu(given, gpu.name):
        known = find_gpu(given)
        part = known.name if known else "a GPU the table does not know"
        raise PoolProblem(f"{where} ({part}), but {sized}: the pods would land on other GPUs than the fit check "
                          f"sized; drop the label (the selector is set from the sized GPU) or make both the same part")
    try:
        labelled = lookup_gpu(given).name
    except KeyError:
        return
    if labelled != gpu.name:
        raise PoolProblem(f"{where} ({labelled}), but {sized}: a MIG slice and its whole board are sized apart; set "
                          f"gpuProduct to the label (sizes the slice) or drop the label")


def resolve_pool(pool: NodePool, ec2: Mapping[str, InstanceGpus], shared: bool, *, mig_strategy: str = "none",
                 time_slices: int = 0) -> PoolFacts:
    """Pool facts from the settings (and EC2 for eks pools). Raises PoolProblem naming the fix."""
    if pool.kind == "eks":
        gpu, per_node = _eks_gpu(pool, ec2.get(str(pool.instance_type)), shared)
    else:
        per_node = pool.gpus_per_node
        gpu = _with_override(pool, lookup_gpu(pool.gpu_product), shared) if per_node and pool.gpu_product else None

    # Labels we can put on nodes ourselves get our pool label too; on unmanaged nodes we can only
    # select on what is already there.
    manages_labels = pool.kind == "eks" or bool(pool.nodes)
    node_labels = {**pool.labels, **({POOL_LABEL: pool.name} if manages_labels else {})}
    selector = dict(node_labels)
    given = pool.labels.get(GPU_PRODUCT_LABEL)
    if gpu is not None and given is not None:
        _same_part_selected(pool, gpu, given)
    if gpu is not None:
        # The pool's own product label, when it is one of the part's labels, is what its nodes carry.
        label = (product_label(gpu, given) if given else None) or product_label(gpu, pool.gpu_product or "")
        if label is None and pool.kind != "eks":
            raise PoolProblem(f"node pool {pool.name}: gpuProduct {pool.gpu_product!r} ({gpu.name}) matches several "
                              f"node labels {list(gpu.product_labels)}; set gpuProduct to the exact "
                              f"{GPU_PRODUCT_LABEL} label of its nodes")
        if label:  # an EKS pool whose GPU has several labels is selected by its own pool label
            selector[GPU_PRODUCT_LABEL] = label + (SHARED_SUFFIX if shared else "")
    taints = [{"key": t.key, "value": t.value, "effect": t.effect} for t in pool.taints]
    if gpu is not None and not any(t["key"] == GPU_TAINT_KEY and t["effect"] == "NoSchedule" for t in taints):
        # GPU nodes carry the NVIDIA taint; a pool that already lists it must not get it twice.
        taints.insert(0, {"key": GPU_TAINT_KEY, "value": "true", "effect": "NoSchedule"})
    tolerations = tuple(
        {"key": t["key"], "operator": "Exists", "effect": t["effect"]} if t["key"] == GPU_TAINT_KEY
        else {"key": t["key"], "operator": "Equal", "value": t["value"], "effect": t["effect"]}
        for t in taints
    )
    board = _mig_board(pool, gpu, mig_strategy, time_slices)
    return PoolFacts(pool=pool, gpu=gpu, gpus_per_node=per_node, node_labels=node_labels, node_selector=selector,
                     taints=tuple(taints), tolerations=tolerations, mig=board,
                     time_slices=time_slices if shared and gpu is not None and time_slices > 1 else 0)
