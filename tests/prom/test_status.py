"""`status`: per-model vLLM figures read from a real Prometheus, as a table and as JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tkf_infra.exit_codes import ExitCode
from tkf_infra.live.status_view import status_command

from .conftest import PromServer
from .metrics_fixtures import (
    GENERATION_TOKENS_PER_S,
    MODELS,
    PROMPT_TOKENS_PER_S,
    UNSCRAPED_ENDPOINT,
    FakeModel,
    histogram_quantile,
)

pytestmark = pytest.mark.prometheus

SCRAPED = [m.endpoint() for m in MODELS]


def _json_status(prom: PromServer, endpoints: list[dict[str, Any]]) -> tuple[dict[str, Any], ExitCode]:
    text, code = status_command(endpoints, prom.url, as_json=True)
    data: dict[str, Any] = json.loads(text)
    return data, code


def _row(table: str, name: str) -> str:
    rows = [line for line in table.splitlines() if f" {name} " in line]
    assert len(rows) == 1, f"expected one table row for {name}:\n{table}"
    return rows[0]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: f"{m.name}-vllm-{m.vllm_release}")
def test_json_reports_each_models_figures(prom: PromServer, model: FakeModel) -> None:
    data, code = _json_status(prom, SCRAPED)

    assert code == ExitCode.OK
    assert data["reachable"] is True and data["warnings"] == []
    record = next(m for m in data["models"] if m["name"] == model.name)
    replicas = model.replicas
    assert record["hasData"] is True
    assert record["servedName"] == model.served_name and record["namespace"] == model.namespace
    assert record["readyReplicas"] == len(replicas)
    assert (record["scrapeTargets"], record["scrapeTargetsDown"]) == (len(replicas), 0)
    assert record["requestsWaiting"] == sum(r.waiting for r in replicas)
    assert record["requestsRunning"] == sum(r.running for r in replicas)
    assert record["kvCacheUsage"] == pytest.approx(sum(r.kv_usage for r in replicas) / len(replicas), abs=1e-4)
    assert record["kvCacheUsageMax"] == pytest.approx(max(r.kv_usage for r in replicas), abs=1e-4)
    assert record["prefixCacheHitRate"] == pytest.approx(model.prefix_hits_per_s / model.prefix_queries_per_s, abs=1e-4)
    assert record["ttftP95Seconds"] == pytest.approx(histogram_quantile(0.95, model.ttft_shape), abs=1e-4)
    # Every replica's counters grow in the same proportion: the rates' ratio is exact, whatever rate()'s
    # extrapolation over the few scrapes of a test does to each rate.
    assert record["promptTokensPerSecond"] > 0 and record["generationTokensPerSecond"] > 0
    assert record["generationTokensPerSecond"] / record["promptTokensPerSecond"] == pytest.approx(
        GENERATION_TOKENS_PER_S / PROMPT_TOKENS_PER_S, rel=2e-2)
    assert record["generationTokens"] / record["promptTokens"] == pytest.approx(
        GENERATION_TOKENS_PER_S / PROMPT_TOKENS_PER_S, rel=2e-2)


def test_table_shows_the_same_figures(prom: PromServer) -> None:
    text, code = status_command(SCRAPED, prom.url, as_json=False)

    assert code == ExitCode.OK
    assert "warning" not in text
    for model in MODELS:
        row = _row(text, model.name)
        replicas = model.replicas
        kv_avg = sum(r.kv_usage for r in replicas) / len(replicas)
        ttft_ms = histogram_quantile(0.95, model.ttft_shape) * 1000
        assert model.served_name in row
        assert f"{len(replicas)}/{len(replicas)}" in row
        assert f" {sum(r.waiting for r in replicas)} " in row
        assert f" {sum(r.running for r in replicas)} " in row
        assert f"{kv_avg * 100:.0f}%" in row
        assert f"{model.prefix_hits_per_s / model.prefix_queries_per_s * 100:.0f}%" in row
        ttft = f"{ttft_ms:.0f} ms" if ttft_ms < 999.5 else f"{ttft_ms / 1000:.2f} s"
        assert ttft in row


def test_model_without_series_shows_no_data_and_a_warning(prom: PromServer) -> None:
    endpoints = [*SCRAPED, UNSCRAPED_ENDPOINT]

    text, code = status_command(endpoints, prom.url, as_json=False)
    assert code == ExitCode.NO_DATA
    assert "no data" in _row(text, UNSCRAPED_ENDPOINT["name"])
    assert "no data" not in _row(text, MODELS[0].name)
    warnings = [line for line in text.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1
    assert UNSCRAPED_ENDPOINT["name"] in warnings[0]
    assert f'model_name="{UNSCRAPED_ENDPOINT["servedName"]}"' in warnings[0]

    data, code = _json_status(prom, endpoints)
    assert code == ExitCode.NO_DATA
    record = next(m for m in data["models"] if m["name"] == UNSCRAPED_ENDPOINT["name"])
    assert record["hasData"] is False and record["readyReplicas"] == 0 and record["requestsWaiting"] is None
    assert len(data["warnings"]) == 1


def test_replica_whose_target_is_down_is_a_warning_and_not_counted(prom: PromServer) -> None:
    model = next(m for m in MODELS if len(m.replicas) > 1)
    down, *alive = model.replicas

    with prom.target_down(down.instance):
        data, code = _json_status(prom, [model.endpoint()])
        text, text_code = status_command([model.endpoint()], prom.url, as_json=False)

    assert code == text_code == ExitCode.OK  # degraded, still serving
    record = data["models"][0]
    assert record["readyReplicas"] == len(alive)
    assert (record["scrapeTargets"], record["scrapeTargetsDown"]) == (len(model.replicas), 1)
    assert record["requestsWaiting"] == sum(r.waiting for r in alive)
    assert len(data["warnings"]) == 1
    assert f"1 of {len(model.replicas)} scrape target(s) down" in data["warnings"][0]
    assert f"app.kubernetes.io/instance={model.name}" in data["warnings"][0]
    assert f"{len(alive)}/{len(model.replicas)}" in _row(text, model.name)
    assert "Traceback" not in text


def test_prometheus_down_is_one_line_and_a_distinct_exit_code(dead_prometheus_url: str) -> None:
    text, code = status_command(SCRAPED, dead_prometheus_url, as_json=False)

    assert code == ExitCode.UNAVAILABLE and int(code) == 4  # 3 is a crash of tkf-infra, never "Prometheus is down"
    assert len(text.splitlines()) == 1
    assert text.startswith("warning:") and dead_prometheus_url in text and "unavailable" in text
    assert "Traceback" not in text

    json_text, json_code = status_command(SCRAPED, dead_prometheus_url, as_json=True)
    data = json.loads(json_text)
    assert json_code == ExitCode.UNAVAILABLE
    assert data["reachable"] is False and data["models"] == []
    assert len(data["warnings"]) == 1 and dead_prometheus_url in data["warnings"][0]
