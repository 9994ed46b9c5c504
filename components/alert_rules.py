"""The fleet's alert rules: one definition, rendered as prometheus-operator's `PrometheusRule` and as a plain
rule file for a Prometheus without the operator (components/observability.py ships both).

Each alert is a *signal* (a query that returns one series per model, replica or pool whenever its sources are
scraped, firing or not) and the condition that makes it fire. Why split: an alert expression returns nothing
while all is well, so "it returned no series" cannot tell a quiet fleet from a metric renamed upstream; the
signal can. The vLLM tier asserts every signal of a source it runs returns series against a real Prometheus
scraping a real vLLM (tests/vllm/test_observability.py); promtool's unit tests (tests/prom/test_alert_rules.py)
hold each alert to its firing and resolving. Each rule's `runbook` annotation says what to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from components import fleet_queries as q
from components import metrics_proxy as mp
from tkf_infra import vllm_metrics as vm
from tkf_infra.sizing.contract import KV_DEVIATION_LIMIT

GROUP = "tkf-infra.fleet"
#: How often the rules are evaluated (the group's `interval`; Prometheus' global default is 1 m): eight cheap rules,
#: so a drift or a refused key shows within a quarter minute.
EVALUATION_INTERVAL = "15s"
SEVERITY_LABEL = "severity"
RUNBOOK_ANNOTATION = "runbook"

MODEL = "model {{ $labels.model_name }} (namespace {{ $labels.namespace }})"


@dataclass(frozen=True)
class Alert:
    name: str
    signal: str
    condition: str
    """The expression that fires, written over `signal` (its text appears in it verbatim)."""
    for_: str
    severity: str
    summary: str
    runbook: str
    source: str

    def rule(self) -> dict[str, Any]:
        return {"alert": self.name, "expr": self.condition, "for": self.for_,
                "labels": {SEVERITY_LABEL: self.severity},
                "annotations": {"summary": self.summary, RUNBOOK_ANNOTATION: self.runbook}}


def _alerts(serving_namespace: str) -> tuple[Alert, ...]:
    by_model, by_pool = q.BY_MODEL, q.BY_POOL
    not_ready = f"max by ({q.BY_REPLICA}) ({mp.VLLM_UP})"
    started = f"max by ({q.BY_REPLICA}) ({mp.START_TIME})"
    patience = f"max by ({q.BY_REPLICA}) ({mp.READY_WITHIN_SECONDS})"
    autoscaled = f"({q.max_replicas()} > {q.min_replicas()})"
    overcommitted = f"({q.pool_reserved(mp.AT_MAXIMUM)} > {q.pool_gpus()})"
    return (
        Alert("TkfModelNotReady", not_ready,
              f"{not_ready} == 0 and on ({q.BY_REPLICA}) (time() - {started} > {patience})", "1m", "critical",
              f"{MODEL}: the vLLM of replica {{{{ $labels.instance }}}} does not answer, past its start-up bound",
              "Its pod runs but vLLM is not serving, longer than the startup probe allows. Read the `main` "
              "container's log (`kubectl -n <ns> logs <pod> -c main`): out of memory (lower maxModelLen or "
              "maxNumSeqs, or check `python -m tkf_infra size`), a crash loop, or a hung GPU (cordon the node). "
              "`python -m tkf_infra status` shows every replica's phase.", q.SIDECAR),
        Alert("TkfKvCacheSaturated", q.kv_cache_usage(), f"({q.kv_cache_usage()}) > 0.95", "10m", "warning",
              f"{MODEL}: KV cache {{{{ $value | humanizePercentage }}}} full for 10 minutes",
              "vLLM is preempting requests. Add replicas (raise replicas or scaling.maxReplicas), lower "
              "maxNumSeqs, or give the model more KV room (more GPUs, a smaller maxModelLen).", q.VLLM),
        Alert("TkfQueueGrowing", q.waiting(),
              f"{q.waiting()} > 0 and sum by ({by_model}) (deriv({vm.WAITING}[10m])) > 0", "10m", "warning",
              f"{MODEL}: {{{{ $value }}}} requests waiting and the queue still growing after 10 minutes",
              "Demand is above what the replicas serve. Scale out (replicas, or scaling.maxReplicas and the "
              "pool's room: `poolHeadroom`); check TTFT and KV-cache use to see which limit is hit.", q.VLLM),
        # No `for`: both figures come from one scrape of one pod and hold from its start-up on (no flapping).
        Alert("TkfKvPredictionDrift", q.kv_deviation(), f"{q.kv_deviation()} > {KV_DEVIATION_LIMIT}", "0m",
              "warning",
              f"{MODEL}: vLLM's KV tokens are {{{{ $value | humanizePercentage }}}} off the fit check's "
              f"prediction (limit {KV_DEVIATION_LIMIT:.0%})",
              "The fit check's estimate is off for this model: its verdicts there are not to be trusted as "
              "they are. Record the start-up with `python -m tkf_infra calibrate --stack <stack> -o cases.json` "
              "and attach it to a sizing issue (docs/sizing.md).", q.SIDECAR),
        Alert("TkfAutoscalerAtMaximum", f"{q.replicas_running()} / {q.max_replicas()}",
              f"{q.replicas_running()} / {q.max_replicas()} >= 1 and on ({by_model}) {autoscaled}", "30m",
              "warning", f"{MODEL}: its autoscaler has held maxReplicas for 30 minutes",
              "Demand may exceed the range: raise scaling.maxReplicas where the pool has room (`poolHeadroom` "
              "atMaximum.free), or add nodes; if the queue is empty, the scaling target may be too low.",
              q.SIDECAR),
        Alert("TkfPoolHeadroomExhausted", q.pool_free_gpus(),
              f"{q.pool_free_gpus()} <= 0 and on ({by_pool}) {overcommitted}", "15m", "warning",
              "node pool {{ $labels.pool }}: every GPU is held and its autoscalers may ask for more",
              "The plan admitted this pool's autoscalers beyond its GPUs (serving.overcommit: allow): the next "
              "scale-up stays Pending. Add nodes (nodePools[].nodeCount) or lower scaling.maxReplicas.",
              q.SIDECAR),
        Alert("TkfWeightDownloadFailed", q.download_failed(serving_namespace),
              f"{q.download_failed(serving_namespace)} == 1", "0m", "critical",
              "weight download Job {{ $labels.job_name }} failed: its models wait and cannot start",
              "Read the Job's log (`kubectl -n <ns> logs job/<job_name>`): a revoked or missing hfTokenSecret, a "
              "revision gone from the Hub, or a full PVC. Fix the cause and run `python -m tkf_infra up`: it "
              "replaces the failed Job and the download resumes (docs/operations.md).", q.KSM),
        Alert("TkfRuntimeApiKeyRejected", q.key_rejections(),
              f"{q.key_rejections()} > 0 or {q.first_key_rejection()} > 0", "0m", "critical",
              "the gateway's calls to {{ $labels.model_group }} are refused with 401",
              "The key the gateway sends is not one the pods accept: check the `apiKeyRotation` output's step "
              "and that the gateway's Secret holds `runtimeApiKey`; finish or undo the rotation "
              "(docs/operations.md, API-key rotation).", q.GATEWAY),
    )


def alerts(serving_namespace: str) -> tuple[Alert, ...]:
    """Every alert of a fleet serving in `serving_namespace`."""
    return _alerts(serving_namespace)


def rule_groups(serving_namespace: str) -> list[dict[str, Any]]:
    """The rule groups, as both a PrometheusRule's `spec.groups` and a rule file's `groups` hold them."""
    return [{"name": GROUP, "interval": EVALUATION_INTERVAL,
             "rules": [a.rule() for a in alerts(serving_namespace)]}]


def rule_file(serving_namespace: str) -> str:
    """A Prometheus rule file (`rule_files:` of a Prometheus without the operator)."""
    return yaml.safe_dump({"groups": rule_groups(serving_namespace)}, sort_keys=False, width=120)
