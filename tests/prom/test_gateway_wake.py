"""Scale-to-zero for real: the signal that wakes a model at zero is the real LiteLLM gateway's own request
counter, scraped by a real Prometheus, read by the very query the rendered ScaledObject gives KEDA.

Why both servers: at zero no vLLM exists, so the only witness of a request is the gateway; a renamed series
or label on LiteLLM's side, a wrong selector or a PromQL slip on ours (the window, the `unless ... offset`
for a counter's first sample) fails here. The gateway config is the program's own output (`gatewayModelList`
and the `litellm_settings` that `gateway-config` adds); the substitutions are the model's `api_base`, a
port nothing listens on (a model at zero has no pod behind its Service), and no retries.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pulumi
import pytest
import yaml

from components.autoscaling import WAKE_TRIGGER
from tests.mocks import SINGLE_GPU, program, prune_nulls, stack_doc, unwrap_secrets
from tests.ports import refused_port
from tests.prom.conftest import run_prometheus
from tests.vllm.server import Service, start_litellm
from tkf_infra.gateway_metrics import gateway_settings

pytestmark = pytest.mark.prometheus

PROM = "http://prometheus.monitoring.svc:9090"  # only written into the trigger; the queries go to ours
GATEWAY_NS = "llm-gateway"
ASLEEP, OTHER = "qwen3.8b", "other-model"
ZERO = {"minReplicas": 0, "maxReplicas": 2, "pollingSeconds": 1}
MODELS = (dict(SINGLE_GPU, servedName=ASLEEP, scaling=ZERO),
          dict(SINGLE_GPU, name="other", servedName=OTHER, scaling=ZERO))
SERVING = {"scrapeSeconds": 1}  # our Prometheus scrapes every second: a 3 s window


def _program(monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], dict[str, str]]:
    """The stack's outputs, and each model's wake query as its rendered ScaledObject holds it."""
    exported: dict[str, Any] = {}
    monkeypatch.setattr(pulumi, "export", lambda name, value: exported.__setitem__(name, value))
    h = program(stack_doc(*MODELS, backend="vllm", prometheusUrl=PROM, serving=SERVING), api_key="k")
    assert h.error is None, h.error
    objects = [prune_nulls(unwrap_secrets(r.manifest())) for r in h.resources
               if r.custom and r.type == "kubernetes:keda.sh/v1alpha1:ScaledObject"]
    queries = {so["metadata"]["name"]: next(t["metadata"]["query"] for t in so["spec"]["triggers"]
                                            if t["name"] == WAKE_TRIGGER) for so in objects}
    return exported, queries


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, str, dict[str, str]]]:
    monkeypatch = pytest.MonkeyPatch()
    try:
        outs, queries = _program(monkeypatch)
    finally:
        monkeypatch.undo()
    config = {"model_list": outs["gatewayModelList"], **gateway_settings(outs["endpoints"])}
    assert config.get("litellm_settings") == {"callbacks": ["prometheus"]}, "gateway-config turns the series on"
    with refused_port() as nobody_port:
        yield from _gateway_on(config, f"http://127.0.0.1:{nobody_port}/v1", tmp_path_factory, queries)


def _gateway_on(config: dict[str, Any], nobody: str, tmp_path_factory: pytest.TempPathFactory,
                queries: dict[str, str]) -> Iterator[tuple[Service, str, dict[str, str]]]:
    """The gateway on ``config``, every model's api_base on ``nobody`` (a port that refuses connections)."""
    for m in config["model_list"]:
        m["litellm_params"]["api_base"] = nobody
        # The retries that hold a woken model's first request (tests/prom/test_gateway_cold_start.py) would
        # hold this one for the whole cold start: here the refusal itself is what is counted.
        assert m["litellm_params"].pop("num_retries") > 0
    workdir = tmp_path_factory.mktemp("gateway")
    (workdir / "litellm.yaml").write_text(yaml.safe_dump(config))
    master_key = "sk-" + secrets.token_hex(16)
    env = {"TKF_VLLM_API_KEY": "unused", "LITELLM_MASTER_KEY": master_key, "HOME": str(workdir / "home"),
           "TMPDIR": str(workdir)}
    service = start_litellm("litellm", workdir / "litellm.yaml", env, workdir=workdir)
    try:
        yield service, master_key, queries
    finally:
        service.stop(check_shm=False)


@pytest.fixture(scope="module")
def prometheus(gateway: tuple[Service, str, dict[str, str]], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Prometheus scraping the gateway as a cluster's would: the gateway namespace's label, the gateway's
    key (LiteLLM's /metrics asks for one unless told otherwise)."""
    service, key, _ = gateway
    workdir = tmp_path_factory.mktemp("prometheus-gateway")
    (workdir / "prometheus.yml").write_text(f"""
global: {{scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: gateway
    metrics_path: /metrics/
    authorization: {{credentials: '{key}'}}
    static_configs:
      - targets: ['127.0.0.1:{service.port}']
        labels: {{namespace: '{GATEWAY_NS}'}}
""")
    server = run_prometheus(workdir / "prometheus.yml", workdir)
    try:
        _until(server.url, 'up{job="gateway"} == 1', lambda v: v == 1.0, 30)
        yield server.url
    finally:
        server.stop()


def _value(url: str, promql: str) -> float | None:
    r = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5)
    r.raise_for_status()
    result = r.json()["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def _until(url: str, promql: str, ok: Any, timeout: float) -> float:
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        if ok(last := _value(url, promql)):
            return time.monotonic()
        time.sleep(0.25)
    raise AssertionError(f"{promql!r} never satisfied the condition in {timeout} s; last value {last}")


def test_a_request_to_a_model_at_zero_wakes_that_model_only_and_the_signal_lapses(
        gateway: tuple[Service, str, dict[str, str]], prometheus: str) -> None:
    service, key, queries = gateway
    assert set(queries) == {"qwen3-8b", "other"}
    for query in queries.values():
        assert _value(prometheus, query) == 0.0, "no request yet: nothing wakes"
    for path in ("a counter LiteLLM creates on this request", "a counter that already exists: increase()"):
        asked = time.monotonic()
        r = httpx.post(f"{service.url}/v1/chat/completions", timeout=60, headers={"Authorization": f"Bearer {key}"},
                       json={"model": ASLEEP, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
        assert r.status_code >= 500, "at zero nothing answers behind the gateway: the request fails, and is counted"
        woke = _until(prometheus, queries["qwen3-8b"], lambda v: v == 1.0, 30)
        print(f"{path}: wake signal active {woke - asked:.1f} s after the request was sent")
        assert _value(prometheus, queries["other"]) == 0.0, "a request for one model wakes no other"
        # No request for a window (3 s here): the trigger goes inactive, so KEDA's cooldown can take it to zero.
        _until(prometheus, queries["qwen3-8b"], lambda v: v == 0.0, 30)
