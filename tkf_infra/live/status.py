"""Per-model capacity signal from vLLM's Prometheus metrics, for `python -m tkf_infra status`.

The figures are the ones an inference gateway's endpoint picker routes on (queue depth, KV-cache
use) plus what an operator needs to decide whether to add replicas (running requests, prefix-cache
hit rate, TTFT p95, replicas actually answering). Reading them from Prometheus rather than from the
pods keeps the CLI usable from a laptop with only a Prometheus URL.

Each model's KV cache is also held against the fit check: the stack outputs publish the tokens the
check predicted (`endpoints[servedName].fit.kvCacheTokens`), every running vLLM reports what it got,
and a deviation over KV_DEVIATION_LIMIT is flagged — the live fleet is the estimator's test bench.

Queries aggregate all models at once (`by (model_name, namespace)`) so the number of requests does
not grow with the catalog; series are matched to endpoints in Python, which avoids escaping served
names such as "meta-llama/Llama-3.1-8B-Instruct" into PromQL regexes.

The per-model figures travel in one query, each tagged with FIGURE_LABEL: Prometheus evaluates one
query against one view of its head block (TSDB isolation), so a scrape is seen whole or not at all.
Separate queries at one pinned instant are not enough: a scrape that started before the instant but
lands between two queries (a slow vLLM after a failed scrape) gave a queue length of "no data" beside
the running count of the same instant — seen on a loaded 2-core CI run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tkf_infra import vllm_metrics as vm
from tkf_infra.live.kv_cache import KvObservation, observations_for, read_kv_observations
from tkf_infra.live.lora_status import lora_status, read_lora_samples
from tkf_infra.live.model_status import KvCheck, ModelStatus, StatusResult, predicted_kv_tokens
from tkf_infra.live.prometheus import PrometheusClient, PrometheusQueryError, Sample
from tkf_infra.names import INSTANCE_LABEL
from tkf_infra.sizing.contract import KV_DEVIATION_LIMIT

# Target label that carries the pod label app.kubernetes.io/instance after the usual
# `labelmap: __meta_kubernetes_pod_label_(.+)` relabelling (dots and slashes become underscores).
DEFAULT_TARGET_LABEL = re.sub(r"[^a-zA-Z0-9_]", "_", INSTANCE_LABEL)

_BY = f"{vm.MODEL_LABEL}, {vm.NAMESPACE_LABEL}"

#: The label the combined query adds to say which figure a series is; no vLLM series carries it.
FIGURE_LABEL = "tkf_figure"


def _queries(window: str) -> dict[str, str]:
    """PromQL per figure. `or` falls back per model to the names releases before 0.11 export."""
    return {
        "waiting": f"sum by ({_BY}) ({vm.WAITING})",
        "running": f"sum by ({_BY}) ({vm.RUNNING})",
        "replicas": f"count by ({_BY}) (count by ({_BY}, instance) ({vm.RUNNING}))",
        "kv_avg": f"avg by ({_BY}) ({vm.KV_CACHE_USAGE}) or avg by ({_BY}) ({vm.KV_CACHE_USAGE_BEFORE_0_11})",
        "kv_max": f"max by ({_BY}) ({vm.KV_CACHE_USAGE}) or max by ({_BY}) ({vm.KV_CACHE_USAGE_BEFORE_0_11})",
        "prefix_hit": (
            f"(sum by ({_BY}) (rate({vm.PREFIX_HITS}[{window}]))"
            f" / sum by ({_BY}) (rate({vm.PREFIX_QUERIES}[{window}])))"
            f' or (sum by ({_BY}) (rate({{__name__=~"{vm.PREFIX_HITS_BEFORE_0_11}"}}[{window}]))'
            f' / sum by ({_BY}) (rate({{__name__=~"{vm.PREFIX_QUERIES_BEFORE_0_11}"}}[{window}])))'
            f" or avg by ({_BY}) ({vm.PREFIX_HIT_RATE_V0})"
        ),
        "ttft_p95": f"histogram_quantile(0.95, sum by ({_BY}, le) (rate({vm.TTFT_BUCKET}[{window}])))",
        "prompt_tokens": f"sum by ({_BY}) ({vm.PROMPT_TOKENS})",
        "generation_tokens": f"sum by ({_BY}) ({vm.GENERATION_TOKENS})",
        "prompt_tps": f"sum by ({_BY}) (rate({vm.PROMPT_TOKENS}[{window}]))",
        "generation_tps": f"sum by ({_BY}) (rate({vm.GENERATION_TOKENS}[{window}]))",
    }


def _combined(queries: Mapping[str, str]) -> str:
    """One PromQL expression returning every figure's series, each tagged with its FIGURE_LABEL value."""
    return " or ".join(f'label_replace(({promql}), "{FIGURE_LABEL}", "{figure}", "", "")'
                       for figure, promql in queries.items())


