"""The program through the Automation API against a real kube-apiserver: the platform from its charts, then
every model, in one `up`.

- the prod stack previews on a fresh server (no CRD installed) without "failed to determine if the
  following GVK is namespaced" (pulumi-kubernetes 4.25; docs/platform.md has the reproduction);
- per backend, one `up` installs the platform from the vendored charts (the CRDs come from the
  charts, no fixture) and every profile (CPU, single GPU, tensor parallel, multi-node), read back as
  the server stored them; a second `up` changes nothing; drift made out of band is reported per
  model by `python -m tkf_infra refresh --json` and undone by `up`; a removed model's objects go but
  its weight cache stays; KServe's CEL rules are enforced on what Pulumi sends;
- `destroy` respects `protect` (prod's setting): it fails on the protected weight caches and serving
  namespace, which stay; once an operator unprotects them a second destroy finishes, and what is
  retained by design (weight caches, serving namespace, cert-manager's CRDs) is still there.

The server (tests/kube/apiserver.py) runs no Deployment/PVC/KServe/LWS controllers and calls no
webhooks, so nothing ever becomes ready: the stacks set `cluster.skipAwait`. Everything else —
admission, defaulting, CEL, the Gateway API's ValidatingAdmissionPolicy, server-side apply, field
managers, garbage collection of deleted namespaces — is the real thing.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi import automation as auto

from components.fleet import API_KEY_SECRET
from tests.engine_fixtures import EngineStack, dev_config, resource_events
from tests.faults.harness import process_tree
from tests.kube.apiserver import KubeAPIServer
from tests.kube.client import KubeClient
from tests.kube.platform.readback import (
    CRD_API,
    GATEWAY_NS,
    H100_LABELS,
    KSERVE_PRESETS,
    LLMISVC,
    LWS,
    MONITORING_NS,
    assert_model_objects,
    assert_no_secret_value,
    assert_platform,
    container,
    merge_patch,
    names_of,
    read_back,
    release_pvcs,
)
from tkf_infra import names
from tkf_infra.ops.stacks import DEV_PASSPHRASE, copy_project, engine_env, pulumi_home

pytestmark = [pytest.mark.apiserver, pytest.mark.engine]

ROOT = names.PROJECT_ROOT
CEL_MESSAGE = "replicas and scaling are mutually exclusive"
DEV_API_KEY = "tkf-dev-api-key"  # the dev stack's documented dev-only key
H100_TAINT = {"key": "tkf.io/dedicated", "value": "llm", "effect": "NoSchedule"}
PLATFORM_NAMESPACES = ("cert-manager", "kserve", "lws-system", "gpu-operator")

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
TIMINGS: dict[str, float] = {}


# ------------------------------------------------------------------------------------------------
# Fixtures and helpers
# ------------------------------------------------------------------------------------------------


def timed(label: str, call: Callable[[], Any]) -> Any:
    t = time.monotonic()
    try:
        return call()
    finally:
        TIMINGS[label] = round(time.monotonic() - t, 1)


def changes(res: auto.UpResult) -> dict[str, int]:
    return {str(k): v for k, v in (res.summary.resource_changes or {}).items() if str(k) != "same"}


def target_config(es: EngineStack, kube_apiserver: KubeAPIServer, backend: str,
                  models: list[dict[str, Any]] | None = None) -> str:
    """Point the stack at the test server, platform installed from the vendored charts (offline);
    the serving namespace is per stack, the platform's are the ones its charts hard-code. ``models``:
    the catalog (default `CATALOG`)."""
    serving = f"llm-{backend}-{uuid.uuid4().hex[:6]}"
    path = es.project / f"Pulumi.{es.stack.name}.yaml"
    doc = yaml.safe_load(path.read_text())
    cfg = doc["config"]
    # skipAwait: the test server runs no controllers, so no object would ever report ready.
    cfg["tkf-infra:cluster"] = {"mode": "kubeconfig", "kubeconfig": str(kube_apiserver.kubeconfig),
                                "skipAwait": True}
    cfg["tkf-infra:namespaces"] = {"serving": serving, "gateway": GATEWAY_NS, "monitoring": MONITORING_NS}
    assert cfg["tkf-infra:platform"]["charts"] == "vendored"  # the dev stack's switch
    cfg["tkf-infra:serving"].update(backend=backend, allowCpu=True)
    cfg["tkf-infra:nodePools"] = [
        {"name": "h100", "kind": "existing", "gpuProduct": "H100-80GB", "gpusPerNode": 8, "nodeCount": 4,
         "labels": H100_LABELS, "taints": [H100_TAINT]},
        *cfg["tkf-infra:nodePools"],  # the dev CPU pool
    ]
    cfg["tkf-infra:models"] = CATALOG if models is None else models
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return serving


def cli(es: EngineStack, *args: str) -> tuple[int, dict[str, Any], str]:
    """`python -m tkf_infra …` inside the project copy, as CI runs it."""
    env = {**os.environ, **es.env, "PULUMI_CONFIG_PASSPHRASE": DEV_PASSPHRASE}
    proc = subprocess.run([str(es.project / ".venv" / "bin" / "python"), "-m", "tkf_infra", *args,
                           "--stack", es.stack.name, "--json"],
                          cwd=es.project, env=env, capture_output=True, text=True, timeout=900)
    try:
        summary: dict[str, Any] = json.loads(proc.stdout)
    except json.JSONDecodeError:
        summary = {}
    return proc.returncode, summary, proc.stderr


def pulumi_cli(es: EngineStack, *args: str) -> subprocess.CompletedProcess[str]:
    """The pulumi CLI on the stack (what an operator types), e.g. `state unprotect`."""
    env = {**os.environ, **es.env, "PULUMI_CONFIG_PASSPHRASE": DEV_PASSPHRASE}
    return subprocess.run([str(pulumi_home() / "bin" / "pulumi"), *args, "--stack", es.stack.name, "--yes",
                           "--non-interactive"], cwd=es.project, env=env, capture_output=True, text=True, timeout=300)


def wait_namespaces_gone(kube: KubeClient, namespaces: tuple[str, ...]) -> None:
    for ns in namespaces:
        if kube.get("v1", "Namespace", ns) is not None:
            kube.delete("v1", "Namespace", ns)
            kube.wait_gone("v1", "Namespace", ns, timeout=180)


@pytest.fixture
def on_apiserver(kube: KubeClient, kube_apiserver: KubeAPIServer, lean_engine_env: dict[str, str],
                 make_stack: Callable[..., EngineStack]) -> Iterator[Callable[[str], tuple[EngineStack, str]]]:
    """A stack of the project aimed at the test server; whatever its test left is cleaned up here."""
    made: list[tuple[EngineStack, str]] = []

    def make(backend: str) -> tuple[EngineStack, str]:
        es = make_stack(platform=True, extra_env=lean_engine_env)
        made.append((es, target_config(es, kube_apiserver, backend)))
        return made[-1]

    yield make
    for es, serving in made:
        release_pvcs(kube, serving)
        pulumi_cli(es, "state", "unprotect", "--all")
        es.stack.destroy(color="never", continue_on_error=True)
        release_pvcs(kube, serving)
        wait_namespaces_gone(kube, (serving, *PLATFORM_NAMESPACES))
        for crd in kube.list_objects(CRD_API, "CustomResourceDefinition"):  # retained by the keep policy
            kube.delete(CRD_API, "CustomResourceDefinition", crd["metadata"]["name"])
            kube.wait_gone(CRD_API, "CustomResourceDefinition", crd["metadata"]["name"], timeout=120)


# ------------------------------------------------------------------------------------------------
# Tests (in this order: the first needs a server with no CRD on it)
# ------------------------------------------------------------------------------------------------


def test_prod_first_preview_on_a_fresh_server_has_no_gvk_error(kube: KubeClient, kube_apiserver: KubeAPIServer,
                                                               lean_engine_env: dict[str, str], engine_ready: None,
                                                               tmp_path: Path) -> None:
    """Pulumi.prod.yaml as committed, aimed at the test server and the vendored charts (no network)."""
    assert kube.list_objects(CRD_API, "CustomResourceDefinition") == []  # fresh: nothing installed
    project = copy_project(tmp_path / "project")
    doc = yaml.safe_load((ROOT / "Pulumi.prod.yaml").read_text())
    cfg = doc["config"]
    cfg["tkf-infra:cluster"] = {**cfg["tkf-infra:cluster"], "kubeconfig": str(kube_apiserver.kubeconfig)}
    del cfg["tkf-infra:cluster"]["context"]  # the test kubeconfig's current context
    cfg["tkf-infra:platform"]["charts"] = "vendored"
    cfg["tkf-infra:prometheusUrl"] = ""  # no Prometheus here
    (project / "Pulumi.prod.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    (tmp_path / "state").mkdir()
    env = {**engine_env("prod", project, f"file://{tmp_path / 'state'}"), "PULUMI_CONFIG_PASSPHRASE": "prod-test",
           **lean_engine_env}
    opts = auto.LocalWorkspaceOptions(env_vars=env, pulumi_command=auto.PulumiCommand(root=str(pulumi_home())))
    stack = auto.create_stack("prod", work_dir=str(project), opts=opts)
    stack.set_config("tkf-infra:apiKey", auto.ConfigValue("prod-test-key", secret=True))
    events: list[auto.events.EngineEvent] = []
    lines: list[str] = []
    shared_tmp = Path(tempfile.gettempdir())
    leaked_before = set(shared_tmp.glob("kubeconfig*"))
    timed("prod: first preview", lambda: stack.preview(color="never", on_event=events.append,
                                                             on_output=lines.append))
    output = "\n".join(lines)
    assert "failed to determine if the following GVK is namespaced" not in output
    # The provider's copy of the kubeconfig (credentials) went to the engine's private TMPDIR, not /tmp.
    assert list(Path(env["TMPDIR"]).glob("kubeconfig*")) and set(shared_tmp.glob("kubeconfig*")) == leaked_before
    created = Counter(t for op, t, _ in resource_events(events) if op == "create")
    assert created["kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"] == 30  # every chart's CRDs
    assert created["kubernetes:serving.kserve.io/v1alpha2:LLMInferenceServiceConfig"] == KSERVE_PRESETS + 1  # + PP
    assert created["kubernetes:nvidia.com/v1:ClusterPolicy"] == 1
    assert created["kubernetes:cert-manager.io/v1:Certificate"] == 1
    assert created["kubernetes:serving.kserve.io/v1alpha2:LLMInferenceService"] == 4  # every prod model
    assert kube.list_objects(CRD_API, "CustomResourceDefinition") == []  # a preview installs nothing


@pytest.mark.parametrize("backend", ["kserve", "vllm"])
def test_platform_and_every_profile_in_one_up(backend: str, kube: KubeClient, kube_apiserver: KubeAPIServer,
                                              on_apiserver: Callable[[str], tuple[EngineStack, str]]) -> None:
    es, serving = on_apiserver(backend)

    # 1. One up installs the platform from its charts and every model; read back as the server stored them.
    first = timed(f"{backend}: up (platform + models)", lambda: es.stack.up(color="never"))
    assert first.summary.result == "succeeded"
    assert changes(first) == {"create": first.summary.resource_changes["create"]}
    assert_platform(kube, backend)
    objects = read_back(kube, serving)
    found = names_of(objects)
    workloads = sorted(m["name"] for m in CATALOG)
    if backend == "kserve":
        assert found[f"{LLMISVC}/LLMInferenceService"] == workloads
        assert "apps/v1/Deployment" not in found and f"{LWS}/LeaderWorkerSet" not in found
        assert found["v1/ServiceAccount"] == [names.service_account(LLAMA_405B["name"])]  # gated: HF_TOKEN
        assert kube.get(LLMISVC, "LLMInferenceServiceConfig", "kserve-config-llm-worker-pipeline-parallel",
                        "kserve") is not None
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
        assert_model_objects(kube, backend, serving, model, GPUS_PER_POD)
    assert_no_secret_value(objects, DEV_API_KEY)

    # 2. A second up changes nothing (platform included).
    second = timed(f"{backend}: second up", lambda: es.stack.up(color="never"))
    assert changes(second) == {}, second.summary.resource_changes

    # 3. Drift: a NetworkPolicy deleted, an alias Service (and on KServe a vLLM arg) edited by hand.
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
    assert summary, stderr
    models = summary["models"]
    assert any(names.network_policy(gone) in d and "deleted" in d for d in models[gone].get("drift", [])), models[gone]
    assert any(names.alias_service(edited) in d and "(metadata.labels.app.kubernetes.io/part-of)" in d
               for d in models[edited].get("drift", [])), models[edited]
    if backend == "kserve":
        assert any(f"{edited}-llmisvc" in d and "spec.template.containers" in d
                   for d in models[edited]["drift"]), models[edited]
    assert all("drift" not in models[n] for n in set(workloads) - {gone, edited}), models

    # 4. One up undoes the drift and removes a model (one run, not two: each costs a minute here):
    # its objects go, its weight cache stays.
    removed = CPU_MODELS[1]
    es.set_models([m for m in CATALOG if m["name"] != removed["name"]])
    restore = timed(f"{backend}: up (drift undone, {removed['name']} removed)", lambda: es.stack.up(color="never"))
    assert restore.summary.result == "succeeded"
    assert changes(restore).get("delete", 0) >= 4, restore.summary.resource_changes
    assert kube.get("networking.k8s.io/v1", "NetworkPolicy", names.network_policy(gone), serving) is not None
    svc = kube.get("v1", "Service", names.alias_service(edited), serving)
    assert svc is not None and svc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "tkf-infra"
    for model in CATALOG:
        if model is not removed:
            assert_model_objects(kube, backend, serving, model, GPUS_PER_POD)
    after = names_of(read_back(kube, serving))
    for key, items in after.items():
        if key != "v1/PersistentVolumeClaim":
            assert not [n for n in items if n.startswith(removed["name"])], (key, items)
    cache = names.weight_cache(removed["repo"], removed["revision"])
    assert cache in after["v1/PersistentVolumeClaim"]
    assert f"{cache}-download" not in after["batch/v1/Job"]

    if backend == "kserve":
        cel_rule_is_enforced_through_pulumi(kube, kube_apiserver, serving, es.env, es.project.parent)

    # 5. destroy: with prod's `serving.protect` (set here on kserve) it fails on the weight caches and
    # the serving namespace, which stay; everything else goes. (Set from the start, protect also makes
    # step 4 fail: the removed model's weight cache is protected, though only retained.)
    release_pvcs(kube, serving)
    if backend == "kserve":
        doc = yaml.safe_load((path := es.project / f"Pulumi.{es.stack.name}.yaml").read_text())
        doc["config"]["tkf-infra:serving"]["protect"] = True
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        assert timed(f"{backend}: up (protect)", lambda: es.stack.up(color="never")).summary.result == "succeeded"
        with pytest.raises(auto.CommandError) as refused:
            timed(f"{backend}: destroy (protected)", lambda: es.stack.destroy(color="never"))
        assert "protect" in str(refused.value)
        assert kube.get("v1", "Namespace", serving) is not None
        assert kube.list_objects("v1", "PersistentVolumeClaim", serving)
        unprotect = pulumi_cli(es, "state", "unprotect", "--all")  # the operator's deliberate step
        assert unprotect.returncode == 0, unprotect.stderr
    timed(f"{backend}: destroy", lambda: es.stack.destroy(color="never"))
    # Retained by design: the serving namespace and its weight caches (retainOnDelete unless
    # pruneWeightCache), and cert-manager's CRDs (the chart's helm.sh/resource-policy: keep).
    assert kube.get("v1", "Namespace", serving) is not None
    assert sorted(p["metadata"]["name"] for p in kube.list_objects("v1", "PersistentVolumeClaim", serving)) == [
        p for p in found["v1/PersistentVolumeClaim"]]
    left = {c["metadata"]["name"] for c in kube.list_objects(CRD_API, "CustomResourceDefinition")}
    kept = {n for n in left if n.endswith(".cert-manager.io")}
    assert left == kept and len(kept) == (6 if backend == "kserve" else 0), left
    assert all(kube.get("v1", "Namespace", ns) is None for ns in PLATFORM_NAMESPACES)
    print(TIMINGS)


def cel_rule_is_enforced_through_pulumi(kube: KubeClient, kube_apiserver: KubeAPIServer, namespace: str,
                                        env: dict[str, str], tmp: Path) -> None:
    """No catalog input produces `replicas` together with `scaling` (the program only ever sets
    replicas), so the CEL rule of the chart's CRD is exercised through the provider in an inline program."""
    import pulumi
    import pulumi_kubernetes as k8s

    def program() -> None:
        provider = k8s.Provider("k8s", kubeconfig=kube_apiserver.kubeconfig.read_text())
        k8s.apiextensions.CustomResource(
            "conflict", api_version=LLMISVC, kind="LLMInferenceService",
            metadata={"name": "conflict", "namespace": namespace,
                      "annotations": {"pulumi.com/skipAwait": "true"}},  # no KServe controller runs here
            spec={"model": {"uri": "hf://Qwen/Qwen3-0.6B"}, "replicas": 1,
                  "scaling": {"minReplicas": 1, "maxReplicas": 2, "wva": {"hpa": {}}}},
            opts=pulumi.ResourceOptions(provider=provider))

    work = tmp / "cel"
    (work / "state").mkdir(parents=True)
    opts = auto.LocalWorkspaceOptions(
        env_vars={**env, "PULUMI_BACKEND_URL": f"file://{work / 'state'}", "PULUMI_CONFIG_PASSPHRASE": DEV_PASSPHRASE},
        work_dir=str(work), pulumi_command=auto.PulumiCommand(root=str(pulumi_home())))
    stack = auto.create_stack(f"cel{uuid.uuid4().hex[:6]}", project_name="tkf-cel", program=program, opts=opts)
    try:
        with pytest.raises(auto.CommandError) as refused:
            stack.up(color="never")
        assert CEL_MESSAGE in str(refused.value)
        assert kube.get(LLMISVC, "LLMInferenceService", "conflict", namespace) is None
    finally:
        stack.destroy(color="never")
        stack.workspace.remove_stack(stack.name)


def _descendants(root: int) -> dict[int, str]:
    """pid → cmdline of every live process whose parent chain reaches root (root itself left out)."""
    return {pid: cmd for pid, cmd in process_tree(root).items() if pid != root}


def test_no_process_left_behind(kube_apiserver: KubeAPIServer, tmp_path: Path) -> None:
    """After the engine runs above: no engine, provider or language host of ours remains, and the only
    server processes are this package's server (stopped by its fixture) and maybe the session's; a
    private one is started and stopped here to check that stopping leaves nothing."""
    from tests.kube.apiserver import start_apiserver, stop_apiserver

    ours = _descendants(os.getpid())
    engine = {p: c for p, c in ours.items() if "pulumi" in c}
    assert engine == {}, engine
    servers = {p for p, c in ours.items() if "tkf-kube-apiserver" in c}
    assert kube_apiserver.pid in servers and len(servers) <= 4, servers  # server + controller-manager, ×2 at most

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
