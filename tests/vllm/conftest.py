"""Fixtures of the real-vLLM tier (marker ``vllm``): the vLLM virtualenv, a tiny local model, the dev
stack rendered per backend, and vLLM servers started from the rendered pods' own command lines.

Cost and order: a vLLM start is ~100 s and 3–5 GB of RAM on CPU, so one server runs at a time.
``PodServers`` keeps the current one while tests ask for the same (backend, model) and stops it
before starting another; the collection hook below groups tests by the server they use so each
is started once. The key rotation (test_rotation.py) runs after the other tests of the vllm
backend's pod, which it starts from and stops, and overlaps two servers for a while, as a rolling
update does. A pod is its vLLM plus its metrics sidecar. Everything lives in one temporary
directory removed at the end of the session.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.vllm.argv import fake_vllm, run_oracle, vllm_version
from tests.vllm.install import build_tiny_model, vllm_venv_path
from tests.vllm.pod import (
    PodCommand,
    deployment_command,
    kserve_command,
    load_manifests,
    localize,
    localize_sidecar,
    project_config_maps,
    sidecar_command,
)
from tests.vllm.server import Service, start_service, start_vllm
from tests.vllm.stacks import RenderedStack, render_stack
from tkf_infra import names

HERE = Path(__file__).parent
_TIMINGS: list[str] = []  # reported in the terminal summary


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tier; group its tests by the vLLM server they use, so each server starts once."""
    slots = [n for n, item in enumerate(items) if HERE in Path(str(item.fspath)).parents]
    ordered = sorted((items[n] for n in slots), key=_server_order)
    for n, item in zip(slots, ordered, strict=True):
        item.add_marker(pytest.mark.vllm)
        items[n] = item


def _server_order(item: pytest.Item) -> int:
    """0: tests on the kserve pod; 1: the vllm pod; 2: the key rotation (starts from the vllm pod, stops it);
    3: tests starting the embedding model's pod; 4: the LoRA stack's pod (test_lora_serving.py)."""
    if "test_lora_serving" in item.nodeid:
        return 4
    callspec = getattr(item, "callspec", None)
    if "kserve_pod" in getattr(item, "fixturenames", ()) or (callspec and "kserve" in callspec.params.values()):
        return 0
    if "test_rotation" in item.nodeid:
        return 2
    return 3 if "embedding" in item.name else 1


@pytest.fixture(scope="session")
def vllm_venv() -> Path:
    return vllm_venv_path()


@pytest.fixture(scope="session")
def tier_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="tkf-vllm-tier-"))
    yield path
    shutil.rmtree(path)


@pytest.fixture(scope="session")
def tiny_model(vllm_venv: Path, tier_dir: Path) -> Path:
    started = time.monotonic()
    out = build_tiny_model(vllm_venv, tier_dir / "tiny-qwen2", tier_dir)
    _TIMINGS.append(f"tiny model built in {time.monotonic() - started:.1f} s")
    return out


