"""GpuNodePool: the nodes a set of models runs on, and the facts every consumer needs about them.

Two kinds:

- ``eks``: an EKS managed node group with a GPU AMI, the pool's labels and the
  ``nvidia.com/gpu=true:NoSchedule`` taint (so only pods that ask for GPUs land there). The GPU
  model, count and memory come from EC2 DescribeInstanceTypes, because a node pool names an
  instance type, not a GPU, and the fit check must size against the real part.
- ``existing``: nodes someone else runs. Nothing is created unless ``nodes`` are listed; then
  each is labelled and tainted with a server-side-apply patch (only the fields we set are ours).

Outputs are plain Python values computed at program time (node selector, tolerations, GPU spec,
GPUs per node, node count): the FitCheck needs them at preview, and Outputs would be unknown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pulumi

from tkf_infra.settings import NodePool
from tkf_infra.sizing.gpus import GpuSpec, lookup_gpu

GPU_TAINT_KEY = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
POOL_LABEL = "tkf.io/node-pool"
_EKS_EFFECT = {"NoSchedule": "NO_SCHEDULE", "PreferNoSchedule": "PREFER_NO_SCHEDULE", "NoExecute": "NO_EXECUTE"}


class NodePoolError(ValueError):
    """A node pool setting that cannot work; the message names the pool, the field and the fix."""


@dataclass(frozen=True)
class GpuNodePoolArgs:
    pool: NodePool
    product_label_suffix: str = ""
    """``-SHARED`` when the GPU Operator time-slices GPUs (GFD then relabels the product)."""
    ec2_client: Any = None
    """boto3 EC2 client for DescribeInstanceTypes (tests pass a moto one); None = default session."""
    region: str | None = None


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def product_label(pool: NodePool, gpu: GpuSpec, suffix: str = "") -> str | None:
    """The ``nvidia.com/gpu.product`` value GPU feature discovery puts on the pool's nodes.

    None for an EKS pool whose GPU has several labels (A100: SXM4 / PCIe): its own pool label
    already selects exactly the node group.
    """
    given = pool.gpu_product or ""
    exact = [lbl for lbl in gpu.product_labels if _norm(lbl) == _norm(given)]
    if exact:
        return exact[0] + suffix
    if len(gpu.product_labels) == 1:
        return gpu.product_labels[0] + suffix
    if pool.kind == "eks":
        return None
    raise NodePoolError(
        f"node pool {pool.name}: gpuProduct {given!r} ({gpu.name}) matches several node labels "
        f"{list(gpu.product_labels)}; set gpuProduct to the exact nvidia.com/gpu.product label of its nodes"
    )


def _gpu_for(pool: NodePool, name: str) -> GpuSpec:
    try:
        gpu = lookup_gpu(name)
    except KeyError as exc:
        raise NodePoolError(f"node pool {pool.name}: gpuProduct: {exc.args[0]}") from None
    if pool.gpu_memory_gib:
        gpu = gpu.with_memory(pool.gpu_memory_gib, f"nodePools[{pool.name}].gpuMemoryGiB override")
    return gpu


def eks_gpu(pool: NodePool, client: Any = None, region: str | None = None) -> tuple[GpuSpec | None, int]:
    """GPU spec and count of the pool's instance type, checked against what the pool declares."""
    from tkf_infra.sizing.ec2 import describe_gpu_instances

    itype = str(pool.instance_type)
    try:
        info = describe_gpu_instances([itype], client=client, region=region).get(itype)
    except ValueError as exc:
        raise NodePoolError(
            f"node pool {pool.name}: instanceType {itype!r} is not an EC2 instance type ({exc}); "
            "use one such as p5.48xlarge or g6e.xlarge"
        ) from None
    if info is None:
        raise NodePoolError(f"node pool {pool.name}: EC2 returned nothing for instanceType {itype!r}")
    if pool.gpus_per_node == 0:
        return None, 0
    if info.count == 0:
        raise NodePoolError(
            f"node pool {pool.name}: instanceType {itype} has no GPUs but gpusPerNode is {pool.gpus_per_node}; "
            "pick a GPU instance type (p4d, p5, g5, g6e …) or set gpusPerNode: 0 for a CPU pool"
        )
    if info.gpu is None:
        raise NodePoolError(
            f"node pool {pool.name}: instanceType {itype} has {info.count} x {info.manufacturer} {info.gpu_name} "
            f"({info.memory_mib} MiB), which is not in the GPU table; add it to tkf_infra/sizing/gpus.py"
        )
    if pool.gpus_per_node != info.count:
        raise NodePoolError(
            f"node pool {pool.name}: gpusPerNode is {pool.gpus_per_node} but instanceType {itype} has "
            f"{info.count} GPUs; set gpusPerNode: {info.count}"
        )
    if pool.gpu_product and lookup_gpu_safe(pool.gpu_product) not in (None, info.gpu):
        raise NodePoolError(
            f"node pool {pool.name}: gpuProduct {pool.gpu_product!r} but instanceType {itype} has "
            f"{info.gpu.name}; drop gpuProduct (it is read from EC2) or fix it"
        )
    gpu = info.gpu
    if pool.gpu_memory_gib:
        gpu = gpu.with_memory(pool.gpu_memory_gib, f"nodePools[{pool.name}].gpuMemoryGiB override")
    return gpu, info.count


