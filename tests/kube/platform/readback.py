"""What the API server stored, checked against what the program and the charts meant.

Shared by the tests of this package: models (workloads, Services, NetworkPolicies, secrets) and
the platform (CRDs as the charts ship them, controllers, presets, the objects each option sets).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import yaml

from components.fleet import API_KEY_SECRET, API_KEY_SECRET_KEY
from tests.kube.client import KubeAPIError, KubeClient
from tkf_infra import names

CHARTS = names.PROJECT_ROOT / "components" / "data" / "charts"
LLMISVC = "serving.kserve.io/v1alpha2"
LWS = "leaderworkerset.x-k8s.io/v1"
CRD_API = "apiextensions.k8s.io/v1"
GATEWAY_NS, MONITORING_NS = "llm-gateway", "monitoring"
H100_LABELS = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "tkf.io/pool": "h100"}

#: CRDs the charts ship as plain files (so their stored schema can be compared with the file), per backend.
GPU_AND_LWS_CRD_FILES = [
    "lws-v0.8.0/lws/crds/*.yaml", "gpu-operator-v26.7.0/gpu-operator/crds/*.yaml",
    "gpu-operator-v26.7.0/gpu-operator/charts/node-feature-discovery/crds/*.yaml"]
KSERVE_CRD_FILES = [
    "kserve-v0.20.0/kserve-llmisvc-crd/templates/serving.kserve.io_llm*.yaml",
    "kserve-v0.20.0/kserve-llmisvc-crd/files/*.yaml", "gateway-api-v1.5.1/standard/*.yaml"]
#: CRDs rendered from templates (cert-manager's templates/crd-*.yaml; the Inference Extension's in
#: kserve-llmisvc-resources).
TEMPLATED_CRDS = {
    "certificaterequests.cert-manager.io", "certificates.cert-manager.io", "challenges.acme.cert-manager.io",
    "clusterissuers.cert-manager.io", "issuers.cert-manager.io", "orders.acme.cert-manager.io",
    "inferencepools.inference.networking.k8s.io", "inferencepools.inference.networking.x-k8s.io",
    "inferenceobjectives.llm-d.ai", "inferencemodelrewrites.llm-d.ai"}
KSERVE_PRESETS = 10  # kserve-runtime-configs v0.20.0 with kserve.llmisvcConfigs.enabled


def chart_crds(patterns: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for pattern in patterns:
        for path in sorted(CHARTS.glob(pattern)):
            for doc in yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader):
                if doc and doc.get("kind") == "CustomResourceDefinition":
                    out[doc["metadata"]["name"]] = doc
    return out


def retry_429(call: Callable[[], Any], timeout: float = 60.0) -> Any:
    """A custom kind's storage answers 429 "storage is (re)initializing" until its watch cache is
    ready, which the server starts on first use, some seconds after the CRD is Established."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except KubeAPIError as err:
            if err.status_code != 429 or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def install_chart_crds(kube: KubeClient, names: set[str]) -> None:
    """Apply some of the vendored charts' CRDs (server-side) and wait until they are served: for a test
    whose platform is `alreadyInstalled`, as on a cluster someone else set up."""
    crds = chart_crds(GPU_AND_LWS_CRD_FILES + KSERVE_CRD_FILES)
    assert names <= set(crds), sorted(names - set(crds))
    for name in sorted(names):
        kube.apply(crds[name])
    for name in sorted(names):
        api_version, kind = kube.wait_crd_served(crds[name], timeout=120)

        def warm(a: str = api_version, k: str = kind) -> list[dict[str, Any]]:
            return kube.list_objects(a, k)

        retry_429(warm)  # a new kind's storage answers 429 until its watch cache is ready


def remove_crds(kube: KubeClient, names: set[str]) -> None:
    """Delete CRDs and wait until they are gone (the package's server must be left without CRDs)."""
    for name in sorted(names):
        kube.delete(CRD_API, "CustomResourceDefinition", name)
        kube.wait_gone(CRD_API, "CustomResourceDefinition", name, timeout=120)


def read_back(kube: KubeClient, namespace: str) -> dict[str, list[dict[str, Any]]]:
    objects: dict[str, list[dict[str, Any]]] = retry_429(lambda: kube.all_objects(namespace))
    return objects


def names_of(objects: dict[str, list[dict[str, Any]]]) -> dict[str, list[str]]:
    return {k: sorted(o["metadata"]["name"] for o in v) for k, v in objects.items()}


def release_pvcs(kube: KubeClient, namespace: str) -> None:
    """Act as the pvc-protection controller (not run by the test server): the StorageObjectInUseProtection
    admission plugin puts `kubernetes.io/pvc-protection` on every PVC, and only that controller removes
    it. Without this a deleted namespace holding our (retained) weight caches stays Terminating."""
    for pvc in kube.list_objects("v1", "PersistentVolumeClaim", namespace):
        if pvc["metadata"].get("finalizers"):
            kube.request("PATCH", f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{pvc['metadata']['name']}",
                         json={"metadata": {"finalizers": None}},
                         headers={"Content-Type": "application/merge-patch+json"})


