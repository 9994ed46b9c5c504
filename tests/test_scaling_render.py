"""What an autoscaled model renders on each backend, checked against the real CRD schemas (docs/scaling.md):
KServe v0.20.0's LLMInferenceService `spec.scaling`, and on the vllm backend KEDA v2.18.0's ScaledObject."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pulumi
import pytest
import yaml

from tests.mocks import CPU, SINGLE_GPU, program, prune_nulls, stack_doc, unwrap_secrets
from tests.test_crd_schemas import K8S_VERSION, crd_validator, pruned_fields
from tkf_infra import vllm_metrics as vm

KEDA_CRD = Path(__file__).resolve().parent / "data" / "crds" / "keda.sh_scaledobjects-v2.18.0.yaml"
PROM = "http://prometheus.monitoring.svc:9090"
SCALED = dict(SINGLE_GPU, scaling={"minReplicas": 2, "maxReplicas": 6, "metric": "kvCacheUsage", "target": 0.75,
                                   "cooldownSeconds": 120, "pollingSeconds": 10})


#: KEDA's release as tkf-infra installs it (platform.keda): its ScaledObject CRD carries the kustomize patches
#: the bare CRD file lacks (e.g. the stabilization window's 3600 s maximum).
KEDA_RELEASE = (Path(__file__).resolve().parents[1] / "components" / "data" / "charts" / "keda-v2.18.0"
                / "keda-2.18.0.yaml")


@functools.cache
def keda_validator() -> Any:
    (doc,) = [d for d in yaml.load_all(KEDA_RELEASE.read_text(), Loader=yaml.CSafeLoader)
              if d and d.get("kind") == "CustomResourceDefinition" and d["metadata"]["name"] == "scaledobjects.keda.sh"]
    (version,) = [v for v in doc["spec"]["versions"] if v["name"] == "v1alpha1"]
    return jsonschema.Draft7Validator(version["schema"]["openAPIV3Schema"])


def rendered(backend: str, *models: dict[str, Any]) -> list[dict[str, Any]]:
    h = program(stack_doc(*models, backend=backend, installed=False, prometheusUrl=PROM), api_key="k")
    assert h.error is None, h.error
    return [prune_nulls(unwrap_secrets(r.manifest())) for r in h.resources if r.custom
            and r.type.startswith("kubernetes:") and "helm.sh" not in r.type and "yaml/v2" not in r.type]


def of_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def test_kserve_renders_spec_scaling_through_wva_and_keda_and_no_replicas() -> None:
    objects = rendered("kserve", SCALED, dict(CPU, replicas=2))
    services = of_kind(objects, "LLMInferenceService")
    scaled, fixed = services["qwen3-8b"]["spec"], services["tiny"]["spec"]
    assert "replicas" not in scaled and fixed["replicas"] == 2 and "scaling" not in fixed
    assert scaled["scaling"]["minReplicas"] == 2 and scaled["scaling"]["maxReplicas"] == 6
    keda = scaled["scaling"]["wva"]["keda"]
    assert keda["pollingInterval"] == 10
    assert "advanced" not in keda, "KServe v0.20.0's CEL rules refuse `advanced` (components/autoscaling.py)"
    assert keda["initialCooldownPeriod"] > 600, "the start-up budget, so the first load is not idleness"
    for obj in services.values():
        validator = crd_validator("serving.kserve.io", "LLMInferenceService", "v1alpha2")
        validator.validate(obj)
        assert pruned_fields(obj, validator.schema) == []
    assert not of_kind(objects, "ScaledObject"), "KServe writes its own ScaledObject from spec.scaling"


def test_vllm_renders_a_scaled_object_on_the_deployment_with_vllms_own_signal() -> None:
    objects = rendered("vllm", SCALED, dict(CPU, replicas=2))
    deployments = of_kind(objects, "Deployment")
    assert "replicas" not in deployments["qwen3-8b"]["spec"], "the HPA KEDA writes owns the count"
    assert deployments["tiny"]["spec"]["replicas"] == 2
    (so,) = of_kind(objects, "ScaledObject").values()
    assert so["apiVersion"] == "keda.sh/v1alpha1" and so["metadata"]["name"] == "qwen3-8b"
    spec = so["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "qwen3-8b"}
    assert (spec["minReplicaCount"], spec["maxReplicaCount"], spec["pollingInterval"]) == (2, 6, 10)
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    assert trigger["metadata"] == {
        "serverAddress": PROM, "threshold": "0.75",
        "query": f'sum({vm.KV_CACHE_USAGE}{{namespace="llm-serving",model_name="qwen3-8b"}})'}
    keda_validator().validate(so)
    assert pruned_fields(so, keda_validator().schema) == []
    kubernetes_validate.validate(deployments["qwen3-8b"], K8S_VERSION, strict=True)


def test_default_signal_is_the_queue() -> None:
    objects = rendered("vllm", dict(SINGLE_GPU, scaling={"maxReplicas": 3}))
    (so,) = of_kind(objects, "ScaledObject").values()
    (trigger,) = so["spec"]["triggers"]
    assert trigger["metadata"]["query"].startswith(f"sum({vm.WAITING}{{")
    assert trigger["metadata"]["threshold"] == "2" and so["spec"]["minReplicaCount"] == 1


def test_the_keda_schema_check_catches_a_misspelt_field() -> None:
    objects = rendered("vllm", dict(SINGLE_GPU, scaling={"maxReplicas": 3}))
    (so,) = of_kind(objects, "ScaledObject").values()
    so["spec"]["maxReplicas"] = so["spec"].pop("maxReplicaCount")
    assert pruned_fields(so, keda_validator().schema) == [".spec.maxReplicas"]
    del so["spec"]["triggers"]
    try:
        keda_validator().validate(so)
    except jsonschema.ValidationError as exc:
        assert "'triggers' is a required property" in str(exc)
    else:
        raise AssertionError("a ScaledObject without triggers must fail the schema")


def test_the_endpoint_publishes_the_range_the_plan_reserved(monkeypatch: pytest.MonkeyPatch) -> None:
    exported: dict[str, Any] = {}
    monkeypatch.setattr(pulumi, "export", lambda name, value: exported.__setitem__(name, value))
    h = program(stack_doc(SCALED, CPU, prometheusUrl=PROM), api_key="k")
    assert h.error is None, h.error
    endpoints = exported["endpoints"]
    published = dict(endpoints["qwen3-8b"]["scaling"])
    cold = published.pop("coldStartSeconds")
    assert published == {"minReplicas": 2, "maxReplicas": 6, "reservedReplicas": 6,
                         "metric": "kvCacheUsage", "target": 0.75, "cooldownSeconds": 120}
    # The bound on a new replica: at least the startup probe's whole budget, below `up`'s wait for a first
    # start (that one includes the weight download, which a replica on the cache PVC does not pay).
    from components import pod_sizes
    from tests.test_admission import planned

    (m,) = [m for m in planned(stack_doc(SCALED, prometheusUrl=PROM)).models if m.entry.name == "qwen3-8b"]
    budget = pod_sizes.startup_failure_threshold(m.entry, m.weight_bytes) * pod_sizes.PROBE_PERIOD_SECONDS
    assert budget < cold < pod_sizes.ready_timeout_seconds(m.entry, m.weight_bytes)
    assert endpoints["qwen3-8b"]["replicas"] == 2 and "scaling" not in endpoints["qwen2.5-0.5b"]


@pytest.mark.parametrize("backend", ["kserve", "vllm"])
def test_the_policy_pack_counts_an_autoscaled_model_at_its_maximum(backend: str) -> None:
    """6 replicas x 1 GPU at most: a 5-GPU ceiling refuses it although it starts at 2 (fails closed here too)."""
    from tests.policy_helpers import build, objects, run_guardrail, workload

    objs = objects(build(stack_doc(SCALED, backend=backend, prometheusUrl=PROM), api_key="k"))
    w = workload(objs, "qwen3-8b")
    assert run_guardrail("model-gpu-ceiling", [w], {"defaultMaxGpus": 6}) == []
    (violation,) = run_guardrail("model-gpu-ceiling", [w], {"defaultMaxGpus": 5})
    assert "takes 6 GPUs (replicas x GPUs per replica)" in violation.message


def test_status_shows_the_replicas_the_autoscaler_asks_against_the_range() -> None:
    """`status` (lifecycle): desired is what KEDA's HPA set on the Deployment, beside the published range."""
    import httpx

    from tkf_infra.live.lifecycle import read_lifecycle, render_table

    deployment = {"spec": {"replicas": 3}, "status": {"readyReplicas": 2}}

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/apis/apps/v1/namespaces/llm-serving/deployments/qwen3-8b":
            return httpx.Response(200, json=deployment)
        if request.url.path == "/api/v1/namespaces/llm-serving/pods":
            return httpx.Response(200, json={"items": []})
        return httpx.Response(404, json={})

    endpoint = {"name": "qwen3-8b", "namespace": "llm-serving", "model": "Qwen/Qwen3-8B@" + "0" * 40,
                "scaling": {"minReplicas": 1, "maxReplicas": 4}}
    with httpx.Client(transport=httpx.MockTransport(answer), base_url="https://k") as client:
        (row,) = read_lifecycle(client, [endpoint])
        (fixed,) = read_lifecycle(client, [{k: v for k, v in endpoint.items() if k != "scaling"}])
    assert row.to_json()["replicas"] == {"desired": 3, "ready": 2, "min": 1, "max": 4}
    assert row.phase.value == "Degraded" and "2/3 (1-4)" in render_table([row])
    assert fixed.to_json()["replicas"] == {"desired": 3, "ready": 2} and "(1-4)" not in render_table([fixed])


