"""The cluster tier's control plane: the real kube-scheduler and the controllers a cluster runs, kwok's
simulated kubelets, a volume provisioner and a GPU device plugin the harness runs — so that what the
program renders is scheduled, bound and made Ready (or not) as on a cluster, with nothing faked in the
API server.

- ``tkf-kube-apiserver --cluster`` (scripts/build_kube_apiserver.sh): etcd, kube-apiserver, the real
  kube-scheduler (v1.36.3, same binary) and the kube-controller-manager's controllers the tier needs
  (tools/kube-apiserver/cluster.go: workloads, node lifecycle and taint eviction, the persistent-volume
  binder, endpoints and EndpointSlices, service accounts). Pods' default tolerations of a NotReady or
  unreachable node are ``NOT_READY_TOLERATION_S`` (kube-apiserver's flag), not 300 s: a lost node's pods
  are evicted within a test's patience.
- kwok v0.8.0 (scripts/build_kube_apiserver.sh builds it beside the API server), managing the Nodes
  labelled ``KWOK_LABEL`` (tests.cluster.nodes makes them): it renews their Leases, so the
  node-lifecycle controller sees them healthy, and plays the stages in ``tests/cluster/stages/`` on
  their pods: Pending → Running → Ready in a few seconds, Job pods Succeeded, and the faults a test
  asks for (``set_pod_fault``; ``nodes.mark_not_ready``).
- ``tests.cluster.storage.Provisioner``: a stand-in for local-path-provisioner (node-local volumes, bound
  on first consumer) and for a shared filesystem (bound at once), thread of the test process.
- ``tests.cluster.nodes.DevicePlugin``: what the GPU Operator's mig-manager and device plugin do for a
  node's ``nvidia.com/mig.config`` label: advertise its MIG slices (thread of the test process).

Every server binds a port it picks and is found through its process (tests/ports.py); kwok serves nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.cluster.nodes import KWOK_LABEL, DevicePlugin
from tests.cluster.storage import Provisioner, install_storage_classes
from tests.kube.apiserver import KubeAPIServer, start_apiserver, stop_apiserver, tools_bin
from tests.kube.client import KubeClient, Obj

STAGES_DIR = Path(__file__).parent / "stages"
#: The annotation the tier's fault stages read (tests/cluster/stages/SOURCES.md).
POD_FAULT_ANNOTATION = "tkf.test/pod-fault"
POD_FAULTS = ("never-ready", "crash-loop", "fail")
#: kwok's Lease duration: renewed every quarter of it; the node-lifecycle controller's grace is 40 s.
NODE_LEASE_S = 40
#: Seconds a pod tolerates its node NotReady or unreachable before taint eviction (default 300).
NOT_READY_TOLERATION_S = 10
#: Pod IPs kwok hands out (its default, 10.0.0.0/24, holds 254), apart from tkf-kube-apiserver's Service range
#: (10.96.0.0/16, tools/kube-apiserver/main.go).
POD_CIDR = "10.244.0.0/16"
KWOK_BUILD_HINT = "{path} is missing: run scripts/build_kube_apiserver.sh (or scripts/setup.sh --dev)"


@dataclass
class Cluster:
    """A running cluster: the API server (scheduler and controllers inside), kwok, and the harness's
    provisioner and device plugin threads."""

    apiserver: KubeAPIServer
    workdir: Path
    kwok: subprocess.Popen[bytes]
    kwok_log: Path
    provisioner: Provisioner
    device_plugin: DevicePlugin
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def kubeconfig(self) -> Path:
        return self.apiserver.kubeconfig

    def client(self) -> KubeClient:
        return self.apiserver.client()

    def check_alive(self) -> None:
        """Fail with the log of whichever part of the cluster has died."""
        if self.kwok.poll() is not None:
            raise RuntimeError(f"kwok exited with {self.kwok.returncode}:\n{_tail(self.kwok_log)}")
        for loop in (self.provisioner, self.device_plugin):
            if loop.error is not None:
                raise RuntimeError(f"{type(loop).__name__} failed: {loop.error!r}")


def _tail(path: Path, chars: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


def kwok_binary() -> Path:
    path = tools_bin() / "kwok"
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(KWOK_BUILD_HINT.format(path=path), pytrace=False)
    return path


def stages_file(workdir: Path) -> Path:
    """Every stage of tests/cluster/stages/ in one kwok config file."""
    path = workdir / "kwok-stages.yaml"
    path.write_text("\n---\n".join(p.read_text() for p in sorted(STAGES_DIR.glob("*.yaml"))))
    return path


def start_kwok(kubeconfig: Path, workdir: Path) -> tuple[subprocess.Popen[bytes], Path]:
    log = workdir / "kwok.log"
    argv = [str(kwok_binary()), f"--kubeconfig={kubeconfig}", f"--config={stages_file(workdir)}",
            f"--manage-nodes-with-label-selector={KWOK_LABEL[0]}={KWOK_LABEL[1]}",
            f"--node-lease-duration-seconds={NODE_LEASE_S}", f"--cidr={POD_CIDR}", "--node-ip=10.243.0.1"]
    with log.open("wb") as out:
        # HOME: kwok would read ~/.kwok/kwok.yaml too.
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True,
                                env={"PATH": "/usr/bin:/bin", "HOME": str(workdir)})
    return proc, log


def _stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@contextlib.contextmanager
def running_cluster(workdir: Path, *, scheduler_config: Path | None = None,
                    server_args: list[str] | None = None) -> Iterator[Cluster]:
    """A cluster of its own for the block (about 10 s to start): ``scheduler_config`` a
    KubeSchedulerConfiguration to run instead of the default profile (its kubeconfig is filled in);
    ``server_args`` more tkf-kube-apiserver flags (admission webhooks: tests/controllers/webhooks.py)."""
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    args = ["--cluster", *(server_args or [])]
    if scheduler_config is not None:
        args.append(f"--scheduler-config={scheduler_config}")
    flags = [f"--default-not-ready-toleration-seconds={NOT_READY_TOLERATION_S}",
             f"--default-unreachable-toleration-seconds={NOT_READY_TOLERATION_S}"]
    proc, server = start_apiserver(workdir / "apiserver", extra_args=flags, server_args=args)
    stack = contextlib.ExitStack()
    stack.callback(stop_apiserver, proc)
    try:
        kwok, kwok_log = start_kwok(server.kubeconfig, workdir)
        stack.callback(_stop, kwok)
        with server.client() as kube:
            install_storage_classes(kube)
        provisioner = Provisioner(server.kubeconfig)
        stack.callback(provisioner.stop)
        plugin = DevicePlugin(server.kubeconfig)
        stack.callback(plugin.stop)
        cluster = Cluster(server, workdir, kwok, kwok_log, provisioner, plugin)
        cluster.timings["start"] = round(time.monotonic() - t0, 1)
        with stack:
            yield cluster
    except BaseException:
        stack.close()
        raise


# ------------------------------------------------------------------------------------------------
# Pods: what the scheduler said, and the faults a test asks kwok for
# ------------------------------------------------------------------------------------------------


def condition(obj: Obj, kind: str) -> Obj | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def unscheduled(kube: KubeClient, namespace: str | None = None, label_selector: str | None = None) -> dict[str, str]:
    """Each pod the scheduler could not place (``namespace/name``) → its PodScheduled message, the
    scheduler's own words ("0/4 nodes are available: 4 Insufficient nvidia.com/gpu. …")."""
    out = {}
    for pod in kube.list_objects("v1", "Pod", namespace, label_selector):
        cond = condition(pod, "PodScheduled")
        if cond and cond.get("status") == "False":
            meta = pod["metadata"]
            out[f"{meta['namespace']}/{meta['name']}"] = str(cond.get("message", ""))
    return out


