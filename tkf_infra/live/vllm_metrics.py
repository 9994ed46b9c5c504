"""vLLM's Prometheus metrics as tkf-infra reads them: names per release, and the KV cache vLLM really got.

Every name below was read in vLLM's own source at a release tag (the wheel published on PyPI):
- v0.32.0 `vllm/v1/metrics/loggers.py`, PrometheusStatLogger: `vllm:num_requests_running` (l. 528),
  `vllm:num_requests_waiting` (l. 538), `vllm:kv_cache_usage_perc` (l. 620), `vllm:prefix_cache_queries`
  (l. 662) and `vllm:prefix_cache_hits` (l. 673) counters, `vllm:time_to_first_token_seconds` (l. 931),
  `vllm:cache_config_info` (`log_metrics_info`, l. 1114-1136), `vllm:prompt_tokens` (l. 748) and
  `vllm:generation_tokens` (l. 799) counters. The older names below are absent there.
- v0.11.0 `vllm/v1/metrics/loggers.py` l. 211-249: `vllm:gpu_cache_usage_perc` and
  `vllm:gpu_prefix_cache_{queries,hits}` only with `--show-hidden-metrics-for-version=0.10`; V0 is gone
  (`vllm/engine/llm_engine.py` aliases the V1 engine).
- v0.10.2 `vllm/v1/metrics/loggers.py` l. 209-265: both the old and the new names, unconditionally; its
  V0 engine (`vllm/engine/metrics.py` l. 82) exports only `vllm:gpu_cache_usage_perc`.
- v0.8.5 `vllm/v1/metrics/loggers.py` l. 169-180: only `vllm:gpu_cache_usage_perc` and
  `vllm:gpu_prefix_cache_{queries,hits}`; its V0 engine (`vllm/engine/metrics.py` l. 96, 123) exports
  `vllm:gpu_cache_usage_perc` and the `vllm:gpu_prefix_cache_hit_rate` gauge.
The stacks may deploy any vLLM from 0.6 on (the sizing engine sizes them), so each figure falls back,
per model, to the older name a release before 0.11 exports.

`vllm:cache_config_info` is a gauge fixed at 1 whose labels are `str()` of every CacheConfig attribute
(`CacheConfig.metrics_info`, v0.32.0 `vllm/config/cache.py` l. 322) plus `engine` (V1 only; v0.8.5 and
V0 have none). It carries no `model_name`, so it is joined to a series that has one on the scrape
target (`job`, `instance`). Labels used:
- `kv_cache_size_tokens` (v0.32.0 `config/cache.py` l. 227): the per-engine token capacity vLLM logs as
  "GPU KV cache size: N tokens", group-aware for hybrid models (`v1/core/kv_cache_utils.py` l. 2316-2322,
  `update_kv_cache_capacity`). Absent before it was added (not in v0.10.2 nor v0.11.0).
- `num_gpu_blocks` and `block_size`: their product is that capacity for a model with one KV-cache
  group; v0.10.2 logs `num_blocks // groups * min_block_size` for hybrid models
  (`v1/core/kv_cache_utils.py` l. 1026), so the product overstates those. The front end sums
  `num_gpu_blocks` over data-parallel engines (v0.32.0 `v1/engine/core_client.py` l. 852-855, v0.10.2
  `v1/engine/utils.py` l. 837-839). v0.8.5's V1 front end builds the gauge before the engine reports
  its blocks (`v1/engine/async_llm.py` l. 89, `v1/metrics/loggers.py` l. 348), so it exports
  `num_gpu_blocks="None"`: no KV figure can be read from that release.
- `kv_cache_max_concurrency`, `gpu_memory_utilization`, `cache_dtype`, `enable_prefix_caching`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tkf_infra.live.prometheus import PrometheusClient, Sample

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"
KV_CACHE_USAGE_BEFORE_0_11 = "vllm:gpu_cache_usage_perc"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"  # prometheus_client exposes counters with `_total`
PREFIX_HITS = "vllm:prefix_cache_hits_total"
PREFIX_QUERIES_BEFORE_0_11 = "vllm:gpu_prefix_cache_queries(_total)?"  # a regex: `{__name__=~...}`
PREFIX_HITS_BEFORE_0_11 = "vllm:gpu_prefix_cache_hits(_total)?"
PREFIX_HIT_RATE_V0 = "vllm:gpu_prefix_cache_hit_rate"
TTFT_BUCKET = "vllm:time_to_first_token_seconds_bucket"
# The time between two output tokens of a request (v0.32.0 loggers.py l. 941 `vllm:inter_token_latency_seconds`).
ITL_BUCKET = "vllm:inter_token_latency_seconds_bucket"
# Counters of tokens served (v0.32.0 loggers.py l. 748 `vllm:prompt_tokens`, l. 799 `vllm:generation_tokens`;
# the same names in v0.8.5 and V0 `engine/metrics.py`), exposed with `_total`.
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
CACHE_CONFIG_INFO = "vllm:cache_config_info"
# LoRA: a gauge set to the current time under the label set of the moment (v0.32.0 loggers.py l. 1092-1112,
# 1224-1236), so the replica's newest series is its present. `running_lora_adapters` and
# `waiting_lora_adapters` list the same names, comma-joined: every adapter with a request waiting or running
# (v1/metrics/stats.py l. 694-700 fills both dicts from one loop; the counts are not exported), by the name
# of `--lora-modules NAME=PATH`. No `model_name` label: joined to the target as `vllm:cache_config_info` is.
LORA_INFO = "vllm:lora_requests_info"
LORA_IN_FLIGHT = "running_lora_adapters"
MAX_LORA = "max_lora"

# The labels every vLLM series carries (v0.32.0 loggers.py: labelnames = ["model_name", "engine"]),
# plus `namespace` that the usual Kubernetes scrape relabelling adds.
MODEL_LABEL = "model_name"
NAMESPACE_LABEL = "namespace"

# `vllm:cache_config_info` label names (CacheConfig attribute names, see the module docstring).
KV_CACHE_SIZE_TOKENS = "kv_cache_size_tokens"
NUM_GPU_BLOCKS = "num_gpu_blocks"
BLOCK_SIZE = "block_size"
KV_CACHE_MAX_CONCURRENCY = "kv_cache_max_concurrency"
GPU_MEMORY_UTILIZATION = "gpu_memory_utilization"
CACHE_DTYPE = "cache_dtype"
ENGINE = "engine"

# One query for every replica of every model: cache_config_info joined to the model name of the
# same scrape target. `group by` keeps one right-hand series per target whatever the engine count.
CACHE_CONFIG_QUERY = (
    f"{CACHE_CONFIG_INFO} * on (job, instance) group_left ({MODEL_LABEL}) "
    f"group by (job, instance, {MODEL_LABEL}) ({RUNNING})"
)

SOURCE_REPORTED = f"vLLM's {KV_CACHE_SIZE_TOKENS} label"
SOURCE_BLOCKS = f"{NUM_GPU_BLOCKS} × {BLOCK_SIZE}"


def _label_int(labels: Mapping[str, str], key: str) -> int | None:
    """vLLM writes str(None) for a value not known when the gauge was set; that stays None."""
    try:
        return int(labels[key])
    except (KeyError, ValueError):
        return None


def _label_float(labels: Mapping[str, str], key: str) -> float | None:
    try:
        return float(labels[key])
    except (KeyError, ValueError):
        return None


@dataclass(frozen=True)
class KvObservation:
    """The KV cache one running vLLM engine allocated at start-up, as its cache_config_info reports it."""

    model_name: str
    namespace: str
    instance: str
    engine: str | None  # None: the release exports no `engine` label (V0, V1 before 0.9)
    labels: Mapping[str, str]
    target_labels: frozenset[str] = frozenset()  # added by the scrape (job, instance, relabelled pod labels)

    @property
    def num_gpu_blocks(self) -> int | None:
        return _label_int(self.labels, NUM_GPU_BLOCKS)

    @property
    def block_size(self) -> int | None:
        return _label_int(self.labels, BLOCK_SIZE)

    @property
    def reported_tokens(self) -> int | None:
        return _label_int(self.labels, KV_CACHE_SIZE_TOKENS)

    @property
    def max_concurrency(self) -> float | None:
        return _label_float(self.labels, KV_CACHE_MAX_CONCURRENCY)

    @property
    def gpu_memory_utilization(self) -> float | None:
        return _label_float(self.labels, GPU_MEMORY_UTILIZATION)

    @property
    def cache_dtype(self) -> str | None:
        value = self.labels.get(CACHE_DTYPE)
        return None if value in (None, "", "None") else value

    @property
    def tokens(self) -> int | None:
        """KV tokens per engine: vLLM's own figure when it exports one, else blocks × block size (which
        counts every engine of a data-parallel front end, see the module docstring; the catalog has no DP)."""
        if self.reported_tokens is not None:
            return self.reported_tokens
        if self.num_gpu_blocks is not None and self.block_size is not None:
            return self.num_gpu_blocks * self.block_size
        return None

    @property
    def tokens_source(self) -> str | None:
        if self.reported_tokens is not None:
            return SOURCE_REPORTED
        return SOURCE_BLOCKS if self.tokens is not None else None

    @property
    def where(self) -> str:
        return self.instance + (f" engine {self.engine}" if self.engine is not None else "")

    def exposition_labels(self) -> dict[str, str]:
        """The labels vLLM itself set: the scrape target's and the joined model_name removed."""
        return {k: v for k, v in sorted(self.labels.items())
                if k not in self.target_labels and k not in (MODEL_LABEL, "__name__")}

    def exposition(self) -> str:
        """The series as vLLM exposed it on /metrics (labels sorted), for quoting in a case."""
        labels = ",".join(f'{k}="{v}"' for k, v in self.exposition_labels().items())
        return f"{CACHE_CONFIG_INFO}{{{labels}}} 1"


