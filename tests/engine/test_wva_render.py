"""WVA (`platform.wva`) rendered by the real provider in render mode, as `make preview`/`make up` write it.

Why an engine test: mocks echo the Chart's values and post-renderer without rendering (no Helm in
the mock tier); only the provider's Helm templates the vendored chart with tkf-infra's values and
pipes the result through components/helm_drop_kinds.py. This shows what a cluster would get: the
pinned image, the stack's Prometheus, cluster-wide RBAC, and none of the demo objects or the
Prometheus Operator ServiceMonitor (whose kind render mode could not even place offline).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.prerequisites import ServingPrerequisites, ServingPrerequisitesArgs
from tests.engine.test_platform_charts import images, read_rendered, render_inline
from tkf_infra.config import Backend, Namespaces, Platform
from tkf_infra.config.charts import WVA_NAMESPACE

pytestmark = pytest.mark.engine

PROM = "https://prometheus.monitoring.svc:9091"


def test_render_mode_writes_the_wva_controller_at_v0_7_0_without_demo_objects_or_service_monitor(
    tmp_path: Path, lean_engine_env: dict[str, str], engine_ready: None,
) -> None:
    platform = Platform.model_validate({
        "wva": {"version": "v0.7.0"}, **{k: {"alreadyInstalled": True}
                                       for k in ("gpuOperator", "certManager", "gatewayApi", "kserve", "lws")}})

    def program(provider_for: Callable[[str], Any]) -> None:
        ServingPrerequisites("prereq", ServingPrerequisitesArgs(
            platform, Namespaces(), backend=Backend.KSERVE, source="vendored", render=True, skip_await=True,
            wva_prometheus_url=PROM), opts=provider_for("wva"))

    rendered = render_inline(tmp_path, lean_engine_env, program) / "wva"
    docs = [d for d in read_rendered(rendered) if d["kind"] != "Namespace"]
    kinds = Counter(d["kind"] for d in docs)
    # 26 objects: the CRD, the controller and its config (3 ConfigMaps), metrics Service, 2 ServiceAccounts with
    # their token Secrets, the leader-election Role/RoleBinding, 7 ClusterRoles and 7 ClusterRoleBindings.
    assert kinds == Counter({"CustomResourceDefinition": 1, "Deployment": 1, "Service": 1, "ServiceAccount": 2,
                             "Secret": 2, "ConfigMap": 3, "Role": 1, "RoleBinding": 1,
                             "ClusterRole": 7, "ClusterRoleBinding": 7}), kinds
    assert not {"ServiceMonitor", "VariantAutoscaling", "HorizontalPodAutoscaler"} & set(kinds)
    assert images(docs) == {"ghcr.io/llm-d/llm-d-workload-variant-autoscaler:v0.7.0"}
    cluster_scoped = {"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"}
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] not in cluster_scoped} == {WVA_NAMESPACE}
    (deploy,) = (d for d in docs if d["kind"] == "Deployment")
    assert deploy["metadata"]["namespace"] == WVA_NAMESPACE
    (manager,) = deploy["spec"]["template"]["spec"]["containers"]
    assert not any(a.startswith("--watch-namespace") for a in manager["args"])  # every namespace
    assert manager["imagePullPolicy"] == "IfNotPresent"
    assert {"name": "POOL_GROUP", "value": "inference.networking.k8s.io"} in manager["env"]
    config = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith(
        "-variantautoscaling-config"))
    wva_config = yaml.safe_load(config["data"]["config.yaml"])
    assert wva_config["PROMETHEUS_BASE_URL"] == PROM and "openshift" not in config["data"]["config.yaml"]
    # Cluster-wide: the manager's ClusterRole is bound by a ClusterRoleBinding (not a namespaced RoleBinding).
    bindings = {d["roleRef"]["name"] for d in docs if d["kind"] == "ClusterRoleBinding"}
    assert f"workload-variant-autoscaler-{WVA_NAMESPACE}-manager-role" in bindings
    # The Prometheus allowed to read WVA's metrics is the stack's monitoring namespace's.
    subjects = [s for d in docs if d["kind"] == "ClusterRoleBinding" for s in d["subjects"]
                if s["name"] == "kube-prometheus-stack-prometheus"]
    assert subjects and {s["namespace"] for s in subjects} == {"monitoring"}
    (crd,) = (d for d in docs if d["kind"] == "CustomResourceDefinition")
    assert crd["metadata"]["name"] == "variantautoscalings.llmd.ai"
