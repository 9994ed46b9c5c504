"""Every PromQL query the fleet dashboard and the alert rules run, in one place, built from the metric names
where they are defined: vLLM's (`tkf_infra/vllm_metrics.py`), the metrics sidecar's
(`components/metrics_proxy.py`: the plan's facts and vLLM's KV tokens as a number), the gateway's
(`tkf_infra/gateway_metrics.py`) and kube-state-metrics' (below).

Why one module: a panel and the alert on the same figure must compare the same series, and the vLLM tier
(tests/vllm/test_observability.py) runs every query here against a real Prometheus scraping a real vLLM, so
a metric renamed upstream fails a test instead of blanking a panel. Each query names its source, which
docs/observability.md tabulates (panel → PromQL → metric source).

Series are aggregated by vLLM's `model_name` (the served name) and the `namespace` the usual Kubernetes scrape
relabelling adds; the sidecar's series carry the same `model_name`, so no join depends on how the platform's
Prometheus labels pod targets.
"""

from __future__ import annotations

from dataclasses import dataclass

from components import metrics_proxy as mp
from tkf_infra import gateway_metrics as gm
from tkf_infra import vllm_metrics as vm
from tkf_infra.sizing.contract import KV_DEVIATION_LIMIT

#: Grafana's rate window for a panel (4 scrape intervals at least); the alert rules use ALERT_WINDOW.
PANEL_WINDOW = "$__rate_interval"
ALERT_WINDOW = "5m"

BY_MODEL = f"{vm.NAMESPACE_LABEL}, {vm.MODEL_LABEL}"
BY_REPLICA = f"{BY_MODEL}, instance"
BY_POOL = f"{vm.NAMESPACE_LABEL}, {mp.POOL_LABEL}"

#: kube-state-metrics' Job condition gauge (kubernetes/kube-state-metrics docs/metrics/workload/job-metrics.md,
#: v2: `kube_job_failed{namespace, job_name, condition}` is 1 for the condition the Job's Failed status has).
KSM_JOB_FAILED = "kube_job_failed"

# Where each series comes from (the docs' "metric source" column; the vLLM tier runs VLLM and SIDECAR ones).
VLLM = "vLLM"
SIDECAR = "metrics sidecar"
GATEWAY = "LiteLLM gateway"
KSM = "kube-state-metrics"


@dataclass(frozen=True)
class Query:
    legend: str
    expr: str
    source: str


def replicas_answering() -> str:
    return f"sum by ({BY_MODEL}) ({mp.VLLM_UP})"


def replicas_running() -> str:
    return f"count by ({BY_MODEL}) ({mp.VLLM_UP})"


def phase() -> str:
    """1: every running replica's vLLM answers (Ready); 0: none does (loading, hung); between: Degraded."""
    return f"{replicas_answering()} / {replicas_running()}"


def min_replicas() -> str:
    return f"max by ({BY_MODEL}) ({mp.MIN_REPLICAS})"


def max_replicas() -> str:
    return f"max by ({BY_MODEL}) ({mp.MAX_REPLICAS})"


def waiting() -> str:
    return f"sum by ({BY_MODEL}) ({vm.WAITING})"


def running() -> str:
    return f"sum by ({BY_MODEL}) ({vm.RUNNING})"


def kv_cache_usage() -> str:
    """The fullest replica's KV-cache use (0-1); the name releases before 0.11 export as the fallback."""
    return f"max by ({BY_MODEL}) ({vm.KV_CACHE_USAGE}) or max by ({BY_MODEL}) ({vm.KV_CACHE_USAGE_BEFORE_0_11})"


def predicted_kv_tokens() -> str:
    return f"max by ({BY_MODEL}) ({mp.PREDICTED_KV_TOKENS})"


def reported_kv_tokens() -> str:
    """The engine with the fewest KV tokens (replicas on one GPU type normally agree exactly)."""
    return f"min by ({BY_MODEL}) ({mp.REPORTED_KV_TOKENS})"


def kv_deviation() -> str:
    """Per engine: |reported / predicted − 1|, the two from the same scrape of the same pod (job, instance)."""
    return (f"max by ({BY_REPLICA}, {mp.ENGINE_LABEL}) (abs({mp.REPORTED_KV_TOKENS} / on (job, instance) "
            f"group_left {mp.PREDICTED_KV_TOKENS} - 1))")


def _p95(bucket: str, window: str) -> str:
    return f"histogram_quantile(0.95, sum by ({BY_MODEL}, le) (rate({bucket}[{window}])))"


def ttft_p95(window: str = PANEL_WINDOW) -> str:
    return _p95(vm.TTFT_BUCKET, window)


def itl_p95(window: str = PANEL_WINDOW) -> str:
    return _p95(vm.ITL_BUCKET, window)


def generation_tps(window: str = PANEL_WINDOW) -> str:
    return f"sum by ({BY_MODEL}) (rate({vm.GENERATION_TOKENS}[{window}]))"


