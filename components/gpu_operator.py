"""GpuOperator: NVIDIA's GPU Operator Helm chart, at a pinned version.

Why the operator: it installs what turns a GPU node into schedulable ``nvidia.com/gpu``
capacity (driver unless the AMI ships one, container toolkit, device plugin), the feature
discovery labels our node selectors use (``nvidia.com/gpu.product``) and the DCGM exporter our
inventory reads. Why ``helm.v3.Release``: the chart relies on Helm hooks (CRD upgrade/cleanup
Jobs), which only a real Helm release runs.

Time-slicing is the device plugin's config, a ConfigMap named in ``devicePlugin.config``; it is
created before the release. ``alreadyInstalled: true`` registers nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from tkf_infra.config import GpuOperatorSettings

CHART = "gpu-operator"
REPOSITORY = "https://helm.ngc.nvidia.com/nvidia"
TIME_SLICING_CONFIG = "tkf-time-slicing"
TIME_SLICING_KEY = "any"


@dataclass(frozen=True)
class GpuOperatorArgs:
    settings: GpuOperatorSettings
    namespace: str = "gpu-operator"
    mig_config: str | None = None
    """The custom mig-parted ConfigMap mig-manager reads (`components.gpu_sharing`), when a pool is MIG."""


def time_slicing_config(replicas: int, mig_strategy: str) -> str:
    """Device-plugin config: each GPU is advertised ``replicas`` times (no memory isolation)."""
    return (
        "version: v1\n"
        f"flags:\n  migStrategy: {mig_strategy}\n"
        "sharing:\n  timeSlicing:\n    resources:\n"
        f"      - name: nvidia.com/gpu\n        replicas: {replicas}\n"
    )


def chart_values(settings: GpuOperatorSettings, mig_config: str | None = None) -> dict[str, Any]:
    values: dict[str, Any] = {
        "driver": {"enabled": settings.driver_enabled},
        "toolkit": {"enabled": settings.toolkit_enabled},
        "dcgmExporter": {"enabled": settings.dcgm_exporter_enabled,
                         "serviceMonitor": {"enabled": settings.dcgm_exporter_enabled}},
        "mig": {"strategy": settings.mig_strategy},
    }  # fmt: skip
    if settings.time_slicing_replicas > 1:
        values["devicePlugin"] = {"config": {"name": TIME_SLICING_CONFIG, "default": TIME_SLICING_KEY}}
    if mig_config:  # the layout planner's geometries; nodes without the label keep MIG off
        values["migManager"] = {"config": {"name": mig_config, "default": "all-disabled"}}
    return values


class GpuOperator(pulumi.ComponentResource):
    """The operator release (plus the time-slicing ConfigMap); empty when already installed."""

    resources: list[pulumi.Resource]

    def __init__(self, name: str, args: GpuOperatorArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tkf:platform:GpuOperator", name, None, opts)
        s = args.settings
        self.resources = []
        if not s.already_installed:
            # The operator's pods need host access (driver, toolkit): the namespace must be privileged.
            ns = k8s.core.v1.Namespace(
                f"{name}-namespace",
                metadata={"name": args.namespace, "labels": {"pod-security.kubernetes.io/enforce": "privileged"}},
                opts=pulumi.ResourceOptions(parent=self),
            )
            self.resources.append(ns)
            deps: list[pulumi.Resource] = [ns]
            if s.time_slicing_replicas > 1:
                cm = k8s.core.v1.ConfigMap(
                    f"{name}-time-slicing",
                    metadata={"name": TIME_SLICING_CONFIG, "namespace": args.namespace},
                    data={TIME_SLICING_KEY: time_slicing_config(s.time_slicing_replicas, s.mig_strategy)},
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[ns]),
                )
                self.resources.append(cm)
                deps.append(cm)
            self.resources.append(k8s.helm.v3.Release(
                f"{name}-release",
                name=CHART,
                chart=CHART,
                version=s.pinned,
                repository_opts={"repo": REPOSITORY},
                namespace=args.namespace,
                values=chart_values(s, args.mig_config),
                opts=pulumi.ResourceOptions(parent=self, depends_on=deps),
            ))  # fmt: skip
        self.register_outputs({"installed": not s.already_installed, "version": s.version})
