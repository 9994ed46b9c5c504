"""WVA and KEDA installed by `up` on a real kube-apiserver (`platform.wva`, `platform.keda`), and an autoscaled
KServe model's objects accepted in the same run.

A kserve-backend stack with one autoscaled CPU model, `platform.keda` and `platform.wva` set, on a server
that serves neither keda.sh nor llmd.ai before the run: the plan does not refuse the model (tkf-infra
installs both), the one `up` creates WVA's CRD and controller from the vendored chart with our values
(image v0.7.0, cluster-wide RBAC, the stack's Prometheus) and without its ServiceMonitor (no Prometheus
Operator CRD on the server: the run would fail on it), then the model's LLMInferenceService with its
`spec.scaling.wva.keda`. The server then accepts the VariantAutoscaling KServe v0.20.0 would write for it
(`expectedVA` in pkg/controller/v1alpha2/llmisvc/scaling.go: no KServe controller runs here) against the
installed CRD. A second preview plans no change.

Why its own API server: KEDA's APIService and webhook (tests/kube/platform/test_keda_on_apiserver.py) must not
reach the platform tests sharing the package's server.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from tests.engine_fixtures import EngineStack
from tests.kube.apiserver import KubeAPIServer, own_apiserver
from tests.kube.platform.readback import CRD_API, LLMISVC
from tests.kube.platform.test_up_against_apiserver import CPU_MODELS, target_config
from tkf_infra.config.charts import WVA_NAMESPACE
from tkf_infra.outputs import REJECTED_OUTPUT

pytestmark = [pytest.mark.apiserver, pytest.mark.engine]

PROM = "https://prometheus.monitoring.svc:9091"
VA_API = "llmd.ai/v1alpha1"


@pytest.fixture(scope="module")
def wva_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPIServer]:
    with own_apiserver(tmp_path_factory.mktemp("wva-apiserver")) as server:
        yield server


def scaled_stack(es: EngineStack, server: KubeAPIServer) -> tuple[str, dict[str, Any]]:
    model = {k: v for k, v in CPU_MODELS[0].items() if k != "replicas"}
    model["scaling"] = {"minReplicas": 1, "maxReplicas": 2}
    serving = target_config(es, server, "kserve", models=[model])

    def with_wva(config: dict[str, Any]) -> None:
        # KServe (and what it needs) installed from the vendored charts; a CPU model needs no GPU Operator.
        config["tkf-infra:platform"]["gpuOperator"]["alreadyInstalled"] = True
        config["tkf-infra:platform"]["keda"] = {"version": "v2.18.0"}
        config["tkf-infra:platform"]["wva"] = {"version": "v0.7.0"}
        config["tkf-infra:prometheusUrl"] = PROM

    es.edit_config(with_wva)
    return serving, model


def test_up_installs_wva_and_the_scaled_kserve_models_objects_are_accepted(
    wva_server: KubeAPIServer, lean_engine_env: dict[str, str], make_stack: Callable[..., EngineStack],
) -> None:
    es = make_stack(platform=True, extra_env=lean_engine_env)
    serving, model = scaled_stack(es, wva_server)
    with wva_server.client() as kube:
        apis = kube.text("/apis")
        assert "llmd.ai" not in apis and "monitoring.coreos.com" not in apis, "a fresh server serves neither"
        started = time.monotonic()
        up = es.stack.up()
        up_seconds = time.monotonic() - started
        assert up.summary.result == "succeeded"
        rejected = up.outputs.get(REJECTED_OUTPUT)
        assert not (rejected.value if rejected else None), rejected

        crd = kube.get(CRD_API, "CustomResourceDefinition", "variantautoscalings.llmd.ai")
        assert crd is not None
        assert {c["type"]: c["status"] for c in crd["status"]["conditions"]}["Established"] == "True"
        manager = kube.get("apps/v1", "Deployment", "workload-variant-autoscaler-controller-manager", WVA_NAMESPACE)
        assert manager is not None
        (container,) = manager["spec"]["template"]["spec"]["containers"]
        assert container["image"] == "ghcr.io/llm-d/llm-d-workload-variant-autoscaler:v0.7.0"
        assert not any(a.startswith("--watch-namespace") for a in container["args"])
        config = kube.get("v1", "ConfigMap", "workload-variant-autoscaler-variantautoscaling-config", WVA_NAMESPACE)
        assert config is not None and yaml.safe_load(config["data"]["config.yaml"])["PROMETHEUS_BASE_URL"] == PROM
        binding = kube.get("rbac.authorization.k8s.io/v1", "ClusterRoleBinding",
                           f"workload-variant-autoscaler-{WVA_NAMESPACE}-manager-rolebinding")
        assert binding is not None and binding["roleRef"]["kind"] == "ClusterRole"

        isvc = kube.get(LLMISVC, "LLMInferenceService", model["name"], serving)
        assert isvc is not None
        assert (isvc["spec"]["scaling"]["minReplicas"], isvc["spec"]["scaling"]["maxReplicas"]) == (1, 2)
        assert "keda" in isvc["spec"]["scaling"]["wva"]

        # What KServe's controller writes for it (expectedVA), accepted by the CRD WVA's chart installed.
        va: dict[str, Any] = {"apiVersion": VA_API, "kind": "VariantAutoscaling",
                              "metadata": {"name": f"{model['name']}-kserve-va", "namespace": serving,
                                           "labels": {"inference.optimization/acceleratorName": "unknown"}},
                              "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment",
                                                          "name": f"{model['name']}-kserve"},
                                       "modelID": isvc["spec"]["model"].get("name") or isvc["spec"]["model"]["uri"],
                                       "minReplicas": 1, "maxReplicas": 2}}
        kube.create(va)
        stored = kube.get(VA_API, "VariantAutoscaling", va["metadata"]["name"], serving)
        assert stored is not None and stored["spec"]["maxReplicas"] == 2

        started = time.monotonic()
        again = es.stack.preview()
        preview_seconds = time.monotonic() - started
        changes = {k: v for k, v in again.change_summary.items() if k != "same"}
        assert changes == {}, changes
        print(f"\nWVA + KEDA + KServe on the test server: up {up_seconds:.1f} s, "
              f"second preview {preview_seconds:.1f} s")
