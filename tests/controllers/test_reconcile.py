"""What we render, reconciled by the controllers that consume it: KServe v0.20.0's LLMInferenceService
manager, LWS v0.8.0's manager and the kube-controller-manager's workload controllers, on a real
kube-apiserver that calls every admission webhook the charts register (tests/controllers/harness.py,
webhooks.py).

One `up` of a prod-like stack per backend (the platform from its vendored charts, then single GPU,
tensor parallel with n-gram speculative decoding, multi-node, and the dev CPU models), with hostile
catalog strings in `extraArgs`. KServe's and LWS's managers start during that `up`, as soon as the CRDs
they watch are served, so their webhooks judge what the rest of the `up` creates; then the tests read what
was written:

- every LLMInferenceService is reconciled: KServe combines its presets, writes the Deployment (or the
  LeaderWorkerSet of a multi-node model) and its router objects (RouterReady), and says why it is not
  Ready (no kubelet: the pods stay Pending) — a rejected, mis-merged or unreconcilable object fails here;
- the workload KServe wrote carries our args, resources, node selection, tolerations, volumes and
  labels, and the Pending pods the workload controllers made from it carry ``tkf.io/model``, which
  our alias Service and NetworkPolicy select;
- its container, run the way the kubelet starts it (env resolved from the Secret, ``$(VAR)``
  expanded, the preset's real bash with a stand-in ``vllm``), hands vLLM every catalog string byte
  for byte and runs none of them;
- the multi-node model's LeaderWorkerSet (KServe's, and the vllm backend's own) becomes a leader
  StatefulSet, a worker StatefulSet per group and their Pending pods, defaulted and labelled by LWS's
  webhooks (v0.8.0's reconciler dereferences the ``rollingUpdateConfiguration`` only its defaulting
  webhook sets, pkg/controllers/leaderworkerset_controller.go:266), carrying our args, env and resources;
- every admission webhook the charts register for what we create was called and refused nothing
  (kube-apiserver's own per-webhook call counts);
- on kserve, tests/vllm/pod.py's emulation of KServe's merge gives the pod KServe wrote for every profile
  (tests/controllers/emulation.py): the rest of the vLLM tier starts that emulation without a server.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from components import metrics_proxy
from components.model_serving import KSERVE_OWNED_LABELS
from tests.controllers.emulation import assert_emulation_is_kserves, emulated_command
from tests.controllers.harness import Manager, start_kserve, start_lws
from tests.controllers.webhooks import (
    StartWhenServed,
    Webhooks,
    chart_webhook_names,
    install_cert_manager_crds,
    webhook_calls,
)
from tests.engine_fixtures import EngineStack
from tests.kube.apiserver import KubeAPIServer
from tests.kube.client import KubeAPIError, KubeClient
from tests.kube.platform.readback import H100_LABELS, LLMISVC, LWS, container
from tests.kube.platform.test_up_against_apiserver import (
    CPU_MODELS,
    H100_TAINT,
    LLAMA_405B,
    QWEN3_8B,
    QWEN_72B,
    cli,
    target_config,
)
from tests.vllm.argv import fake_vllm, run_recorded, vllm_version
from tests.vllm.kubelet import pod_process
from tests.vllm.pod import kubelet_expand, resolve_env
from tkf_infra import names

pytestmark = [pytest.mark.apiserver, pytest.mark.engine]

#: A chat template (vLLM takes the template text itself) holding what a shell or Go template would run.
HOSTILE_TEMPLATE = "{{{{ messages }}}} $(touch {marker}) `touch {marker}`; a \"b\" 'c' $(HOME) $$ {{{{- end }}}}"
GENERATION = '{"temperature": 0.5, "top_p": 0.9}'
SPECULATIVE = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}
TIMINGS: dict[str, float] = {}
#: What `deployed` hands a test: the serving namespace, the file a hostile string would create, the stack.
Deployed = tuple[str, Path, EngineStack]
#: The managers of the running test, whose logs a timeout shows.
MANAGERS: list[Manager] = []
RECONCILE_TIMEOUT_S = 240.0


DATA = Path(__file__).resolve().parents[1] / "data"
#: The single-GPU model autoscales: KServe writes its VariantAutoscaling and ScaledObject (the vllm backend: ours).
SCALING = {"minReplicas": 1, "maxReplicas": 3}
#: The Prometheus the stack names (nothing answers there: no KEDA or WVA controller runs in this tier).
PROMETHEUS_URL = "http://prometheus.monitoring.svc:9090"
#: How KEDA reaches it (`serving.prometheusAuth`): KServe must copy it into the trigger of the ScaledObject it writes.
PROMETHEUS_AUTH = {"authModes": "bearer", "triggerAuthentication": "prometheus-reader",
                   "kind": "ClusterTriggerAuthentication", "insecureSkipVerify": True}
SCALING_CRDS = (DATA / "crds" / "keda.sh_scaledobjects-v2.18.0.yaml",
                DATA / "crds" / "llmd.ai_variantautoscalings-v0.7.0.yaml")


def catalog(marker: Path, scaled: bool = False) -> list[dict[str, Any]]:
    """``scaled``: the single-GPU model autoscales (`SCALING`); the stack then names a Prometheus."""
    hostile = ["--chat-template", HOSTILE_TEMPLATE.format(marker=marker), "--override-generation-config", GENERATION]
    tp = {**QWEN_72B, "speculativeConfig": {k: v for k, v in SPECULATIVE.items() if k != "prompt_lookup_max"}}
    first = {**QWEN3_8B, "extraArgs": hostile, **({"scaling": SCALING} if scaled else {})}
    return [first, tp, LLAMA_405B, *CPU_MODELS]


#: The CRDs each manager watches, served before it starts: KServe decides at start whether to watch
#: HTTPRoutes, Gateways and LeaderWorkerSets (IsCrdAvailable, pkg/controller/v1alpha2/llmisvc/controller.go).
LWS_CRDS = ["leaderworkersets.leaderworkerset.x-k8s.io"]
KSERVE_CRDS = ["llminferenceservices.serving.kserve.io", "llminferenceserviceconfigs.serving.kserve.io",
               "httproutes.gateway.networking.k8s.io", "gateways.gateway.networking.k8s.io", *LWS_CRDS,
               "scaledobjects.keda.sh", "variantautoscalings.llmd.ai"]


@pytest.fixture
def deployed(kube_apiserver: KubeAPIServer, kube: KubeClient, webhooks: Webhooks,
             lean_engine_env: dict[str, str], make_stack: Callable[..., EngineStack],
             tmp_path: Path) -> Iterator[Callable[..., Deployed]]:
    with reconciled_deploys(kube_apiserver, kube, webhooks, lean_engine_env, make_stack, tmp_path) as deploy:
        yield deploy


@contextmanager
def reconciled_deploys(kube_apiserver: KubeAPIServer, kube: KubeClient, webhooks: Webhooks,
                       lean_engine_env: dict[str, str], make_stack: Callable[..., EngineStack],
                       tmp_path: Path) -> Iterator[Callable[..., Deployed]]:
    """`up` of a stack on one backend, LWS's manager (and on kserve KServe's) started during it.

    `deploy(backend, models=None, scaled=False)`: ``models`` is the catalog (default: this module's, whose
    hostile template writes the returned marker if any string runs; ``scaled``: its autoscaled form)."""
    managers = MANAGERS
    stacks: list[EngineStack] = []
    starters: list[StartWhenServed] = []

    def launcher(start: Callable[..., Manager], piece: str) -> Callable[[], Manager]:
        def launch() -> Manager:
            m = start(kube_apiserver.kubeconfig, tmp_path / piece, webhooks.servers[piece])
            managers.append(m)
            return m
        return launch

    def deploy(backend: str, models: list[dict[str, Any]] | None = None, scaled: bool = False) -> Deployed:
        marker = tmp_path / f"ran-{backend}"
        es = make_stack(platform=True, extra_env=lean_engine_env)
        stacks.append(es)
        models = catalog(marker, scaled) if models is None else models
        serving = target_config(es, kube_apiserver, backend, models)
        # KEDA's and WVA's CRDs stand in for their installations (tkf-infra installs neither): the plan
        # reads that the cluster serves their APIs, and KServe watches what it writes for an autoscaled model.
        for crd_file in SCALING_CRDS:
            crd = yaml.load(crd_file.read_text(), Loader=yaml.CSafeLoader)
            kube.apply(crd)
            kube.wait_crd_served(crd, timeout=120)
        if any("scaling" in m for m in models):
            def name_prometheus(c: dict[str, Any]) -> None:
                c["tkf-infra:prometheusUrl"] = PROMETHEUS_URL
                c["tkf-infra:serving"]["prometheusAuth"] = PROMETHEUS_AUTH
            es.edit_config(name_prometheus)
        first = len(starters)  # this deploy's
        starters.append(StartWhenServed(kube_apiserver.client, LWS_CRDS, launcher(start_lws, "lws")))
        if backend == "kserve":
            # cert-manager's webhook is not buildable here (tests/controllers/webhooks.py): someone else's.
            es.edit_config(lambda c: c["tkf-infra:platform"].setdefault("certManager", {})
                           .update(alreadyInstalled=True))
            install_cert_manager_crds(kube)
            starters.append(StartWhenServed(kube_apiserver.client, KSERVE_CRDS, launcher(start_kserve, "kserve")))
        t = time.monotonic()
        es.stack.up(color="never", on_output=lambda _: None)
        TIMINGS[f"up {backend}"] = round(time.monotonic() - t, 1)
        for starter in starters[first:]:
            m = starter.wait()
            TIMINGS[f"{m.name} ready"] = round(m.wait_ready(), 1)
        return serving, marker, es

    yield deploy
    for starter in starters:  # so that no manager starts after the ones running are stopped
        starter.cancel()
    for m in managers:
        m.stop()
    managers.clear()
    # The server is thrown away with the test: forget the stacks instead of a `destroy` (minutes for the
    # platform's charts) that make_stack's teardown would otherwise run against it.
    for es in stacks:
        es.stack.workspace.remove_stack(es.stack.name, force=True)


def assert_kserve_scaling(kube: KubeClient, namespace: str, name: str, scaling: dict[str, int]) -> None:
    """KServe wrote the autoscaler path of an autoscaled model (scaling.go at v0.20.0): WVA's
    VariantAutoscaling and a KEDA ScaledObject on its Deployment with our range, whose Prometheus trigger
    reads WVA's `wva_desired_replicas` from the Prometheus our install put in its inferenceservice-config, with
    the stack's `serving.prometheusAuth` (KServe's `prometheusTrigger` reads it from the same config)."""
    va = wait(f"KServe's VariantAutoscaling of {name}",
              partial(kube.get, "llmd.ai/v1alpha1", "VariantAutoscaling", f"{name}-kserve-va", namespace))
    assert (va["spec"]["minReplicas"], va["spec"]["maxReplicas"]) == (scaling["minReplicas"], scaling["maxReplicas"])
    assert va["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": f"{name}-kserve"}
    so = wait(f"KServe's ScaledObject of {name}",
              partial(kube.get, "keda.sh/v1alpha1", "ScaledObject", f"{name}-kserve-keda", namespace))
    spec = so["spec"]
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (scaling["minReplicas"], scaling["maxReplicas"])
    assert spec["scaleTargetRef"]["name"] == f"{name}-kserve"
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metadata"]["serverAddress"] == PROMETHEUS_URL, trigger
    assert f'variant_name="{name}-kserve-va"' in trigger["metadata"]["query"], trigger
    assert trigger["authenticationRef"] == {"name": PROMETHEUS_AUTH["triggerAuthentication"],
                                            "kind": PROMETHEUS_AUTH["kind"]}, trigger
    assert (trigger["metadata"]["authModes"], trigger["metadata"]["unsafeSsl"]) == ("bearer", "true"), trigger


def assert_webhooks_judged(kube: KubeClient, pieces: list[str]) -> None:
    """Every webhook of these pieces' charts for what we create (v1alpha2, the version we write; LWS's all)
    was called by the server, and refused nothing."""
    calls = webhook_calls(kube)
    want = {n for p in pieces for n in chart_webhook_names()[p] if "v1alpha1" not in n}
    assert {n for n in want if calls.get(n, {}).get("false", 0) > 0} == want, calls
    assert not {n: c for n, c in calls.items() if c.get("true")}, calls


def assert_lws_webhook_refuses(kube: KubeClient, namespace: str, lws_name: str) -> None:
    """A copy of our LeaderWorkerSet with a rollout its CRD schema accepts and only LWS's validating webhook
    refuses (maxUnavailable and maxSurge both 0), sent as a dry run: the server's answer is the webhook's."""
    lws = kube.get(LWS, "LeaderWorkerSet", lws_name, namespace)
    assert lws is not None
    rollout = {"type": "RollingUpdate", "rollingUpdateConfiguration": {"maxUnavailable": 0, "maxSurge": 0}}
    probe = {"apiVersion": LWS, "kind": "LeaderWorkerSet", "metadata": {"name": f"{lws_name}-probe"},
             "spec": {**lws["spec"], "rolloutStrategy": rollout}}
    with pytest.raises(KubeAPIError) as refused:
        kube.request("POST", f"/apis/{LWS}/namespaces/{namespace}/leaderworkersets?dryRun=All", json=probe)
    assert 'admission webhook "vleaderworkerset.kb.io" denied the request' in refused.value.message, refused.value
    assert "must not be 0 when `maxSurge` is 0" in refused.value.message, refused.value


def assert_lws_groups(kube: KubeClient, namespace: str, lws_name: str, model: dict[str, Any],
                      bin_dir: Path) -> list[str]:
    """LWS turned the LeaderWorkerSet into its leader StatefulSet, one worker StatefulSet per group and
    their (Pending) pods, through its webhooks; returns the argv vLLM gets on the leader."""
    lws = wait(f"LeaderWorkerSet {lws_name}", partial(kube.get, LWS, "LeaderWorkerSet", lws_name, namespace))
    # Set only by LWS's defaulting webhook; v0.8.0's reconciler dereferences it.
    assert lws["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"], lws["spec"]
    leader_sts = wait(f"LWS's leader StatefulSet {lws_name}",
                      partial(kube.get, "apps/v1", "StatefulSet", lws_name, namespace))
    assert leader_sts["metadata"]["ownerReferences"][0]["name"] == lws_name
    wait(f"LWS's worker StatefulSet {lws_name}-0",
         partial(kube.get, "apps/v1", "StatefulSet", f"{lws_name}-0", namespace))
    size = model["nodeCount"]

    def group() -> list[dict[str, Any]]:
        pods = [p for p in kube.list_objects("v1", "Pod", namespace)
                if p["metadata"].get("labels", {}).get("leaderworkerset.sigs.k8s.io/name") == lws_name]
        return pods if len(pods) == size else []

    pods = {p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"]: p
            for p in wait(f"the {size} pods of {lws_name}", group)}
    assert sorted(pods) == [str(i) for i in range(size)], sorted(pods)
    for index, pod in pods.items():
        labels, spec = pod["metadata"]["labels"], pod["spec"]
        assert pod["status"]["phase"] == "Pending" and labels["leaderworkerset.sigs.k8s.io/group-index"] == "0"
        main = container(spec)
        env = {v["name"]: v.get("value") for v in main.get("env", [])}
        # What LWS's pod webhook injects: the group's size, this pod's rank and where the leader is.
        assert env["LWS_GROUP_SIZE"] == str(size) and env["LWS_WORKER_INDEX"] == index, env
        assert env["LWS_LEADER_ADDRESS"].startswith(f"{lws_name}-0."), env
        assert main["resources"]["limits"]["nvidia.com/gpu"] == str(model["gpusPerNode"])
        assert spec["nodeSelector"] == H100_LABELS and {**H100_TAINT, "operator": "Equal"} in spec["tolerations"]
        # Every rank loads its pipeline stages' weights from our weight cache, never from the Hub.
        assert env.get("HF_HUB_OFFLINE") == "1" and any("persistentVolumeClaim" in v for v in spec["volumes"]), index
    assert_sidecar_runs_our_source(kube, namespace, pods["0"]["spec"])
    return vllm_argv(kube, namespace, pods["0"]["spec"], bin_dir)


def conditions(obj: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions", [])}


def wait(what: str, check: Callable[[], Any], timeout: float = RECONCILE_TIMEOUT_S) -> Any:
    """``check()``'s first truthy answer; on a timeout the managers' logs say why."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := check():
            return result
        time.sleep(1)
    logs = "".join(f"\n--- {m.name}:\n{m.log_tail()}" for m in MANAGERS)
    raise AssertionError(f"timed out waiting for {what}{logs}")