def pod_ready(pod: Obj) -> bool:
    cond = condition(pod, "Ready")
    return bool(cond and cond.get("status") == "True")


def wait_pods(kube: KubeClient, namespace: str, label_selector: str | None = None, *, count: int = 1,
              timeout: float = 120.0) -> list[Obj]:
    """Until the selected pods (at least ``count``) are all Ready (or Succeeded: a Job's); a
    timeout names every pod not there yet with its phase and, when unscheduled, the scheduler's message."""
    pods: list[Obj] = []

    def done() -> bool:
        nonlocal pods
        pods = kube.list_objects("v1", "Pod", namespace, label_selector)
        done = [p for p in pods if pod_ready(p) or (p.get("status") or {}).get("phase") == "Succeeded"]
        return len(pods) >= count and len(done) == len(pods)

    try:
        kube.wait_for(done, f"pods {label_selector or ''} in {namespace} Ready", timeout, interval=0.5)
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}: {describe_pods(pods)}") from None
    return pods


def describe_pods(pods: list[Obj]) -> str:
    """One line per pod: node, phase, readiness and the scheduler's message when it has one."""
    lines = []
    for p in pods:
        sched = condition(p, "PodScheduled") or {}
        msg = f" [{sched.get('message')}]" if sched.get("status") == "False" else ""
        lines.append(f"{p['metadata']['name']} on {p['spec'].get('nodeName') or '-'}: {p['status'].get('phase')}, "
                     f"ready={pod_ready(p)}{msg}")
    return "; ".join(lines) or "(no pods)"


def set_pod_fault(kube: KubeClient, namespace: str, pod: str, fault: str | None) -> None:
    """Make kwok play a fault on a pod (``POD_FAULTS``: never-ready, crash-loop, fail), even once it is
    Ready; ``None`` clears the mark (kwok does not undo a played fault: delete the pod for a fresh one)."""
    if fault is not None and fault not in POD_FAULTS:
        raise ValueError(f"fault {fault!r} is not one of {POD_FAULTS}")
    annotate_pod(kube, namespace, pod, {POD_FAULT_ANNOTATION: fault})


def annotate_pod(kube: KubeClient, namespace: str, pod: str, annotations: dict[str, str | None]) -> None:
    """Merge ``annotations`` into a pod's (None removes one): how a test tells kwok's stages what to play."""
    kube.request("PATCH", f"/api/v1/namespaces/{namespace}/pods/{pod}", json={"metadata": {"annotations": annotations}},
                 headers={"Content-Type": "application/merge-patch+json"})
