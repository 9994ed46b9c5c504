"""The platform pieces a stack installs (GPU Operator, cert-manager, Gateway API, KServe, LWS, KEDA, WVA) or leaves
alone.

Why pinned: a chart version that floats changes the cluster under a stack nobody edited; every piece
tkf-infra installs names an exact release (docs/platform.md), and `alreadyInstalled` is the way to
say someone else owns it.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from tkf_infra.config import kube_syntax as ks
from tkf_infra.config.base import SettingsModel
from tkf_infra.config.catalog import Backend
from tkf_infra.config.charts import ChartSource

_RELEASE_RE = re.compile(r"v?\d+\.\d+\.\d+([-+][0-9A-Za-z.-]+)?")


class Component(SettingsModel):
    """A platform piece: installed by us at a pinned version, or already installed by someone else."""

    already_installed: bool = Field(
        False, description="True: someone else installed it; tkf-infra registers nothing for it.")
    version: str | None = Field(None, description="Pinned chart/release version (required unless alreadyInstalled).")
    chart_path: str | None = Field(
        None, description="Local chart directory (air-gapped sites), absolute or relative to the project; it "
        "replaces the upstream repository and `platform.charts`. gatewayApi: the folder of its standard-channel "
        "YAML files; kserve: the folder holding its kserve-llmisvc-crd, kserve-llmisvc-resources and "
        "kserve-runtime-configs charts (KServe's charts/).")

    @field_validator("version")
    @classmethod
    def _pinned(cls, v: str | None) -> str | None:
        if v is not None and v.strip().lower() in {"", "latest", "*", "stable", "main", "master"}:
            raise ValueError(f"version {v!r} is not pinned; give an exact release such as v0.15.2")
        if v is not None and not _RELEASE_RE.fullmatch(v):
            raise ValueError(f"version {v!r} is not an exact release; give one such as v0.15.2 (or 0.8.0)")
        return v

    @model_validator(mode="after")
    def _version_when_installing(self) -> Component:
        if not self.already_installed and not self.version:
            raise ValueError("version is required when tkf-infra installs this piece; pin an exact release "
                             "(or set alreadyInstalled: true)")
        return self

    @property
    def pinned(self) -> str:
        """The pinned version; only meaningful when tkf-infra installs the piece."""
        return self.version or ""


class GpuOperatorSettings(Component):
    version: str | None = "v26.7.0"
    driver_enabled: bool = Field(True, description="False where nodes ship NVIDIA drivers.")
    toolkit_enabled: bool = True
    dcgm_exporter_enabled: bool = Field(True, description="Feeds GPU inventory and capacity data.")
    time_slicing_replicas: int = Field(0, ge=0, le=48, description="Device-plugin time-slicing; 0 = off.")
    mig_strategy: Literal["none", "single", "mixed"] = "none"


class KServeSettings(Component):
    presets: bool = Field(
        True, description="Install KServe's LLMInferenceServiceConfig presets (kserve-runtime-configs); without "
        "them, or an equivalent set of your own, every LLMInferenceService stays PresetsCombined=False.")


class KedaSettings(Component):
    """KEDA, the autoscaler both backends' scaling objects need (docs/scaling.md).

    Why opt-in, unlike the other pieces: only autoscaled models need it, and a stack that autoscales
    nothing (dev) should not carry its 24 objects, its APIService and its webhook; a cluster may also
    run a KEDA of its own, which two installs would fight over (one owner of keda.sh's CRDs).
    """

    version: str | None = "v2.18.0"


class WvaSettings(Component):
    """llm-d's Workload Variant Autoscaler, which computes the `wva_desired_replicas` that KServe's scaling
    path follows (docs/scaling.md).

    Why opt-in, as KEDA: only autoscaled models on the kserve backend need it, and a cluster may run a WVA
    of its own (one owner of llmd.ai's CRD). It reads vLLM's metrics from the stack's Prometheus
    (`prometheusUrl`), which must be https (WVA v0.7.0 refuses to start on any other scheme).
    """

    version: str | None = "v0.7.0"
    prometheus_service_account: str = Field(
        "kube-prometheus-stack-prometheus", description="The ServiceAccount (in namespaces.monitoring) of the "
        "Prometheus that scrapes WVA's https metrics endpoint: the chart lets it read /metrics (the chart's "
        "default name, kube-prometheus-stack's).")


def _label_problems(labels: dict[str, str]) -> dict[str, str]:
    checks = ((ks.label_key_problem(k), ks.label_value_problem(val)) for k, val in labels.items())
    problems = [f"label {p}" for pair in checks for p in pair if p]
    if problems:
        raise ValueError("; ".join(problems))
    return labels


class DashboardsSettings(SettingsModel):
    """Grafana dashboards and Prometheus alert rules for the fleet (docs/observability.md).

    Why opt-in: they are objects for a monitoring stack the cluster must already run (kube-prometheus-stack, or
    a Grafana with its dashboard sidecar and a Prometheus), and a PrometheusRule cannot even be applied where
    prometheus-operator's CRD is not served. Not a chart: nothing here is installed, only configured.
    """

    namespace: str | None = Field(
        None, description="Namespace of the dashboards' ConfigMaps and of the rules (default: namespaces.monitoring), "
        "where the Grafana sidecar and the Prometheus look.")
    grafana_label: str = Field(
        "grafana_dashboard", description="The label Grafana's dashboard sidecar selects ConfigMaps by "
        "(kube-prometheus-stack: grafana.sidecar.dashboards.label).")
    grafana_label_value: str = Field("1", description="Its value (grafana.sidecar.dashboards.labelValue).")
    vllm_dashboards: bool = Field(
        True, description="Also ship vLLM's own three dashboards, from the pinned release's source distribution.")
    prometheus_rule: bool = Field(
        True, description="Render the alert rules as a PrometheusRule (prometheus-operator's CRD must be served); "
        "the plain rule file's ConfigMap is rendered either way, for a Prometheus without the operator.")
    rule_labels: dict[str, str] = Field(
        default_factory=lambda: {"release": "kube-prometheus-stack"},
        description="Labels on the PrometheusRule, for the Prometheus' ruleSelector (kube-prometheus-stack selects "
        "its release's label by default).")

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str | None) -> str | None:
        if v is not None and (p := ks.subdomain_problem(v, "namespace")):
            raise ValueError(p)
        return v

    @field_validator("grafana_label")
    @classmethod
    def _grafana_label(cls, v: str) -> str:
        if p := ks.label_key_problem(v):
            raise ValueError(p)
        return v

    @field_validator("grafana_label_value")
    @classmethod
    def _grafana_label_value(cls, v: str) -> str:
        if p := ks.label_value_problem(v):
            raise ValueError(p)
        return v

    @field_validator("rule_labels")
    @classmethod
    def _rule_labels(cls, v: dict[str, str]) -> dict[str, str]:
        return _label_problems(v)


class Platform(SettingsModel):
    charts: ChartSource | None = Field(
        None, description="Where chart sources come from: `upstream` = each project's repository at the piece's "
        "version (needs the network); `vendored` = the copies shipped in components/data/charts/ (offline; the "
        "pinned versions only). Default: vendored in render mode, upstream otherwise. A piece's chartPath "
        "overrides both.")
    gpu_operator: GpuOperatorSettings = Field(default_factory=lambda: GpuOperatorSettings())
    # The versions KServe v0.20.0 pins in its kserve-deps.env (CERT_MANAGER_VERSION, GATEWAY_API_VERSION,
    # LWS_VERSION) at commit 1fb781055dd1567164358233e1125142ca6ef1fe.
    cert_manager: Component = Field(default_factory=lambda: Component(version="v1.21.1"))
    gateway_api: Component = Field(default_factory=lambda: Component(version="v1.5.1"))
    kserve: KServeSettings = Field(default_factory=lambda: KServeSettings(version="v0.20.0"))
    lws: Component = Field(default_factory=lambda: Component(version="0.8.0"))
    # The release KServe v0.20.0's go.mod builds against (github.com/kedacore/keda/v2 v2.18.0).
    keda: KedaSettings | None = Field(
        None, description="KEDA (keda.sh ScaledObject, its operator, metrics server and webhook), which every "
        "autoscaled model needs. Absent (the default): tkf-infra does not install it, and an autoscaled model is "
        "refused on a cluster that does not serve keda.sh/v1alpha1. Set it (`keda: {version: v2.18.0}`) to "
        "install it (namespace `keda`, hard-coded by its manifests); `alreadyInstalled: true` says the same as "
        "absent, explicitly. chartPath: a folder of KEDA's install YAML (its release's keda-<version>.yaml).")

    # The release whose VariantAutoscaling CRD KServe v0.20.0 writes against (tests/data/crds/).
    wva: WvaSettings | None = Field(
        None, description="llm-d's Workload Variant Autoscaler (llmd.ai VariantAutoscaling), which an autoscaled "
        "model on the kserve backend needs. Absent (the default): tkf-infra does not install it, and such a model "
        "is refused on a cluster that does not serve llmd.ai/v1alpha1. Set it (`wva: {version: v0.7.0}`) to "
        "install its chart (namespace workload-variant-autoscaler-system); needs an https prometheusUrl. "
        "`alreadyInstalled: true` says the same as absent, explicitly. Only the kserve backend uses it.")

    dashboards: DashboardsSettings | None = Field(
        None, description="Grafana dashboards (vLLM's own and the fleet's) as ConfigMaps for Grafana's dashboard "
        "sidecar, and the fleet's alert rules as a PrometheusRule and a plain rule file (docs/observability.md). "
        "Absent (the default): none. `dashboards: {}` ships them with kube-prometheus-stack's conventions.")

    def pieces(self) -> dict[str, Component]:
        """Each piece under its stack-file key (KEDA and WVA only when set)."""
        out: dict[str, Component] = {"gpuOperator": self.gpu_operator, "certManager": self.cert_manager,
                                     "gatewayApi": self.gateway_api, "kserve": self.kserve, "lws": self.lws}
        if self.keda is not None:
            out["keda"] = self.keda
        if self.wva is not None:
            out["wva"] = self.wva
        return out


def installed_pieces(platform: Platform, backend: Backend) -> dict[str, Component]:
    """The pieces tkf-infra installs: the vllm backend needs only the GPU Operator, LeaderWorkerSet and
    (when set) KEDA; WVA is KServe's scaling path only."""
    wanted = ("gpuOperator", "lws", "keda") if backend == Backend.VLLM else tuple(platform.pieces())
    return {k: c for k, c in platform.pieces().items() if k in wanted and not c.already_installed}
