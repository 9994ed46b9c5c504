"""KEDA installed by `up` on a real kube-apiserver (`platform.keda`), and our ScaledObject accepted in the same run.

A vllm-backend stack with one autoscaled CPU model and `platform.keda` set, on a server that serves no
keda.sh API before the run: the plan does not refuse the model (tkf-infra installs KEDA), the one `up`
creates KEDA's CRDs, operator, metrics server and webhook from the vendored release, then the model's
ScaledObject, which the server accepts against KEDA's own CRD (and whose bounds it enforces: a cool-down
over 3600 s is refused). A second preview then plans no change.

Why its own API server: KEDA registers the `v1beta1.external.metrics.k8s.io` APIService and a
ValidatingWebhookConfiguration whose backends (KEDA's pods) never run here (no kubelet). The APIService
stays unavailable (the test server routes it to EndpointSlices, of which there are none), so discovery
reports that group as failed; that must not break the provider's discovery, and it must not reach the
platform tests sharing the package's server. The webhook's failurePolicy is Ignore (tests/test_keda_platform.py),
and the test server runs no webhook plugin unless asked (tools/kube-apiserver), so writes are not slowed.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.engine_fixtures import EngineStack
from tests.kube.apiserver import KubeAPIServer, own_apiserver
from tests.kube.client import KubeAPIError
from tests.kube.platform.readback import CRD_API
from tests.kube.platform.test_up_against_apiserver import CPU_MODELS, target_config
from tkf_infra import names
from tkf_infra.config.charts import KEDA_NAMESPACE
from tkf_infra.outputs import REJECTED_OUTPUT

pytestmark = [pytest.mark.apiserver, pytest.mark.engine]

PROM = "http://prometheus.monitoring.svc:9090"
KEDA_CRDS = ("scaledobjects.keda.sh", "scaledjobs.keda.sh", "triggerauthentications.keda.sh",
             "clustertriggerauthentications.keda.sh")


@pytest.fixture(scope="module")
def keda_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPIServer]:
    with own_apiserver(tmp_path_factory.mktemp("keda-apiserver")) as server:
        yield server


def scaled_stack(es: EngineStack, server: KubeAPIServer) -> tuple[str, dict[str, Any]]:
    model = {k: v for k, v in CPU_MODELS[0].items() if k != "replicas"}
    model["scaling"] = {"minReplicas": 1, "maxReplicas": 2}
    serving = target_config(es, server, "vllm", models=[model])

    def with_keda(config: dict[str, Any]) -> None:
        config["tkf-infra:platform"]["keda"] = {"version": "v2.18.0"}
        config["tkf-infra:prometheusUrl"] = PROM

    es.edit_config(with_keda)
    return serving, model


def test_up_installs_keda_and_the_scaled_model_is_accepted_in_the_same_run(
    keda_server: KubeAPIServer, lean_engine_env: dict[str, str], make_stack: Callable[..., EngineStack],
) -> None:
    es = make_stack(extra_env=lean_engine_env)
    serving, model = scaled_stack(es, keda_server)
    with keda_server.client() as kube:
        assert "keda.sh" not in kube.text("/apis"), "a fresh server serves no KEDA API"
        started = time.monotonic()
        up = es.stack.up()
        up_seconds = time.monotonic() - started
        assert up.summary.result == "succeeded"
        rejected = up.outputs.get(REJECTED_OUTPUT)
        assert not (rejected.value if rejected else None), rejected

        for name in KEDA_CRDS:
            crd = kube.get(CRD_API, "CustomResourceDefinition", name)
            assert crd is not None, name
            assert {c["type"]: c["status"] for c in crd["status"]["conditions"]}["Established"] == "True"
        served = {r["kind"] for r in kube.request("GET", "/apis/keda.sh/v1alpha1")["resources"]}
        assert {"ScaledObject", "ScaledJob", "TriggerAuthentication", "ClusterTriggerAuthentication"} <= served
        operator = kube.get("apps/v1", "Deployment", "keda-operator", KEDA_NAMESPACE)
        assert operator is not None
        assert operator["spec"]["template"]["spec"]["containers"][0]["image"] == "ghcr.io/kedacore/keda:2.18.0"

        scaled = kube.get("keda.sh/v1alpha1", "ScaledObject", names.workload(model["name"]), serving)
        assert scaled is not None, "our ScaledObject is on the server"
        assert (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]) == (1, 2)
        assert scaled["spec"]["scaleTargetRef"]["name"] == names.workload(model["name"])
        assert scaled["spec"]["triggers"][0]["metadata"]["serverAddress"] == PROM

        # The installed CRD is KEDA's release CRD, not the bare controller-gen one in tests/data/crds: its
        # kustomize patch bounds the HPA's stabilization windows to 0-3600 s (kedacore/keda#4976), so a
        # cool-down above an hour is refused by the server.
        long = copy.deepcopy(scaled)
        long["metadata"] = {"name": "cooldown-over-an-hour", "namespace": serving}
        long["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"][
            "stabilizationWindowSeconds"] = 3601
        with pytest.raises(KubeAPIError) as refused:
            kube.create(long)
        assert refused.value.status_code == 422 and "stabilizationWindowSeconds" in refused.value.message
        assert "less than or equal to 3600" in refused.value.message

        # KEDA's metrics APIService has no backend here: the group is listed, unavailable, and the
        # provider's discovery (the preview below) does not trip over it.
        api = kube.get("apiregistration.k8s.io/v1", "APIService", "v1beta1.external.metrics.k8s.io")
        assert api is not None
        available = {c["type"]: c["status"] for c in api.get("status", {}).get("conditions", [])}.get("Available")
        assert available == "False"
        assert "external.metrics.k8s.io" in kube.text("/apis")
        with pytest.raises(KubeAPIError) as unavailable:
            kube.request("GET", "/apis/external.metrics.k8s.io/v1beta1")
        assert unavailable.value.status_code == 503
        started = time.monotonic()
        again = es.stack.preview()
        preview_seconds = time.monotonic() - started
        changes = {k: v for k, v in again.change_summary.items() if k != "same"}
        assert changes == {}, changes
        print(f"\nKEDA on the test server: up {up_seconds:.1f} s, second preview {preview_seconds:.1f} s, "
              f"external.metrics APIService Available={available}")
