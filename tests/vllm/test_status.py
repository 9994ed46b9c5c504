"""Live state for real: Debian's Prometheus scrapes the real vLLM, and ``python -m tkf_infra status``
(run as a user runs it, as a black box) reports that model's load.

The load is made so the figures cannot be zero by accident: more concurrent requests than the
catalog's ``maxNumSeqs`` (8 in dev), each generating long enough to be observed, so vLLM runs exactly
``maxNumSeqs`` of them and queues the rest — which is what ``status`` must show.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.vllm.conftest import TOOL_MODEL, PodServers, RunningPod
from tests.vllm.metrics import parse_metrics, sample
from tests.vllm.scrape import start_prometheus
from tests.vllm.server import Service

#: One client for every request the test makes: an ``httpx.get``/``post`` builds a new client and so
#: a new TLS context (the CA bundle parsed by OpenSSL 3.0) per call, even for plain http. Measured
#: here: 24 load threads doing that at once kept both cores busy in ``ssl.create_default_context``
#: for minutes, so vLLM saw one request at a time and Prometheus' own ``/-/ready`` took 14–80 s.
#: No keep-alive: uvicorn closes an idle connection after 5 s, and a pooled one it has just closed
#: fails the next request with "Server disconnected" (it failed a load run here).
HTTP = httpx.Client(timeout=httpx.Timeout(30, read=900),
                    limits=httpx.Limits(max_connections=64, max_keepalive_connections=0))
#: A load client's connections closed without a response, in a row, before the test counts it an error.
DROPS_IN_A_ROW = 3
#: How long to keep vLLM loaded while waiting for a `status` call that caught a steady queue.
STATUS_PATIENCE_S = 300


def _target_labels(pod: RunningPod) -> dict[str, str]:
    """What the usual ``labelmap: __meta_kubernetes_pod_label_(.+)`` relabelling leaves on the pod's
    target, from the rendered Deployment's pod labels, plus its namespace."""
    from tests.vllm.pod import load_manifests

    deployment = load_manifests(pod.stack.render_dir)[("Deployment", pod.model)]
    labels = {k.replace(".", "_").replace("/", "_").replace("-", "_"): v
              for k, v in deployment["spec"]["template"]["metadata"]["labels"].items()}
    return {"namespace": deployment["metadata"]["namespace"], **labels}


@pytest.fixture(scope="module")
def prometheus(pods: PodServers, tier_dir: Path) -> Iterator[Service]:
    """Prometheus scraping the vllm backend's pod of the tool-calling model, labelled as in a cluster."""
    vllm_pod = pods.get("vllm", TOOL_MODEL)
    service = start_prometheus(vllm_pod, _target_labels(vllm_pod), tier_dir / "prometheus")
    try:
        yield service
    finally:
        service.stop()


def _query(prom: Service, promql: str, when: str | None = None) -> list[dict[str, Any]]:
    """The instant query's result, at ``when`` (Prometheus' time format) or now. The bound is for a hang,
    not for speed: with vLLM loaded on both cores Prometheus answered one query in more than 5 s (CI)."""
    params = {"query": promql} if when is None else {"query": promql, "time": when}
    response = HTTP.get(f"{prom.url}/api/v1/query", params=params, timeout=30)
    response.raise_for_status()
    result: list[dict[str, Any]] = response.json()["data"]["result"]
    return result


def _value(prom: Service, promql: str, when: str | None = None) -> float | None:
    result = _query(prom, promql, when)
    return float(result[0]["value"][1]) if len(result) == 1 else None


def _wait_until(prom: Service, promql: str, ok: Any, timeout: float = 120) -> float:
    """Polls until ``ok`` holds; a query Prometheus is too starved to answer in time is asked again: the
    load on vLLM takes both cores, and one slow answer (a CI run: 5 s) says nothing of what it shows."""
    deadline, last, slow = time.monotonic() + timeout, None, 0
    while time.monotonic() < deadline:
        try:
            last = _value(prom, promql)
        except httpx.TimeoutException:
            slow += 1
            continue
        if last is not None and ok(last):
            return last
        time.sleep(0.5)
    raise AssertionError(f"Prometheus never showed the expected {promql}; last {last}, {slow} queries timed out")


