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
from dataclasses import dataclass, field
from typing import Any

from tkf_infra.live import vllm_metrics as vm
from tkf_infra.live.lora_status import LoraStatus, lora_status, lora_warnings, read_lora_samples
from tkf_infra.live.prometheus import PrometheusClient, PrometheusQueryError, Sample
from tkf_infra.names import INSTANCE_LABEL
from tkf_infra.ops.exit_codes import ExitCode
from tkf_infra.sizing.contract import wire_name

# Target label that carries the pod label app.kubernetes.io/instance after the usual
# `labelmap: __meta_kubernetes_pod_label_(.+)` relabelling (dots and slashes become underscores).
DEFAULT_TARGET_LABEL = re.sub(r"[^a-zA-Z0-9_]", "_", INSTANCE_LABEL)

# Issue 13's tolerance for the live check: the sizing bench holds the estimator to a 2 % median and
# 10 % worst case on recorded start-ups; one live model off by more than 5 % is worth a person's look.
KV_DEVIATION_LIMIT = 0.05

_BY = f"{vm.MODEL_LABEL}, {vm.NAMESPACE_LABEL}"

#: The label the combined query adds to say which figure a series is; no vLLM series carries it.
FIGURE_LABEL = "tkf_figure"

# The outputs' `fit` key of the predicted tokens, named like every FitFigures field (sizing/contract.py).
_PREDICTED_KEY = wire_name("kv_cache_tokens")


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


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


@dataclass(frozen=True)
class KvCheck:
    """Predicted KV tokens (the fit check's) against what each running engine of the model reports."""

    predicted: int | None
    observations: tuple[vm.KvObservation, ...] = ()

    def deviation(self, observation: vm.KvObservation) -> float | None:
        """(observed − predicted) / predicted: negative means vLLM got less than the check assumed."""
        if not self.predicted or observation.tokens is None:
            return None
        return (observation.tokens - self.predicted) / self.predicted

    @property
    def worst(self) -> vm.KvObservation | None:
        """The engine farthest from the prediction (replicas on one GPU type normally agree exactly)."""
        measured = [o for o in self.observations if o.tokens is not None]
        if not self.predicted:
            return measured[0] if measured else None
        return max(measured, key=lambda o: abs(self.deviation(o) or 0.0), default=None)

    @property
    def deviates(self) -> bool:
        worst = self.worst
        deviation = self.deviation(worst) if worst else None
        return deviation is not None and abs(deviation) > KV_DEVIATION_LIMIT

    @property
    def unavailable(self) -> str | None:
        """Why no comparison was made, in a few words; None when one was."""
        if not self.predicted:
            return "no prediction in the stack outputs"
        if not self.observations:
            return f"no {vm.CACHE_CONFIG_INFO} series"
        if self.worst is None:
            return f'{vm.CACHE_CONFIG_INFO} has {vm.NUM_GPU_BLOCKS}="None" (this vLLM sets it after exporting)'
        return None

    def to_json(self) -> dict[str, Any]:
        worst = self.worst
        return {
            "predictedTokens": self.predicted,
            "observedTokens": worst.tokens if worst else None,
            "deviation": _round(self.deviation(worst)) if worst else None,
            "deviates": self.deviates,
            "limit": KV_DEVIATION_LIMIT,
            "source": worst.tokens_source if worst else None,
            "unavailable": self.unavailable,
            "engines": [
                {"instance": o.instance, "engine": o.engine, "tokens": o.tokens, "numGpuBlocks": o.num_gpu_blocks,
                 "blockSize": o.block_size, "reportedTokens": o.reported_tokens}
                for o in self.observations
            ],
        }


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
    prompt_tokens: float | None = None
    """Prompt tokens served since the replicas started (vLLM's counter, summed over replicas)."""
    generation_tokens: float | None = None
    prompt_tokens_per_second: float | None = None
    generation_tokens_per_second: float | None = None
    scrape_targets: int | None = None
    scrape_targets_down: int | None = None
    kv_check: KvCheck = field(default_factory=lambda: KvCheck(predicted=None))
    footprint: Mapping[str, Any] | None = None
    """What the model asks of nodes and storage (`endpoints[...].footprint`, docs/admission.md), when published."""
    lora: LoraStatus | None = None
    """Its LoRA adapters as the replicas report them (None: the endpoint publishes none)."""

    def footprint_text(self) -> str | None:
        """One line: pod requests, pods per replica and the weight cache (None without a published footprint)."""
        fp = self.footprint or {}
        pod = fp.get("pod") if isinstance(fp.get("pod"), Mapping) else None
        if not pod:
            return None
        pods = int(fp.get("podsPerReplica") or 1)
        per = f"{pods} pods per replica, each" if pods > 1 else "each pod"
        cache = f"; weight cache {fp['weightCache']} {fp['weightCacheGiB']} GiB" if fp.get("weightCacheGiB") else ""
        return (f"{per} asks {float(pod.get('cpuMillis') or 0) / 1000:g} CPU, "
                f"{float(pod.get('memoryMiB') or 0) / 1024:.1f} GiB memory, {pod.get('gpus', 0)} GPU(s){cache}")

    def to_json(self) -> dict[str, Any]:
        """camelCase like the stack outputs; ratios and seconds rounded past what anyone acts on."""
        extra = {"footprint": dict(self.footprint)} if self.footprint else {}
        if self.lora is not None:
            extra["lora"] = self.lora.to_json()
        return {**extra,
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
            "promptTokens": self.prompt_tokens,
            "generationTokens": self.generation_tokens,
            "promptTokensPerSecond": _round(self.prompt_tokens_per_second),
            "generationTokensPerSecond": _round(self.generation_tokens_per_second),
            "scrapeTargets": self.scrape_targets,
            "scrapeTargetsDown": self.scrape_targets_down,
            "kvCacheCheck": self.kv_check.to_json(),
        }


