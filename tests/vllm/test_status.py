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

from tests.prom.conftest import _prometheus_binary, _wait_ready
from tests.vllm.conftest import RunningPod
from tests.vllm.metrics import parse_metrics, sample
from tests.vllm.server import Service, free_port, start_service

SCRAPE_INTERVAL_S = 1


def _target_labels(pod: RunningPod) -> dict[str, str]:
    """What the usual ``labelmap: __meta_kubernetes_pod_label_(.+)`` relabelling leaves on the pod's
    target, from the rendered Deployment's pod labels, plus its namespace."""
    from tests.vllm.pod import load_manifests

    deployment = load_manifests(pod.stack.render_dir)[("Deployment", pod.model)]
    labels = {k.replace(".", "_").replace("/", "_").replace("-", "_"): v
              for k, v in deployment["spec"]["template"]["metadata"]["labels"].items()}  # fmt: skip
    return {"namespace": deployment["metadata"]["namespace"], **labels}


@pytest.fixture(scope="module")
def prometheus(vllm_pod: RunningPod, tier_dir: Path) -> Iterator[Service]:
    workdir = tier_dir / "prometheus"
    target = vllm_pod.server.url.removeprefix("http://")
    labels = "".join(f"\n          {k}: {json.dumps(v)}" for k, v in _target_labels(vllm_pod).items())
    workdir.mkdir()
    (workdir / "prometheus.yml").write_text(f"""
global: {{scrape_interval: {SCRAPE_INTERVAL_S}s, scrape_timeout: {SCRAPE_INTERVAL_S}s}}
scrape_configs:
  - job_name: vllm
    metrics_path: /metrics
    static_configs:
      - targets: ['{target}']
        labels:{labels}
""")
    port = free_port()
    service = start_service("prometheus", [_prometheus_binary(), f"--config.file={workdir / 'prometheus.yml'}",
                                           f"--storage.tsdb.path={workdir / 'data'}",
                                           f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                            {}, port=port, health_path="/-/ready", workdir=workdir)  # fmt: skip
    try:
        _wait_ready(service.process, service.url, service.log)
        yield service
    finally:
        service.stop()


def _query(prom: Service, promql: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{prom.url}/api/v1/query", params={"query": promql}, timeout=5)
    response.raise_for_status()
    result: list[dict[str, Any]] = response.json()["data"]["result"]
    return result


def _wait_for(prom: Service, promql: str, want: float, timeout: float = 60) -> None:
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        result = _query(prom, promql)
        last = [float(r["value"][1]) for r in result]
        if last == [want]:
            return
        time.sleep(0.5)
    raise AssertionError(f"Prometheus never showed {promql} == {want}; last {last}")


def test_status_reports_the_real_vllms_load(vllm_pod: RunningPod, prometheus: Service) -> None:
    served = vllm_pod.endpoint["servedName"]
    max_num_seqs = int(vllm_pod.command.argv[vllm_pod.command.argv.index("--max-num-seqs") + 1])
    queued = 3
    before = parse_metrics(httpx.get(f"{vllm_pod.server.url}/metrics", timeout=10).text)
    usages: list[dict[str, int]] = []
    errors: list[str] = []

    def request() -> None:
        body = {"model": served, "prompt": "The fleet serves", "max_tokens": 3000, "ignore_eos": True}
        try:
            r = httpx.post(f"{vllm_pod.server.url}/v1/completions", json=body, headers=vllm_pod.server.headers(),
                           timeout=600)  # fmt: skip
            r.raise_for_status()
            usages.append(r.json()["usage"])
        except httpx.HTTPError as exc:
            errors.append(str(exc))

    threads = [threading.Thread(target=request) for _ in range(max_num_seqs + queued)]
    for t in threads:
        t.start()
    try:
        sel = f'{{model_name="{served}"}}'
        _wait_for(prometheus, f"vllm:num_requests_running{sel}", max_num_seqs)
        _wait_for(prometheus, f"vllm:num_requests_waiting{sel}", queued)
        proc = vllm_pod.stack.cli("status", "--stack", "dev", "--json", "--prometheus-url", prometheus.url)
        kv_now = float(_query(prometheus, f"vllm:kv_cache_usage_perc{sel}")[0]["value"][1])
    finally:
        for t in threads:
            t.join(timeout=600)
    assert not errors, errors
    report = json.loads(proc.stdout)
    record = next(m for m in report["models"] if m["name"] == vllm_pod.model)
    assert record["servedName"] == served and record["hasData"] is True, (record, proc.stderr)
    assert (record["requestsRunning"], record["requestsWaiting"]) == (max_num_seqs, queued), record
    assert record["readyReplicas"] == 1 and (record["scrapeTargets"], record["scrapeTargetsDown"]) == (1, 0)
    assert 0 < record["kvCacheUsage"] < 1 and kv_now > 0

    # Token counters: what Prometheus scraped is what the requests consumed.
    after = parse_metrics(httpx.get(f"{vllm_pod.server.url}/metrics", timeout=10).text)
    generated = sample(after, "vllm:generation_tokens_total", model_name=served) - sample(
        before, "vllm:generation_tokens_total", model_name=served)  # fmt: skip
    assert generated == sum(u["completion_tokens"] for u in usages) == (max_num_seqs + queued) * 3000
    _wait_for(prometheus, f"vllm:generation_tokens_total{sel}", sample(after, "vllm:generation_tokens_total",
                                                                     model_name=served))  # fmt: skip
