"""pytest plugin: a real Kubernetes API server (tkf-kube-apiserver) for the session.

The binary (embedded etcd + kube-apiserver + garbage-collector and namespace controllers, all on
127.0.0.1) is built by `scripts/build_kube_apiserver.sh`; building takes minutes, so the fixture
never builds: it fails with the command to run when the binary is missing.

Use it from a test module with `pytest_plugins = ["tests.kube.apiserver"]` (or once for all tests
from tests/conftest.py). Fixtures:

- `kube_apiserver` (session): a started server — `.server` (base URL), `.kubeconfig` (path, token +
  CA), `.client()`; stopped at the end by signalling its process group.
- `kube` (session): a KubeClient on it.
- `kube_namespace` (function): a fresh namespace, deleted after the test (not waited for).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.kube.client import KubeClient

BINARY_ENV = "TKF_KUBE_APISERVER_BIN"
BUILD_HINT = (
    "tkf-kube-apiserver not found at {path}. The `apiserver`-marked tests run against a real "
    "kube-apiserver built from Go modules: run `scripts/build_kube_apiserver.sh` first (needs Go; "
    "several minutes cold, instant when up to date), or set TKF_KUBE_APISERVER_BIN to the binary."
)
READY_TIMEOUT_S = 180.0  # a cold start is ~3 s here; the margin is for a loaded 2-core CI machine
STOP_TIMEOUT_S = 30.0

_READY_SECONDS: list[float] = []  # reported in the terminal summary


def tools_bin() -> Path:
    """Where the build scripts put the test tools (scripts/build_kube_apiserver.sh, build_controllers.sh)."""
    home = os.environ.get("TKF_TOOLS_HOME") or str(Path.home() / ".cache" / "tkf-infra")
    return Path(home) / "bin"


def binary_path() -> Path:
    """Where scripts/build_kube_apiserver.sh puts the binary (or $TKF_KUBE_APISERVER_BIN)."""
    if override := os.environ.get(BINARY_ENV):
        return Path(override)
    return tools_bin() / "tkf-kube-apiserver"


def require_binary() -> Path:
    path = binary_path()
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(BUILD_HINT.format(path=path), pytrace=False)
    return path


@dataclass(frozen=True)
class KubeAPIServer:
    server: str  # https://127.0.0.1:<port>
    kubeconfig: Path  # admin bearer token + the CA of the generated serving certificate
    log: Path  # kube-apiserver, etcd and controller-manager stderr
    pid: int  # also the process group id
    ready_seconds: float

    def client(self) -> KubeClient:
        return KubeClient.from_kubeconfig(self.kubeconfig)


def _log_tail(log: Path, lines: int = 40) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _read_ready_line(proc: subprocess.Popen[bytes], log: Path, timeout: float) -> dict[str, object]:
    """The binary prints one JSON line on stdout once /readyz answers and the kubeconfig exists."""
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    buf = b""
    try:
        while b"\n" not in buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"tkf-kube-apiserver not ready after {timeout:.0f}s; log tail:\n{_log_tail(log)}")
            if sel.select(remaining):
                chunk = os.read(proc.stdout.fileno(), 4096)
                if not chunk:  # EOF: the process exited
                    proc.wait(timeout=10)
                    raise RuntimeError(
                        f"tkf-kube-apiserver exited with {proc.returncode} before ready; log tail:\n{_log_tail(log)}"
                    )
                buf += chunk
    finally:
        sel.close()
    ready: dict[str, object] = json.loads(buf.split(b"\n", 1)[0])
    return ready


def stop_apiserver(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group (server + controller-manager child), SIGKILL whatever is left."""
    pgid = proc.pid  # start_new_session=True: the group is this server's alone
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        proc.wait(timeout=10)
    # The group can outlive its (now reaped) leader if a child was orphaned: empty it.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    if proc.stdout is not None:
        proc.stdout.close()


@contextlib.contextmanager
def own_apiserver(workdir: Path) -> Iterator[KubeAPIServer]:
    """A server of the test module's own, stopped when the block ends: for tests whose objects (APIServices,
    webhooks, live Node objects) must not reach the package's shared server."""
    proc, server = start_apiserver(workdir)
    try:
        yield server
    finally:
        stop_apiserver(proc)


def start_apiserver(
    workdir: Path, extra_args: list[str] | None = None, controllers: str | None = None,
    server_args: list[str] | None = None,
) -> tuple[subprocess.Popen[bytes], KubeAPIServer]:
    """Start a server whose files live in workdir; the caller must stop_apiserver() the process.
    ``controllers``: the kube-controller-manager's list (default: garbage collector and namespaces);
    ``server_args``: tkf-kube-apiserver's own flags (``extra_args`` go to kube-apiserver)."""
    binary = require_binary()
    kubeconfig, log = workdir / "kubeconfig", workdir / "tkf-kube-apiserver.log"
    args = [str(binary), "--kubeconfig", str(kubeconfig), "--data-dir", str(workdir / "data")]
    if controllers:
        args.append(f"--controllers={controllers}")
    args += server_args or []
    (workdir / "data").mkdir(parents=True, exist_ok=True)
    if extra_args:
        args += ["--", *extra_args]
    start = time.monotonic()
    with log.open("wb") as log_file:
        # Own session = own process group, so teardown signals exactly this server and its child.
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log_file, start_new_session=True)
    try:
        ready = _read_ready_line(proc, log, READY_TIMEOUT_S)
        server = KubeAPIServer(str(ready["server"]), kubeconfig, log, proc.pid, time.monotonic() - start)
        with server.client() as client:  # trust, but verify: the credentials work and /readyz is 200
            assert client.text("/readyz") == "ok"
    except BaseException:
        stop_apiserver(proc)
        raise
    return proc, server


@pytest.fixture(scope="session")
def kube_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPIServer]:
    proc, server = start_apiserver(tmp_path_factory.mktemp("kube-apiserver"))
    _READY_SECONDS.append(server.ready_seconds)
    try:
        yield server
    finally:
        stop_apiserver(proc)


@pytest.fixture(scope="session")
def kube(kube_apiserver: KubeAPIServer) -> Iterator[KubeClient]:
    with kube_apiserver.client() as client:
        yield client


@pytest.fixture
def kube_namespace(kube: KubeClient) -> Iterator[str]:
    """A fresh namespace per test; deleted afterwards without waiting (the namespace controller finishes it)."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    kube.delete("v1", "Namespace", name)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for seconds in _READY_SECONDS:
        terminalreporter.write_line(f"tkf-kube-apiserver: ready in {seconds:.1f}s")
