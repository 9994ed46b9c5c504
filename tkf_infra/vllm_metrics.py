"""vLLM's Prometheus series and labels as tkf-infra reads them, per release; pure (standard library only), so
the components (autoscaling triggers) and live/ (status, calibrate; the KV cache each engine reports is
read in live/kv_cache.py) spell them once.

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
