"""Fixtures of the real-vLLM tier (marker ``vllm``): the vLLM virtualenv, a tiny local model, the dev
stack rendered per backend, and vLLM servers started from the rendered pods' own command lines.

Cost and order: a vLLM start is ~100 s and 3–5 GB of RAM on CPU, so one server runs at a time.
``PodServers`` keeps the current one while tests ask for the same (backend, model) and stops it
before starting another; the collection hook below groups tests by the server they use so each
is started once. Everything lives in one temporary directory removed at the end of the session.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.vllm.pod import PodCommand, deployment_command, kserve_command, load_manifests, localize
from tests.vllm.server import Service, free_port, start_vllm
from tests.vllm.stacks import RenderedStack, render_stack
from tkf_infra import names

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent
INSTALL_HINT = "run scripts/install_vllm.sh (make test and scripts/setup.sh --dev do)"
_TIMINGS: list[str] = []  # reported in the terminal summary


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tier; group its tests by the vLLM server they use, so each server starts once."""
    slots = [n for n, item in enumerate(items) if HERE in Path(str(item.fspath)).parents]
    ordered = sorted((items[n] for n in slots), key=_server_order)
    for n, item in zip(slots, ordered, strict=True):
        item.add_marker(pytest.mark.vllm)
        items[n] = item


def _server_order(item: pytest.Item) -> int:
    """0: tests on the kserve pod; 2: tests starting the embedding model's pod; 1: the rest (vllm pod)."""
    callspec = getattr(item, "callspec", None)
    if "kserve_pod" in getattr(item, "fixturenames", ()) or (callspec and "kserve" in callspec.params.values()):
        return 0
    return 2 if "embedding" in item.name else 1


@pytest.fixture(scope="session")
def vllm_venv() -> Path:
    """The virtualenv scripts/install_vllm.sh made (fail, not skip: a skipped tier checks nothing)."""
    path = Path(subprocess.run(["bash", str(ROOT / "scripts" / "install_vllm.sh"), "--print"],
                               capture_output=True, text=True, check=True).stdout.strip())  # fmt: skip
    if not (path / ".tkf-installed").is_file() or not (path / "bin" / "vllm").is_file():
        pytest.fail(f"vLLM is not installed at {path}: {INSTALL_HINT}", pytrace=False)
    return path


@pytest.fixture(scope="session")
def tier_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="tkf-vllm-tier-"))
    yield path
    shutil.rmtree(path)


@pytest.fixture(scope="session")
def tiny_model(vllm_venv: Path, tier_dir: Path) -> Path:
    out = tier_dir / "tiny-qwen2"
    started = time.monotonic()
    env = {"HOME": str(tier_dir / "build-home"), "TMPDIR": str(tier_dir), "PATH": "/usr/bin:/bin"}
    subprocess.run([str(vllm_venv / "bin" / "python"), str(HERE / "tiny_model.py"), str(out)], check=True,
                   capture_output=True, env=env)  # fmt: skip
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
    """A rendered pod's process running for real, with what the stack says about it."""

    backend: str
    model: str
    stack: RenderedStack
    command: PodCommand
    server: Service
    endpoint: dict[str, Any] = field(default_factory=dict)


class PodServers:
    def __init__(self, venv: Path, model_dir: Path, stacks: Stacks, workdir: Path) -> None:
        self.venv, self.model_dir, self.stacks, self.workdir = venv, model_dir, stacks, workdir
        self.current: RunningPod | None = None

    def get(self, backend: str, model: str) -> RunningPod:
        if self.current and (self.current.backend, self.current.model) == (backend, model):
            return self.current
        self.close()
        stack = self.stacks.get(backend)
        manifests = load_manifests(stack.render_dir)
        workload = names.workload(model)
        command = deployment_command(manifests, workload) if backend == "vllm" else kserve_command(manifests, workload)
        port = free_port()
        scratch = self.workdir / f"pod-{backend}-{model}"
        argv, env = localize(command, model_dir=self.model_dir, port=port, scratch=scratch)
        server = start_vllm(argv, env, port=port, api_key=command.env.get("VLLM_API_KEY"), venv=self.venv,
                            workdir=scratch)  # fmt: skip
        _TIMINGS.append(f"vLLM from the {backend} backend's pod ({model}) ready in {server.started_in_s:.1f} s")
        self.current = RunningPod(backend, model, stack, command, server, stack.endpoint(model))
        return self.current

    def close(self) -> None:
        if self.current:
            current, self.current = self.current, None
            current.server.stop()


@pytest.fixture(scope="session")
def pods(vllm_venv: Path, tiny_model: Path, stacks: Stacks, tier_dir: Path) -> Iterator[PodServers]:
    servers = PodServers(vllm_venv, tiny_model, stacks, tier_dir)
    try:
        yield servers
    finally:
        servers.close()


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
