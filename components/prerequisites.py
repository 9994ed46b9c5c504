"""ServingPrerequisites: what must exist before any model can be served, in dependency order.

- cert-manager: KServe's webhooks get their certificates from it, so it comes first;
- Gateway API CRDs and the Gateway API Inference Extension CRDs: KServe's LLMInferenceService
  controller watches HTTPRoutes and InferencePools and will not start without the CRDs;
- KServe ``kserve-llmisvc-crd`` → ``kserve-llmisvc-resources`` (controller, webhooks) →
  ``kserve-runtime-configs`` with ``kserve.llmisvcConfigs.enabled=true`` (the presets are off by
  default, and without them every service stays ``PresetsCombined=False``);
- LeaderWorkerSet: multi-node workloads (KServe's, and the vllm backend's) are LWS objects;
- our ``kserve-config-llm-worker-pipeline-parallel`` preset: KServe picks that name for a
  multi-node service with pipeline parallelism but does not ship it (see
  ``components/data/pipeline-parallel-preset.yaml``).

Each piece is pinned (``platform.<piece>.version``) and can be marked ``alreadyInstalled``, which
registers nothing for it. Helm releases (``helm.v3.Release``) rather than Chart v4: the KServe
CRD chart uses Helm ``lookup``, which only a real release evaluates. ``dependencies`` is the
handle ModelServing waits on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from tkf_infra.config import Backend, Namespaces, Platform
from tkf_infra.config.stack import VLLM_GPU_IMAGE

DATA = Path(__file__).resolve().parent / "data"
CERT_MANAGER_REPO = "https://charts.jetstack.io"
KSERVE_CHARTS = "oci://ghcr.io/kserve/charts"
LWS_CHART = "oci://registry.k8s.io/lws/charts/lws"
GATEWAY_API_URL = "https://github.com/kubernetes-sigs/gateway-api/releases/download/{version}/standard-install.yaml"
#: Inference Extension CRDs (InferencePool inference.networking.k8s.io/v1), as pinned by KServe v0.20.0.
GIE_VERSION = "v1.5.0"
GIE_URL = (
    "https://github.com/kubernetes-sigs/gateway-api-inference-extension/releases/download/{version}/v1-manifests.yaml"
)


@dataclass(frozen=True)
class ServingPrerequisitesArgs:
    platform: Platform
    namespaces: Namespaces
    backend: Backend = Backend.KSERVE
    """The vllm backend needs only LeaderWorkerSet; KServe and its dependencies are skipped."""
    pipeline_parallel_preset: bool = False
    """Install the PP preset (only useful when a multi-node model runs on KServe)."""
    vllm_image: str = VLLM_GPU_IMAGE


def pipeline_parallel_preset(namespace: str, image: str) -> dict[str, Any]:
    """The preset document with our namespace and image filled in."""
    doc: dict[str, Any] = yaml.safe_load((DATA / "pipeline-parallel-preset.yaml").read_text())
    doc["metadata"]["namespace"] = namespace
    for part in ("template", "worker"):
        for c in doc["spec"][part]["containers"]:
            c["image"] = image
    return doc


class ServingPrerequisites(pulumi.ComponentResource):
    """cert-manager, Gateway API (+ Inference Extension) CRDs, KServe, LWS, the PP preset."""

    dependencies: list[pulumi.Resource]
    """Everything registered here; ModelServing ``depends_on`` it."""

    def __init__(self, name: str, args: ServingPrerequisitesArgs,
                 opts: pulumi.ResourceOptions | None = None) -> None:  # fmt: skip
        super().__init__("tkf:platform:ServingPrerequisites", name, None, opts)
        p, ns = args.platform, args.namespaces
        self.dependencies = []
        kserve = args.backend == Backend.KSERVE

        cert_manager: list[pulumi.Resource] = []
        if kserve and not p.cert_manager.already_installed:
            cert_manager.append(self._release(
                f"{name}-cert-manager", "cert-manager", "cert-manager", p.cert_manager.pinned, ns.cert_manager,
                repo=CERT_MANAGER_REPO, values={"crds": {"enabled": True}}, deps=[]))  # fmt: skip

        gateway: list[pulumi.Resource] = []
        if kserve and not p.gateway_api.already_installed:
            for suffix, url in (("gateway-api-crds", GATEWAY_API_URL.format(version=p.gateway_api.pinned)),
                                ("inference-extension-crds", GIE_URL.format(version=GIE_VERSION))):  # fmt: skip
                cf = k8s.yaml.v2.ConfigFile(f"{name}-{suffix}", file=url, opts=pulumi.ResourceOptions(parent=self))
                gateway.append(cf)
                self.dependencies.append(cf)

        kserve_crd: list[pulumi.Resource] = []
        if kserve and not p.kserve.already_installed:
            crd = self._release(
                f"{name}-kserve-llmisvc-crd", "kserve-llmisvc-crd", f"{KSERVE_CHARTS}/kserve-llmisvc-crd",
                p.kserve.pinned, ns.kserve, deps=[])  # fmt: skip
            kserve_crd = [crd]
            controller = self._release(
                f"{name}-kserve-llmisvc-resources", "kserve-llmisvc-resources",
                f"{KSERVE_CHARTS}/kserve-llmisvc-resources", p.kserve.pinned, ns.kserve,
                deps=[crd, *cert_manager, *gateway])  # fmt: skip
            self._release(
                f"{name}-kserve-runtime-configs", "kserve-runtime-configs", f"{KSERVE_CHARTS}/kserve-runtime-configs",
                p.kserve.pinned, ns.kserve, values={"kserve": {"llmisvcConfigs": {"enabled": True}}},
                deps=[crd, controller])  # fmt: skip

        if not p.lws.already_installed:
            self._release(f"{name}-lws", "lws", LWS_CHART, p.lws.pinned, ns.lws, deps=[])

        if kserve and args.pipeline_parallel_preset:
            doc = pipeline_parallel_preset(ns.kserve, args.vllm_image)
            self.dependencies.append(k8s.apiextensions.CustomResource(
                f"{name}-pipeline-parallel-preset",
                api_version=doc["apiVersion"], kind=doc["kind"], metadata=doc["metadata"], spec=doc["spec"],
                opts=pulumi.ResourceOptions(parent=self, depends_on=kserve_crd),
            ))  # fmt: skip
        self.register_outputs({"count": len(self.dependencies)})

    def _release(self, rname: str, release: str, chart: str, version: str, namespace: str, *,
                 deps: list[pulumi.Resource], repo: str | None = None,
                 values: dict[str, Any] | None = None) -> k8s.helm.v3.Release:  # fmt: skip
        r = k8s.helm.v3.Release(
            rname,
            name=release,
            chart=chart,
            version=version,
            repository_opts={"repo": repo} if repo else None,
            namespace=namespace,
            create_namespace=True,
            values=values or {},
            opts=pulumi.ResourceOptions(parent=self, depends_on=deps),
        )
        self.dependencies.append(r)
        return r