def pods_of(kube: KubeClient, namespace: str, model: str) -> Callable[[], list[dict[str, Any]]]:
    """The pods our alias Service selects for a model (``tkf.io/model``)."""
    return lambda: [p for p in kube.list_objects("v1", "Pod", namespace)
                    if p["metadata"].get("labels", {}).get("tkf.io/model") == model]


def vllm_argv(kube: KubeClient, namespace: str, pod_spec: dict[str, Any], bin_dir: Path,
              extra_env: dict[str, str] | None = None) -> list[str]:
    """What vLLM receives from the pod's ``main`` container: started as the kubelet does it."""
    main = container(pod_spec)
    # The Secrets its env references, as the server stores them, for the same resolution the vllm tier uses.
    refs = {v["valueFrom"]["secretKeyRef"]["name"] for v in main.get("env", []) if "valueFrom" in v}
    secrets = {("Secret", name): kube.get("v1", "Secret", name, namespace) for name in refs}
    env = resolve_env(main.get("env", []), {k: v for k, v in secrets.items() if v is not None})
    argv = [kubelet_expand(a, env) for a in [*main["command"], *main.get("args", [])]]
    return run_recorded(argv, {**env, **(extra_env or {})}, bin_dir)


def assert_sidecar_runs_our_source(kube: KubeClient, namespace: str, pod_spec: dict[str, Any]) -> None:
    """The pod's metrics sidecar (KServe merges ours in by name) runs the file its ConfigMap volume projects,
    and that ConfigMap is on the server holding this repository's metrics_proxy.py: a volume lost in the
    merge, or a name the stack never applied, is a sidecar that cannot start."""
    (sidecar,) = [c for c in pod_spec["containers"] if c["name"] == "metrics"]
    script = sidecar["command"][1]
    # The source's mount is the one the script lives under (the fleet's facts ConfigMap is mounted beside it).
    (mount,) = [m for m in sidecar["volumeMounts"] if script.startswith(m["mountPath"] + "/")]
    (volume,) = [v for v in pod_spec["volumes"] if v["name"] == mount["name"]]
    configmap = kube.get("v1", "ConfigMap", volume["configMap"]["name"], namespace)
    assert configmap is not None, f"the sidecar mounts ConfigMap {volume['configMap']['name']}, not on the server"
    assert configmap["data"][script.removeprefix(mount["mountPath"] + "/")] == Path(metrics_proxy.__file__).read_text()


