"""The scaling objects of both backends, as rendered, accepted by a real API server (docs/scaling.md).

Why a real server: the schemas here are checked offline too (tests/test_scaling_render.py), but only
the server runs KServe's CEL rules on `spec.scaling` and prunes what its structural schema lacks; the
read-back shows nothing we render is dropped. KEDA's CRD (v2.18.0, tests/data/crds) stands in for a KEDA
installation, and no KEDA controller runs here; tkf-infra's own install (`platform.keda`) is
tests/kube/platform/test_keda_on_apiserver.py.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kube.client import KubeAPIError, KubeClient
from tests.kube.test_apiserver_smoke import CRDS, LLMISVC_API
from tests.test_scaling_render import KEDA_CRD, SCALED, of_kind, rendered

KEDA_API = "keda.sh/v1alpha1"


@pytest.fixture(scope="module")
def scaling_crds(kube: KubeClient) -> None:
    for path in (Path(CRDS["llminferenceservices.serving.kserve.io"]), KEDA_CRD):
        crd = yaml.load(path.read_text(), Loader=yaml.CSafeLoader)
        kube.apply(crd)
        kube.wait_crd_served(crd, timeout=120)


def _into(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"] = {k: v for k, v in out["metadata"].items() if k in ("name", "labels", "annotations")}
    out["metadata"]["namespace"] = namespace
    return out


@pytest.mark.apiserver
def test_kserve_spec_scaling_is_accepted_and_stored_whole(kube: KubeClient, scaling_crds: None,
                                                          kube_namespace: str) -> None:
    (svc,) = [o for name, o in of_kind(rendered("kserve", SCALED), "LLMInferenceService").items()]
    stored = kube.apply(_into(svc, kube_namespace))
    assert stored["spec"]["scaling"] == svc["spec"]["scaling"] | {"wva": {**svc["spec"]["scaling"]["wva"],
                                                                         "variantCost": "10.0"}}, "nothing pruned"
    assert "replicas" not in stored["spec"]
    # The server's own CEL rule agrees with the catalog's (tkf_infra/config/scaling.py): min above max is refused.
    bad = _into(svc, kube_namespace)
    bad["metadata"]["name"] = "min-above-max"
    bad["spec"]["scaling"]["minReplicas"] = bad["spec"]["scaling"]["maxReplicas"] + 1
    with pytest.raises(KubeAPIError) as refused:
        kube.apply(bad)
    assert refused.value.status_code == 422 and "minReplicas cannot exceed maxReplicas" in refused.value.message
    # And `replicas` beside `scaling`, which the renderer never writes, is refused by the CRD's rule.
    both = _into(svc, kube_namespace)
    both["metadata"]["name"] = "both"
    both["spec"]["replicas"] = 2
    with pytest.raises(KubeAPIError) as exclusive:
        kube.apply(both)
    assert "replicas and scaling are mutually exclusive" in exclusive.value.message
    assert kube.get(LLMISVC_API, "LLMInferenceService", "both", kube_namespace) is None
    # Why the cool-down is not passed on KServe (components/autoscaling.py): v0.20.0's CEL rules on wva.keda
    # read advanced.scalingModifiers and horizontalPodAutoscalerConfig.name without has(), so an HPA behaviour
    # alone is refused. If a KServe bump fixes it, this fails and the renderer can pass cooldownSeconds.
    cooled = _into(svc, kube_namespace)
    cooled["metadata"]["name"] = "cooled"
    cooled["spec"]["scaling"]["wva"]["keda"]["advanced"] = {"horizontalPodAutoscalerConfig": {"behavior": {
        "scaleDown": {"stabilizationWindowSeconds": 60}}}}
    with pytest.raises(KubeAPIError) as no_key:
        kube.apply(cooled)
    assert "no such key: scalingModifiers" in no_key.value.message


@pytest.mark.apiserver
def test_vllm_scaled_object_and_its_deployment_are_accepted(kube: KubeClient, scaling_crds: None,
                                                            kube_namespace: str) -> None:
    objects = rendered("vllm", SCALED)
    (so,) = of_kind(objects, "ScaledObject").values()
    deployment = of_kind(objects, "Deployment")["qwen3-8b"]
    stored_deployment = kube.apply(_into(deployment, kube_namespace))
    assert stored_deployment["spec"]["replicas"] == 1, "the server's default until KEDA's HPA sets the count"
    stored = kube.apply(_into(so, kube_namespace))
    assert stored["apiVersion"] == KEDA_API
    assert stored["spec"] == so["spec"], "nothing pruned"
    assert stored["spec"]["scaleTargetRef"]["name"] == stored_deployment["metadata"]["name"]
    # A misspelt field is refused by server-side apply (as the provider applies), so a rename on our side
    # cannot pass unnoticed here either.
    typo = _into(so, kube_namespace)
    typo["metadata"]["name"] = "typo"
    typo["spec"]["maxReplicas"] = typo["spec"].pop("maxReplicaCount")
    with pytest.raises(KubeAPIError) as undeclared:
        kube.apply(typo)
    assert ".spec.maxReplicas: field not declared in schema" in undeclared.value.message
    no_triggers = _into(so, kube_namespace)
    no_triggers["metadata"]["name"] = "no-triggers"
    del no_triggers["spec"]["triggers"]
    with pytest.raises(KubeAPIError) as refused:
        kube.apply(no_triggers)
    assert refused.value.status_code == 422 and "triggers" in refused.value.message


@pytest.mark.apiserver
def test_scale_to_zero_objects_are_accepted_and_kserve_refuses_a_zero_floor(kube: KubeClient, scaling_crds: None,
                                                                           kube_namespace: str) -> None:
    """vllm: the ScaledObject at zero (KEDA's cooldownPeriod, the gateway wake trigger) stored whole. kserve:
    the server's own schema refuses minReplicas 0, which is why the plan refuses it there by name."""
    zero = dict(SCALED, scaling={"minReplicas": 0, "maxReplicas": 6, "metric": "kvCacheUsage", "target": 0.75})
    (so,) = of_kind(rendered("vllm", zero), "ScaledObject").values()
    stored = kube.apply(_into(so, kube_namespace))
    assert stored["spec"] == so["spec"], "nothing pruned"
    assert stored["spec"]["minReplicaCount"] == 0 and [t["name"] for t in stored["spec"]["triggers"]] == [
        "kvcacheusage", "gatewayrequests"]
    (svc,) = of_kind(rendered("kserve", SCALED), "LLMInferenceService").values()
    at_zero = _into(svc, kube_namespace)
    at_zero["metadata"]["name"] = "at-zero"
    at_zero["spec"]["scaling"]["minReplicas"] = 0
    with pytest.raises(KubeAPIError) as refused:
        kube.apply(at_zero)
    assert refused.value.status_code == 422 and "spec.scaling.minReplicas" in refused.value.message