def test_scale_to_zero_on_vllm_wakes_on_the_gateways_requests_and_publishes_its_cold_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """At zero no vLLM exists to count anything: a second trigger reads the gateway's request counter for the
    model's served name (regex-safe), KEDA's cooldownPeriod is the catalog's cool-down, and the published cold
    start grows with the stack's scrape interval."""
    from tkf_infra import gateway_metrics as gm
    from tkf_infra.gateway_metrics import retries_spanning

    zero = dict(SINGLE_GPU, servedName="qwen3.8b", scaling={"minReplicas": 0, "maxReplicas": 3,
                                                            "cooldownSeconds": 600, "pollingSeconds": 20})
    (so,) = of_kind(rendered("vllm", zero), "ScaledObject").values()
    spec = so["spec"]
    assert (spec["minReplicaCount"], spec["cooldownPeriod"]) == (0, 600)
    vllm_signal, wake = spec["triggers"]
    assert vllm_signal["metadata"]["query"].startswith(f"sum({vm.WAITING}{{")
    assert wake["name"] == "gatewayrequests" and wake["metricType"] == "AverageValue"
    assert (wake["metadata"]["threshold"], wake["metadata"]["activationThreshold"]) == ("1", "0")
    series = f'{gm.REQUESTS}{{namespace="llm-gateway",{gm.MODEL_LABEL}=~"qwen3[.]8b"}}'
    # 2 scrapes of 30 s (the default scrapeSeconds) and one 20 s poll: no request falls between two reads.
    assert wake["metadata"]["query"] == (f"clamp_max((sum(increase({series}[80s])) or vector(0)) + "
                                         f"(count({series} unless {series} offset 80s) or vector(0)), 1)")
    keda_validator().validate(so)
    assert pruned_fields(so, keda_validator().schema) == []

    def cold_start(**serving: Any) -> int:
        exported: dict[str, Any] = {}
        monkeypatch.setattr(pulumi, "export", lambda name, value: exported.__setitem__(name, value))
        h = program(stack_doc(zero, backend="vllm", prometheusUrl=PROM, serving=serving), api_key="k")
        assert h.error is None, h.error
        (endpoint,) = exported["endpoints"].values()
        assert endpoint["replicas"] == 0 and endpoint["scaling"]["minReplicas"] == 0
        assert [m["model_name"] for m in exported["gatewayModelList"]] == ["qwen3.8b"], "kept in the gateway's list"
        value: int = endpoint["scaling"]["coldStartSeconds"]
        (listed,) = exported["gatewayModelList"]
        assert listed["litellm_params"]["num_retries"] == retries_spanning(value), "holds the waking request"
        return value

    assert cold_start(scrapeSeconds=90) - cold_start() == 60
    kept: dict[str, Any] = {}
    monkeypatch.setattr(pulumi, "export", lambda name, value: kept.__setitem__(name, value))
    assert program(stack_doc(SCALED, backend="vllm", prometheusUrl=PROM), api_key="k").error is None
    assert "num_retries" not in kept["gatewayModelList"][0]["litellm_params"], "a model kept up needs none"