def lookup_gpu_safe(name: str) -> GpuSpec | None:
    try:
        return lookup_gpu(name)
    except KeyError:
        return None


class GpuNodePool(pulumi.ComponentResource):
    """One node pool (see module docstring): creates nodes (eks) or labels them (existing)."""

    node_selector: dict[str, str]
    tolerations: list[dict[str, Any]]
    gpu: dict[str, object] | None
    """``GpuSpec.to_dict()`` with the pool's ``gpuMemoryGiB`` override; None for a CPU pool."""
    gpus_per_node: int
    node_count: int
    resources: list[pulumi.Resource]

    def __init__(self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tkf:platform:GpuNodePool", name, None, opts)
        pool = args.pool
        self.node_count = pool.node_count
        self.resources = []
        spec: GpuSpec | None
        if pool.kind == "eks":
            spec, self.gpus_per_node = eks_gpu(pool, args.ec2_client, args.region)
        else:
            self.gpus_per_node = pool.gpus_per_node
            spec = _gpu_for(pool, pool.gpu_product) if pool.gpus_per_node > 0 and pool.gpu_product else None
        self.gpu = spec.to_dict() if spec else None

        # Labels we can put on nodes ourselves get our pool label too; on unmanaged nodes we can
        # only select on what is already there.
        manages_labels = pool.kind == "eks" or bool(pool.nodes)
        node_labels = {**pool.labels, **({POOL_LABEL: pool.name} if manages_labels else {})}
        self.node_selector = dict(node_labels)
        product = product_label(pool, spec, args.product_label_suffix) if spec is not None else None
        if product:
            self.node_selector[GPU_PRODUCT_LABEL] = product
        taints = [{"key": t.key, "value": t.value, "effect": t.effect} for t in pool.taints]
        if spec is not None and not any(t["key"] == GPU_TAINT_KEY and t["effect"] == "NoSchedule" for t in taints):
            # GPU nodes carry the NVIDIA taint; a pool that already lists it must not get it twice.
            taints.insert(0, {"key": GPU_TAINT_KEY, "value": "true", "effect": "NoSchedule"})
        self.tolerations = [
            {"key": t["key"], "operator": "Exists", "effect": t["effect"]} if t["key"] == GPU_TAINT_KEY
            else {"key": t["key"], "operator": "Equal", "value": t["value"], "effect": t["effect"]}
            for t in taints
        ]  # fmt: skip

        if pool.kind == "eks":
            self._node_group(name, pool, node_labels, taints)
        elif pool.nodes:
            self._patch_nodes(name, pool, node_labels, taints)
        self.register_outputs({
            "nodeSelector": self.node_selector, "tolerations": self.tolerations, "gpu": self.gpu,
            "gpusPerNode": self.gpus_per_node, "nodeCount": self.node_count,
        })  # fmt: skip

    def _node_group(self, name: str, pool: NodePool, node_labels: dict[str, str],
                    taints: list[dict[str, str]]) -> None:  # fmt: skip
        import pulumi_aws as aws

        self.resources.append(aws.eks.NodeGroup(
            f"{name}-nodegroup",
            cluster_name=str(pool.cluster_name),
            node_group_name=pool.name,
            node_role_arn=str(pool.node_role_arn),
            subnet_ids=list(pool.subnet_ids),
            instance_types=[str(pool.instance_type)],
            ami_type=pool.ami_type,
            capacity_type=pool.capacity_type,
            scaling_config={
                "desired_size": pool.node_count,
                "min_size": pool.min_size if pool.min_size is not None else pool.node_count,
                "max_size": pool.max_size if pool.max_size is not None else pool.node_count,
            },
            labels=node_labels,
            taints=[{"key": t["key"], "value": t["value"] or None, "effect": _EKS_EFFECT[t["effect"]]}
                    for t in taints],
            # A cluster autoscaler moves desiredSize; `up` must not fight it.
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["scalingConfig.desiredSize"]),
        ))  # fmt: skip

    def _patch_nodes(self, name: str, pool: NodePool, node_labels: dict[str, str],
                     taints: list[dict[str, str]]) -> None:  # fmt: skip
        import pulumi_kubernetes as k8s

        for node in pool.nodes:
            # Server-side apply: we own only these labels and the taint list we send. `taints` is an
            # atomic list in the Node API, so taints others set on these nodes are replaced.
            self.resources.append(k8s.core.v1.NodePatch(
                f"{name}-{node}",
                metadata={"name": node, "labels": node_labels,
                          "annotations": {"pulumi.com/patchForce": "true"}},
                spec={"taints": taints} if taints else None,
                opts=pulumi.ResourceOptions(parent=self),
            ))  # fmt: skip
