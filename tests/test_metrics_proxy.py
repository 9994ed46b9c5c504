"""The metrics sidecar: where it runs (under mocks) and what it answers (run as the pod runs it, against a
stand-in vLLM that records every request it gets).

The real-vLLM tier runs the same rendered command next to a real vLLM and has Prometheus scrape it
(tests/vllm/test_routes.py, tests/vllm/test_status.py).
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from components import metrics_proxy
from tests.mocks import CPU, MULTI_NODE, SINGLE_GPU, program, stack_doc
from tests.vllm.server import free_port, start_service
from tkf_infra.names import METRICS_PORT, SERVING_PORT

PROBES = ("startupProbe", "livenessProbe", "readinessProbe")


@functools.cache
def pods(backend: str) -> dict[tuple[str, str], dict[str, Any]]:
    """(model, role) -> pod spec, for a single-GPU, a CPU and a multi-node model (built once; not to be edited)."""
    h = program(stack_doc(SINGLE_GPU, CPU, MULTI_NODE, backend=backend), api_key="k")
    assert h.error is None, h.error
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for r in h.resources:
        kind, spec, name = r.inputs.get("kind"), r.inputs.get("spec") or {}, str(r.metadata.get("name"))
        if kind == "LLMInferenceService":
            out[(name, "leader")] = spec["template"]
            if "worker" in spec:
                out[(name, "worker")] = spec["worker"]
        elif kind == "Deployment":
            out[(name, "leader")] = spec["template"]["spec"]
        elif kind == "LeaderWorkerSet":
            out[(name, "leader")] = spec["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
            out[(name, "worker")] = spec["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    return out


@pytest.mark.parametrize("backend", ["kserve", "vllm"])
def test_every_api_serving_pod_runs_the_sidecar_from_its_own_image(backend: str) -> None:
    found = pods(backend)
    assert {role for _, role in found} == {"leader", "worker"}
    for (model, role), pod in found.items():
        by_name = {c["name"]: c for c in pod["containers"]}
        if role == "worker":  # headless ranks serve no API and no metrics
            assert set(by_name) == {"main"}, model
            continue
        assert set(by_name) == {"main", "metrics"}, model
        main, sidecar = by_name["main"], by_name["metrics"]
        assert sidecar["image"] == main["image"]
        assert sidecar["command"] == ["python3", "-c", Path(metrics_proxy.__file__).read_text(),
                                      "--listen", f"0.0.0.0:{METRICS_PORT}",
                                      "--upstream", f"http://127.0.0.1:{SERVING_PORT}/metrics"]
        assert sidecar["ports"] == [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}]
        # No probes: a metrics hiccup must never take the model out of its Service.
        assert not any(p in sidecar for p in PROBES)
        assert sidecar["securityContext"] == main["securityContext"]
        assert sidecar["resources"]["limits"] == {"memory": "64Mi"}
        # The serving container's probes are untouched: /health on 8000.
        assert {main[p]["httpGet"]["port"] for p in PROBES} == {SERVING_PORT}


class _Upstream(BaseHTTPRequestHandler):
    """A stand-in vLLM: /metrics answers, anything else would be an inference route; every request is kept."""

    seen: ClassVar[list[tuple[str, str, dict[str, str]]]] = []

    def _any(self) -> None:
        self.seen.append((self.command, self.path, dict(self.headers)))
        body = b"vllm:num_requests_running 0\n" if self.path == "/metrics" else b"inference!"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _any

    def log_message(self, format: str, *args: object) -> None:
        pass


def _serve_upstream() -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def upstream() -> Iterator[ThreadingHTTPServer]:
    server = _serve_upstream()
    yield server
    server.shutdown()
    server.server_close()


def _run_sidecar(upstream_port: int, workdir: Path) -> Any:
    """The rendered sidecar command, with this host's python and free ports substituted (nothing else)."""
    (_, pod), *_ = pods("vllm").items()
    command = next(c for c in pod["containers"] if c["name"] == "metrics")["command"]
    port = free_port()
    argv = [sys.executable if w == "python3" else w.replace(f":{METRICS_PORT}", f":{port}")
            .replace(f":{SERVING_PORT}/", f":{upstream_port}/") for w in command]
    assert argv[:2] == [sys.executable, "-c"] and argv[3:] == [
        "--listen", f"0.0.0.0:{port}", "--upstream", f"http://127.0.0.1:{upstream_port}/metrics"]
    return start_service("metrics", argv, {}, port=port, health_path="/metrics", workdir=workdir, check_shm=False)


def test_the_sidecar_forwards_get_metrics_and_nothing_else(upstream: ThreadingHTTPServer, tmp_path: Path) -> None:
    sidecar = _run_sidecar(upstream.server_address[1], tmp_path)
    try:
        _Upstream.seen.clear()
        got = httpx.get(f"{sidecar.url}/metrics", headers={"Accept": "text/plain", "Authorization": "Bearer x"})
        assert got.status_code == 200 and got.text == "vllm:num_requests_running 0\n"
        assert got.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        (method, path, headers), = _Upstream.seen
        assert (method, path) == ("GET", "/metrics") and headers.get("Accept") == "text/plain"
        assert "Authorization" not in headers, "nothing but content negotiation is passed on"
        assert httpx.head(f"{sidecar.url}/metrics").status_code == 200
        _Upstream.seen.clear()
        for path in ("/invocations", "/tokenize", "/v1/chat/completions", "/health", "/metrics/../invocations",
                     "/metricsx", "/"):
            for method in ("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
                status = httpx.request(method, f"{sidecar.url}{path}", content=b"{}").status_code
                assert status == 404, (method, path, status)
        for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
            assert httpx.request(method, f"{sidecar.url}/metrics").status_code == 405
        assert _Upstream.seen == [], "a request other than GET /metrics reached vLLM"
        got = httpx.get(f"{sidecar.url}/metrics?name[]=vllm:x")
        assert got.status_code == 200 and _Upstream.seen[-1][1] == "/metrics", "the query is not passed on"
    finally:
        sidecar.stop()


def test_the_sidecar_answers_503_while_vllm_is_down(upstream: ThreadingHTTPServer, tmp_path: Path) -> None:
    sidecar = _run_sidecar(upstream.server_address[1], tmp_path)
    try:
        upstream.shutdown()
        upstream.server_close()  # vLLM gone (restarting, or not up yet)
        got = httpx.get(f"{sidecar.url}/metrics", timeout=30)
        assert got.status_code == 503 and "did not answer" in got.text
    finally:
        sidecar.stop()


def test_the_sidecar_needs_only_the_images_python() -> None:
    """Standard library only, and no syntax newer than Python 3.10 (the vLLM images ship 3.12)."""
    source = Path(metrics_proxy.__file__).read_text()
    imported = {line.split()[1].split(".")[0] for line in source.splitlines()
                if line.startswith(("import ", "from ")) and "__future__" not in line}
    assert imported <= set(sys.stdlib_module_names), imported
    ast.parse(source, feature_version=(3, 10))
    subprocess.run([sys.executable, "-c", source, "--help"], check=True, capture_output=True)
