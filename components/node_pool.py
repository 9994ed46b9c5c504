"""GpuNodePool: the nodes a set of models runs on.

Two kinds:

- ``eks``: an EKS managed node group with a GPU AMI, the pool's labels and the
  ``nvidia.com/gpu=true:NoSchedule`` taint (so only pods that ask for GPUs land there);
- ``existing``: nodes someone else runs. Nothing is created unless ``nodes`` are listed; then
  each is labelled and tainted with a server-side-apply patch (only the fields we set are ours).

What the pool *is* (its GPU from the table or EC2, selector, taints) was decided before any
resource exists (`tkf_infra.plan.pools`): the fit check needs it at preview as plain values. This
component only registers what makes the nodes so.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from tkf_infra.names import GPU_NODE_POOL_TYPE
from tkf_infra.plan.pools import PoolFacts

_EKS_EFFECT = {"NoSchedule": "NO_SCHEDULE", "PreferNoSchedule": "PREFER_NO_SCHEDULE", "NoExecute": "NO_EXECUTE"}


@dataclass(frozen=True)
class GpuNodePoolArgs:
    facts: PoolFacts


class GpuNodePool(pulumi.ComponentResource):
    """One node pool (see module docstring): creates nodes (eks) or labels them (existing)."""

    facts: PoolFacts
    resources: list[pulumi.Resource]

    def __init__(self, name: str, args: GpuNodePoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(GPU_NODE_POOL_TYPE, name, None, opts)
        self.facts = args.facts
        self.resources = []
        if args.facts.pool.kind == "eks":
            self._node_group(name, args.facts)
        elif args.facts.pool.nodes:
            self._patch_nodes(name, args.facts)
        gpu = args.facts.gpu
        self.register_outputs({
            "nodeSelector": args.facts.node_selector, "tolerations": list(args.facts.tolerations),
            "gpu": gpu.model_dump(mode="json") if gpu else None, "gpusPerNode": args.facts.gpus_per_node,
            "nodeCount": args.facts.node_count,
        })

    def _node_group(self, name: str, facts: PoolFacts) -> None:
        import pulumi_aws as aws

        pool = facts.pool
        self.resources.append(aws.eks.NodeGroup(
            f"{name}-nodegroup",
            cluster_name=str(pool.cluster_name),
            node_group_name=pool.name,
            node_role_arn=str(pool.node_role_arn),
            subnet_ids=list(pool.subnet_ids),
            instance_types=[str(pool.instance_type)],
            ami_type=pool.ami_type,
            capacity_type=pool.capacity_type,
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                desired_size=pool.node_count,
                min_size=pool.min_size if pool.min_size is not None else pool.node_count,
                max_size=pool.max_size if pool.max_size is not None else pool.node_count,
            ),
            labels=facts.node_labels,
            taints=[aws.eks.NodeGroupTaintArgs(key=t["key"], value=t["value"] or None, effect=_EKS_EFFECT[t["effect"]])
                    for t in facts.taints],
            # A cluster autoscaler moves desiredSize; `up` must not fight it.
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["scalingConfig.desiredSize"]),
        ))

    def _patch_nodes(self, name: str, facts: PoolFacts) -> None:
        import pulumi_kubernetes as k8s

        for node in facts.pool.nodes:
            # Server-side apply: we own only these labels and the taint list we send. `taints` is an
            # atomic list in the Node API, so taints others set on these nodes are replaced.
            self.resources.append(k8s.core.v1.NodePatch(
                f"{name}-{node}",
                metadata=k8s.meta.v1.ObjectMetaPatchArgs(name=node, labels=facts.node_labels,
                                                         annotations={"pulumi.com/patchForce": "true"}),
                spec=k8s.core.v1.NodeSpecPatchArgs(
                    taints=[k8s.core.v1.TaintPatchArgs(**t) for t in facts.taints]) if facts.taints else None,
                opts=pulumi.ResourceOptions(parent=self),
            ))