def flag_value(argv: list[str], flag: str) -> str:
    assert argv.count(flag) == 1, (flag, argv)
    return argv[argv.index(flag) + 1]


def test_kserve_reconciles_every_profile_and_hands_vllm_the_catalog_as_written(
        kube: KubeClient, deployed: Callable[..., Deployed], tmp_path: Path) -> None:
    serving, marker, _ = deployed("kserve", scaled=True)
    bin_dir = fake_vllm(tmp_path / "bin", vllm_version())
    models = catalog(marker, scaled=True)
    single = [m for m in models if m.get("nodeCount", 1) == 1]

    for m in models:
        name = names.workload(m["name"])

        def combined(name: str = name) -> dict[str, Any] | None:
            """Once KServe has merged the presets and judged the workload it wrote."""
            isvc = kube.get(LLMISVC, "LLMInferenceService", name, serving)
            conds = conditions(isvc)
            done = conds.get("PresetsCombined", {}).get("status") == "True" and "WorkloadsReady" in conds
            return isvc if done else None

        isvc = wait(f"KServe to combine the presets of {name}", combined)
        conds = conditions(isvc)
        # Nothing runs without a kubelet: Ready waits, and says it is the workload that is not ready.
        assert conds["Ready"]["status"] == "False", conds
        assert conds["RouterReady"]["status"] == "True", conds
        # No KEDA controller runs: an autoscaled model's ScaledObject never gets the conditions KServe waits for.
        waiting = {"Ready", "WorkloadsReady", "MainWorkloadReady", "WorkerWorkloadReady"}
        failed = {t: c for t, c in conds.items() if c["status"] == "False" and t not in waiting
                  and not (t == "ScalingReady" and c.get("reason") == "ScaledObjectProgressing")}
        assert not failed, f"{name}: KServe could not reconcile: {json.dumps(failed, indent=1)}"
        if "scaling" in m:
            assert_kserve_scaling(kube, serving, name, m["scaling"])

    for m in single:
        name = names.workload(m["name"])
        dep = wait(f"KServe's Deployment of {name}",
                   partial(kube.get, "apps/v1", "Deployment", f"{name}-kserve", serving))
        owner = dep["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("LLMInferenceService", name)
        labels = dep["spec"]["template"]["metadata"]["labels"]
        assert labels["app.kubernetes.io/part-of"] == "llminferenceservice", labels  # KServe's own, not ours
        assert labels["tkf.io/model"] == m["name"] and not {k for k in labels if k in KSERVE_OWNED_LABELS} - {
            "app.kubernetes.io/part-of", "app.kubernetes.io/name", "app.kubernetes.io/component",
            "kserve.io/component", "llm-d.ai/role"}
        pod = dep["spec"]["template"]["spec"]
        # The replica set and the (Pending) pods the workload controllers wrote, found by our alias Service's selector.
        pods = wait(f"the pods of {name}", pods_of(kube, serving, m["name"]))
        assert all(p["status"]["phase"] == "Pending" for p in pods)
        argv = vllm_argv(kube, serving, pod, bin_dir)
        assert_sidecar_runs_our_source(kube, serving, pod)
        assert flag_value(argv, "--served-model-name") == m["servedName"]
        if "maxModelLen" in m:  # else modelDefaults'
            assert flag_value(argv, "--max-model-len") == str(m["maxModelLen"])
        if m is models[0]:
            assert flag_value(argv, "--chat-template") == HOSTILE_TEMPLATE.format(marker=marker)
            assert flag_value(argv, "--override-generation-config") == GENERATION
            assert not marker.exists(), "a catalog string ran as a command in the pod"
        if "speculativeConfig" in m:
            assert json.loads(flag_value(argv, "--speculative-config")) == m["speculativeConfig"]
        if m.get("gpusPerNode", 0):
            main = container(pod)
            assert main["resources"]["limits"]["nvidia.com/gpu"] == str(m["gpusPerNode"])
            assert pod["nodeSelector"] == H100_LABELS
            assert {**H100_TAINT, "operator": "Equal"} in pod["tolerations"]
            assert any("persistentVolumeClaim" in v for v in pod["volumes"])

    multi = names.workload(LLAMA_405B["name"])
    argv = assert_lws_groups(kube, serving, f"{multi}-kserve-mn", LLAMA_405B, bin_dir)
    assert flag_value(argv, "--pipeline-parallel-size") == str(LLAMA_405B["pipelineParallelSize"])
    assert flag_value(argv, "--served-model-name") == LLAMA_405B["servedName"]
    assert_webhooks_judged(kube, ["kserve", "lws"])
    assert_emulation_holds_for_every_profile(kube, serving, models)


def assert_emulation_holds_for_every_profile(kube: KubeClient, serving: str, models: list[dict[str, Any]]) -> None:
    """tests/vllm/pod.py's merge (the pod the rest of the vLLM tier starts, without a server) gives the pod
    KServe wrote for every profile of the catalog — single GPU (autoscaled) with hostile extraArgs, tensor
    parallel with n-gram speculative decoding, multi-node on our pipeline-parallel preset, the dev CPU
    models — read from its Deployment or LeaderWorkerSet leader template (tests/controllers/emulation.py)."""
    # The operator's Hugging Face token Secret (hfTokenSecret), which the kubelet needs to start the pod.
    kube.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": LLAMA_405B["hfTokenSecret"],
                 "namespace": serving}, "stringData": {"HF_TOKEN": "hf-test-token"}})
    for m in models:
        workload = names.workload(m["name"])
        if m.get("nodeCount", 1) > 1:
            lws = kube.get(LWS, "LeaderWorkerSet", f"{workload}-kserve-mn", serving)
            assert lws is not None, workload
            spec = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
        else:
            dep = kube.get("apps/v1", "Deployment", f"{workload}-kserve", serving)
            assert dep is not None, workload
            spec = dep["spec"]["template"]["spec"]
        assert_emulation_is_kserves(emulated_command(kube, serving, workload), pod_process(kube, serving, spec),
                                    workload)