def _observation(sample: Sample, target_labels: frozenset[str]) -> KvObservation:
    labels = dict(sample.labels)
    return KvObservation(
        model_name=labels.get(MODEL_LABEL, ""),
        namespace=labels.get(NAMESPACE_LABEL, ""),
        instance=labels.get("instance", ""),
        engine=labels.get(ENGINE),
        labels=labels,
        target_labels=target_labels,
    )


def _target(sample: Sample) -> tuple[str, str]:
    return sample.labels.get("job", ""), sample.labels.get("instance", "")


def read_kv_observations(client: PrometheusClient) -> list[KvObservation]:
    """Every engine's cache_config_info, with the model it serves; raises PrometheusQueryError.

    `up` carries exactly the labels the scrape adds to a target, which tells them apart from the
    labels vLLM wrote (those vary with the release: they are CacheConfig's attributes).
    """
    samples = client.vector(CACHE_CONFIG_QUERY)
    targets = {_target(s): frozenset(s.labels) - {"__name__"} for s in client.vector("up")} if samples else {}
    observations = [_observation(s, targets.get(_target(s), frozenset({"job", "instance"}))) for s in samples]
    return sorted(observations, key=lambda o: (o.namespace, o.model_name, o.instance, o.engine or ""))


def observations_for(observations: list[KvObservation], served_name: str, namespace: str) -> list[KvObservation]:
    """The endpoint's engines: series of its namespace, else series scraped without a namespace label."""
    for ns in (namespace, ""):
        found = [o for o in observations if o.model_name == served_name and o.namespace == ns]
        if found:
            return found
    return []
