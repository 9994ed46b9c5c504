"""The program through the Automation API against a real kube-apiserver (issue 8, second half).

`up` of a catalog covering every profile (CPU, single GPU, tensor parallel, multi-node) on both
serving backends, read back from the API server as it stored the objects (defaults included); a
second `up` that changes nothing; drift made out of band reported per model by
`python -m tkf_infra refresh --json` and undone by `up`; a removed model's objects deleted but its
weight cache kept; KServe's CEL rules enforced on what Pulumi sends; no process left behind.

The server (tests/kube/apiserver.py) runs no Deployment/PVC/Service/KServe/LWS controllers and no
webhooks, so nothing ever becomes ready: the stacks here set `cluster.skipAwait` (see
`target_config`). Everything else — admission, defaulting, CEL, server-side apply, field managers,
garbage collection of deleted namespaces — is the real thing.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi import automation as auto

from components.fleet import API_KEY_SECRET, API_KEY_SECRET_KEY
from tests.engine_fixtures import EngineStack, dev_config
from tests.kube.apiserver import KubeAPIServer
from tests.kube.client import KubeAPIError, KubeClient
from tkf_infra import names
from tkf_infra.ops.stacks import DEV_PASSPHRASE, pulumi_home

pytestmark = [pytest.mark.apiserver, pytest.mark.engine]

ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = ROOT / "components" / "data" / "crds"
CRD_NAMES = {
    "serving.kserve.io_llminferenceservices.yaml": "llminferenceservices.serving.kserve.io",
    "serving.kserve.io_llminferenceserviceconfigs.yaml": "llminferenceserviceconfigs.serving.kserve.io",
    "leaderworkerset.x-k8s.io_leaderworkersets.yaml": "leaderworkersets.leaderworkerset.x-k8s.io",
}
LLMISVC = "serving.kserve.io/v1alpha2"
LWS = "leaderworkerset.x-k8s.io/v1"
CEL_MESSAGE = "replicas and scaling are mutually exclusive"
GATEWAY_NS, MONITORING_NS = "llm-gateway", "monitoring"
H100_LABELS = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "tkf.io/pool": "h100"}
H100_TAINT = {"key": "tkf.io/dedicated", "value": "llm", "effect": "NoSchedule"}

# Revisions and gating from models.lock.json.
QWEN3_8B: dict[str, Any] = {
    "name": "qwen3-8b", "repo": "Qwen/Qwen3-8B", "revision": "b968826d9c46dd6066d109eabc6255188de91218",
    "servedName": "qwen3-8b", "nodePool": "h100", "gpusPerNode": 1, "maxModelLen": 32768}
QWEN_72B: dict[str, Any] = {"name": "qwen-2-5-72b", "repo": "Qwen/Qwen2.5-72B-Instruct",
            "revision": "495f39366efef23836d0cfae4fbe635880d2be31", "servedName": "qwen2.5-72b-instruct",
            "nodePool": "h100", "gpusPerNode": 4, "tensorParallelSize": 4, "maxModelLen": 32768}
LLAMA_405B: dict[str, Any] = {"name": "llama-3-1-405b", "repo": "meta-llama/Llama-3.1-405B-Instruct",
              "revision": "be673f326cab4cd22ccfef76109faf68e41aa5f1", "servedName": "llama-3.1-405b-instruct",
              "nodePool": "h100", "nodeCount": 2, "gpusPerNode": 8, "tensorParallelSize": 8,
              "pipelineParallelSize": 2, "maxModelLen": 32768, "hfTokenSecret": "hf-token"}
CPU_MODELS: list[dict[str, Any]] = dev_config()["config"]["tkf-infra:models"]  # the two dev CPU models
CATALOG = [QWEN3_8B, QWEN_72B, LLAMA_405B, *CPU_MODELS]
GPUS_PER_POD = {QWEN3_8B["name"]: "1", QWEN_72B["name"]: "4", LLAMA_405B["name"]: "8"}


# ------------------------------------------------------------------------------------------------
# Fixtures and helpers
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def crds(kube: KubeClient) -> None:
    """The charts cannot be fetched here: apply the copied CRDs (server-side) and wait Established."""
    for file, name in CRD_NAMES.items():
        crd = yaml.load((CRD_DIR / file).read_text(), Loader=yaml.CSafeLoader)
        assert crd["metadata"]["name"] == name
        kube.apply(crd)
    for name in CRD_NAMES.values():
        kube.wait_condition("apiextensions.k8s.io/v1", "CustomResourceDefinition", name, "Established", timeout=120)
    for api_version, kind in ((LLMISVC, "LLMInferenceService"), (LLMISVC, "LLMInferenceServiceConfig"),
                              (LWS, "LeaderWorkerSet")):
        def warm(a: str = api_version, k: str = kind) -> list[dict[str, Any]]:
            return kube.list_objects(a, k)

        retry_429(warm)  # warm the storage (see retry_429)


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


def read_back(kube: KubeClient, namespace: str) -> dict[str, list[dict[str, Any]]]:
    objects: dict[str, list[dict[str, Any]]] = retry_429(lambda: kube.all_objects(namespace))
    return objects


def release_pvcs(kube: KubeClient, namespace: str) -> None:
    """Act as the pvc-protection controller (not run by the test server): the StorageObjectInUseProtection
    admission plugin puts `kubernetes.io/pvc-protection` on every PVC, and only that controller removes
    it. Without this a deleted namespace holding our (retained) weight caches stays Terminating and
    `pulumi destroy` waits the full 10-minute delete timeout on the Namespace."""
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


def target_config(es: EngineStack, kube_apiserver: KubeAPIServer, backend: str, suffix: str) -> dict[str, str]:
    """Point the stack at the test server; namespaces of its own so the backends never collide."""
    ns = {"serving": f"llm-{backend}-{suffix}", "gateway": GATEWAY_NS, "monitoring": MONITORING_NS,
          "kserve": f"kserve-{suffix}"}
    path = es.project / f"Pulumi.{es.stack.name}.yaml"
    doc = yaml.safe_load(path.read_text())
    cfg = doc["config"]
    # skipAwait: the test server runs no Deployment/PVC/KServe/LWS controllers, so no object would
    # ever report ready and every await would time out. Only this test target sets it.
    cfg["tkf-infra:cluster"] = {"mode": "kubeconfig", "kubeconfig": str(kube_apiserver.kubeconfig),
                                "skipAwait": True}
    cfg["tkf-infra:namespaces"] = ns
    for piece in cfg["tkf-infra:platform"].values():
        piece["alreadyInstalled"] = True
    cfg["tkf-infra:serving"]["backend"] = backend
    cfg["tkf-infra:serving"]["allowCpu"] = True
    cfg["tkf-infra:nodePools"] = [
        {"name": "h100", "kind": "existing", "gpuProduct": "H100-80GB", "gpusPerNode": 8, "nodeCount": 4,
         "labels": H100_LABELS, "taints": [H100_TAINT]},
        *cfg["tkf-infra:nodePools"],  # the dev CPU pool
    ]
    cfg["tkf-infra:models"] = CATALOG
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return ns


def cli(es: EngineStack, *args: str) -> tuple[int, dict[str, Any], str]:
    """`python -m tkf_infra …` inside the project copy, as CI runs it."""
    env = {**os.environ, **es.env, "PULUMI_CONFIG_PASSPHRASE": DEV_PASSPHRASE}
    proc = subprocess.run([str(es.project / ".venv" / "bin" / "python"), "-m", "tkf_infra", *args,
                           "--stack", es.stack.name, "--json"],
                          cwd=es.project, env=env, capture_output=True, text=True, timeout=300)
    try:
        summary: dict[str, Any] = json.loads(proc.stdout)
    except json.JSONDecodeError:
        summary = {}
    return proc.returncode, summary, proc.stderr


def up(es: EngineStack) -> auto.UpResult:
    return es.stack.up(color="never")


def changes(res: auto.UpResult) -> dict[str, int]:
    return {str(k): v for k, v in (res.summary.resource_changes or {}).items() if str(k) != "same"}


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


# ------------------------------------------------------------------------------------------------
# Read-back assertions
# ------------------------------------------------------------------------------------------------


def assert_model_objects(kube: KubeClient, backend: str, ns: dict[str, str], model: dict[str, Any]) -> None:
    serving = ns["serving"]
    name = model["name"]
    gpu = name in GPUS_PER_POD
    multi = model.get("nodeCount", 1) > 1
    pods = workload_pod_specs(kube, backend, serving, model)
    assert len(pods) == (2 if multi else 1)
    for i, pod in enumerate(pods):
        main = container(pod)
        req, lim = main["resources"]["requests"], main["resources"]["limits"]
        if gpu:
            assert req["nvidia.com/gpu"] == lim["nvidia.com/gpu"] == GPUS_PER_POD[name], (name, main["resources"])
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

    # NetworkPolicy: 8000 from the gateway and monitoring namespaces only (+ group-internal traffic).
    pol = kube.get("networking.k8s.io/v1", "NetworkPolicy", names.network_policy(name), serving)
    assert pol is not None
    rules = pol["spec"]["ingress"]
    port = [{"protocol": "TCP", "port": 8000}]
    assert rules[:2] == [
        {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": GATEWAY_NS}}}], "ports": port},
        {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": MONITORING_NS}}}],
         "ports": port},
    ]
    assert len(rules) == (3 if multi else 2)
    assert pol["spec"]["policyTypes"] == ["Ingress"]
    assert pol["spec"]["podSelector"] == {"matchLabels": {"tkf.io/model": name}}

    svc = kube.get("v1", "Service", names.alias_service(name), serving)
    assert svc is not None
    assert svc["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": 8000, "protocol": "TCP"}]
    assert svc["spec"]["type"] == "ClusterIP" and svc["spec"]["clusterIP"]  # allocated by the server
    assert svc["spec"]["sessionAffinity"] == "None"  # a server default


def assert_no_secret_value(objects: dict[str, list[dict[str, Any]]]) -> None:
    """The API key is only in its Secret: never in a workload, Service or policy."""
    for key, items in objects.items():
        if key == "v1/Secret":
            continue
        text = json.dumps(items)
        assert "tkf-dev-api-key" not in text, key


# ------------------------------------------------------------------------------------------------
# Tests
# ------------------------------------------------------------------------------------------------


TIMINGS: dict[str, float] = {}
MakeTarget = Callable[[str], tuple[EngineStack, dict[str, str]]]


@pytest.fixture
def on_apiserver(crds: None, kube: KubeClient, kube_apiserver: KubeAPIServer,
                 make_stack: Callable[..., EngineStack]) -> Iterator[MakeTarget]:
    """A stack of the project aimed at the test server; destroyed here (before make_stack's own
    teardown) once the PVCs are released, and its namespaces deleted."""
    made: list[tuple[EngineStack, dict[str, str]]] = []

    def make(backend: str) -> tuple[EngineStack, dict[str, str]]:
        es = make_stack()
        ns = target_config(es, kube_apiserver, backend, uuid.uuid4().hex[:6])
        # On a real cluster the KServe namespace exists (platform alreadyInstalled); the PP preset goes there.
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns["kserve"]}})
        made.append((es, ns))
        return es, ns

    yield make
    for es, ns in made:
        release_pvcs(kube, ns["serving"])
        t = time.monotonic()
        es.stack.destroy(color="never")
        TIMINGS[f"destroy {es.stack.name}"] = time.monotonic() - t
        for name in (ns["serving"], ns["kserve"]):
            kube.delete("v1", "Namespace", name)




def timed(label: str, call: Callable[[], Any]) -> Any:
    t = time.monotonic()
    try:
        return call()
    finally:
        TIMINGS[label] = time.monotonic() - t


@pytest.mark.parametrize("backend", ["kserve", "vllm"])
def test_up_refresh_drift_and_removal(backend: str, kube: KubeClient,
                                      on_apiserver: MakeTarget) -> None:
    es, ns = on_apiserver(backend)
    serving = ns["serving"]

    # 1-2. up creates every object; read back as the server stored them.
    first = timed(f"{backend}: up", lambda: up(es))
    assert first.summary.result == "succeeded"
    assert changes(first) == {"create": first.summary.resource_changes["create"]}
    objects = read_back(kube, serving)
    found = {k: sorted(o["metadata"]["name"] for o in v) for k, v in objects.items()}
    workloads = sorted(m["name"] for m in CATALOG)
    if backend == "kserve":
        assert found[f"{LLMISVC}/LLMInferenceService"] == workloads
        assert "apps/v1/Deployment" not in found and f"{LWS}/LeaderWorkerSet" not in found
        assert found["v1/ServiceAccount"] == [names.service_account(LLAMA_405B["name"])]  # gated: HF_TOKEN
        preset = kube.get(LLMISVC, "LLMInferenceServiceConfig", "kserve-config-llm-worker-pipeline-parallel",
                          ns["kserve"])
        assert preset is not None
    else:
        assert found[f"{LWS}/LeaderWorkerSet"] == [LLAMA_405B["name"]]
        assert found["apps/v1/Deployment"] == sorted(set(workloads) - {LLAMA_405B["name"]})
        assert f"{LLMISVC}/LLMInferenceService" not in found
    assert found["v1/Service"] == sorted(names.alias_service(n) for n in workloads)
    assert found["networking.k8s.io/v1/NetworkPolicy"] == sorted(names.network_policy(n) for n in workloads)
    pvcs = sorted({names.weight_cache(m["repo"], m["revision"]) for m in CATALOG})
    assert found["v1/PersistentVolumeClaim"] == pvcs
    assert found["batch/v1/Job"] == sorted(f"{p}-download" for p in pvcs)
    assert found["v1/Secret"] == [API_KEY_SECRET]
    for model in CATALOG:
        assert_model_objects(kube, backend, ns, model)
    assert_no_secret_value(objects)

    # 3. A second up changes nothing.
    second = timed(f"{backend}: second up", lambda: up(es))
    assert changes(second) == {}, second.summary.resource_changes

    # 4. Drift: a NetworkPolicy deleted and an alias Service (and, on KServe, a vLLM arg) edited out of band.
    gone, edited = QWEN3_8B["name"], QWEN_72B["name"]
    kube.delete("networking.k8s.io/v1", "NetworkPolicy", names.network_policy(gone), serving)
    merge_patch(kube, "v1", "Service", names.alias_service(edited), serving,
                {"metadata": {"labels": {"app.kubernetes.io/part-of": "edited-by-hand"}}})
    if backend == "kserve":
        isvc = kube.get(LLMISVC, "LLMInferenceService", edited, serving)
        assert isvc is not None
        containers = isvc["spec"]["template"]["containers"]
        main = container(isvc["spec"]["template"])
        main["args"] = [a.replace("32768", "16384") for a in main["args"]]
        merge_patch(kube, LLMISVC, "LLMInferenceService", edited, serving,
                    {"spec": {"template": {"containers": containers}}})
    _code, summary, stderr = timed(f"{backend}: refresh (CLI)", lambda: cli(es, "refresh"))
    print(json.dumps(summary, indent=1))
    assert summary, stderr
    models = summary["models"]
    assert any(names.network_policy(gone) in d and "deleted" in d for d in models[gone].get("drift", [])), models[gone]
    assert any(names.alias_service(edited) in d and "(metadata.labels.app.kubernetes.io/part-of)" in d
               for d in models[edited].get("drift", [])), models[edited]
    if backend == "kserve":
        assert any(f"{edited}-llmisvc" in d and "spec.template.containers" in d
                   for d in models[edited]["drift"]), models[edited]
    untouched = set(workloads) - {gone, edited}
    assert all("drift" not in models[n] for n in untouched), models

    restore = timed(f"{backend}: up after drift", lambda: up(es))
    assert restore.summary.result == "succeeded"
    assert kube.get("networking.k8s.io/v1", "NetworkPolicy", names.network_policy(gone), serving) is not None
    svc = kube.get("v1", "Service", names.alias_service(edited), serving)
    assert svc is not None and svc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "tkf-infra"
    for model in CATALOG:
        assert_model_objects(kube, backend, ns, model)

    # 5. Removing a model deletes its objects and keeps its weight cache.
    es.set_models([m for m in CATALOG if m["name"] != gone])
    removal = timed(f"{backend}: up without {gone}", lambda: up(es))
    assert removal.summary.result == "succeeded"
    assert changes(removal).get("delete", 0) >= 4, removal.summary.resource_changes
    after = {k: sorted(o["metadata"]["name"] for o in v) for k, v in read_back(kube, serving).items()}
    for key, items in after.items():
        if key != "v1/PersistentVolumeClaim":
            assert not [n for n in items if n.startswith(gone)], (key, items)
    cache = names.weight_cache(QWEN3_8B["repo"], QWEN3_8B["revision"])
    assert cache in after["v1/PersistentVolumeClaim"]
    assert f"{cache}-download" not in after["batch/v1/Job"]
    print(TIMINGS)


def test_kserve_cel_rule_is_enforced_through_pulumi(crds: None, kube: KubeClient, kube_apiserver: KubeAPIServer,
                                                    kube_namespace: str, tmp_path: Path) -> None:
    """No catalog input produces `replicas` together with `scaling` (the program only ever sets
    replicas), so the CEL rule is exercised through Pulumi's Kubernetes provider in an inline program."""
    import pulumi
    import pulumi_kubernetes as k8s

    def program() -> None:
        provider = k8s.Provider("k8s", kubeconfig=kube_apiserver.kubeconfig.read_text())
        k8s.apiextensions.CustomResource(
            "conflict", api_version=LLMISVC, kind="LLMInferenceService",
            metadata={"name": "conflict", "namespace": kube_namespace,
                      "annotations": {"pulumi.com/skipAwait": "true"}},  # no KServe controller runs here
            spec={"model": {"uri": "hf://Qwen/Qwen3-0.6B"}, "replicas": 1,
                  "scaling": {"minReplicas": 1, "maxReplicas": 2, "wva": {"hpa": {}}}},
            opts=pulumi.ResourceOptions(provider=provider))

    (tmp_path / "state").mkdir()
    env = {"PULUMI_BACKEND_URL": f"file://{tmp_path / 'state'}", "PULUMI_CONFIG_PASSPHRASE": DEV_PASSPHRASE,
           "PULUMI_SKIP_UPDATE_CHECK": "true"}
    opts = auto.LocalWorkspaceOptions(env_vars=env, work_dir=str(tmp_path),
                                      pulumi_command=auto.PulumiCommand(root=str(pulumi_home())))
    stack = auto.create_stack(f"cel{uuid.uuid4().hex[:6]}", project_name="tkf-cel", program=program, opts=opts)
    try:
        with pytest.raises(auto.CommandError) as refused:
            stack.up(color="never")
        assert CEL_MESSAGE in str(refused.value)
        assert kube.get(LLMISVC, "LLMInferenceService", "conflict", kube_namespace) is None
    finally:
        stack.destroy(color="never")
        stack.workspace.remove_stack(stack.name)