def test_the_retries_span_litellms_backoff() -> None:
    """LiteLLM's retry i sleeps min(0.5 x 2^i, 8) s (plus jitter): the count is the fewest whose sleeps cover."""
    from tkf_infra.gateway_metrics import retries_spanning

    def slept(n: int) -> float:
        return float(sum(min(0.5 * 2.0 ** i, 8.0) for i in range(n)))

    for seconds in (0.4, 1, 7.5, 15.5, 16, 100, 435, 1200):
        n = retries_spanning(seconds)
        assert slept(n) >= seconds > slept(n - 1), seconds


def test_the_gateway_config_turns_on_the_metrics_that_wake_a_model_at_zero() -> None:
    from tkf_infra.gateway_metrics import gateway_settings

    assert gateway_settings({"a": {"scaling": {"minReplicas": 0}}, "b": {}}) == {
        "litellm_settings": {"callbacks": ["prometheus"]}}
    assert gateway_settings({"a": {"scaling": {"minReplicas": 1}}, "b": {}}) == {}


def test_a_cool_down_past_keda_s_hour_is_refused_at_load_and_the_hour_itself_renders() -> None:
    """KEDA's ScaledObject caps the HPA's stabilization window at 3600 s: the catalog says so by name rather
    than the API server refusing the object at `up`."""
    from tests.test_settings import only_problem, with_model

    msg = only_problem(with_model(scaling={"maxReplicas": 2, "cooldownSeconds": 3601}))
    assert "cooldownSeconds 3601 is above 3600" in msg and "set at most 3600" in msg
    (so,) = of_kind(rendered("vllm", dict(SINGLE_GPU, scaling={"maxReplicas": 2, "cooldownSeconds": 3600})),
                    "ScaledObject").values()
    keda_validator().validate(so)
    behavior = so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    behavior["scaleDown"]["stabilizationWindowSeconds"] = 3601
    with pytest.raises(jsonschema.ValidationError, match="3601 is greater than the maximum of 3600"):
        keda_validator().validate(so)
