"""Per-model capacity signal from vLLM's Prometheus metrics, for `python -m tkf_infra status`.

The figures are the ones an inference gateway's endpoint picker routes on (queue depth, KV-cache
use) plus what an operator needs to decide whether to add replicas (running requests, prefix-cache
hit rate, TTFT p95, replicas actually answering). Reading them from Prometheus rather than from the
pods keeps the CLI usable from a laptop with only a Prometheus URL.

Queries aggregate all models at once (`by (model_name, namespace)`) so the number of requests does
not grow with the catalog; series are matched to endpoints in Python, which avoids escaping served
names such as "meta-llama/Llama-3.1-8B-Instruct" into PromQL regexes.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from tkf_infra.inventory import PrometheusClient, PrometheusQueryError, Sample

# Exit codes of `status`, distinct so scripts can tell "nothing to see" from "cannot see".
EXIT_OK = 0
EXIT_PROMETHEUS_UNAVAILABLE = 3
EXIT_NO_DATA = 4

# Target label that carries the pod label app.kubernetes.io/instance after the usual
# `labelmap: __meta_kubernetes_pod_label_(.+)` relabelling (dots and slashes become underscores).
DEFAULT_TARGET_LABEL = "app_kubernetes_io_instance"

_BY = "model_name, namespace"


def _queries(window: str) -> dict[str, str]:
    """PromQL per figure. `or` falls back per model to metric names of older vLLM releases."""
    return {
        "waiting": f"sum by ({_BY}) (vllm:num_requests_waiting)",
        "running": f"sum by ({_BY}) (vllm:num_requests_running)",
        "replicas": f"count by ({_BY}) (count by ({_BY}, instance) (vllm:num_requests_running))",
        "kv_avg": f"avg by ({_BY}) (vllm:kv_cache_usage_perc) or avg by ({_BY}) (vllm:gpu_cache_usage_perc)",
        "kv_max": f"max by ({_BY}) (vllm:kv_cache_usage_perc) or max by ({_BY}) (vllm:gpu_cache_usage_perc)",
        "prefix_hit": (
            f"(sum by ({_BY}) (rate(vllm:prefix_cache_hits_total[{window}]))"
            f" / sum by ({_BY}) (rate(vllm:prefix_cache_queries_total[{window}])))"
            f' or (sum by ({_BY}) (rate({{__name__=~"vllm:gpu_prefix_cache_hits(_total)?"}}[{window}]))'
            f' / sum by ({_BY}) (rate({{__name__=~"vllm:gpu_prefix_cache_queries(_total)?"}}[{window}])))'
            f" or avg by ({_BY}) (vllm:gpu_prefix_cache_hit_rate)"
        ),
        "ttft_p95": (
            f"histogram_quantile(0.95, sum by ({_BY}, le) (rate(vllm:time_to_first_token_seconds_bucket[{window}])))"
        ),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


@dataclass(frozen=True)
class ModelStatus:
    """Live figures for one published endpoint. None means "no value" (no series, or no traffic)."""

    name: str
    served_name: str
    namespace: str
    has_data: bool
    ready_replicas: int = 0
    requests_waiting: float | None = None
    requests_running: float | None = None
    kv_cache_usage: float | None = None
    kv_cache_usage_max: float | None = None
    prefix_cache_hit_rate: float | None = None
    ttft_p95_seconds: float | None = None
    scrape_targets: int | None = None
    scrape_targets_down: int | None = None

    def to_json(self) -> dict[str, Any]:
        """camelCase like the stack outputs; ratios and seconds rounded past what anyone acts on."""
        return {
            "name": self.name,
            "servedName": self.served_name,
            "namespace": self.namespace,
            "hasData": self.has_data,
            "readyReplicas": self.ready_replicas,
            "requestsWaiting": self.requests_waiting,
            "requestsRunning": self.requests_running,
            "kvCacheUsage": _round(self.kv_cache_usage),
            "kvCacheUsageMax": _round(self.kv_cache_usage_max),
            "prefixCacheHitRate": _round(self.prefix_cache_hit_rate),
            "ttftP95Seconds": _round(self.ttft_p95_seconds),
            "scrapeTargets": self.scrape_targets,
            "scrapeTargetsDown": self.scrape_targets_down,
        }


@dataclass
class StatusResult:
    prometheus_url: str
    reachable: bool
    models: list[ModelStatus] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if not self.reachable:
            return EXIT_PROMETHEUS_UNAVAILABLE
        if any(not m.has_data for m in self.models):
            return EXIT_NO_DATA
        return EXIT_OK

    def to_json(self) -> dict[str, Any]:
        return {
            "prometheusUrl": self.prometheus_url,
            "reachable": self.reachable,
            "models": [m.to_json() for m in self.models],
            "warnings": list(self.warnings),
        }


_Index = dict[tuple[str, str], float | None]


def _index(samples: Sequence[Sample], key_label: str = "model_name") -> _Index:
    return {(s.labels.get(key_label, ""), s.labels.get("namespace", "")): s.value for s in samples}


def _lookup(index: _Index, key: str, namespace: str) -> tuple[bool, float | None]:
    """Prefer the series of the endpoint's namespace; fall back to series without a namespace label.

    Two namespaces may serve the same name; series scraped outside Kubernetes have no namespace.
    """
    for ns in (namespace, ""):
        if (key, ns) in index:
            return True, index[(key, ns)]
    return False, None


def read_model_status(
    endpoints: Sequence[Mapping[str, Any]],
    prometheus_url: str,
    *,
    timeout_s: float = 5,
    rate_window: str = "5m",
    target_label: str = DEFAULT_TARGET_LABEL,
) -> StatusResult:
    """Query Prometheus once per figure and build one ModelStatus per endpoint. Never raises."""
    result = StatusResult(prometheus_url=prometheus_url, reachable=True)
    client = PrometheusClient(prometheus_url, timeout_s)
    indexes: dict[str, _Index] = {}
    try:
        for figure, promql in _queries(rate_window).items():
            try:
                indexes[figure] = _index(client.vector(promql))
            except PrometheusQueryError as exc:
                if not indexes:  # the very first query failed: Prometheus itself is the problem
                    result.reachable = False
                    result.warnings.append(
                        f"Prometheus at {prometheus_url} is unavailable: {exc}; no live status to show."
                    )
                    return result
                result.warnings.append(f"Prometheus at {prometheus_url}: the query for {figure} failed: {exc}.")
                indexes[figure] = {}
        try:
            up = client.vector(f"count by ({target_label}, namespace) (up)")
            up_ok = client.vector(f"sum by ({target_label}, namespace) (up)")
            targets, targets_up = _index(up, target_label), _index(up_ok, target_label)
        except PrometheusQueryError as exc:
            result.warnings.append(f"Prometheus at {prometheus_url}: the query for scrape targets failed: {exc}.")
            targets, targets_up = {}, {}
    finally:
        client.close()

    for ep in endpoints:
        name = str(ep.get("name", ""))
        served = str(ep.get("servedName") or name)
        namespace = str(ep.get("namespace", ""))
        values: dict[str, float | None] = {}
        found_any = False
        for figure, index in indexes.items():
            found, value = _lookup(index, served, namespace)
            found_any = found_any or found
            values[figure] = value
        n_found, n_targets = _lookup(targets, name, namespace)
        _, n_up = _lookup(targets_up, name, namespace)
        total = int(n_targets) if n_found and n_targets is not None else None
        down = total - int(n_up or 0) if total is not None else None
        status = ModelStatus(
            name=name,
            served_name=served,
            namespace=namespace,
            has_data=found_any,
            ready_replicas=int(values.get("replicas") or 0),
            requests_waiting=values.get("waiting"),
            requests_running=values.get("running"),
            kv_cache_usage=values.get("kv_avg"),
            kv_cache_usage_max=values.get("kv_max"),
            prefix_cache_hit_rate=values.get("prefix_hit"),
            ttft_p95_seconds=values.get("ttft_p95"),
            scrape_targets=total,
            scrape_targets_down=down,
        )
        result.models.append(status)
        where = f"namespace {namespace}" if namespace else "no namespace"
        kubectl = f"kubectl -n {namespace or '<namespace>'} get pods -l app.kubernetes.io/instance={name}"
        if not found_any:
            result.warnings.append(
                f"model '{name}' ({where}): no data — Prometheus has no vLLM series with "
                f'model_name="{served}". The pods may not be running yet, or nothing scrapes their '
                f"/metrics (check `{kubectl}` and that a PodMonitor/ServiceMonitor selects them)."
            )
        if down:
            result.warnings.append(
                f"model '{name}' ({where}): {down} of {total} scrape target(s) down — those replicas do not "
                f"answer /metrics and are not counted in the figures (check `{kubectl}`)."
            )
    return result


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------


def _num(value: float | None) -> str:
    if value is None:
        return "—"
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f}%"


def _kv(m: ModelStatus) -> str:
    if m.kv_cache_usage is None:
        return "—"
    if m.kv_cache_usage_max is not None and m.ready_replicas > 1:
        return f"{_pct(m.kv_cache_usage)} (max {_pct(m.kv_cache_usage_max)})"
    return _pct(m.kv_cache_usage)


def _ttft(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value * 1000:.0f} ms" if value < 0.9995 else f"{value:.2f} s"


def _replicas(m: ModelStatus) -> str:
    if m.scrape_targets is not None:
        return f"{m.ready_replicas}/{m.scrape_targets}"
    return str(m.ready_replicas)


def render_table(result: StatusResult, width: int = 140) -> str:
    """Plain-text table (no colour codes) followed by warnings; suits terminals, CI logs and pipes."""
    if not result.reachable:
        return "\n".join(f"warning: {w}" for w in result.warnings)
    table = Table(title=f"Model status (Prometheus {result.prometheus_url})", title_justify="left")
    for header in (
        "model",
        "namespace",
        "served name",
        "ready",
        "waiting",
        "running",
        "KV cache",
        "prefix hit",
        "TTFT p95",
    ):
        table.add_column(header, justify="left" if header in ("model", "namespace", "served name") else "right")
    for m in result.models:
        if not m.has_data:
            table.add_row(m.name, m.namespace, m.served_name, _replicas(m), "no data", "", "", "", "")
            continue
        table.add_row(
            m.name,
            m.namespace,
            m.served_name,
            _replicas(m),
            _num(m.requests_waiting),
            _num(m.requests_running),
            _kv(m),
            _pct(m.prefix_cache_hit_rate),
            _ttft(m.ttft_p95_seconds),
        )
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None, force_terminal=False).print(table)
    lines = [line.rstrip() for line in buffer.getvalue().rstrip("\n").splitlines()]
    lines += [f"warning: {w}" for w in result.warnings]
    return "\n".join(lines)


def render_json(result: StatusResult) -> str:
    return json.dumps(result.to_json(), indent=2)


def status_command(
    endpoints: Sequence[Mapping[str, Any]],
    prometheus_url: str,
    as_json: bool,
    *,
    timeout_s: float = 5,
    rate_window: str = "5m",
) -> tuple[str, int]:
    """Text to print and the exit code: 0 ok, 3 Prometheus unavailable, 4 some model has no data."""
    result = read_model_status(endpoints, prometheus_url, timeout_s=timeout_s, rate_window=rate_window)
    text = render_json(result) if as_json else render_table(result)
    return text, result.exit_code