def _queried_at(query_log: Path, skip: int) -> list[str]:
    """Evaluation times of the vLLM queries logged after the first ``skip`` lines (Prometheus' query log),
    in the order they were asked."""
    lines = query_log.read_text().splitlines()[skip:]
    return [entry["params"]["end"] for entry in map(json.loads, lines) if "vllm:" in entry["params"]["query"]]


#: A scrape's samples carry its start time but are committed after it is read and parsed: the
#: duration Prometheus records, plus this much for parsing and appending on a loaded machine.
SCRAPE_COMMIT_MARGIN_S = 0.5


def _landed_after(prom: Service, sel: str, instant: str) -> float | None:
    """How long after ``instant`` the scrape Prometheus now shows for it was committed (negative: before).

    A scrape that starts before the instant and is committed after it (vLLM slow to answer, often
    after a failed scrape left the series stale) is history written later: ``status`` asking at that
    instant could not see it, and Prometheus asked afterwards for the same instant does. Such a call
    proves nothing either way and is repeated.
    """
    late = _value(prom, f'timestamp(vllm:num_requests_running{sel}) + scalar(scrape_duration_seconds{{job="vllm"}})'
                        " - time()", instant)
    return None if late is None else late + SCRAPE_COMMIT_MARGIN_S



@pytest.mark.vllm_solo
def test_status_reports_the_real_vllms_load(vllm_pod: RunningPod, prometheus: Service) -> None:
    """While vLLM runs ``maxNumSeqs`` requests and queues more, ``status`` shows exactly that.

    The load is steady: more clients than ``maxNumSeqs``, each sending its next request as soon as
    the last one returns, until ``status`` has been checked. ``status`` is a black box that asks
    Prometheus at an instant the test cannot choose; Prometheus' query log says when, and Prometheus'
    own figures for the model, evaluated at that instant, are the expected ones. A call whose instant
    caught a batch boundary (fewer running) or a scrape vLLM was too busy to answer is repeated.
    """
    served = vllm_pod.endpoint["servedName"]
    sel = f'{{model_name="{served}"}}'
    max_num_seqs = int(vllm_pod.command.argv[vllm_pod.command.argv.index("--max-num-seqs") + 1])
    clients, max_tokens = 3 * max_num_seqs, 3000
    before = parse_metrics(HTTP.get(f"{vllm_pod.server.url}/metrics", timeout=10).text)
    usages: list[dict[str, int]] = []
    errors: list[str] = []
    stop = threading.Event()

    dropped: list[str] = []

    def client() -> None:
        body = {"model": served, "prompt": "The fleet serves", "max_tokens": max_tokens, "ignore_eos": True}
        in_a_row = 0
        while not stop.is_set():
            try:
                r = HTTP.post(f"{vllm_pod.server.url}/v1/completions", json=body, headers=vllm_pod.server.headers())
                r.raise_for_status()
                usages.append(r.json()["usage"])
                in_a_row = 0
            except httpx.RemoteProtocolError as exc:
                # A fresh connection closed with no response (one in about five loaded runs on 2 cores): this
                # request never ran, so it is sent again; a server that keeps doing it fails the test below.
                dropped.append(str(exc))
                in_a_row += 1
                if in_a_row >= DROPS_IN_A_ROW:
                    errors.append(f"{in_a_row} connections in a row closed with no response: {exc}")
                    return
            except httpx.HTTPError as exc:
                errors.append(str(exc))
                return

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    record: dict[str, Any] | None = None
    attempts: list[str] = []
    expected: dict[str, float | None] = {}
    query_log = prometheus.log.parent / "queries.log"
    deadline = time.monotonic() + STATUS_PATIENCE_S
    try:
        try:
            _wait_until(prometheus, f"vllm:num_requests_waiting{sel}", lambda v: v > 0, timeout=STATUS_PATIENCE_S)
        except AssertionError as exc:
            now = parse_metrics(HTTP.get(f"{vllm_pod.server.url}/metrics", timeout=60).text)
            raise AssertionError(f"{exc}; vLLM itself says waiting="
                                 f"{sample(now, 'vllm:num_requests_waiting', model_name=served)}; "
                                 f"client errors: {errors[:3]}; vLLM log:\n{vllm_pod.server.log_tail(2000)}") from None
        while record is None and time.monotonic() < deadline and not errors:
            skip = len(query_log.read_text().splitlines())
            proc = vllm_pod.stack.cli("status", "--stack", "dev", "--json", "--prometheus-url", prometheus.url)
            instants = _queried_at(query_log, skip)
            if not instants:
                attempts.append(f"no vLLM query logged: {proc.returncode} {proc.stderr[-300:]}")
                continue
            at = instants[0]  # the figures' query; a pinned snapshot asks everything after it at the same instant
            late = _landed_after(prometheus, sel, at)
            if late is not None and late > 0:
                attempts.append(f"at {at}: the scrape shown for it was committed {late:.2f} s later")
                continue
            running = _value(prometheus, f"sum(vllm:num_requests_running{sel})", at)
            waiting = _value(prometheus, f"sum(vllm:num_requests_waiting{sel})", at)
            attempts.append(f"{len(instants)} queries at {sorted(set(instants))}: (running, waiting) "
                            f"{running, waiting}")
            if running == max_num_seqs and (waiting or 0) > 0:
                expected = {"requestsRunning": running, "requestsWaiting": waiting,
                            "kvCacheUsage": _value(prometheus, f"avg(vllm:kv_cache_usage_perc{sel})", at),
                            "generationTokensLow": _value(prometheus, f"sum(vllm:generation_tokens_total{sel})",
                                                       min(instants)),
                            "generationTokensHigh": _value(prometheus, f"sum(vllm:generation_tokens_total{sel})",
                                                        max(instants))}
                report = json.loads(proc.stdout)
                record = next(m for m in report["models"] if m["name"] == vllm_pod.model)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=900)
    assert not errors, (errors, f"{len(dropped)} connections dropped in all")
    assert len(dropped) <= clients, f"{len(dropped)} of the requests' connections closed with no response"
    assert record is not None, f"no `status` call caught vLLM with a steady queue: {attempts}"
    assert record["servedName"] == served and record["hasData"] is True, (record, proc.stderr, attempts)
    assert len(set(instants)) == 1, f"status asked at several instants, not one snapshot: {instants}"
    assert {k: record[k] for k in ("requestsRunning", "requestsWaiting")} == {
        k: expected[k] for k in ("requestsRunning", "requestsWaiting")}, (record, expected, attempts)
    assert record["kvCacheUsage"] == pytest.approx(expected["kvCacheUsage"], abs=1e-4) and record["kvCacheUsage"] > 0
    assert record["readyReplicas"] == 1 and record["scrapeTargets"] == 1, record
    # `status` reports the token counters too: the count Prometheus held while `status` asked.
    low, high = expected["generationTokensLow"] or 0, expected["generationTokensHigh"] or 0
    assert 0 < low <= record["generationTokens"] <= high, (record, low, high)
    assert record["promptTokens"] > 0 and record["generationTokensPerSecond"] > 0, record

    # Token counters: vLLM counted every generated token, and Prometheus scraped that count.
    after = parse_metrics(HTTP.get(f"{vllm_pod.server.url}/metrics", timeout=10).text)
    counted = sample(after, "vllm:generation_tokens_total", model_name=served)
    generated = sum(u["completion_tokens"] for u in usages)
    assert generated == len(usages) * max_tokens > 0
    assert counted - sample(before, "vllm:generation_tokens_total", model_name=served) == generated
    _wait_until(prometheus, f"vllm:generation_tokens_total{sel}", lambda v: v == counted)
