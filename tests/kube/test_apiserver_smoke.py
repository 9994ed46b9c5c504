"""Smoke test of tkf-kube-apiserver: a real API server, not a schema copy.

Each check needs something only a real control plane does: version stamping, server-side apply and
CRD establishment, the namespace controller finishing a namespace deletion, and KServe's own CEL
rules (x-kubernetes-validations) enforced by admission with the CRD author's message.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kube.apiserver import BINARY_ENV, BUILD_HINT, KubeAPIServer, require_binary
from tests.kube.client import KubeAPIError, KubeClient

ROOT = Path(__file__).parents[2]
GO_MOD = ROOT / "tools" / "kube-apiserver" / "go.mod"
CHARTS = ROOT / "components" / "data" / "charts"  # the CRDs of the charts the platform installs
CRDS = {
    "llminferenceservices.serving.kserve.io":
        CHARTS / "kserve-v0.20.0" / "kserve-llmisvc-crd" / "templates" / "serving.kserve.io_llminferenceservices.yaml",
    "leaderworkersets.leaderworkerset.x-k8s.io":
        CHARTS / "lws-v0.8.0" / "lws" / "crds" / "leaderworkerset.x-k8s.io_leaderworkersets.yaml",
}
CEL_MESSAGE = "replicas and scaling are mutually exclusive"
LLMISVC_API = "serving.kserve.io/v1alpha2"  # the storage version: no conversion webhook involved


def test_missing_binary_fails_with_the_build_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(BINARY_ENV, str(tmp_path / "absent"))
    with pytest.raises(pytest.fail.Exception, match=re.escape("scripts/build_kube_apiserver.sh")):
        require_binary()
    assert "scripts/build_kube_apiserver.sh" in BUILD_HINT


@pytest.mark.apiserver
def test_version_is_the_pinned_kubernetes(kube_apiserver: KubeAPIServer, kube: KubeClient) -> None:
    pinned = re.search(r"^\s*(?:require\s+)?k8s\.io/kubernetes (v1\.(\d+)\.\d+)$", GO_MOD.read_text(), re.M)
    assert pinned, f"no k8s.io/kubernetes pin in {GO_MOD}"
    version = kube.request("GET", "/version")
    # The Pulumi provider reads major/minor; unstamped builds report "" and v0.0.0-master.
    assert (version["gitVersion"], version["major"], version["minor"]) == (pinned[1], "1", pinned[2])
    assert kube_apiserver.server.startswith("https://127.0.0.1:")


@pytest.fixture(scope="module")
def crds(kube: KubeClient) -> dict[str, Any]:
    """Apply the real CRDs with server-side apply and wait until the server serves them."""
    applied = {}
    for name, path in CRDS.items():
        crd = yaml.load(path.read_text(), Loader=yaml.CSafeLoader)
        assert crd["metadata"]["name"] == name
        applied[name] = kube.apply(crd)
        kube.wait_crd_served(crd, timeout=120)
    return applied


@pytest.mark.apiserver
def test_crds_are_established_and_served(kube: KubeClient, crds: dict[str, Any]) -> None:
    for name, crd in crds.items():
        managers = {m["manager"]: m["operation"] for m in crd["metadata"]["managedFields"]}
        assert managers.get("tkf-tests") == "Apply", f"{name} was not server-side applied: {managers}"
    assert kube.resource(LLMISVC_API, "LLMInferenceService").namespaced
    assert kube.resource("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet").plural == "leaderworkersets"


@pytest.mark.apiserver
def test_namespace_deletion_completes(kube: KubeClient, crds: dict[str, Any]) -> None:
    ns = "smoke-ns-delete"
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    kube.apply(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": ns}, "data": {"k": "v"}}
    )
    assert kube.get("v1", "ConfigMap", "cm", ns)["data"] == {"k": "v"}  # type: ignore[index]
    kube.apply(_llmisvc(ns, "ok", scaling=False))  # a custom object the namespace controller must delete too

    kube.delete("v1", "Namespace", ns)
    # The `kubernetes` finalizer keeps the namespace Terminating until the namespace controller
    # has deleted every object in it and removed the finalizer.
    seconds = kube.wait_gone("v1", "Namespace", ns, timeout=90)
    assert kube.get("v1", "ConfigMap", "cm", ns) is None
    print(f"namespace deleted in {seconds:.1f}s")


@pytest.mark.apiserver
def test_foreground_delete_cascades(kube: KubeClient, kube_namespace: str) -> None:
    # Foreground deletion (the Pulumi provider's default) puts a `foregroundDeletion` finalizer on
    # the owner that only the garbage-collector controller removes, after deleting the dependents.
    # (Dependents of a *custom* kind are only seen once the GC re-reads discovery — every 30 s,
    # hard-coded upstream — so right after a CRD is created they may outlive the owner that long.)
    def configmap(name: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": kube_namespace}}

    owner = kube.apply(configmap("owner"))
    dependent = configmap("dependent")
    dependent["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": "owner",
            "uid": owner["metadata"]["uid"],
            "blockOwnerDeletion": True,
        }
    ]
    kube.apply(dependent)

    kube.delete("v1", "ConfigMap", "owner", kube_namespace, propagation="Foreground")
    # Without the GC controller the owner would keep its foregroundDeletion finalizer forever.
    seconds = kube.wait_gone("v1", "ConfigMap", "owner", kube_namespace, timeout=90)
    assert kube.get("v1", "ConfigMap", "dependent", kube_namespace) is None  # blockOwnerDeletion: gone first
    print(f"foreground delete with a dependent took {seconds:.1f}s")


@pytest.mark.apiserver
def test_all_objects_reads_back_a_namespace(kube: KubeClient, crds: dict[str, Any], kube_namespace: str) -> None:
    kube.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": kube_namespace}})
    kube.apply(_llmisvc(kube_namespace, "svc", scaling=False))
    found = {
        key: sorted(o["metadata"]["name"] for o in items) for key, items in kube.all_objects(kube_namespace).items()
    }
    # ["cm"] only: kube-root-ca.crt would need the root-ca-cert-publisher controller, which does not run.
    assert found["v1/ConfigMap"] == ["cm"]
    assert found[f"{LLMISVC_API}/LLMInferenceService"] == ["svc"]
    assert "v1/Namespace" not in found  # cluster-scoped kinds are not "in" a namespace


@pytest.mark.apiserver
def test_kserve_cel_rule_is_enforced(kube: KubeClient, crds: dict[str, Any], kube_namespace: str) -> None:
    # The same object without the conflict is accepted: the refusal below is the CEL rule, not
    # some other schema problem in the test's object.
    kube.apply(_llmisvc(kube_namespace, "valid", scaling=True, replicas=False))
    with pytest.raises(KubeAPIError) as refused:
        kube.apply(_llmisvc(kube_namespace, "conflict", scaling=True, replicas=True))
    assert refused.value.status_code == 422, refused.value
    assert refused.value.reason == "Invalid"
    assert CEL_MESSAGE in refused.value.message
    assert kube.get(LLMISVC_API, "LLMInferenceService", "conflict", kube_namespace) is None
    assert [o["metadata"]["name"] for o in kube.list_objects(LLMISVC_API, "LLMInferenceService", kube_namespace)] == [
        "valid"
    ]


def _llmisvc(namespace: str, name: str, scaling: bool, replicas: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"model": {"uri": "hf://Qwen/Qwen3-0.6B"}}
    if replicas:
        spec["replicas"] = 1
    if scaling:
        spec["scaling"] = {"minReplicas": 1, "maxReplicas": 2, "wva": {"hpa": {}}}
    return {
        "apiVersion": LLMISVC_API,
        "kind": "LLMInferenceService",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