def test_vllm_backend_deployments_become_pods_that_get_the_catalog_as_written(
        kube: KubeClient, deployed: Callable[[str], Deployed], tmp_path: Path) -> None:
    """Our own Deployments, turned into pods by the deployment and replicaset controllers."""
    serving, marker, _ = deployed("vllm")
    bin_dir = fake_vllm(tmp_path / "bin", vllm_version())
    models = catalog(marker)
    for m in models:
        name = names.workload(m["name"])
        if m.get("nodeCount", 1) > 1:
            argv = assert_lws_groups(kube, serving, name, m, bin_dir)
            assert flag_value(argv, "--pipeline-parallel-size") == str(m["pipelineParallelSize"])
            assert flag_value(argv, "--served-model-name") == m["servedName"]
            continue
        pods = wait(f"the pods of {name}", pods_of(kube, serving, m["name"]))
        assert len(pods) == m.get("replicas", 1) and all(p["status"]["phase"] == "Pending" for p in pods)
        argv = vllm_argv(kube, serving, pods[0]["spec"], bin_dir)
        assert_sidecar_runs_our_source(kube, serving, pods[0]["spec"])
        assert flag_value(argv, "--served-model-name") == m["servedName"]
        if m is models[0]:
            assert flag_value(argv, "--chat-template") == HOSTILE_TEMPLATE.format(marker=marker)
            assert flag_value(argv, "--override-generation-config") == GENERATION
            assert not marker.exists(), "a catalog string ran as a command in the pod"
    assert_webhooks_judged(kube, ["lws"])
    assert_lws_webhook_refuses(kube, serving, names.workload(LLAMA_405B["name"]))  # after: it counts as a refusal


