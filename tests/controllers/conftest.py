"""A fresh API server per test, with the workload controllers of kube-controller-manager and admission
webhooks on, each chart's webhook Service resolved to the manager that serves it; the tests start KServe's
and LWS's managers (tests/controllers/harness.py) once the platform's CRDs are on it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.controllers.harness import KCM_CONTROLLERS
from tests.controllers.webhooks import Webhooks, webhook_servers
from tests.kube.apiserver import _READY_SECONDS, KubeAPIServer, start_apiserver, stop_apiserver
from tests.kube.client import KubeClient


@pytest.fixture
def webhooks(tmp_path: Path) -> Iterator[Webhooks]:
    """The CA and, per chart that registers webhooks, the port (reserved for the test) and certificate its
    manager serves them on."""
    hooks = webhook_servers(tmp_path / "webhooks")
    try:
        yield hooks
    finally:
        hooks.release()


@pytest.fixture
def kube_apiserver(tmp_path: Path, webhooks: Webhooks) -> Iterator[KubeAPIServer]:
    """One server per test (about 10 s to start): each test installs the whole platform, and a thrown-away
    server needs no `destroy` (minutes for the platform's charts)."""
    proc, server = start_apiserver(tmp_path / "apiserver", controllers=KCM_CONTROLLERS,
                                   server_args=webhooks.server_args())
    _READY_SECONDS.append(server.ready_seconds)
    try:
        yield server
    finally:
        stop_apiserver(proc)


@pytest.fixture
def kube(kube_apiserver: KubeAPIServer) -> Iterator[KubeClient]:
    with kube_apiserver.client() as client:
        yield client