class Stacks:
    """The dev stack rendered per backend, each on first use."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._done: dict[str, RenderedStack] = {}

    def get(self, backend: str) -> RenderedStack:
        if backend not in self._done:
            started = time.monotonic()
            self._done[backend] = render_stack(backend, self.workdir / f"stack-{backend}")
            _TIMINGS.append(f"dev stack ({backend} backend) up + outputs in {time.monotonic() - started:.1f} s")
        return self._done[backend]


@pytest.fixture(scope="session")
def stacks(engine_ready: None, tier_dir: Path) -> Stacks:
    return Stacks(tier_dir)


@dataclass
class RunningPod:
    """A rendered pod's processes running for real (vLLM and its metrics sidecar), with what the stack
    says about it."""

    backend: str
    model: str
    stack: RenderedStack
    command: PodCommand
    server: Service
    metrics: Service
    endpoint: dict[str, Any] = field(default_factory=dict)

    def stop(self, *, check_shm: bool = True) -> None:
        """vLLM first (its own checks see its own leftovers), then the sidecar."""
        try:
            self.server.stop(check_shm=check_shm)
        finally:
            self.metrics.stop()


def start_pod(stack: RenderedStack, model: str, *, venv: Path, model_dir: Path, scratch: Path) -> RunningPod:
    """Run the pod ``stack`` rendered for ``model``: vLLM from the serving container (the kserve backend's
    with KServe's preset), then the metrics sidecar as the pod runs it, both from the rendered spec
    (vLLM with the host's ``HOST_ENV``)."""
    manifests = load_manifests(stack.render_dir)
    workload = names.workload(model)
    vllm = stack.backend == "vllm"
    command = deployment_command(manifests, workload) if vllm else kserve_command(manifests, workload)
    argv, env = localize(command, model_dir=model_dir, port=0, scratch=scratch)  # vLLM binds a port of its own
    server = start_vllm(argv, env, port=None, api_key=command.env.get("VLLM_API_KEY"), venv=venv, workdir=scratch)
    _TIMINGS.append(f"vLLM from the {stack.backend} backend's pod ({model}, {scratch.name}) ready in "
                    f"{server.started_in_s:.1f} s")
    try:
        sidecar = sidecar_command(manifests, workload)
        files = project_config_maps(manifests, workload, scratch / "metrics-volumes")
        metrics = start_service("metrics", localize_sidecar(sidecar, port=0, upstream_port=server.port,
                                                            files=files),
                                sidecar.env, port=None, health_path="/metrics", workdir=scratch / "metrics",
                                path=f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin", check_shm=False)
    except BaseException:
        server.stop()
        raise
    return RunningPod(stack.backend, model, stack, command, server, metrics, stack.endpoint(model))


class PodServers:
    def __init__(self, venv: Path, model_dir: Path, stacks: Stacks, workdir: Path) -> None:
        self.venv, self.model_dir, self.stacks, self.workdir = venv, model_dir, stacks, workdir
        self.current: RunningPod | None = None

    def start(self, stack: RenderedStack, model: str, scratch: str) -> RunningPod:
        """A pod the caller owns (and stops): it may run beside the current one."""
        return start_pod(stack, model, venv=self.venv, model_dir=self.model_dir, scratch=self.workdir / scratch)

    def get(self, backend: str, model: str) -> RunningPod:
        if self.current and (self.current.backend, self.current.model) == (backend, model):
            return self.current
        self.close()
        self.current = self.start(self.stacks.get(backend), model, f"pod-{backend}-{model}")
        return self.current

    def close(self, *, check_shm: bool = True) -> None:
        if self.current:
            current, self.current = self.current, None
            current.stop(check_shm=check_shm)


@pytest.fixture(scope="session")
def pods(vllm_venv: Path, tiny_model: Path, stacks: Stacks, tier_dir: Path) -> Iterator[PodServers]:
    servers = PodServers(vllm_venv, tiny_model, stacks, tier_dir)
    try:
        yield servers
    finally:
        servers.close()


@pytest.fixture(scope="session")
def oracle(vllm_venv: Path, tier_dir: Path) -> Callable[..., dict[str, Any]]:
    """``oracle(cases, show=())``: vLLM's verdict per command line (tests/vllm/argv.py, oracle.py)."""

    def run(cases: dict[str, list[str]], show: tuple[str, ...] = ()) -> dict[str, Any]:
        return run_oracle(vllm_venv, tier_dir / "oracle-home", cases, show)

    return run


@pytest.fixture(scope="session")
def fake_bin(tier_dir: Path) -> Path:
    """A directory whose ``vllm`` records the argv a pod's shell hands it (tests/vllm/argv.py)."""
    return fake_vllm(tier_dir / "oracle-bin", f"{vllm_version()}+cpu")


#: The model of the dev stack with tool calling enabled (enableAutoToolChoice + hermes).
TOOL_MODEL = "qwen-0-5b"


@pytest.fixture
def vllm_pod(pods: PodServers) -> RunningPod:
    """The dev stack's tool-calling model, run from the ``vllm`` backend's Deployment."""
    return pods.get("vllm", TOOL_MODEL)


@pytest.fixture
def kserve_pod(pods: PodServers) -> RunningPod:
    """The same model, run from the pod KServe would make of the ``kserve`` backend's service."""
    return pods.get("kserve", TOOL_MODEL)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for line in _TIMINGS:
        terminalreporter.write_line(f"vllm tier: {line}")