def _bind(kube: KubeClient, pod: dict[str, Any], node: str) -> None:
    """What the scheduler does: the Binding subresource puts the pod on a node."""
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    kube.request("POST", f"/api/v1/namespaces/{ns}/pods/{name}/binding",
                 json={"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                       "target": {"apiVersion": "v1", "kind": "Node", "name": node}})


def _ready(kube: KubeClient, pod: dict[str, Any]) -> None:
    """What the kubelet reports once vLLM answers /health: the pod Running and Ready."""
    ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    conds = [{"type": t, "status": "True", "lastTransitionTime": now} for t in
             ("PodScheduled", "Initialized", "ContainersReady", "Ready")]
    kube.request("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}/status",
                 json={"status": {"phase": "Running", "conditions": conds, "startTime": now}},
                 headers={"Content-Type": "application/merge-patch+json"})


def test_status_gives_each_model_its_phase_from_what_the_controllers_wrote(
        kube: KubeClient, kube_apiserver: KubeAPIServer,
        deployed: Callable[[str], Deployed]) -> None:
    """Downloading → Pending → Loading → Ready as the job controller, the scheduler and the kubelet would
    move a model along (the first from the real job controller; the others written as those three write
    them), and Failed for a failed download — each judged from the objects KServe and the workload
    controllers keep (tkf_infra/live/lifecycle.py)."""
    from tests.kube.jobs import complete_job, fail_job
    from tkf_infra.live.cluster import client_from_kubeconfig
    from tkf_infra.live.lifecycle import Phase, read_lifecycle

    serving, marker, es = deployed("kserve")
    models = [m for m in catalog(marker) if m.get("nodeCount", 1) == 1]
    endpoints = [{"name": m["name"], "namespace": serving, "model": f"{m['repo']}@{m['revision']}"} for m in models]

    def phases() -> dict[str, Any]:
        with client_from_kubeconfig(str(kube_apiserver.kubeconfig), None) as client:
            return {r.model: r for r in read_lifecycle(client, endpoints)}

    def settled(want: Phase, models: list[dict[str, Any]]) -> Callable[[], dict[str, Any] | None]:
        def check() -> dict[str, Any] | None:
            now = phases()
            return now if all(now[m["name"]].phase is want for m in models) else None
        return check

    now = wait("every model Downloading", settled(Phase.DOWNLOADING, models))
    assert all(r.cache.value == "downloading" and r.desired == 1 and not r.ready for r in now.values()), now
    first, broken, *rest = models
    for m in (first, *rest):
        complete_job(kube, serving, names.weight_download_job(m["repo"], m["revision"]))
    # One model's download fails (written as the job controller does: tests/kube/jobs.py).
    fail_job(kube, serving, names.weight_download_job(broken["repo"], broken["revision"]))
    now = wait(f"{broken['name']} Failed", settled(Phase.FAILED, [broken]))
    assert "weight download failed" in now[broken["name"]].reason and now[broken["name"]].cache.value == "failed"
    now = wait("the others Pending (weights cached, no pod on a node)", settled(Phase.PENDING, [first, *rest]))
    assert all(now[m["name"]].cache.value == "complete" for m in (first, *rest)), now
    pod = wait(f"a pod of {first['name']}", pods_of(kube, serving, first["name"]))[0]
    kube.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-node-0", "labels": H100_LABELS}})
    _bind(kube, pod, "gpu-node-0")
    wait(f"{first['name']} Loading", settled(Phase.LOADING, [first]))
    _ready(kube, pod)
    now = wait(f"{first['name']} Ready", settled(Phase.READY, [first]))
    assert (now[first["name"]].ready, now[first["name"]].desired) == (1, 1)
    assert all(now[m["name"]].phase is Phase.PENDING for m in rest), now
    # What an operator types: `status` on the stack (dev-based: no Prometheus, so the cluster's view only).
    code, summary, err = cli(es, "status")
    assert code == 1, (code, err)  # one model Failed
    shown = {name: row["phase"] for name, row in summary["lifecycle"].items()}
    assert shown[first["name"]] == "Ready" and shown[broken["name"]] == "Failed", shown
    assert summary["lifecycle"][first["name"]]["replicas"] == {"desired": 1, "ready": 1}
