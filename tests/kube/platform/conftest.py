"""A fresh API server for this folder of the API-server tier (not the session's), and the lean engine for its
stacks.

Why its own server: these tests install the platform from its charts — CRDs included — and the
first one checks a first preview against a cluster that has none of them; the session server's
smoke tests apply some of the same CRDs with another field manager (tests/kube/test_apiserver_smoke.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kube.apiserver import _READY_SECONDS, KubeAPIServer, start_apiserver, stop_apiserver
from tests.kube.client import KubeClient


@pytest.fixture(scope="package")
def kube_apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPIServer]:
    proc, server = start_apiserver(tmp_path_factory.mktemp("platform-apiserver"))
    _READY_SECONDS.append(server.ready_seconds)
    try:
        yield server
    finally:
        stop_apiserver(proc)


@pytest.fixture(scope="package")
def kube(kube_apiserver: KubeAPIServer) -> Iterator[KubeClient]:
    with kube_apiserver.client() as client:
        yield client
