"""ServingPrerequisites: what must exist before any model can be served, in dependency order.

1. cert-manager (``crds.enabled``): KServe's webhooks get their certificates from it;
2. KServe ``kserve-llmisvc-crd``: LLMInferenceService(Config) and ClusterStorageContainer CRDs;
3. Gateway API CRDs (KServe's controller watches HTTPRoutes and will not start without them) and
   LeaderWorkerSet (multi-node workloads, KServe's and the vllm backend's, are LWS objects);
4. ``kserve-llmisvc-resources``: controller, webhooks, Issuer/Certificate, and the Inference
   Extension's InferencePool CRDs (``createGIECRDs``, so no second copy is applied);
5. ``kserve-runtime-configs`` with ``kserve.llmisvcConfigs.enabled`` (``platform.kserve.presets``):
   the presets every LLMInferenceService is combined with (off by default in the chart);
6. our ``kserve-config-llm-worker-pipeline-parallel`` preset: KServe picks that name for a multi-node
   service with pipeline parallelism but does not ship it (``components/data/pipeline-parallel-preset.yaml``);
7. KEDA (only with ``platform.keda`` set, either backend): its release's install YAML, needing none of the
   others, so it is a chain of its own that ModelServing also waits on (a ScaledObject needs its CRD);
8. llm-d's Workload Variant Autoscaler (only with ``platform.wva`` set, kserve backend): its chart, the
   controller alone (components/wva.py), another chain of its own (KServe writes VariantAutoscalings).

Every chart is a Chart v4 (components/platform_charts.py); each step ``depends_on`` the charts before
it, which Pulumi resolves only once their objects exist, so a chart's custom resources find their
CRDs. The charts create no namespaces: they are created here (KEDA's YAML holds its own, `keda`).
``dependencies`` is what ModelServing waits on. The vllm backend needs only LeaderWorkerSet (and KEDA).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components.platform_charts import (
    GATEWAY_API_URL,
    KEDA_URL,
    ChartSpec,
    chart_spec,
    config_group,
    helm_chart,
    local_dir,
    render_shim_chart,
    static_crd_files,
)
from components.wva import WVA_CHART, drop_service_monitor, wva_values
from tkf_infra.config import Backend, Namespaces, Platform
from tkf_infra.config.charts import WVA_NAMESPACE, ChartSource
from tkf_infra.config.platform import installed_pieces
from tkf_infra.config.prometheus_auth import PrometheusAuth
from tkf_infra.config.stack import VLLM_GPU_IMAGE
from tkf_infra.names import SERVING_PREREQUISITES_TYPE

DATA = Path(__file__).resolve().parent / "data"
#: Our pipeline-parallel LLMInferenceServiceConfig (KServe v0.20.0 references it but does not ship it).
PIPELINE_PARALLEL_PRESET_FILE = DATA / "pipeline-parallel-preset.yaml"


@dataclass(frozen=True)
class ServingPrerequisitesArgs:
    platform: Platform
    namespaces: Namespaces
    backend: Backend = Backend.KSERVE
    """The vllm backend needs only LeaderWorkerSet; KServe and its dependencies are skipped."""
    pipeline_parallel_preset: bool = False
    """Install the PP preset (only useful when a multi-node model runs on KServe)."""
    vllm_image: str = VLLM_GPU_IMAGE
    source: ChartSource = "upstream"
    render: bool = False
    """Render mode: cert-manager and the KServe CRDs go through their stand-ins (platform_charts)."""
    skip_await: bool = False
    wva_prometheus_url: str | None = None
    """The Prometheus KServe's scaling path reads (the stack's prometheusUrl): written into its
    inferenceservice-config (`kserve_wva_config`); None leaves KServe's chart as it is."""
    wva_prometheus_auth: PrometheusAuth | None = None
    """How KEDA authenticates to it (`serving.prometheusAuth`), written beside the URL."""


#: The inferenceservice-config key KServe v0.20.0 reads its WVA/KEDA settings from
#: (pkg/controller/v1alpha2/llmisvc/config_loader.go `autoscalingConfigName`, l. 152).
WVA_CONFIG_KEY = "autoscaling-wva-controller-config"
#: The ConfigMap KServe's controller loads (pkg/constants `InferenceServiceConfigMapName`).
KSERVE_CONFIG_MAP = "inferenceservice-config"