def _read_figures(client: PrometheusClient, queries: Mapping[str, str]) -> dict[str, list[Sample]]:
    """Every figure's series from one query (module docstring: why one). Raises PrometheusQueryError."""
    by_figure: dict[str, list[Sample]] = {figure: [] for figure in queries}
    for s in client.vector(_combined(queries)):
        figure = s.labels.get(FIGURE_LABEL, "")
        if figure in by_figure:
            by_figure[figure].append(s)
    return by_figure


_Index = dict[tuple[str, str], float | None]


def _index(samples: Sequence[Sample], key_label: str = vm.MODEL_LABEL) -> _Index:
    return {(s.labels.get(key_label, ""), s.labels.get(vm.NAMESPACE_LABEL, "")): s.value for s in samples}


def _lookup(index: _Index, key: str, namespace: str) -> tuple[bool, float | None]:
    """Prefer the series of the endpoint's namespace; fall back to series without a namespace label.

    Two namespaces may serve the same name; series scraped outside Kubernetes have no namespace.
    """
    for ns in (namespace, ""):
        if (key, ns) in index:
            return True, index[(key, ns)]
    return False, None


def _deviation_warning(name: str, where: str, check: KvCheck) -> str:
    worst = check.worst
    assert worst is not None and worst.tokens is not None and check.predicted
    deviation = check.deviation(worst) or 0.0
    effect = (
        "the fit check over-estimates this model's KV cache, so its `fits` verdict and concurrency are "
        "optimistic here" if deviation < 0 else
        "the fit check under-estimates this model's KV cache, so it may refuse configurations that fit"
    )
    return (
        f"model '{name}' ({where}): vLLM reports {worst.tokens:,} KV-cache tokens ({worst.tokens_source}, "
        f"{worst.where}) but the fit check predicted {check.predicted:,}: {deviation:+.1%}, over the "
        f"±{KV_DEVIATION_LIMIT:.0%} limit — {effect}. Record this start-up as a calibration case with "
        "`python -m tkf_infra calibrate --stack <stack> -o <file>` and attach it to a sizing issue."
    )


@dataclass(frozen=True)
class _Reads:
    """What one `status` read from Prometheus, for every endpoint: the figures by model, each engine's KV
    cache, the LoRA gauge's series, and the scrape targets (all, and up) by pod instance label."""

    figures: dict[str, _Index]
    kv: list[KvObservation] = field(default_factory=list)
    lora: list[Sample] = field(default_factory=list)
    targets: _Index = field(default_factory=dict)
    targets_up: _Index = field(default_factory=dict)


def _read_all(client: PrometheusClient, result: StatusResult, rate_window: str, target_label: str) -> _Reads | None:
    """Every read `status` makes; None (and ``result`` unreachable) when the figures' query fails. A later
    read that fails is a warning and leaves its part empty: the figures are still worth showing."""
    url = result.prometheus_url
    try:
        figures = _read_figures(client, _queries(rate_window))
    except PrometheusQueryError as exc:
        result.reachable = False
        result.warnings.append(f"Prometheus at {url} is unavailable: {exc}; no live status to show.")
        return None
    reads = _Reads({figure: _index(samples) for figure, samples in figures.items()})
    try:
        reads = replace(reads, kv=read_kv_observations(client))
    except PrometheusQueryError as exc:
        result.warnings.append(f"Prometheus at {url}: the query for the KV-cache check failed: {exc}.")
    try:
        reads = replace(reads, lora=read_lora_samples(client))
    except PrometheusQueryError as exc:
        result.warnings.append(f"Prometheus at {url}: the query for LoRA adapters failed: {exc}.")
    try:
        up = client.vector(f"count by ({target_label}, namespace) (up)")
        up_ok = client.vector(f"sum by ({target_label}, namespace) (up)")
        reads = replace(reads, targets=_index(up, target_label), targets_up=_index(up_ok, target_label))
    except PrometheusQueryError as exc:
        result.warnings.append(f"Prometheus at {url}: the query for scrape targets failed: {exc}.")
    return reads