@dataclass
class StatusResult:
    prometheus_url: str
    reachable: bool
    models: list[ModelStatus] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> ExitCode:
        """A deviation outranks missing data: it is a finding about the fit check, not a gap."""
        if not self.reachable:
            return ExitCode.UNAVAILABLE
        if any(m.kv_check.deviates for m in self.models):
            return ExitCode.REFUSED
        if any(not m.has_data for m in self.models):
            return ExitCode.NO_DATA
        return ExitCode.OK

    def to_json(self) -> dict[str, Any]:
        return {
            "prometheusUrl": self.prometheus_url,
            "reachable": self.reachable,
            "exitCode": int(self.exit_code),
            "models": [m.to_json() for m in self.models],
            "warnings": list(self.warnings),
        }


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


def predicted_kv_tokens(endpoint: Mapping[str, Any]) -> int | None:
    """The fit check's KV tokens from an `endpoints[...]` output (null while a first preview is unknown)."""
    fit = endpoint.get("fit")
    value = fit.get(_PREDICTED_KEY) if isinstance(fit, Mapping) else None
    return int(value) if isinstance(value, int | float) and value > 0 else None


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
    kv_observations: list[vm.KvObservation] = []
    with PrometheusClient(prometheus_url, timeout_s, snapshot=True) as client:
        try:
            figures = _read_figures(client, _queries(rate_window))
        except PrometheusQueryError as exc:
            result.reachable = False
            result.warnings.append(f"Prometheus at {prometheus_url} is unavailable: {exc}; no live status to show.")
            return result
        indexes = {figure: _index(samples) for figure, samples in figures.items()}
        try:
            kv_observations = vm.read_kv_observations(client)
        except PrometheusQueryError as exc:
            result.warnings.append(f"Prometheus at {prometheus_url}: the query for the KV-cache check failed: {exc}.")
        try:
            lora_samples = read_lora_samples(client)
        except PrometheusQueryError as exc:
            lora_samples = []
            result.warnings.append(f"Prometheus at {prometheus_url}: the query for LoRA adapters failed: {exc}.")
        try:
            up = client.vector(f"count by ({target_label}, namespace) (up)")
            up_ok = client.vector(f"sum by ({target_label}, namespace) (up)")
            targets, targets_up = _index(up, target_label), _index(up_ok, target_label)
        except PrometheusQueryError as exc:
            result.warnings.append(f"Prometheus at {prometheus_url}: the query for scrape targets failed: {exc}.")
            targets, targets_up = {}, {}

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
        check = KvCheck(predicted_kv_tokens(ep), tuple(vm.observations_for(kv_observations, served, namespace)))
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
            prompt_tokens=values.get("prompt_tokens"),
            generation_tokens=values.get("generation_tokens"),
            prompt_tokens_per_second=values.get("prompt_tps"),
            generation_tokens_per_second=values.get("generation_tps"),
            scrape_targets=total,
            scrape_targets_down=down,
            kv_check=check,
            footprint=ep.get("footprint") if isinstance(ep.get("footprint"), Mapping) else None,
            lora=lora_status(ep, lora_samples),
        )
        result.models.append(status)
        where = f"namespace {namespace}" if namespace else "no namespace"
        result.warnings += lora_warnings(status, where)
        kubectl = f"kubectl -n {namespace or '<namespace>'} get pods -l {INSTANCE_LABEL}={name}"
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
        if check.deviates:
            result.warnings.append(_deviation_warning(name, where, check))
    return result