def merge_patch(kube: KubeClient, api_version: str, kind: str, name: str, namespace: str, patch: dict[str, Any],
                manager: str = "kubectl-patch") -> dict[str, Any]:
    """What `kubectl patch --type merge` sends (and the field manager it records)."""
    path = kube.resource(api_version, kind).path(namespace, name)
    patched: dict[str, Any] = kube.request("PATCH", path, params={"fieldManager": manager}, json=patch,
                                           headers={"Content-Type": "application/merge-patch+json"})
    return patched


# ------------------------------------------------------------------------------------------------
# The platform
# ------------------------------------------------------------------------------------------------


def assert_platform(kube: KubeClient, backend: str) -> None:
    """The charts' objects as the server stored them: CRDs byte-for-byte from the chart files (not
    test fixtures), applied by Pulumi, Established; each piece's controller; the presets."""
    from_files = chart_crds(GPU_AND_LWS_CRD_FILES + (KSERVE_CRD_FILES if backend == "kserve" else []))
    stored = {c["metadata"]["name"]: c for c in kube.list_objects(CRD_API, "CustomResourceDefinition")}
    expected = set(from_files) | (TEMPLATED_CRDS if backend == "kserve" else set())
    assert set(stored) == expected, sorted(set(stored) ^ expected)
    for name, crd in stored.items():
        managers = {m["manager"] for m in crd["metadata"]["managedFields"]}
        assert any(m.startswith("pulumi-kubernetes") for m in managers), (name, managers)
        assert any(c["type"] == "Established" and c["status"] == "True" for c in crd["status"]["conditions"]), name
        if name in from_files:
            want = {v["name"]: v.get("schema") for v in from_files[name]["spec"]["versions"]}
            assert {v["name"]: v.get("schema") for v in crd["spec"]["versions"]} == want, name

    deployments = {f"{d['metadata']['namespace']}/{d['metadata']['name']}": d
                   for d in kube.list_objects("apps/v1", "Deployment") if d["metadata"]["namespace"] != "kube-system"}
    images = {c["image"] for d in deployments.values() for c in d["spec"]["template"]["spec"]["containers"]}
    assert {"nvcr.io/nvidia/gpu-operator:v26.7.0", "registry.k8s.io/lws/lws:v0.8.0"} <= images, images
    policy = kube.get("nvidia.com/v1", "ClusterPolicy", "cluster-policy")
    assert policy is not None and policy["spec"]["driver"]["enabled"] is True
    if backend == "kserve":
        assert {"cert-manager/cert-manager-webhook", "kserve/llmisvc-controller-manager"} <= set(deployments)
        presets = kube.list_objects(LLMISVC, "LLMInferenceServiceConfig", "kserve")
        assert len([p for p in presets if p["metadata"]["name"].startswith("kserve-config-llm-")]) >= KSERVE_PRESETS
        vap = kube.get("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy",
                       "safe-upgrades.gateway.networking.k8s.io")
        assert vap is not None  # enforced by the server itself (CEL): it accepted the standard v1.5.1 CRDs
    else:
        assert not [d for d in deployments if d.startswith(("kserve/", "cert-manager/"))]


# ------------------------------------------------------------------------------------------------
# The models
# ------------------------------------------------------------------------------------------------


def container(pod_spec: dict[str, Any]) -> dict[str, Any]:
    mains: list[dict[str, Any]] = [c for c in pod_spec["containers"] if c["name"] == "main"]
    assert len(mains) == 1
    return mains[0]


def workload_pod_specs(kube: KubeClient, backend: str, ns: str, model: dict[str, Any]) -> list[dict[str, Any]]:
    """(leader/only pod spec, worker pod spec if multi-node) as the server stored them."""
    name = names.workload(model["name"])
    multi = model.get("nodeCount", 1) > 1
    if backend == "kserve":
        obj = kube.get(LLMISVC, "LLMInferenceService", name, ns)
        assert obj is not None, name
        spec = obj["spec"]
        return [spec["template"], spec["worker"]] if multi else [spec["template"]]
    if multi:
        lws = kube.get(LWS, "LeaderWorkerSet", name, ns)
        assert lws is not None and kube.get("apps/v1", "Deployment", name, ns) is None
        tmpl = lws["spec"]["leaderWorkerTemplate"]
        return [tmpl["leaderTemplate"]["spec"], tmpl["workerTemplate"]["spec"]]
    dep = kube.get("apps/v1", "Deployment", name, ns)
    assert dep is not None, name
    return [dep["spec"]["template"]["spec"]]