def _model_status(ep: Mapping[str, Any], reads: _Reads) -> ModelStatus:
    """One endpoint's figures, matched by served name and namespace (module doc: matched in Python)."""
    name = str(ep.get("name", ""))
    served = str(ep.get("servedName") or name)
    namespace = str(ep.get("namespace", ""))
    found = {figure: _lookup(index, served, namespace) for figure, index in reads.figures.items()}
    values = {figure: value for figure, (_, value) in found.items()}
    n_found, n_targets = _lookup(reads.targets, name, namespace)
    _, n_up = _lookup(reads.targets_up, name, namespace)
    total = int(n_targets) if n_found and n_targets is not None else None
    return ModelStatus(
        name=name,
        served_name=served,
        namespace=namespace,
        has_data=any(hit for hit, _ in found.values()),
        ready_replicas=int(values.get("replicas") or 0),
        requests_waiting=values.get("waiting"),
        requests_running=values.get("running"),
        kv_cache_usage=values.get("kv_avg"),
        kv_cache_usage_max=values.get("kv_max"),
        prefix_cache_hit_rate=values.get("prefix_hit"),
        ttft_p95_seconds=values.get("ttft_p95"),
        prompt_tokens=values.get("prompt_tokens"),
        generation_tokens=values.get("generation_tokens"),
        prompt_tokens_per_second=values.get("prompt_tps"),
        generation_tokens_per_second=values.get("generation_tps"),
        scrape_targets=total,
        scrape_targets_down=total - int(n_up or 0) if total is not None else None,
        kv_check=KvCheck(predicted_kv_tokens(ep), tuple(observations_for(reads.kv, served, namespace))),
        footprint=ep.get("footprint") if isinstance(ep.get("footprint"), Mapping) else None,
        lora=lora_status(ep, reads.lora),
    )


def _model_warnings(m: ModelStatus) -> list[str]:
    """What a person should look at for this model: its adapters, no data, targets down, a KV deviation."""
    where = f"namespace {m.namespace}" if m.namespace else "no namespace"
    out = m.lora.warnings(m.name, where) if m.lora is not None and m.has_data else []
    kubectl = f"kubectl -n {m.namespace or '<namespace>'} get pods -l {INSTANCE_LABEL}={m.name}"
    if not m.has_data:
        out.append(
            f"model '{m.name}' ({where}): no data — Prometheus has no vLLM series with "
            f'model_name="{m.served_name}". The pods may not be running yet, or nothing scrapes their '
            f"/metrics (check `{kubectl}` and that a PodMonitor/ServiceMonitor selects them)."
        )
    if down := m.scrape_targets_down:
        out.append(
            f"model '{m.name}' ({where}): {down} of {m.scrape_targets} scrape target(s) down — those replicas do "
            f"not answer /metrics and are not counted in the figures (check `{kubectl}`)."
        )
    if m.kv_check.deviates:
        out.append(_deviation_warning(m.name, where, m.kv_check))
    return out


def read_model_status(
    endpoints: Sequence[Mapping[str, Any]],
    prometheus_url: str,
    *,
    timeout_s: float = 5,
    rate_window: str = "5m",
    target_label: str = DEFAULT_TARGET_LABEL,
) -> StatusResult:
    """Query Prometheus (the figures in one query) and build one ModelStatus per endpoint. Never raises."""
    result = StatusResult(prometheus_url=prometheus_url, reachable=True)
    with PrometheusClient(prometheus_url, timeout_s, snapshot=True) as client:
        reads = _read_all(client, result, rate_window, target_label)
    if reads is None:
        return result
    for ep in endpoints:
        status = _model_status(ep, reads)
        result.models.append(status)
        result.warnings += _model_warnings(status)
    return result
