"""A real Prometheus server scraping local fake exporters, started once per test session.

Mocking the HTTP API would only test our reading of our own assumptions; a real server checks the
PromQL (aggregation, `or` fallbacks, rate(), histogram_quantile, staleness of a target that went
down) against the engine users run. Debian's `prometheus` binary starts in about a second.
"""

from __future__ import annotations

import functools
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.ports import refused_port
from tests.vllm.server import Service, start_service

from .metrics_fixtures import DCGM_NODES, MODELS, dcgm_page, vllm_page

INSTALL_HINT = (
    "Prometheus server binary not found. The `prometheus`-marked tests run against a real server: "
    "install it with `sudo scripts/install_prometheus.sh` (Debian package; does not start a system "
    "service), or set TKF_PROMETHEUS_BIN to a prometheus binary"
)

Page = Callable[[], str]

_STARTUP_SECONDS: list[float] = []  # measured by the session fixture, reported in the summary


class FakeExporter:
    """HTTP server on 127.0.0.1 serving one metrics page per path; a page set to None answers 503."""

    def __init__(self) -> None:
        self._pages: dict[str, Page | None] = {}
        self._lock = threading.Lock()
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with exporter._lock:
                    page = exporter._pages.get(self.path, None)
                    known = self.path in exporter._pages
                if page is None:
                    self.send_response(503 if known else 404)
                    self.end_headers()
                    return
                body = page().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.address = f"127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-exporter", daemon=True)
        self._thread.start()

    def set_page(self, path: str, page: Page | None) -> None:
        with self._lock:
            self._pages[path] = page

    def page(self, path: str) -> Page | None:
        with self._lock:
            return self._pages.get(path)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@dataclass
class PromServer:
    url: str
    exporter: FakeExporter
    startup_seconds: float
    targets: dict[str, str] = field(default_factory=dict)  # instance label -> exporter path

    def query(self, promql: str) -> list[dict[str, Any]]:
        """Ask Prometheus directly (not through the code under test) to observe its state."""
        response = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5)
        response.raise_for_status()
        result: list[dict[str, Any]] = response.json()["data"]["result"]
        return result

    def wait_until(self, promql: str, predicate: Callable[[list[dict[str, Any]]], bool], timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        last: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            last = self.query(promql)
            if predicate(last):
                return
            time.sleep(0.2)
        raise AssertionError(f"Prometheus never satisfied the condition on {promql!r}; last result {last}")

    @contextmanager
    def target_down(self, *instances: str) -> Iterator[None]:
        """Make targets answer 503 until the block ends; waits for Prometheus to notice both ways."""
        saved = {i: self.exporter.page(self.targets[i]) for i in instances}
        selector = "|".join(instances)
        try:
            for i in instances:
                self.exporter.set_page(self.targets[i], None)
            self.wait_until(f'up{{instance=~"{selector}"}} == 0', lambda r: len(r) == len(instances))
            yield
        finally:
            for i, page in saved.items():
                self.exporter.set_page(self.targets[i], page)
            self.wait_until(f'up{{instance=~"{selector}"}} == 1', lambda r: len(r) == len(instances))


def _prometheus_binary() -> str:
    """Fail (not skip) without a server: a skipped suite would hide that nothing was checked."""
    override = os.environ.get("TKF_PROMETHEUS_BIN")
    candidates = [override] if override else [shutil.which("prometheus"), "/usr/bin/prometheus"]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    where = f"TKF_PROMETHEUS_BIN={override}" if override else "`prometheus` on PATH or /usr/bin/prometheus"
    pytest.fail(f"{INSTALL_HINT} (looked for {where})", pytrace=False)


def run_prometheus(config: Path, workdir: Path) -> Service:
    """Prometheus on ``config``, ready, on a port it binds itself (``127.0.0.1:0``, read back: tests/ports.py);
    its TSDB and log under ``workdir``. ``Service.stop`` stops it."""
    return start_service("prometheus", [_prometheus_binary(), f"--config.file={config}",
                                        f"--storage.tsdb.path={workdir / 'data'}", "--web.listen-address=127.0.0.1:0",
                                        "--log.level=warn"],
                         {}, port=None, health_path="/-/ready", workdir=workdir, check_shm=False)


def _config(exporter: FakeExporter, targets: dict[str, str], labels: dict[str, dict[str, str]]) -> str:
    def static(instance: str, job_labels: dict[str, str]) -> str:
        extra = "".join(f"\n          {k}: {v!r}" for k, v in job_labels.items())
        return (
            f"\n      - targets: ['{exporter.address}']\n        labels:\n"
            f"          instance: '{instance}'\n          __metrics_path__: '{targets[instance]}'{extra}"
        )

    dcgm = "".join(static(i, labels[i]) for i in targets if targets[i].startswith("/dcgm/"))
    vllm = "".join(static(i, labels[i]) for i in targets if targets[i].startswith("/vllm/"))
    return f"""
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: dcgm-exporter
    static_configs:{dcgm}
  - job_name: vllm
    static_configs:{vllm}
"""


@pytest.fixture(scope="session")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromServer]:
    started = time.monotonic()
    exporter = FakeExporter()
    targets: dict[str, str] = {}
    labels: dict[str, dict[str, str]] = {}
    for node in DCGM_NODES:
        targets[f"dcgm-{node}"] = f"/dcgm/{node}"
        labels[f"dcgm-{node}"] = {}
        exporter.set_page(f"/dcgm/{node}", functools.partial(dcgm_page, node))
    for model in MODELS:
        for replica in model.replicas:
            path = f"/vllm/{replica.instance}"
            targets[replica.instance] = path
            # What the usual Kubernetes pod relabelling leaves on a vLLM target.
            labels[replica.instance] = {
                "namespace": model.namespace,
                "app_kubernetes_io_instance": model.name,
            }
            exporter.set_page(path, functools.partial(vllm_page, model, replica))

    workdir = tmp_path_factory.mktemp("prometheus")
    config = workdir / "prometheus.yml"
    config.write_text(_config(exporter, targets, labels))
    try:
        prometheus = run_prometheus(config, workdir)
    except BaseException:
        exporter.close()
        raise
    server = PromServer(url=prometheus.url, exporter=exporter, startup_seconds=0.0, targets=targets)
    try:
        # Every target scraped at least twice, so rate() has two points from the first test on.
        server.wait_until("count_over_time(up[1m]) >= 2 and up == 1", lambda r: len(r) == len(targets), timeout=20)
        server.startup_seconds = time.monotonic() - started
        _STARTUP_SECONDS.append(server.startup_seconds)
        yield server
    finally:
        try:
            prometheus.stop()
        finally:
            exporter.close()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Report the measured server start-up cost, which is paid once per session."""
    for seconds in _STARTUP_SECONDS:
        terminalreporter.write_line(
            f"prometheus session fixture: server started and all targets scraped twice in {seconds:.2f} s"
        )


@pytest.fixture
def dead_prometheus_url() -> Iterator[str]:
    """A URL on a port where connections are refused for the whole test: what a user sees when Prometheus
    is down."""
    with refused_port() as port:
        yield f"http://127.0.0.1:{port}"
