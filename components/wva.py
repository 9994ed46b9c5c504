"""llm-d's Workload Variant Autoscaler (WVA) as tkf-infra installs it: its chart's values and the one object dropped.

Why a module of its own: the tag's chart (components/data/charts/SOURCES.md) is written for a demo on
OpenShift — a VariantAutoscaling, HPA and vLLM Service/ServiceMonitor for one named model, a controller
watching only its own namespace, Prometheus at OpenShift's thanos-querier, image v0.5.1 — and renders a
Prometheus Operator ServiceMonitor whatever the values say. KServe v0.20.0's scaling path needs the
controller alone, cluster-wide, reading the stack's Prometheus: each fact that takes is set here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pulumi_kubernetes as k8s

from tkf_infra.config.platform import WvaSettings

#: The chart's folder name and its release name (object names derive from it: `<release>-controller-manager`).
WVA_CHART = "workload-variant-autoscaler"
#: The InferencePool API group KServe v0.20.0 writes (gateway-api-inference-extension api/v1); WVA's default is
#: the older inference.networking.x-k8s.io, whose pools KServe's LLMInferenceServices do not have.
KSERVE_POOL_GROUP = "inference.networking.k8s.io"
#: The kinds the chart always renders (templates/manager/wva-servicemonitor.yaml) and tkf-infra drops.
DROPPED_KINDS = ("ServiceMonitor",)
DROP_KINDS = Path(__file__).resolve().parent / "helm_drop_kinds.py"


def wva_values(piece: WvaSettings, prometheus_url: str, monitoring_namespace: str) -> dict[str, Any]:
    """The chart's values for KServe's scaling path.

    - image pinned to the piece's version (the tag's values still say v0.5.1), pulled IfNotPresent;
    - `namespaceScoped: false`: KServe writes each VariantAutoscaling in its model's namespace, which a
      controller watching only its own (the chart's default) would never see;
    - Prometheus from the stack: the URL (settings refuse a non-https one) and the monitoring namespace
      and ServiceAccount the chart lets read WVA's metrics. TLS verification stays off (the chart's
      default, `insecureSkipVerify: true`): no CA is given, and an in-cluster Prometheus is usually self-signed;
    - the demo objects off (`va`, `hpa`, `vllmService`): they name a model (`llmd.*`) that is not ours;
    - `poolGroup` the InferencePool group KServe v0.20.0 writes.
    """
    return {
        "wva": {
            "image": {"tag": f"v{piece.pinned.removeprefix('v')}"},
            "imagePullPolicy": "IfNotPresent",
            "namespaceScoped": False,
            "poolGroup": KSERVE_POOL_GROUP,
            "prometheus": {"baseURL": prometheus_url, "monitoringNamespace": monitoring_namespace,
                           "serviceAccountName": piece.prometheus_service_account,
                           "tls": {"insecureSkipVerify": True}},
        },
        "va": {"enabled": False},
        "hpa": {"enabled": False},
        "vllmService": {"enabled": False},
    }


def drop_service_monitor() -> k8s.helm.v4.PostRendererArgs:
    """Helm's post-renderer that leaves out the controller's ServiceMonitor (components/helm_drop_kinds.py).

    Why: the chart renders it unconditionally (only `controller.enabled` guards it); its kind is the
    Prometheus Operator's, which tkf-infra does not install, so on a cluster without that CRD it would fail
    the `up`, and in render mode the provider could not learn its scope. A transform cannot remove a
    chart's child, so the object is dropped before the provider sees it. The stack's Prometheus scrapes
    WVA's metrics endpoint itself (docs/scaling.md says how).
    """
    return k8s.helm.v4.PostRendererArgs(command=sys.executable, args=[str(DROP_KINDS), *DROPPED_KINDS])