def assert_model_objects(kube: KubeClient, backend: str, serving: str, model: dict[str, Any],
                         gpus_per_pod: dict[str, str]) -> None:
    name = model["name"]
    gpu = name in gpus_per_pod
    multi = model.get("nodeCount", 1) > 1
    pods = workload_pod_specs(kube, backend, serving, model)
    assert len(pods) == (2 if multi else 1)
    for i, pod in enumerate(pods):
        main = container(pod)
        req, lim = main["resources"]["requests"], main["resources"]["limits"]
        if gpu:
            assert req["nvidia.com/gpu"] == lim["nvidia.com/gpu"] == gpus_per_pod[name], (name, main["resources"])
            assert pod["nodeSelector"] == H100_LABELS
            assert pod["tolerations"] == [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "tkf.io/dedicated", "operator": "Equal", "value": "llm", "effect": "NoSchedule"}]
        else:
            assert "nvidia.com/gpu" not in req and "nvidia.com/gpu" not in lim
            # The CPU profile lands on its CPU pool (the dev stack's pool selects on kubernetes.io/os).
            assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"} and "tolerations" not in pod
        # The API key only ever as a secretKeyRef.
        env = {e["name"]: e for e in main.get("env", [])}
        assert env["VLLM_API_KEY"] == {"name": "VLLM_API_KEY", "valueFrom": {"secretKeyRef": {
            "name": API_KEY_SECRET, "key": API_KEY_SECRET_KEY}}}
        # Defaults the server filled in for a core kind (a Deployment's pod template); pod templates
        # inside custom resources (LLMInferenceService, LeaderWorkerSet) get only their CRD's defaults.
        if backend == "vllm" and not multi:
            assert pod["restartPolicy"] == "Always" and pod["dnsPolicy"] == "ClusterFirst"
            assert main["terminationMessagePolicy"] == "File" and main["imagePullPolicy"] == "IfNotPresent"
            if i == 0:
                assert main["startupProbe"]["successThreshold"] == 1
        weights = [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
        assert [v["persistentVolumeClaim"]["claimName"] for v in weights] == [
            names.weight_cache(model["repo"], model["revision"])]
        if gpu and i == 0:
            args = main["args"] if backend == "kserve" else main["command"]
            text = " ".join(args)
            assert f"--max-model-len {model['maxModelLen']}" in text
            if backend == "vllm" and not multi:
                assert f"--tensor-parallel-size {model.get('tensorParallelSize', 1)}" in text
                assert f"--served-model-name {model['servedName']}" in text
    if backend == "kserve":
        isvc = kube.get(LLMISVC, "LLMInferenceService", name, serving)
        assert isvc is not None
        spec = isvc["spec"]
        pvc = names.weight_cache(model["repo"], model["revision"])
        assert spec["model"]["uri"] == f"pvc://{pvc}/{model['revision']}"
        assert spec["model"]["name"] == model["servedName"]
        assert ("worker" in spec) is multi
        if gpu:
            want = {"tensor": model.get("tensorParallelSize", 1)}
            if multi:
                want["pipeline"] = model["pipelineParallelSize"]
            assert spec["parallelism"] == want
        if multi:
            assert spec["baseRefs"] == [{"name": "kserve-config-llm-worker-pipeline-parallel"}]
            assert [e["name"] for e in container(spec["template"])["env"]].count("VLLM_API_KEY") == 1
    elif multi:
        lws = kube.get(LWS, "LeaderWorkerSet", name, serving)
        assert lws is not None
        tmpl = lws["spec"]["leaderWorkerTemplate"]
        assert tmpl["size"] == model["nodeCount"]
        assert tmpl["restartPolicy"] == "RecreateGroupOnPodRestart"
        assert lws["spec"]["startupPolicy"] == "LeaderCreated"

    # NetworkPolicy: the API port from the gateway namespace only, the metrics sidecar's port from the
    # monitoring namespace only (+ group-internal traffic).
    pol = kube.get("networking.k8s.io/v1", "NetworkPolicy", names.network_policy(name), serving)
    assert pol is not None
    rules = pol["spec"]["ingress"]
    assert rules[:2] == [
        {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": GATEWAY_NS}}}],
         "ports": [{"protocol": "TCP", "port": names.SERVING_PORT}]},
        {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": MONITORING_NS}}}],
         "ports": [{"protocol": "TCP", "port": names.METRICS_PORT}]},
    ]
    assert len(rules) == (3 if multi else 2)
    assert pol["spec"]["policyTypes"] == ["Ingress"]
    assert pol["spec"]["podSelector"] == {"matchLabels": {"tkf.io/model": name}}

    svc = kube.get("v1", "Service", names.alias_service(name), serving)
    assert svc is not None
    assert svc["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": 8000, "protocol": "TCP"}]
    assert svc["spec"]["type"] == "ClusterIP" and svc["spec"]["clusterIP"]  # allocated by the server
    assert svc["spec"]["sessionAffinity"] == "None"  # a server default


def assert_no_secret_value(objects: dict[str, list[dict[str, Any]]], secret: str) -> None:
    """The API key is only in its Secret: never in a workload, Service or policy."""
    for key, items in objects.items():
        if key != "v1/Secret":
            assert secret not in json.dumps(items), key
