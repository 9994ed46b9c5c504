"""The one Prometheus client: what each kind of failure looks like to a user, and NaN as "no value"."""

from __future__ import annotations

import socket
import time

import pytest

from tkf_infra.live.prometheus import FailureKind, PrometheusClient, PrometheusQueryError

from .conftest import PromServer


def _failure(url: str, promql: str = "up", timeout_s: float = 2) -> PrometheusQueryError:
    with PrometheusClient(url, timeout_s) as client, pytest.raises(PrometheusQueryError) as err:
        client.vector(promql)
    return err.value


@pytest.mark.prometheus
def test_instant_vector_with_labels_and_nan_as_none(prom: PromServer) -> None:
    with PrometheusClient(prom.url) as client:
        samples = client.vector('label_replace(vector(0) / vector(0), "figure", "ratio", "", "")')
        up = client.vector('up{job="vllm"}')

    assert [(dict(s.labels), s.value) for s in samples] == [({"figure": "ratio"}, None)]
    assert {s.labels["instance"] for s in up} == {i for i, path in prom.targets.items() if path.startswith("/vllm/")}
    assert all(s.value == 1.0 for s in up)


@pytest.mark.prometheus
def test_rejected_query_quotes_prometheus(prom: PromServer) -> None:
    error = _failure(prom.url, "sum by (model_name (up)")
    assert error.kind is FailureKind.BAD_QUERY
    assert str(error).startswith("answered HTTP 400 — query rejected: ") and "parse error" in str(error)


@pytest.mark.prometheus
def test_scalar_result_is_not_taken_for_a_vector(prom: PromServer) -> None:
    error = _failure(prom.url, "scalar(vector(1))")
    assert error.kind is FailureKind.NOT_PROMETHEUS and "'scalar'" in str(error)


@pytest.mark.prometheus
def test_server_that_is_not_prometheus(prom: PromServer) -> None:
    error = _failure(f"http://{prom.exporter.address}")
    assert error.kind is FailureKind.HTTP
    assert str(error).startswith("answered HTTP 404 — is this the Prometheus base URL")


def test_refused_connection_is_unreachable_at_once(dead_prometheus_url: str) -> None:
    started = time.monotonic()
    error = _failure(dead_prometheus_url)
    assert time.monotonic() - started < 1
    assert error.kind is FailureKind.UNREACHABLE and str(error) == "could not connect (Connection refused)"


def test_hung_server_is_a_timeout() -> None:
    with socket.socket() as listener:  # accepts connections, never replies
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        started = time.monotonic()
        error = _failure(f"http://127.0.0.1:{listener.getsockname()[1]}", timeout_s=0.5)
    assert time.monotonic() - started < 1.5
    assert error.kind is FailureKind.TIMEOUT and str(error) == "no answer within 0.5 s"


@pytest.mark.parametrize("url", ["prometheus.monitoring.svc:9090", "ftp://prometheus:9090"])
def test_url_that_cannot_be_requested(url: str) -> None:
    error = _failure(url)
    assert error.kind is FailureKind.BAD_URL and "http://prometheus.monitoring.svc:9090" in str(error)


@pytest.mark.prometheus
def test_a_snapshot_reads_every_figure_at_one_instant(prom: PromServer) -> None:
    """`status` reads its figures one query after another; with a snapshot they describe one moment,
    so a queue is never paired with the running count of a later scrape."""
    with PrometheusClient(prom.url, snapshot=True) as client:
        assert client.vector('up{job="no-such-job"}') == []  # no series: nothing to pin yet
        first = client.vector("vector(time())")
        time.sleep(1.5)
        later = client.vector("vector(time())")
    assert client.at is not None
    assert first[0].value == later[0].value == client.at

    with PrometheusClient(prom.url) as live:
        a = live.vector("vector(time())")
        time.sleep(1.5)
        b = live.vector("vector(time())")
    assert a[0].value is not None and b[0].value is not None and b[0].value > a[0].value
