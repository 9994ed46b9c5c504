"""The CLI's own `up` on the cluster tier, waiting for real (``cluster.skipAwait`` off): a stack aimed at a
running cluster, KServe's and LWS's managers started as soon as their CRDs are served (as in
tests/controllers), and a watchdog that stops a run the scheduler has given up on instead of letting it
wait out its timeouts.

Why a watchdog: on a cluster `up` waits for every model to be Ready (the LeaderWorkerSet's and the
LLMInferenceService's ``pulumi.com/waitFor``, each download Job), for as long as a model's start-up may
take — many minutes. A pod the scheduler cannot place never becomes Ready; once the same pods have been
unschedulable for ``STUCK_S`` with nothing else moving, the run is interrupted (SIGINT: the engine saves
its state, exit 7) and the test reads the scheduler's messages.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from components.pod_meta import WAIT_FOR_WEIGHTS
from tests.cluster.harness import (
    POD_FAULT_ANNOTATION,
    Cluster,
    annotate_pod,
    describe_pods,
    pod_ready,
    running_cluster,
    unscheduled,
)
from tests.cluster.nodes import create_nodes, pool_nodes
from tests.cluster.storage import SHARED_CLASS
from tests.controllers.harness import Manager, start_kserve, start_lws
from tests.controllers.webhooks import (
    StartWhenServed,
    Webhooks,
    WebhookServer,
    install_cert_manager_crds,
    webhook_servers,
)
from tests.engine_fixtures import EngineStack, add_adapters
from tests.kube.client import KubeClient, Obj
from tests.kube.platform.readback import GATEWAY_NS, MONITORING_NS
from tests.kube.platform.test_up_against_apiserver import QWEN3_8B
from tkf_infra import names
from tkf_infra.config.quantity import parse_quantity
from tkf_infra.ops.stacks import DEV_PASSPHRASE
from tkf_infra.ops.summary import FAILED_STATUSES
from tkf_infra.sizing.adapter_facts import AdapterFacts

#: Seconds the same pods stay unschedulable, with no pod changing, before the watchdog stops `up`.
STUCK_S = 45.0
#: The simulated download bandwidth (GiB/s): a download Job's pod completes after its cache's size / this.
DOWNLOAD_GIB_PER_S = 20.0
COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
COMPLETE_JITTER = "pod-complete.stage.kwok.x-k8s.io/jitter-delay"
READY_DELAY = "pod-ready.stage.kwok.x-k8s.io/delay"
READY_JITTER = "pod-ready.stage.kwok.x-k8s.io/jitter-delay"
#: What kwok's pod-weights-arrived stage waits for on a serving pod (tests/cluster/stages/SOURCES.md).
WEIGHTS_ANNOTATION, WEIGHTS_ARRIVED = "tkf.test/weights", "arrived"
WEIGHT_CACHE_SELECTOR = f"{names.COMPONENT_LABEL}={names.WEIGHT_CACHE_COMPONENT}"
LWS_CRDS = ["leaderworkersets.leaderworkerset.x-k8s.io"]
KSERVE_CRDS = ["llminferenceservices.serving.kserve.io", "llminferenceserviceconfigs.serving.kserve.io",
               "httproutes.gateway.networking.k8s.io", "gateways.gateway.networking.k8s.io", *LWS_CRDS]


def committed_stack(stack: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(node pools, models) of Pulumi.<stack>.yaml as committed, the stack's modelDefaults applied as the
    program applies them."""
    cfg = yaml.safe_load((names.PROJECT_ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]
    defaults = cfg.get("tkf-infra:modelDefaults", {})
    return cfg["tkf-infra:nodePools"], [{**defaults, **m} for m in cfg["tkf-infra:models"]]


#: Pulumi.prod.yaml's pool as committed: 4 nodes x 8 H100, the NVIDIA taint, p5.48xlarge's allocatable.
PROD_POOL: dict[str, Any] = committed_stack("prod")[0][0]
#: A node outside the stack's pools (an EKS system node group): the platform's pods run there.
SYSTEM_POOL = {"name": "system", "gpusPerNode": 0, "nodeCount": 1,
               "nodeResources": {"cpu": "15890m", "memory": "61408Mi"}}


def small(name: str, gpus: int, base: dict[str, Any] = QWEN3_8B, **extra: Any) -> dict[str, Any]:
    """A catalog entry like ``base`` (Qwen3-8B by default) under another name, on ``gpus`` GPUs (TP)."""
    return {**base, "name": name, "servedName": name, "gpusPerNode": gpus, "tensorParallelSize": gpus, **extra}


def aim_at(es: EngineStack, cluster: Cluster, *, pools: list[dict[str, Any]], models: list[dict[str, Any]],
           backend: str = "kserve", storage_class: str | None = None, platform: bool = True,
           cluster_settings: dict[str, Any] | None = None, gpu_operator: dict[str, Any] | None = None) -> str:
    """Point the stack at the cluster with `up`'s waiting on; ``platform``: install it from the vendored charts
    (cert-manager excepted: its webhook is not buildable here, tests/controllers/webhooks.py), else every piece
    ``alreadyInstalled``; ``cluster_settings``: more of the stack's ``cluster`` block (readyTimeoutSeconds);
    ``gpu_operator``: the stack's ``platform.gpuOperator`` settings (migStrategy, timeSlicingReplicas).
    Returns the serving namespace."""
    serving = f"llm-{backend}-{uuid.uuid4().hex[:6]}"
    path = es.project / f"Pulumi.{es.stack.name}.yaml"
    doc = yaml.safe_load(path.read_text())
    cfg = doc["config"]
    cfg["tkf-infra:cluster"] = {"mode": "kubeconfig", "kubeconfig": str(cluster.kubeconfig),  # skipAwait off
                                **(cluster_settings or {})}
    cfg["tkf-infra:namespaces"] = {"serving": serving, "gateway": GATEWAY_NS, "monitoring": MONITORING_NS}
    cfg["tkf-infra:serving"].update(backend=backend, allowCpu=True)
    if storage_class:
        cfg["tkf-infra:serving"]["storageClass"] = storage_class
    for name, piece in cfg["tkf-infra:platform"].items():
        if isinstance(piece, dict):
            piece["alreadyInstalled"] = not platform or name == "certManager"
    cfg["tkf-infra:platform"]["gpuOperator"].update(gpu_operator or {})
    cfg["tkf-infra:nodePools"] = pools
    cfg["tkf-infra:models"] = models
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return serving


@dataclass
class UpRun:
    """What the CLI's `up` ended with, and what the cluster showed then."""

    returncode: int
    summary: dict[str, Any]
    stderr: str
    seconds: float
    stopped: bool
    """The watchdog interrupted it: pods stayed unschedulable."""
    stuck: dict[str, str] = field(default_factory=dict)
    """Pod → the scheduler's message, for every pod unschedulable at the end."""
    pods: list[Obj] = field(default_factory=list)
    workloads: dict[str, str] = field(default_factory=dict)
    """Each LLMInferenceService and LeaderWorkerSet → its conditions (``Type=Status``), as `up` left them."""

    def explain(self) -> str:
        failed = {m: row for m, row in (self.summary.get("models") or {}).items()
                  if isinstance(row, dict) and row.get("status") in FAILED_STATUSES}
        return (f"up exit {self.returncode} after {self.seconds:.0f} s (stopped by the watchdog: {self.stopped}); "
                f"models that failed: {failed}; "
                f"unschedulable: {self.stuck}; pods: {describe_pods(self.pods)}; workloads: {self.workloads}; "
                f"stderr tail: {self.stderr[-1500:]}")


#: The custom resources whose conditions `UpRun.workloads` shows.
WORKLOAD_KINDS = (("serving.kserve.io/v1alpha2", "LLMInferenceService"),
                  ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"))


def workload_conditions(kube: KubeClient, namespace: str) -> dict[str, str]:
    out = {}
    for api_version, kind in WORKLOAD_KINDS:
        try:
            objs = kube.list_objects(api_version, kind, namespace)
        except LookupError:  # not served: the platform was not installed
            continue
        for o in objs:
            conds = (o.get("status") or {}).get("conditions") or []
            out[f"{kind}/{o['metadata']['name']}"] = ", ".join(f"{c['type']}={c['status']}" for c in conds)
    return out


def _claims(pod: Obj) -> list[str]:
    return [v["persistentVolumeClaim"]["claimName"] for v in pod["spec"].get("volumes") or []
            if "persistentVolumeClaim" in v]


@dataclass
class Kubelets:
    """What a node's kubelet and the pod's own processes take time for, played on kwok's pods by annotations
    (tests/cluster/stages/SOURCES.md), each tick of `cli_up`'s watch:

    - a weight download takes its cache's size / ``gib_per_s`` (kwok completes a Job's pod 2–4 s after it is
      Ready, whatever it downloads): the 405B's last, as on a cluster;
    - a serving pod's ``wait-for-weights`` init container ends only once a download Job of its cache has
      completed and none is running (kwok's stage waits for ``WEIGHTS_ANNOTATION``, written here): on a
      cluster it polls for that Job's marker file;
    - vLLM takes ``load_s`` to load its weights before its readiness probe passes (None: kwok's 2–4 s);
    - ``faults``: model → a fault of ``tests.cluster.harness.POD_FAULTS`` its serving pods play instead of
      turning Ready (written with the release, before any pod could turn Ready)."""

    gib_per_s: float = DOWNLOAD_GIB_PER_S
    load_s: float | None = None
    faults: dict[str, str] = field(default_factory=dict)
    paced: set[str] = field(default_factory=set)
    released: set[str] = field(default_factory=set)

    def tick(self, kube: KubeClient, namespace: str) -> None:
        jobs = kube.list_objects("batch/v1", "Job", namespace, WEIGHT_CACHE_SELECTOR)
        done: set[str] = set()
        running: set[str] = set()
        for job in jobs:
            claims = _claims(job["spec"]["template"])
            complete = any(c["type"] == "Complete" and c["status"] == "True"
                           for c in (job.get("status") or {}).get("conditions") or [])
            (done if complete else running).update(claims)
        for pod in kube.list_objects("v1", "Pod", namespace):
            name, claims = pod["metadata"]["name"], _claims(pod)
            labels = pod["metadata"].get("labels") or {}
            if labels.get(names.COMPONENT_LABEL) == names.WEIGHT_CACHE_COMPONENT and claims and name not in self.paced:
                self._pace(kube, namespace, name, claims[0])
            waits = any(c["name"] == WAIT_FOR_WEIGHTS for c in pod["spec"].get("initContainers") or [])
            if waits and name not in self.released and claims and set(claims) <= done and not running & set(claims):
                self._release(kube, namespace, name, labels.get(names.MODEL_LABEL))

    def _pace(self, kube: KubeClient, namespace: str, pod: str, claim: str) -> None:
        pvc = kube.get("v1", "PersistentVolumeClaim", claim, namespace) or {}
        gib = float(parse_quantity(pvc["spec"]["resources"]["requests"]["storage"])) / 2**30
        delay = f"{max(1, round(gib / self.gib_per_s))}s"
        annotate_pod(kube, namespace, pod, {COMPLETE_DELAY: delay, COMPLETE_JITTER: delay})
        self.paced.add(pod)

    def _release(self, kube: KubeClient, namespace: str, pod: str, model: str | None) -> None:
        annotations: dict[str, str | None] = {WEIGHTS_ANNOTATION: WEIGHTS_ARRIVED}
        if self.load_s is not None:
            annotations |= {READY_DELAY: f"{self.load_s:g}s", READY_JITTER: f"{self.load_s:g}s"}
        if model in self.faults:
            annotations[POD_FAULT_ANNOTATION] = self.faults[model]
        annotate_pod(kube, namespace, pod, annotations)
        self.released.add(pod)


def _snapshot(kube: KubeClient, namespace: str) -> tuple[dict[str, str], frozenset[tuple[str, str, bool]]]:
    pods = kube.list_objects("v1", "Pod", namespace)
    state = frozenset((p["metadata"]["name"], str(p["status"].get("phase")), pod_ready(p)) for p in pods)
    return unscheduled(kube, namespace), state


def _cli_env(es: EngineStack) -> dict[str, str]:
    return {**os.environ, **es.env, "PULUMI_CONFIG_PASSPHRASE": DEV_PASSPHRASE}


def cli_status(es: EngineStack) -> tuple[int, dict[str, Any]]:
    """`python -m tkf_infra status --json` (the cluster's view: no prometheusUrl): (exit code, each model's
    lifecycle row)."""
    proc = subprocess.run([str(es.project / ".venv" / "bin" / "python"), "-m", "tkf_infra", "status", "--stack",
                           es.stack.name, "--json"], cwd=es.project, env=_cli_env(es), capture_output=True,
                          text=True, timeout=120)
    try:
        rows: dict[str, Any] = json.loads(proc.stdout)["lifecycle"]
    except (json.JSONDecodeError, KeyError):
        raise AssertionError(f"status exit {proc.returncode}: {proc.stdout[-800:]} {proc.stderr[-1500:]}") from None
    return proc.returncode, rows


def _watch(proc: subprocess.Popen[str], kube: KubeClient, namespace: str, kubelets: Kubelets, deadline: float,
           stuck_s: float) -> bool:
    """Play the kubelets while the CLI runs; SIGINT it (True) past the deadline or when the same pods stay
    unschedulable ``stuck_s`` with nothing changing."""
    last: tuple[dict[str, str], frozenset[tuple[str, str, bool]]] | None = None
    since = looked = time.monotonic()
    while proc.poll() is None:
        time.sleep(0.3)
        kubelets.tick(kube, namespace)
        if time.monotonic() - looked < 2:
            continue
        looked = time.monotonic()
        snap = _snapshot(kube, namespace)
        if snap != last:
            last, since = snap, time.monotonic()
        if (bool(snap[0]) and time.monotonic() - since > stuck_s) or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGINT)  # the CLI stops the engine cleanly (exit 7)
            return True
    return False


def cli_up(es: EngineStack, kube: KubeClient, namespace: str, *, timeout: float = 600.0,
           stuck_s: float = STUCK_S, kubelets: Kubelets | None = None) -> UpRun:
    """`python -m tkf_infra up --json` in the project copy (as CI runs it), watched (module doc), its pods'
    downloads, weight waits and loading played by ``kubelets`` (:class:`Kubelets`)."""
    kubelets = kubelets or Kubelets()
    env = _cli_env(es)
    t0 = time.monotonic()
    # Files, not pipes: nothing reads the CLI's output until it exits, and a pipe holds 64 KiB — a 150-model
    # `--json` summary filled it and the CLI blocked writing it, holding `up` open forever.
    with tempfile.TemporaryFile("w+") as out_file, tempfile.TemporaryFile("w+") as err_file:
        proc = subprocess.Popen([str(es.project / ".venv" / "bin" / "python"), "-m", "tkf_infra", "up", "--stack",
                                 es.stack.name, "--json"], cwd=es.project, env=env, stdout=out_file,
                                stderr=err_file, text=True, start_new_session=True)
        stopped = _watch(proc, kube, namespace, kubelets, t0 + timeout, stuck_s)
        try:
            proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        out_file.seek(0)
        err_file.seek(0)
        out, err = out_file.read(), err_file.read()
    try:
        summary: dict[str, Any] = json.loads(out)
    except json.JSONDecodeError:
        summary = {}
    stuck, _ = _snapshot(kube, namespace)
    return UpRun(proc.returncode, summary, err, time.monotonic() - t0, stopped, stuck,
                 kube.list_objects("v1", "Pod", namespace), workload_conditions(kube, namespace))


def is_serving_pod(pod: Obj) -> bool:
    """A model's pod, not a weight download Job's."""
    return all(o["kind"] != "Job" for o in pod["metadata"].get("ownerReferences") or [])


def assert_all_ready(run: UpRun, pods: int) -> None:
    """`up` ended by itself, successfully, with at least ``pods`` serving pods (not download Jobs') Ready."""
    assert run.returncode == 0 and not run.stopped, run.explain()
    serving = [p for p in run.pods if is_serving_pod(p)]
    assert len([p for p in serving if pod_ready(p)]) >= pods, run.explain()
    # `up`'s own check after the engine (tkf_infra/ops/ready_check.py) read the cluster and found every model Ready.
    readiness = run.summary.get("readiness") or {}
    assert "notReady" not in readiness and "unreadable" not in readiness, run.explain()


@dataclass
class Managers:
    """KServe's and LWS's managers, each started as soon as the CRDs it watches are served."""

    starters: list[StartWhenServed] = field(default_factory=list)
    running: list[Manager] = field(default_factory=list)

    def start_when_served(self, cluster: Cluster, webhooks: Webhooks, workdir: Path, kserve: bool = True) -> None:
        def launcher(start: Callable[[Path, Path, WebhookServer], Manager], piece: str) -> Callable[[], Manager]:
            def launch() -> Manager:
                m = start(cluster.kubeconfig, workdir / piece, webhooks.servers[piece])
                self.running.append(m)
                return m
            return launch

        self.starters.append(StartWhenServed(cluster.client, LWS_CRDS, launcher(start_lws, "lws")))
        if kserve:
            self.starters.append(StartWhenServed(cluster.client, KSERVE_CRDS, launcher(start_kserve, "kserve")))

    def stop(self) -> None:
        for starter in self.starters:
            starter.cancel()
        for m in self.running:
            m.stop()


class Fleet:
    """One stack on a cluster of its own (the ``fleet`` fixture)."""

    def __init__(self, cluster: Cluster, kube: KubeClient, hooks: Webhooks, make_stack: Callable[..., EngineStack],
                 engine_env: dict[str, str], workdir: Path) -> None:
        self.cluster, self.kube, self.hooks = cluster, kube, hooks
        self._make_stack, self._engine_env, self._workdir = make_stack, engine_env, workdir
        self.managers = Managers()
        self.stacks: list[EngineStack] = []
        self.namespace = ""

    @property
    def es(self) -> EngineStack:
        return self.stacks[-1]

    def up(self, models: list[dict[str, Any]], *, kubelets: Kubelets | None = None, **aim: Any) -> UpRun:
        """`aim` (``aim`` its options), then one `up`."""
        self.aim(models, **aim)
        return self.again(kubelets)

    def aim(self, models: list[dict[str, Any]], *, pools: list[dict[str, Any]] | None = None,
            system_node: bool = True, backend: str = "kserve", platform: bool = True,
            cluster_settings: dict[str, Any] | None = None, gpu_operator: dict[str, Any] | None = None,
            adapters: Sequence[AdapterFacts] = (), config: Callable[[dict[str, Any]], None] | None = None) -> None:
        """The pools' nodes (default: the prod pool) and a system node, a stack of ``models`` aimed at them,
        the managers its platform runs. ``gpu_operator``: its MIG strategy and time-slicing replicas shape the
        nodes too (what the device plugin advertises); ``adapters``: LoRA adapter facts added to the project's
        lock (as `lock` would record them); ``config``: a last edit of the stack file's config map."""
        pools = pools or [PROD_POOL]
        slices = int((gpu_operator or {}).get("timeSlicingReplicas", 0))
        strategy = str((gpu_operator or {}).get("migStrategy", "none"))
        create_nodes(self.kube, [n for p in pools for n in pool_nodes(p, time_slices=slices, mig_strategy=strategy)]
                     + (pool_nodes(SYSTEM_POOL) if system_node else []))
        es = self._make_stack(platform=True, extra_env=self._engine_env)
        self.stacks.append(es)
        self.namespace = aim_at(es, self.cluster, pools=pools, models=models, backend=backend,
                                storage_class=SHARED_CLASS, platform=platform, cluster_settings=cluster_settings,
                                gpu_operator=gpu_operator)
        add_adapters(es.project, adapters)
        if config is not None:
            es.edit_config(config)
        if platform:
            install_cert_manager_crds(self.kube)
            self.managers.start_when_served(self.cluster, self.hooks, self._workdir / "managers",
                                            kserve=backend == "kserve")

    def again(self, kubelets: Kubelets | None = None, timeout: float = 600.0) -> UpRun:
        """One more `up` of the stack as it is now (``timeout``: the watchdog's bound on the whole run)."""
        result = cli_up(self.es, self.kube, self.namespace, kubelets=kubelets, timeout=timeout)
        self.cluster.timings[f"up{len(self.cluster.timings)}"] = round(result.seconds, 1)
        return result

    def status(self) -> tuple[int, dict[str, Any]]:
        return cli_status(self.es)


@contextlib.contextmanager
def own_cluster(workdir: Path, make_stack: Callable[..., EngineStack], engine_env: dict[str, str]) -> Iterator[Fleet]:
    """A cluster of its own with admission webhooks on (KServe's and LWS's managers serve them), and a
    :class:`Fleet` on it; the stacks are removed with it (the cluster goes too: no destroy)."""
    hooks = webhook_servers(workdir / "webhooks")
    try:
        with running_cluster(workdir / "cluster", server_args=hooks.server_args()) as cluster, \
                cluster.client() as kube:
            f = Fleet(cluster, kube, hooks, make_stack, engine_env, workdir)
            try:
                yield f
            finally:
                f.managers.stop()
                for es in f.stacks:
                    es.stack.workspace.remove_stack(es.stack.name, force=True)
            cluster.check_alive()
    finally:
        hooks.release()