def kserve_wva_config(prometheus_url: str, auth: PrometheusAuth | None = None
                      ) -> Callable[[pulumi.ResourceTransformArgs], pulumi.ResourceTransformResult | None]:
    """Add KServe's WVA settings to the inferenceservice-config its chart renders.

    Why: KServe v0.20.0 writes the KEDA ScaledObject of an autoscaled LLMInferenceService only when
    `autoscaling-wva-controller-config` names a Prometheus (`validateAutoscalingConfig`, scaling.go l. 338:
    `prometheus.url is required`), and fails the whole reconcile otherwise; its chart has no value that
    sets the key (kserve-llmisvc-resources/files/common/configmap.yaml), so an install of ours must add it.
    The shape is its `WVAAutoscalingConfig` (config_loader.go l. 119-147): `{"prometheus": {"url": ...}}`,
    with `serving.prometheusAuth`'s keys beside the URL (KServe copies them into the ScaledObject's trigger).
    """
    text = json.dumps({"prometheus": {"url": prometheus_url, **(auth.kserve_fields() if auth else {})}})

    def transform(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
        # A chart's children arrive as plain values (the provider rendered them).
        meta, data = args.props.get("metadata"), args.props.get("data")
        if (args.type_ != "kubernetes:core/v1:ConfigMap" or not isinstance(meta, dict)
                or meta.get("name") != KSERVE_CONFIG_MAP):
            return None
        merged = {**(data if isinstance(data, dict) else {}), WVA_CONFIG_KEY: text}
        return pulumi.ResourceTransformResult({**args.props, "data": merged}, args.opts)

    return transform


def cert_manager_values() -> dict[str, Any]:
    return {"crds": {"enabled": True}}


def lws_values(version: str) -> dict[str, Any]:
    """The repository's chart runs ``lws:main`` with ``Always`` (its release job rewrites both): pin the release."""
    return {"image": {"manager": {"tag": f"v{version.removeprefix('v')}", "pullPolicy": "IfNotPresent"}}}


def runtime_configs_values() -> dict[str, Any]:
    return {"kserve": {"llmisvcConfigs": {"enabled": True}}}


def split_crds(files: Sequence[Path]) -> tuple[list[str], list[dict[str, Any]]]:
    """Files holding only CRDs, and every document of the other files."""
    crd_files: list[str] = []
    others: list[dict[str, Any]] = []
    for path in files:
        docs = [d for d in yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader) if d]
        if all(d.get("kind") == "CustomResourceDefinition" for d in docs):
            crd_files.append(str(path))
        else:
            others += docs
    return crd_files, others


def pipeline_parallel_preset(namespace: str, image: str) -> dict[str, Any]:
    """The preset document with our namespace and image filled in."""
    doc: dict[str, Any] = yaml.safe_load(PIPELINE_PARALLEL_PRESET_FILE.read_text())
    doc["metadata"]["namespace"] = namespace
    for part in ("template", "worker"):
        for c in doc["spec"][part]["containers"]:
            c["image"] = image
    return doc