def _descendants(root: int) -> dict[int, str]:
    """pid → cmdline of every live process whose parent chain reaches root."""
    parents: dict[int, int] = {}
    cmdlines: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            cmdlines[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
    out = {}
    for pid in parents:
        p, seen = pid, 0
        while p in parents and p != root and seen < 64:
            p, seen = parents[p], seen + 1
        if p == root and pid != root:
            out[pid] = cmdlines.get(pid, "")
    return out


def test_no_process_left_behind(kube_apiserver: KubeAPIServer, tmp_path: Path) -> None:
    """After the engine runs above: no engine, provider or language host of ours remains, and the only
    server processes are the session server's own (stopped by its fixture; a private one is started and
    stopped here to check that stopping leaves nothing)."""
    from tests.kube.apiserver import start_apiserver, stop_apiserver

    ours = _descendants(os.getpid())
    engine = {p: c for p, c in ours.items() if "pulumi" in c}
    assert engine == {}, engine
    servers = {p for p, c in ours.items() if "tkf-kube-apiserver" in c}
    assert kube_apiserver.pid in servers and len(servers) <= 2, servers  # the server + its controller-manager

    proc, server = start_apiserver(tmp_path)
    started = {p for p, c in _descendants(os.getpid()).items() if str(tmp_path) in c}
    assert server.pid in started
    stop_apiserver(proc)
    left = {p: c for p, c in _descendants(os.getpid()).items() if str(tmp_path) in c}
    assert left == {}, left
    # and nothing orphaned (re-parented to init) still runs from that server's directory
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            assert str(tmp_path) not in cmd, (entry.name, cmd)
