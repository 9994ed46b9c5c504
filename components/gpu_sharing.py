"""GpuSharing: what makes each MIG pool's nodes carve their GPUs as the layout planner decided.

Why these two objects: the GPU Operator's mig-manager applies the mig-parted config named by a
node's ``nvidia.com/mig.config`` label, reading the configs from the ConfigMap named in the
operator's ``migManager.config.name`` (key ``config.yaml``). So the layout (`tkf_infra.plan.layout`)
becomes one custom mig-parted ConfigMap — every MIG node's geometry, plus ``all-disabled``, the
operator's default config — and one label per node. Config names are digests of the geometry, so an
unchanged layout never relabels a node (relabelling makes mig-manager drain and re-partition it).

When tkf-infra installs the operator, its values name this ConfigMap (`components.gpu_operator`);
with ``alreadyInstalled: true`` the operator's owner must set ``migManager.config.name`` to it.
Nothing is registered when no pool is a MIG pool.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from tkf_infra import names
from tkf_infra.names import MIG_CONFIG_KEY, MIG_CONFIG_LABEL, MIG_CONFIG_NAME
from tkf_infra.plan.pool_layout import ALL_DISABLED, PoolLayout


def mig_parted_document(layouts: Mapping[str, PoolLayout]) -> dict[str, Any]:
    """The mig-parted config (format v1 of NVIDIA/mig-parted api/spec/v1) for every MIG pool's nodes."""
    configs: dict[str, Any] = {ALL_DISABLED: [{"devices": "all", "mig-enabled": False}]}
    for _, layout in sorted(layouts.items()):
        if layout.kind == "mig":
            configs.update(sorted(layout.mig_parted_configs().items()))
    return {"version": "v1", "mig-configs": configs}


def mig_parted_yaml(layouts: Mapping[str, PoolLayout]) -> str:
    return yaml.safe_dump(mig_parted_document(layouts), sort_keys=False, default_flow_style=False)


def node_labels(layouts: Mapping[str, PoolLayout]) -> dict[str, str]:
    """Node name → the mig-parted config it must apply."""
    out: dict[str, str] = {}
    for _, layout in sorted(layouts.items()):
        if layout.kind == "mig":
            out.update(layout.node_configs())
    return out


def has_mig(layouts: Mapping[str, PoolLayout]) -> bool:
    return any(layout.kind == "mig" for layout in layouts.values())


@dataclass(frozen=True)
class GpuSharingArgs:
    layouts: Mapping[str, PoolLayout]
    namespace: str
    """The GPU Operator's namespace: where mig-manager reads its config."""


class GpuSharing(pulumi.ComponentResource):
    """The mig-parted ConfigMap and each MIG node's ``nvidia.com/mig.config`` label (module docstring)."""

    resources: list[pulumi.Resource]

    def __init__(self, name: str, args: GpuSharingArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(names.GPU_SHARING_TYPE, name, None, opts)
        self.resources = []
        labels = node_labels(args.layouts)
        if has_mig(args.layouts):
            child = pulumi.ResourceOptions(parent=self)
            self.resources.append(k8s.core.v1.ConfigMap(
                f"{name}-mig-parted",
                metadata=k8s.meta.v1.ObjectMetaArgs(name=MIG_CONFIG_NAME, namespace=args.namespace,
                                                    labels={names.PART_OF_LABEL: names.PART_OF}),
                data={MIG_CONFIG_KEY: mig_parted_yaml(args.layouts)},
                opts=child,
            ))
            for node, config in sorted(labels.items()):
                # Server-side apply of this one label: the pool's own labels and taints are another patch's.
                self.resources.append(k8s.core.v1.NodePatch(
                    f"{name}-{node}",
                    metadata=k8s.meta.v1.ObjectMetaPatchArgs(name=node, labels={MIG_CONFIG_LABEL: config},
                                                             annotations={"pulumi.com/patchForce": "true"}),
                    opts=child,
                ))
        self.register_outputs({"migConfig": MIG_CONFIG_NAME if labels else None, "nodes": labels})
