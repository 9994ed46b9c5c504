"""What `status` learns about each model, as data: its live figures (`ModelStatus`), its KV cache held
against the fit check's prediction (`KvCheck`), and the whole answer with its exit code (`StatusResult`).

Why a module of its own: status.py reads Prometheus into these, status_view.py shows them and
calibrate.py reuses the check, so the shapes sit one floor below all three.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tkf_infra import vllm_metrics as vm
from tkf_infra.exit_codes import ExitCode
from tkf_infra.live.kv_cache import KvObservation
from tkf_infra.live.lora_status import LoraStatus
from tkf_infra.sizing.contract import KV_DEVIATION_LIMIT, wire_name

# The outputs' `fit` key of the predicted tokens, named like every FitFigures field (sizing/contract.py).
_PREDICTED_KEY = wire_name("kv_cache_tokens")


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


@dataclass(frozen=True)
class KvCheck:
    """Predicted KV tokens (the fit check's) against what each running engine of the model reports."""

    predicted: int | None
    observations: tuple[KvObservation, ...] = ()

    def deviation(self, observation: KvObservation) -> float | None:
        """(observed − predicted) / predicted: negative means vLLM got less than the check assumed."""
        if not self.predicted or observation.tokens is None:
            return None
        return (observation.tokens - self.predicted) / self.predicted

    @property
    def worst(self) -> KvObservation | None:
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


def predicted_kv_tokens(endpoint: Mapping[str, Any]) -> int | None:
    """The fit check's KV tokens from an `endpoints[...]` output (null while a first preview is unknown)."""
    fit = endpoint.get("fit")
    value = fit.get(_PREDICTED_KEY) if isinstance(fit, Mapping) else None
    return int(value) if isinstance(value, int | float) and value > 0 else None