class ServingPrerequisites(pulumi.ComponentResource):
    """cert-manager, KServe (CRDs, controller, presets), Gateway API CRDs, LWS, the PP preset, KEDA and WVA."""

    dependencies: list[pulumi.Resource]
    """What ModelServing waits on: the last step of each chain (earlier steps come before it)."""
    charts: dict[str, pulumi.Resource]
    """Every chart (or YAML group) registered, by step name."""

    def __init__(self, name: str, args: ServingPrerequisitesArgs,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(SERVING_PREREQUISITES_TYPE, name, None, opts)
        self._name, self._args = name, args
        p, ns = args.platform, args.namespaces
        installed = installed_pieces(p, args.backend)
        self.charts = {}
        self._namespaces: dict[str, k8s.core.v1.Namespace] = {}

        cert_manager: list[pulumi.Resource] = []
        if "certManager" in installed:
            cert_manager = [self._cert_manager(ns.cert_manager)]

        crds: list[pulumi.Resource] = []
        if "kserve" in installed:
            crds = [self._kserve_crds(ns.kserve, after=cert_manager)]

        third: list[pulumi.Resource] = []
        if "gatewayApi" in installed:
            third += self._gateway_api(after=crds)
        if "lws" in installed:
            third.append(self._chart("lws", "lws", "lws", ns.lws, lws_values(p.lws.pinned), after=crds))

        controller: list[pulumi.Resource] = []
        if "kserve" in installed:
            wva = ([kserve_wva_config(args.wva_prometheus_url, args.wva_prometheus_auth)]
                   if args.wva_prometheus_url else [])
            controller = [self._chart("kserve-llmisvc-resources", "kserve", "kserve-llmisvc-resources", ns.kserve, {},
                                      after=[*cert_manager, *crds, *third], transforms=wva)]
            if p.kserve.presets:
                controller.append(self._chart("kserve-runtime-configs", "kserve", "kserve-runtime-configs",
                                              ns.kserve, runtime_configs_values(), after=controller))

        last: list[pulumi.Resource] = controller or third
        if args.backend == Backend.KSERVE and args.pipeline_parallel_preset:
            doc = pipeline_parallel_preset(ns.kserve, args.vllm_image)
            last = [*last, self._add("pipeline-parallel-preset", k8s.apiextensions.CustomResource(
                f"{name}-pipeline-parallel-preset",
                api_version=doc["apiVersion"], kind=doc["kind"], metadata=doc["metadata"], spec=doc["spec"],
                opts=self._opts(after=controller or crds)))]
        keda = [self._keda()] if "keda" in installed else []
        autoscaler = [self._wva()] if "wva" in installed else []
        self.dependencies = list(dict.fromkeys([*last, *third, *keda, *autoscaler]))
        self.register_outputs({"charts": sorted(self.charts)})

    # -- steps ----------------------------------------------------------------------------------

    def _cert_manager(self, namespace: str) -> pulumi.Resource:
        a = self._args
        piece = a.platform.cert_manager
        if a.render:
            folder = local_dir("certManager", piece, a.source)
            assert folder is not None, "settings refuse an upstream cert-manager in render mode"
            return self._add("cert-manager", helm_chart(
                f"{self._name}-cert-manager", "cert-manager",
                ChartSpec(render_shim_chart(folder, "cert-manager"), local=True), namespace,
                {"cert-manager": cert_manager_values()}, skip_await=a.skip_await,
                opts=self._opts(namespace=namespace)))
        return self._chart("cert-manager", "certManager", "cert-manager", namespace, cert_manager_values(), after=[])

    def _kserve_crds(self, namespace: str, after: list[pulumi.Resource]) -> pulumi.Resource:
        a = self._args
        if a.render:
            folder = local_dir("kserve", a.platform.kserve, a.source)
            assert folder is not None, "settings refuse an upstream KServe in render mode"
            return self._add("kserve-llmisvc-crd", config_group(
                f"{self._name}-kserve-llmisvc-crd", static_crd_files(folder / "kserve-llmisvc-crd"),
                skip_await=a.skip_await, opts=self._opts(after=after)))
        return self._chart("kserve-llmisvc-crd", "kserve", "kserve-llmisvc-crd", namespace, {}, after=after)

    def _gateway_api(self, after: list[pulumi.Resource]) -> list[pulumi.Resource]:
        """Gateway API's standard channel: its CRDs, and the safe-upgrades ValidatingAdmissionPolicy.

        From local files the policy and its binding are registered as objects of their own: the
        provider's YAML machinery needs every kind's scope, and pulumi-kubernetes 4.25 knows a
        ValidatingAdmissionPolicy's only from a cluster (render mode has none). From the release URL
        (needs a cluster anyway to answer that) the whole file goes through one YAML group.
        """
        a, piece = self._args, self._args.platform.gateway_api
        folder = local_dir("gatewayApi", piece, a.source)
        opts = self._opts(after=after)
        if folder is None:
            return [self._add("gateway-api", config_group(f"{self._name}-gateway-api",
                                                          [GATEWAY_API_URL.format(version=piece.pinned)],
                                                          skip_await=a.skip_await, opts=opts))]
        crd_files, others = split_crds(sorted(folder.glob("*.yaml")))
        out = [self._add("gateway-api", config_group(f"{self._name}-gateway-api", crd_files,
                                                     skip_await=a.skip_await, opts=opts))]
        for doc in others:
            kind, meta = doc["kind"], doc["metadata"]
            fields = {k: v for k, v in doc.items() if k not in {"apiVersion", "kind", "metadata"}}
            out.append(self._add(f"gateway-api-{kind}-{meta['name']}", k8s.apiextensions.CustomResource(
                f"{self._name}-gateway-api-{meta['name']}-{kind.lower()}", api_version=doc["apiVersion"],
                kind=kind, metadata=meta, opts=pulumi.ResourceOptions(parent=self, depends_on=out[:1]),
                **fields)))
        return out

    def _keda(self) -> pulumi.Resource:
        """KEDA's install YAML as one group: its Namespace, six CRDs, operator, metrics server (with the
        `v1beta1.external.metrics.k8s.io` APIService) and admission webhook.

        Why a YAML group and not a chart: KEDA's repository has none (its chart is another repository,
        not reachable as a Go module); the release asset is this file. The group applies the Namespace
        and CRDs before the objects in them, and renders offline (every kind in it is built in or a CRD
        of the file itself).
        """
        a = self._args
        piece = a.platform.keda
        assert piece is not None, "installed_pieces lists keda only when platform.keda is set"
        folder = local_dir("keda", piece, a.source)
        files = ([str(p) for p in sorted(folder.glob("*.yaml"))] if folder is not None
                 else [KEDA_URL.format(version=piece.pinned.removeprefix("v"))])
        return self._add("keda", config_group(f"{self._name}-keda", files, skip_await=a.skip_await,
                                              opts=self._opts()))

    def _wva(self) -> pulumi.Resource:
        """WVA's chart in its own namespace: its CRD (crds/), the controller, cluster-wide RBAC, metrics Service.

        Why its own chain: it needs none of the other pieces' CRDs, and only KServe's controller (not
        this program) writes VariantAutoscalings, so nothing here waits on it but ModelServing.
        """
        a = self._args
        piece = a.platform.wva
        assert piece is not None, "installed_pieces lists wva only when platform.wva is set"
        assert a.wva_prometheus_url is not None, "settings refuse platform.wva without prometheusUrl"
        return self._chart("wva", "wva", WVA_CHART, WVA_NAMESPACE,
                           wva_values(piece, a.wva_prometheus_url, a.namespaces.monitoring), after=[],
                           post_renderer=drop_service_monitor())

    # -- helpers --------------------------------------------------------------------------------

    def _chart(self, step: str, key: str, chart: str, namespace: str, values: dict[str, Any], *,
               after: list[pulumi.Resource], transforms: Sequence[pulumi.ResourceTransform] = (),
               post_renderer: k8s.helm.v4.PostRendererArgs | None = None) -> pulumi.Resource:
        piece = self._args.platform.pieces()[key]
        spec = chart_spec(key, chart, piece, self._args.source)
        opts = self._opts(after=after, namespace=namespace)
        if transforms:
            opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(transforms=list(transforms)))
        return self._add(step, helm_chart(f"{self._name}-{step}", chart, spec, namespace, values,
                                          skip_await=self._args.skip_await, opts=opts, post_renderer=post_renderer))

    def _opts(self, *, after: Sequence[pulumi.Resource] = (), namespace: str | None = None) -> pulumi.ResourceOptions:
        deps = list(after)
        if namespace is not None:
            deps.append(self._namespace(namespace))
        return pulumi.ResourceOptions(parent=self, depends_on=deps)

    def _namespace(self, namespace: str) -> k8s.core.v1.Namespace:
        """The charts create none of their namespaces; each is created once, here."""
        if namespace not in self._namespaces:
            self._namespaces[namespace] = k8s.core.v1.Namespace(
                f"{self._name}-namespace-{namespace}", metadata={"name": namespace},
                opts=pulumi.ResourceOptions(parent=self))
        return self._namespaces[namespace]

    def _add(self, step: str, resource: pulumi.Resource) -> pulumi.Resource:
        self.charts[step] = resource
        return resource
