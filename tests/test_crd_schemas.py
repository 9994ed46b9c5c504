"""Every custom resource the program emits validates against the real CRD schema; core kinds
validate offline with kubernetes-validate. A typo in a field path (which the API server would
reject, or silently prune) fails here instead of on the cluster."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.mocks import CPU, MULTI_NODE, SINGLE_GPU, TP4, Registered, program, prune_nulls, stack_doc, unwrap_secrets

# The CRDs of the charts the platform installs (components/data/charts/, at the pinned versions).
CHARTS = Path(__file__).resolve().parent.parent / "components" / "data" / "charts"
CRD_FILES = {
    ("serving.kserve.io", "LLMInferenceService"):
        "kserve-v0.20.0/kserve-llmisvc-crd/templates/serving.kserve.io_llminferenceservices.yaml",
    ("serving.kserve.io", "LLMInferenceServiceConfig"):
        "kserve-v0.20.0/kserve-llmisvc-crd/templates/serving.kserve.io_llminferenceserviceconfigs.yaml",
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"):
        "lws-v0.8.0/lws/crds/leaderworkerset.x-k8s.io_leaderworkersets.yaml",
}
K8S_VERSION = kubernetes_validate.latest_version()


@functools.cache
def crd_validator(group: str, kind: str, version: str) -> Any:
    """A validator on the CRD's structural schema (built once: the KServe schemas are 2.7 MB, and
    ``jsonschema.validate`` would re-check the whole schema on every call)."""
    doc = yaml.load((CHARTS / CRD_FILES[(group, kind)]).read_text(), Loader=yaml.CSafeLoader)
    match = [v for v in doc["spec"]["versions"] if v["name"] == version]
    assert match, f"{kind} has no version {version}"
    return jsonschema.Draft7Validator(match[0]["schema"]["openAPIV3Schema"])


def pruned_fields(obj: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Fields the API server would silently drop (structural pruning): jsonschema accepts unknown
    keys, so a misspelt field path would otherwise pass unnoticed."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    out: list[str] = []
    if isinstance(obj, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, value in obj.items():
            if props is not None and key in props:
                out += pruned_fields(value, props[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                out += pruned_fields(value, extra, f"{path}.{key}")
            elif props is not None:
                out.append(f"{path}.{key}")
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, value in enumerate(obj):
            out += pruned_fields(value, schema["items"], f"{path}[{i}]")
    return out


def emitted(backend: str) -> list[Registered]:
    models = [SINGLE_GPU, TP4, MULTI_NODE, CPU]
    h = program(stack_doc(*models, backend=backend, installed=False), api_key="k")
    assert h.error is None, h.error
    return [r for r in h.resources if r.custom and r.type.startswith("kubernetes:") and "helm.sh" not in r.type
            and "yaml/v2" not in r.type]


@pytest.fixture(scope="module", params=["kserve", "vllm"])
def objects(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return [prune_nulls(unwrap_secrets(r.manifest())) for r in emitted(request.param)]


def test_custom_resources_match_the_crd_schema(objects: list[dict[str, Any]]) -> None:
    custom = [o for o in objects if "/" in o["apiVersion"] and o["apiVersion"].split("/")[0] in
              {"serving.kserve.io", "leaderworkerset.x-k8s.io"}]
    assert custom, "no custom resources emitted"
    for obj in custom:
        group, version = obj["apiVersion"].split("/")
        validator = crd_validator(group, obj["kind"], version)
        validator.validate(obj)
        assert pruned_fields(obj, validator.schema) == [], f"{obj['kind']} {obj['metadata']['name']}"
        # CEL rule the schema carries but jsonschema cannot check.
        assert not ("replicas" in obj["spec"] and "scaling" in obj["spec"])


def test_core_kinds_validate_offline(objects: list[dict[str, Any]]) -> None:
    core = [o for o in objects if o["kind"] in
            {"Namespace", "Secret", "Service", "ServiceAccount", "PersistentVolumeClaim", "Job", "Deployment",
             "NetworkPolicy", "ConfigMap"}]
    assert {o["kind"] for o in core} >= {"Namespace", "Service", "PersistentVolumeClaim", "Job", "NetworkPolicy"}
    for obj in core:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_schema_checks_catch_bad_values_and_misspelt_fields() -> None:
    validator = crd_validator("serving.kserve.io", "LLMInferenceService", "v1alpha2")
    bad = {"apiVersion": "serving.kserve.io/v1alpha2", "kind": "LLMInferenceService", "metadata": {"name": "x"},
           "spec": {"model": {"uri": "hf://a/b"}, "parallelism": {"tensor": 0}}}
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(bad)
    misspelt = {"apiVersion": "serving.kserve.io/v1alpha2", "kind": "LLMInferenceService", "metadata": {"name": "x"},
                "spec": {"model": {"uri": "hf://a/b"}, "parallelism": {"tensorParallel": 2}}}
    assert pruned_fields(misspelt, validator.schema) == [".spec.parallelism.tensorParallel"]


PROMETHEUS_RULE_CRD = (Path(__file__).resolve().parent / "data" / "crds"
                       / "monitoring.coreos.com_prometheusrules-v0.94.1.yaml")


def test_the_prometheus_rule_matches_prometheus_operators_crd() -> None:
    """`platform.dashboards`' PrometheusRule against prometheus-operator v0.94.1's schema (tests/data/SOURCES.md),
    pruning included: a misspelt `for` or annotation key would be dropped by the API server."""
    doc = stack_doc(SINGLE_GPU, backend="kserve", installed=False)
    doc["platform"]["dashboards"] = {}
    h = program(doc, api_key="k")
    assert h.error is None, h.error
    (rule,) = [prune_nulls(r.manifest()) for r in h.resources if r.inputs.get("kind") == "PrometheusRule"]
    crd = yaml.safe_load(PROMETHEUS_RULE_CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == rule["apiVersion"].split("/")[1]]
    validator = jsonschema.Draft7Validator(version["schema"]["openAPIV3Schema"])
    validator.validate(rule)
    assert pruned_fields(rule, validator.schema) == []
    bad = {**rule, "spec": {"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "up", "fro": "5m"}]}]}}
    assert pruned_fields(bad, validator.schema) == [".spec.groups[0].rules[0].fro"]
