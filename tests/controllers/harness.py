"""The upstream controllers that consume what we render, run as the cluster would run them.

- KServe v0.20.0's LLMInferenceService controller manager (``cmd/llmisvc``), built by
  ``scripts/build_controllers.sh`` from the Go module proxy, a process of its own with ``KUBECONFIG``
  pointing at the test API server;
- LeaderWorkerSet v0.8.0's controller manager (``sigs.k8s.io/lws`` ``./cmd``), built the same way;
- the kube-controller-manager's workload controllers (deployment, replicaset, statefulset, job),
  which ``tkf-kube-apiserver --controllers`` starts beside the GC and namespace controllers.

No kubelet runs: the Pods they write stay Pending, so conditions that need a running pod
(Ready, Available) wait, and the tests say which. Each manager serves the admission webhooks its chart
registers, with a certificate the harness signs (tests/controllers/webhooks.py), and the API server
calls them: admission is the real one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml

from tests.controllers.webhooks import WebhookServer
from tests.kube.apiserver import tools_bin
from tests.ports import Reservation, reserve
from tkf_infra.config.charts import LWS_NAMESPACE

#: The controllers tkf-kube-apiserver runs for this tier: deletion needs the first two; the next four
#: turn Deployments, StatefulSets and Jobs into Pods; the last gives each namespace its `default`
#: ServiceAccount, whose pull secrets KServe copies onto the accounts it writes.
KCM_CONTROLLERS = ("garbage-collector-controller,namespace-controller,deployment-controller,"
                   "replicaset-controller,statefulset-controller,job-controller,serviceaccount-controller")
KSERVE_MANAGER = "kserve-llmisvc-manager"
LWS_MANAGER = "lws-manager"
#: The namespace KServe's chart installs into; the manager reads its ConfigMap there (POD_NAMESPACE).
KSERVE_NAMESPACE = "kserve"
READY_TIMEOUT_S = 120.0


def binary(name: str) -> Path:
    path = tools_bin() / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run scripts/build_controllers.sh (or make test)")
    return path


@dataclass
class Manager:
    """One running controller manager: its process, its log, the port its health probe answers on (reserved
    until it stops: the manager binds it itself, and a second listener, its webhook, rules out reading it back)."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    probe: Reservation

    @property
    def probe_port(self) -> int:
        return self.probe.port

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> float:
        """Until ``/readyz`` answers 200; a manager that exits first fails with its log."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{self.probe_port}/readyz", timeout=2).status_code == 200:
                    return time.monotonic() - start
            time.sleep(0.5)
        raise TimeoutError(f"{self.name} not ready after {timeout:.0f} s:\n{self.log_tail()}")

    def stop(self) -> None:
        try:
            self._stop()
        finally:
            self.probe.release()

    def _stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


def _start(name: str, argv: list[str], env: dict[str, str], workdir: Path, probe: Reservation) -> Manager:
    log = workdir / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env={"PATH": "/usr/bin:/bin", **env}, cwd=workdir, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    return Manager(name, proc, log, probe)


def start_kserve(kubeconfig: Path, workdir: Path, webhook: WebhookServer) -> Manager:
    """KServe's LLMInferenceService manager: reconciler, validators, defaulters, conversion webhooks."""
    workdir.mkdir(parents=True, exist_ok=True)
    probe = reserve()
    argv = [str(binary(KSERVE_MANAGER)), "--metrics-addr=0", f"--health-probe-addr=127.0.0.1:{probe.port}",
            f"--webhook-port={webhook.port}", "--leader-elect=false", "--zap-log-level=info"]
    # cmd/llmisvc has no cert-dir flag: controller-runtime's default, $TMPDIR/k8s-webhook-server/serving-certs.
    env = {"KUBECONFIG": str(kubeconfig), "TMPDIR": str(webhook.tmpdir), "POD_NAMESPACE": KSERVE_NAMESPACE,
           "HOME": str(workdir)}
    return _start(KSERVE_MANAGER, argv, env, workdir, probe)


def start_lws(kubeconfig: Path, workdir: Path, webhook: WebhookServer) -> Manager:
    """LWS's manager: the LeaderWorkerSet and pod controllers, its defaulting, validating and pod webhooks.

    Its configuration file (``--config``, the format of the chart's ``lws-manager-config``) turns off its
    internal certificate rotation, which would write a Secret and patch the webhook configurations' caBundle:
    here the harness's certificate and CA stand in, as they do for KServe."""
    workdir.mkdir(parents=True, exist_ok=True)
    probe = reserve()
    config = workdir / "lws-config.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": "config.lws.x-k8s.io/v1alpha1", "kind": "Configuration",
        "leaderElection": {"leaderElect": False}, "internalCertManagement": {"enable": False},
        "webhook": {"port": webhook.port, "certDir": str(webhook.cert_dir)},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{probe.port}"}, "metrics": {"bindAddress": "0"}}))
    argv = [str(binary(LWS_MANAGER)), f"--config={config}", "--zap-log-level=info"]
    env = {"KUBECONFIG": str(kubeconfig), "POD_NAMESPACE": LWS_NAMESPACE, "HOME": str(workdir)}
    return _start(LWS_MANAGER, argv, env, workdir, probe)
