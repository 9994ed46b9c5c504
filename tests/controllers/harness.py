"""The upstream controllers that consume what we render, run as the cluster would run them.

- KServe v0.20.0's LLMInferenceService controller manager (``cmd/llmisvc``), built by
  ``scripts/build_controllers.sh`` from the Go module proxy, a process of its own with ``KUBECONFIG``
  pointing at the test API server;
- the kube-controller-manager's workload controllers (deployment, replicaset, statefulset, job),
  which ``tkf-kube-apiserver --controllers`` starts beside the GC and namespace controllers.

No kubelet runs: the Pods they write stay Pending, so conditions that need a running pod
(Ready, Available) wait, and the tests say which. The manager's webhook server starts with a serving
certificate the harness makes (controller-runtime reads it from
``$TMPDIR/k8s-webhook-server/serving-certs``); the API server does not call it yet (no admission
webhooks on the test servers), but KServe's reconciler runs its own validator on every object.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.kube.apiserver import tools_bin
from tests.vllm.server import free_port

#: The controllers tkf-kube-apiserver runs for this tier: deletion needs the first two; the next four
#: turn Deployments, StatefulSets and Jobs into Pods; the last gives each namespace its `default`
#: ServiceAccount, whose pull secrets KServe copies onto the accounts it writes.
KCM_CONTROLLERS = ("garbage-collector-controller,namespace-controller,deployment-controller,"
                   "replicaset-controller,statefulset-controller,job-controller,serviceaccount-controller")
KSERVE_MANAGER = "kserve-llmisvc-manager"
#: The namespace KServe's chart installs into; the manager reads its ConfigMap there (POD_NAMESPACE).
KSERVE_NAMESPACE = "kserve"
READY_TIMEOUT_S = 120.0


def binary(name: str) -> Path:
    path = tools_bin() / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run scripts/build_controllers.sh (or make test)")
    return path


def serving_cert(cert_dir: Path, host: str = "127.0.0.1") -> Path:
    """A self-signed serving certificate for a webhook server on ``host`` (tls.crt / tls.key), as
    controller-runtime's envtest makes one; returns the certificate (its own CA)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tkf-test-webhook")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host)),
                                                        x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))  # fmt: skip
    cert_dir.mkdir(parents=True, exist_ok=True)
    (cert_dir / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (cert_dir / "tls.key").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                         serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()))  # fmt: skip
    return cert_dir / "tls.crt"


@dataclass
class Manager:
    """One running controller manager: its process, its log, the port its health probe answers on."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    probe_port: int

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
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


def _start(name: str, argv: list[str], env: dict[str, str], workdir: Path, probe_port: int) -> Manager:
    log = workdir / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env={"PATH": "/usr/bin:/bin", **env}, cwd=workdir, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    return Manager(name, proc, log, probe_port)


def start_kserve(kubeconfig: Path, workdir: Path) -> Manager:
    """KServe's LLMInferenceService manager: reconciler, validators, defaulters, conversion webhooks."""
    workdir.mkdir(parents=True, exist_ok=True)
    tmp = workdir / "tmp"
    serving_cert(tmp / "k8s-webhook-server" / "serving-certs")  # controller-runtime's default CertDir
    probe = free_port()
    argv = [str(binary(KSERVE_MANAGER)), "--metrics-addr=0", f"--health-probe-addr=127.0.0.1:{probe}",
            f"--webhook-port={free_port()}", "--leader-elect=false", "--zap-log-level=info"]  # fmt: skip
    env = {"KUBECONFIG": str(kubeconfig), "TMPDIR": str(tmp), "POD_NAMESPACE": KSERVE_NAMESPACE, "HOME": str(workdir)}
    return _start(KSERVE_MANAGER, argv, env, workdir, probe)


