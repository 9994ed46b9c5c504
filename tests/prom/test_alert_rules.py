"""The alert rules under Prometheus' own rule unit tests (`promtool test rules`, from Debian's prometheus package
that scripts/install_prometheus.sh installs): each alert fires on the series that should fire it, at the time its
`for` allows, with its labels and expanded annotations, and resolves when the series recover; near misses do not
fire. The series are written here by hand, from what each source exports (vLLM, the metrics sidecar,
kube-state-metrics, LiteLLM); the vLLM tier checks the same names against the real exporters
(tests/vllm/test_observability.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.alert_rules import RUNBOOK_ANNOTATION, SEVERITY_LABEL, alerts, rule_file

pytestmark = pytest.mark.prometheus

NS = "llm-serving"
M = {"namespace": NS, "model_name": "qwen", "job": "vllm", "instance": "10.0.0.1:8001"}
OTHER = {**M, "model_name": "coder", "instance": "10.0.0.2:8001"}


def series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{text}}}", "values": values}


def promtool() -> str:
    found = os.environ.get("TKF_PROMTOOL_BIN") or shutil.which("promtool") or "/usr/bin/promtool"
    if not os.access(found, os.X_OK):
        pytest.fail("promtool not found: it ships with Debian's prometheus package (scripts/install_prometheus.sh)",
                    pytrace=False)
    return found


RUNBOOK = {a.name: a.runbook for a in alerts(NS)}
SEVERITY = {a.name: a.severity for a in alerts(NS)}


def fired(name: str, labels: dict[str, str], summary: str) -> dict[str, Any]:
    return {"exp_labels": {**labels, SEVERITY_LABEL: SEVERITY[name]},
            "exp_annotations": {"summary": summary, RUNBOOK_ANNOTATION: RUNBOOK[name]}}


def case(name: str, input_series: list[dict[str, str]], quiet: list[str], firing: dict[str, list[dict[str, Any]]],
         ) -> dict[str, Any]:
    """A promtool test: `name` checked silent at each `quiet` time and as `firing` says at the others."""
    checks: list[dict[str, Any]] = [{"eval_time": t, "alertname": name, "exp_alerts": []} for t in quiet]
    checks += [{"eval_time": t, "alertname": name, "exp_alerts": exp} for t, exp in firing.items()]
    return {"interval": "1m", "input_series": input_series, "alert_rule_test": checks}


def model(labels: dict[str, str]) -> str:
    return f"model {labels['model_name']} (namespace {labels['namespace']})"


REPLICA = {k: M[k] for k in ("namespace", "model_name", "instance")}
MODEL_ONLY = {k: M[k] for k in ("namespace", "model_name")}
POOL = {"namespace": NS, "pool": "h100"}

CASES = [
    # vLLM stops answering at 6 min, 6 min after its pod started, past its 5-minute start-up bound; the other
    # replica has not answered either but may still be loading (1 h bound). Back at 16 min.
    case("TkfModelNotReady", [
        series("tkf:vllm_up", M, "1x5 0x10 1x10"),
        series("tkf:metrics_proxy_start_time_seconds", M, "0x25"),
        series("tkf:model_ready_within_seconds", M, "300x25"),
        series("tkf:vllm_up", OTHER, "0x25"),
        series("tkf:metrics_proxy_start_time_seconds", OTHER, "0x25"),
        series("tkf:model_ready_within_seconds", OTHER, "3600x25"),
    ], quiet=["5m", "6m", "20m"], firing={"8m": [fired("TkfModelNotReady", REPLICA, (
        f"{model(M)}: the vLLM of replica {M['instance']} does not answer, past its start-up bound"))]}),
    # 99 % full from 5 to 19 min fires after 10 minutes; 94 % (under the line) never does.
    case("TkfKvCacheSaturated", [
        series("vllm:kv_cache_usage_perc", {**M, "engine": "0"}, "0.5x5 0.99x15 0.5x10"),
        series("vllm:kv_cache_usage_perc", {**OTHER, "engine": "0"}, "0.94x30"),
    ], quiet=["12m", "28m"], firing={"17m": [fired("TkfKvCacheSaturated", MODEL_ONLY, (
        f"{model(M)}: KV cache 99% full for 10 minutes"))]}),
    # A queue growing one request a minute for 20 minutes, then flat; the other model's queue is steady.
    case("TkfQueueGrowing", [
        series("vllm:num_requests_waiting", {**M, "engine": "0"}, "0+1x20 20x25"),
        series("vllm:num_requests_waiting", {**OTHER, "engine": "0"}, "5x45"),
    ], quiet=["8m", "40m"], firing={"15m": [fired("TkfQueueGrowing", MODEL_ONLY, (
        f"{model(M)}: 15 requests waiting and the queue still growing after 10 minutes"))]}),
    # vLLM reports 1000 tokens; the prediction is 900 (+11.1 %) from 5 to 14 min, then 1000 again; the other
    # model is 4 % off (under the 5 % limit).
    case("TkfKvPredictionDrift", [
        series("tkf:vllm_kv_cache_tokens", {**M, "engine": "0"}, "1000x25"),
        series("tkf:fit_kv_cache_tokens", M, "1000x5 900x10 1000x10"),
        series("tkf:vllm_kv_cache_tokens", {**OTHER, "engine": "0"}, "1000x25"),
        series("tkf:fit_kv_cache_tokens", OTHER, "960x25"),
    ], quiet=["3m", "20m"], firing={"8m": [fired("TkfKvPredictionDrift", {**REPLICA, "engine": "0"}, (
        f"{model(M)}: vLLM's KV tokens are 11.11% off the fit check's prediction (limit 5%)"))]}),
    # An autoscaled model (1-2) at 2 replicas from 5 to 45 min; a fixed-count model (1-1) always at its 1.
    case("TkfAutoscalerAtMaximum", [
        series("tkf:vllm_up", M, "1x60"),
        series("tkf:vllm_up", {**M, "instance": "10.0.0.3:8001"}, "_x5 1x40"),
        series("tkf:model_min_replicas", M, "1x60"),
        series("tkf:model_max_replicas", M, "2x60"),
        series("tkf:vllm_up", OTHER, "1x60"),
        series("tkf:model_min_replicas", OTHER, "1x60"),
        series("tkf:model_max_replicas", OTHER, "1x60"),
    ], quiet=["20m", "58m"], firing={"40m": [fired("TkfAutoscalerAtMaximum", MODEL_ONLY, (
        f"{model(M)}: its autoscaler has held maxReplicas for 30 minutes"))]}),
    # Pool h100 (8 GPUs, 10 reserved at maximum: overcommitted) full from 5 to 30 min; pool a100 (8, not
    # overcommitted) full all along.
    case("TkfPoolHeadroomExhausted", [
        series("tkf:pool_gpus", {**M, "pool": "h100"}, "8x50"),
        series("tkf:pool_reserved_gpus", {**M, "pool": "h100", "at": "maximum"}, "10x50"),
        series("tkf:replica_gpus", {**M, "pool": "h100"}, "4x50"),
        series("tkf:replica_gpus", {**M, "pool": "h100", "instance": "10.0.0.3:8001"}, "_x5 4x25"),
        series("tkf:pool_gpus", {**OTHER, "pool": "a100"}, "8x50"),
        series("tkf:pool_reserved_gpus", {**OTHER, "pool": "a100", "at": "maximum"}, "8x50"),
        series("tkf:replica_gpus", {**OTHER, "pool": "a100"}, "8x50"),
    ], quiet=["15m", "45m"], firing={"25m": [fired("TkfPoolHeadroomExhausted", POOL, (
        "node pool h100: every GPU is held and its autoscalers may ask for more"))]}),
    # A download Job of the serving namespace Failed from 5 to 10 min (then replaced); one elsewhere is not ours.
    case("TkfWeightDownloadFailed", [
        series("kube_job_failed", {"namespace": NS, "job_name": "qwen2-5-0-5b-7ae557", "condition": "true",
                                   "job": "kube-state-metrics"}, "0x5 1x5"),
        series("kube_job_failed", {"namespace": "batch", "job_name": "etl", "condition": "true",
                                   "job": "kube-state-metrics"}, "1x20"),
    ], quiet=["3m", "20m"], firing={"7m": [fired("TkfWeightDownloadFailed", {
        "namespace": NS, "job_name": "qwen2-5-0-5b-7ae557"}, (
        "weight download Job qwen2-5-0-5b-7ae557 failed: its models wait and cannot start"))]}),
    # The gateway's calls refused with 401 from 6 to 10 min; another model's first and only refusal at 6 min (its
    # series is born at 1: `increase` alone would miss it); 429s (rate limits) are not about the key.
    case("TkfRuntimeApiKeyRejected", [
        series("litellm_deployment_failure_responses_total",
               {"model_group": "qwen", "exception_status": "401", "job": "litellm"}, "0x5 1+1x5 6x20"),
        series("litellm_deployment_failure_responses_total",
               {"model_group": "once", "exception_status": "401", "job": "litellm"}, "_x5 1x25"),
        series("litellm_deployment_failure_responses_total",
               {"model_group": "coder", "exception_status": "429", "job": "litellm"}, "0+1x30"),
    ], quiet=["3m", "25m"], firing={"8m": [
        fired("TkfRuntimeApiKeyRejected", {"model_group": "once"}, "the gateway's calls to once are refused with 401"),
        fired("TkfRuntimeApiKeyRejected", {"model_group": "qwen"}, "the gateway's calls to qwen are refused with 401"),
    ]}),
]


def test_every_alert_has_a_promtool_case() -> None:
    tested = {c["alert_rule_test"][0]["alertname"] for c in CASES}
    assert tested == {a.name for a in alerts(NS)}


def test_each_alert_fires_and_resolves_under_promtool(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(rule_file(NS))
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m",
                                                          "tests": CASES}, sort_keys=False))
    checked = subprocess.run([promtool(), "check", "rules", "rules.yaml"], cwd=tmp_path, capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    run = subprocess.run([promtool(), "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr


def test_a_broken_expectation_fails_promtool(tmp_path: Path) -> None:
    """Control: promtool does fail a wrong expectation (a case expecting no alert where one fires)."""
    wrong = [{**CASES[0], "alert_rule_test": [{"eval_time": "8m", "alertname": "TkfModelNotReady", "exp_alerts": []}]}]
    (tmp_path / "rules.yaml").write_text(rule_file(NS))
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m",
                                                          "tests": wrong}, sort_keys=False))
    run = subprocess.run([promtool(), "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode != 0 and "TkfModelNotReady" in run.stdout + run.stderr