def prompt_tps(window: str = PANEL_WINDOW) -> str:
    return f"sum by ({BY_MODEL}) (rate({vm.PROMPT_TOKENS}[{window}]))"


def pool_gpus() -> str:
    return f"max by ({BY_POOL}) ({mp.POOL_GPUS})"


def pool_gpus_held() -> str:
    """Whole GPUs the pool's running replicas hold now (each replica's API pod counts its replica's GPUs)."""
    return f"sum by ({BY_POOL}) ({mp.REPLICA_GPUS})"


def pool_reserved(at: str) -> str:
    return f'max by ({BY_POOL}) ({mp.POOL_RESERVED_GPUS}{{{mp.AT_LABEL}="{at}"}})'


def pool_free_gpus() -> str:
    return f"{pool_gpus()} - {pool_gpus_held()}"


def key_rejections(window: str = ALERT_WINDOW) -> str:
    """Calls the gateway made that vLLM refused with 401, per served name."""
    return (f"sum by ({gm.MODEL_GROUP_LABEL}) (increase({gm.DEPLOYMENT_FAILURES}"
            f'{{{gm.EXCEPTION_STATUS_LABEL}="401"}}[{window}]))')


def first_key_rejection(window: str = ALERT_WINDOW) -> str:
    """A 401 series the gateway did not have `window` ago: its first refusal, which `increase` cannot see (a
    counter series is born at 1, and Prometheus does not count from an implicit 0)."""
    failures = f'{gm.DEPLOYMENT_FAILURES}{{{gm.EXCEPTION_STATUS_LABEL}="401"}}'
    return f"sum by ({gm.MODEL_GROUP_LABEL}) ({failures} unless {failures} offset {window})"


def download_failed(namespace: str) -> str:
    """Failed Jobs of the serving namespace: the weight downloads are the only Jobs tkf-infra runs there."""
    return f'max by (namespace, job_name) ({KSM_JOB_FAILED}{{namespace="{namespace}", condition="true"}})'


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    queries: tuple[Query, ...]
    description: str
    per: str = "model"


M = "{{model_name}}"
P = "{{pool}}"

PANELS: tuple[Panel, ...] = (
    Panel("Phase", "none", (Query(M, phase(), SIDECAR),),
          "Replicas whose vLLM answers, over replicas running: 1 Ready, 0 not ready (loading or hung), between "
          "Degraded. A replica with no pod (Pending, no room) has no series: see Replicas."),
    Panel("Replicas against min / max", "none", (Query(f"{M} running", replicas_running(), SIDECAR),
                                                 Query(f"{M} min", min_replicas(), SIDECAR),
                                                 Query(f"{M} max", max_replicas(), SIDECAR)),
          "Replicas running (a pod whose sidecar answers) against the catalog's range (fixed count: min = max)."),
    Panel("Queue (requests waiting)", "none", (Query(M, waiting(), VLLM),),
          "Requests vLLM holds waiting for room in the batch or the KV cache, summed over replicas."),
    Panel("Running requests", "none", (Query(M, running(), VLLM),), "Requests in the running batch."),
    Panel("KV-cache use", "percentunit", (Query(M, kv_cache_usage(), VLLM),),
          "The fullest replica's KV cache; near 100 % vLLM preempts requests."),
    Panel("KV tokens: fit check's prediction vs vLLM's", "none",
          (Query(f"{M} predicted", predicted_kv_tokens(), SIDECAR),
           Query(f"{M} reported", reported_kv_tokens(), SIDECAR)),
          "The tokens the fit check predicted (stack output endpoints[].fit.kvCacheTokens) against what vLLM "
          "allocated at start-up (vllm:cache_config_info, served as a number by the sidecar)."),
    Panel("KV prediction drift", "percentunit", (Query(f"{M} {{{{instance}}}}", kv_deviation(), SIDECAR),),
          f"|reported / predicted − 1| per engine; the alert fires over {KV_DEVIATION_LIMIT:.0%}."),
    Panel("TTFT p95", "s", (Query(M, ttft_p95(), VLLM),), "Time to first token, 95th percentile."),
    Panel("Inter-token latency p95", "s", (Query(M, itl_p95(), VLLM),), "Time between output tokens, 95th percentile."),
    Panel("Tokens / s", "short", (Query(f"{M} generated", generation_tps(), VLLM),
                                  Query(f"{M} prompt", prompt_tps(), VLLM)),
          "Generated and prompt tokens per second, summed over replicas."),
    Panel("Pool GPUs: held against the plan", "none",
          (Query(f"{P} GPUs", pool_gpus(), SIDECAR), Query(f"{P} held now", pool_gpus_held(), SIDECAR),
           Query(f"{P} reserved at min", pool_reserved(mp.AT_MINIMUM), SIDECAR),
           Query(f"{P} reserved at max", pool_reserved(mp.AT_MAXIMUM), SIDECAR)),
          "The pool's whole GPUs, those its running replicas hold, and what the plan reserves with every "
          "autoscaler at its minimum and at its maximum (stack output poolHeadroom).", per="pool"),
)
