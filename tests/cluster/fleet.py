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

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.cluster.harness import Cluster, describe_pods, pod_ready, unscheduled
from tests.controllers.harness import Manager, start_kserve, start_lws
from tests.controllers.webhooks import StartWhenServed, Webhooks, WebhookServer
from tests.engine_fixtures import EngineStack
from tests.kube.client import KubeClient, Obj
from tests.kube.platform.readback import GATEWAY_NS, MONITORING_NS
from tkf_infra import names
from tkf_infra.config.quantity import parse_quantity
from tkf_infra.ops.stacks import DEV_PASSPHRASE

#: Seconds the same pods stay unschedulable, with no pod changing, before the watchdog stops `up`.
STUCK_S = 45.0
#: The simulated download bandwidth (GiB/s): a download Job's pod completes after its cache's size / this.
DOWNLOAD_GIB_PER_S = 20.0
COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
COMPLETE_JITTER = "pod-complete.stage.kwok.x-k8s.io/jitter-delay"
LWS_CRDS = ["leaderworkersets.leaderworkerset.x-k8s.io"]
KSERVE_CRDS = ["llminferenceservices.serving.kserve.io", "llminferenceserviceconfigs.serving.kserve.io",
               "httproutes.gateway.networking.k8s.io", "gateways.gateway.networking.k8s.io", *LWS_CRDS]


def aim_at(es: EngineStack, cluster: Cluster, *, pools: list[dict[str, Any]], models: list[dict[str, Any]],
           backend: str = "kserve", storage_class: str | None = None, platform: bool = True) -> str:
    """Point the stack at the cluster with `up`'s waiting on; ``platform``: install it from the vendored charts
    (cert-manager excepted: its webhook is not buildable here, tests/controllers/webhooks.py), else every piece
    ``alreadyInstalled``. Returns the serving namespace."""
    serving = f"llm-{backend}-{uuid.uuid4().hex[:6]}"
    path = es.project / f"Pulumi.{es.stack.name}.yaml"
    doc = yaml.safe_load(path.read_text())
    cfg = doc["config"]
    cfg["tkf-infra:cluster"] = {"mode": "kubeconfig", "kubeconfig": str(cluster.kubeconfig)}  # skipAwait off
    cfg["tkf-infra:namespaces"] = {"serving": serving, "gateway": GATEWAY_NS, "monitoring": MONITORING_NS}
    cfg["tkf-infra:serving"].update(backend=backend, allowCpu=True)
    if storage_class:
        cfg["tkf-infra:serving"]["storageClass"] = storage_class
    for name, piece in cfg["tkf-infra:platform"].items():
        if isinstance(piece, dict):
            piece["alreadyInstalled"] = not platform or name == "certManager"
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
        return (f"up exit {self.returncode} after {self.seconds:.0f} s (stopped by the watchdog: {self.stopped}); "
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


def pace_downloads(kube: KubeClient, namespace: str, paced: set[str], gib_per_s: float = DOWNLOAD_GIB_PER_S) -> None:
    """kwok completes a Job's pod 2–4 s after it is Ready; a weight download takes as long as its checkpoint
    (the 405B's last: on a cluster the order models start in). Each new download pod gets kwok's
    pod-complete delay (and its upper bound: kwok takes the jitter bound when it is below the delay) =
    its cache's size / ``gib_per_s``; kwok re-plans a pod's pending stage when the pod changes."""
    selector = f"{names.COMPONENT_LABEL}={names.WEIGHT_CACHE_COMPONENT}"
    for pod in kube.list_objects("v1", "Pod", namespace, selector):
        name = pod["metadata"]["name"]
        claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["spec"].get("volumes") or []
                  if "persistentVolumeClaim" in v]
        if name in paced or not claims:
            continue
        pvc = kube.get("v1", "PersistentVolumeClaim", claims[0], namespace) or {}
        gib = float(parse_quantity(pvc["spec"]["resources"]["requests"]["storage"])) / 2**30
        delay = f"{max(1, round(gib / gib_per_s))}s"
        kube.request("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}",
                     json={"metadata": {"annotations": {COMPLETE_DELAY: delay, COMPLETE_JITTER: delay}}},
                     headers={"Content-Type": "application/merge-patch+json"})
        paced.add(name)


def _snapshot(kube: KubeClient, namespace: str) -> tuple[dict[str, str], frozenset[tuple[str, str, bool]]]:
    pods = kube.list_objects("v1", "Pod", namespace)
    state = frozenset((p["metadata"]["name"], str(p["status"].get("phase")), pod_ready(p)) for p in pods)
    return unscheduled(kube, namespace), state


def cli_up(es: EngineStack, kube: KubeClient, namespace: str, *, timeout: float = 600.0,
           stuck_s: float = STUCK_S) -> UpRun:
    """`python -m tkf_infra up --json` in the project copy (as CI runs it), watched (module doc), its
    downloads paced by their size (:func:`pace_downloads`)."""
    env = {**os.environ, **es.env, "PULUMI_CONFIG_PASSPHRASE": DEV_PASSPHRASE}
    t0 = time.monotonic()
    proc = subprocess.Popen([str(es.project / ".venv" / "bin" / "python"), "-m", "tkf_infra", "up", "--stack",
                             es.stack.name, "--json"], cwd=es.project, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    stopped = False
    last: tuple[dict[str, str], frozenset[tuple[str, str, bool]]] | None = None
    since = looked = time.monotonic()
    paced: set[str] = set()
    while proc.poll() is None:
        time.sleep(0.3)
        pace_downloads(kube, namespace, paced)
        if time.monotonic() - looked < 2:
            continue
        looked = time.monotonic()
        snap = _snapshot(kube, namespace)
        if snap != last:
            last, since = snap, time.monotonic()
        given_up = bool(snap[0]) and time.monotonic() - since > stuck_s
        if given_up or time.monotonic() - t0 > timeout:
            stopped = True
            os.killpg(proc.pid, signal.SIGINT)  # the CLI stops the engine cleanly (exit 7)
            break
    try:
        out, err = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    try:
        summary: dict[str, Any] = json.loads(out)
    except json.JSONDecodeError:
        summary = {}
    stuck, _ = _snapshot(kube, namespace)
    return UpRun(proc.returncode, summary, err, time.monotonic() - t0, stopped, stuck,
                 kube.list_objects("v1", "Pod", namespace), workload_conditions(kube, namespace))


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
