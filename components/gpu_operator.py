"""GpuOperator: NVIDIA's GPU Operator chart at a pinned version, as a Chart v4 (every object a resource).

Why the operator: it installs what turns a GPU node into schedulable ``nvidia.com/gpu`` capacity
(driver unless the image ships one, container toolkit, device plugin), the feature-discovery labels
our node selectors use (``nvidia.com/gpu.product``) and the DCGM exporter our inventory reads.

The chart has no values schema: a misspelt key is ignored without a word. Every key set here is
therefore checked by a test against the rendered objects (tests/engine/test_platform_charts.py).
Chart v4 does not run the chart's hooks (CRD-upgrade Job: Pulumi applies ``crds/`` itself; GPUCluster
cleanup and NFD label pruning on delete): docs/platform.md. ``alreadyInstalled: true`` registers nothing.
With a MIG pool, ``migManager.config.name`` names the mig-parted ConfigMap `components.gpu_sharing` makes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.platform_charts import chart_spec, helm_chart
from tkf_infra import names
from tkf_infra.config import GpuOperatorSettings
from tkf_infra.config.charts import ChartSource
from tkf_infra.names import GPU_OPERATOR_TYPE

CHART = "gpu-operator"
TIME_SLICING_CONFIG = "tkf-time-slicing"
TIME_SLICING_KEY = "any"


@dataclass(frozen=True)
class GpuOperatorArgs:
    settings: GpuOperatorSettings
    namespace: str = "gpu-operator"
    mig_config: str | None = None
    """The custom mig-parted ConfigMap mig-manager reads (`components.gpu_sharing`), when a pool is MIG."""
    source: ChartSource = "upstream"
    skip_await: bool = False


def time_slicing_config(replicas: int, mig_strategy: str) -> str:
    """Device-plugin config: each GPU is advertised ``replicas`` times (no memory isolation)."""
    return (
        "version: v1\n"
        f"flags:\n  migStrategy: {mig_strategy}\n"
        "sharing:\n  timeSlicing:\n    resources:\n"
        f"      - name: {names.GPU_RESOURCE}\n        replicas: {replicas}\n"
    )


def chart_values(settings: GpuOperatorSettings, mig_config: str | None = None) -> dict[str, Any]:
    v = settings.pinned
    values: dict[str, Any] = {
        # The repository's chart says appVersion "main-latest" (the release job rewrites it); these three
        # images default to it. Pinned here, the published and the vendored chart run the same images.
        "operator": {"version": v}, "validator": {"version": v}, "nodeStatusExporter": {"version": v},
        "driver": {"enabled": settings.driver_enabled},
        "toolkit": {"enabled": settings.toolkit_enabled},
        "dcgmExporter": {"enabled": settings.dcgm_exporter_enabled,
                         "serviceMonitor": {"enabled": settings.dcgm_exporter_enabled}},
        "mig": {"strategy": settings.mig_strategy},  # the chart's default is "single"
    }
    if settings.time_slicing_replicas > 1:
        # The chart creates the ConfigMap itself (templates/plugin_config.yaml) and names it in the ClusterPolicy.
        values["devicePlugin"] = {"config": {
            "create": True, "name": TIME_SLICING_CONFIG, "default": TIME_SLICING_KEY,
            "data": {TIME_SLICING_KEY: time_slicing_config(settings.time_slicing_replicas, settings.mig_strategy)}}}
    if mig_config:
        # The layout planner's geometries, in a ConfigMap of ours (`components.gpu_sharing`), not the chart's
        # (`config.create` stays off); nodes without the `nvidia.com/mig.config` label keep MIG off.
        values["migManager"] = {"config": {"name": mig_config, "default": "all-disabled"}}
    return values


class GpuOperator(pulumi.ComponentResource):
    """The operator's namespace and chart; empty when already installed."""

    resources: list[pulumi.Resource]

    def __init__(self, name: str, args: GpuOperatorArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(GPU_OPERATOR_TYPE, name, None, opts)
        s = args.settings
        self.resources = []
        if not s.already_installed:
            # The operator's pods need host access (driver, toolkit): the namespace must be privileged.
            ns = k8s.core.v1.Namespace(
                f"{name}-namespace",
                metadata={"name": args.namespace, "labels": {"pod-security.kubernetes.io/enforce": "privileged"}},
                opts=pulumi.ResourceOptions(parent=self),
            )
            chart = helm_chart(
                f"{name}-chart", CHART, chart_spec("gpuOperator", CHART, s, args.source), args.namespace,
                chart_values(s, args.mig_config), skip_await=args.skip_await,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[ns]))
            self.resources += [ns, chart]
        self.register_outputs({"installed": not s.already_installed, "version": s.version})
