"""What the fake exporters serve: a small GPU cluster (DCGM) and three vLLM models of three releases.

The data is structured so the tests derive every expected figure from it instead of hard-coding
numbers. Counters grow linearly with a shared clock, so Prometheus' rate() sees steady traffic; the
two replicas of one model share a traffic *shape* (hit ratio, latency distribution) because rate()
over a window that is only seconds old extrapolates each series slightly differently, which would
blur any figure that mixes replicas with different shapes.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

# ------------------------------------------------------------------------------------- DCGM


@dataclass(frozen=True)
class FakeGpu:
    hostname: str
    index: int
    product: str
    free_mib: int
    used_mib: int
    reserved_mib: int
    host_label: str = "Hostname"  # released dcgm-exporter; its main branch says "hostname"

    @property
    def uuid(self) -> str:
        return f"GPU-{self.hostname}-{self.index:04d}-fake"


# gpu-node-a: two H100s, one nearly full (time-sliced between pods); gpu-node-b: four A100 40GB,
# exported with the newer lower-case `hostname` label.
DCGM_NODES: dict[str, list[FakeGpu]] = {
    "gpu-node-a": [
        FakeGpu("gpu-node-a", 0, "NVIDIA H100 80GB HBM3", free_mib=9_000, used_mib=71_520, reserved_mib=559),
        FakeGpu("gpu-node-a", 1, "NVIDIA H100 80GB HBM3", free_mib=60_000, used_mib=20_520, reserved_mib=559),
    ],
    "gpu-node-b": [
        FakeGpu("gpu-node-b", i, "NVIDIA A100-SXM4-40GB", 30_000 + 1_000 * i, 10_000 - 1_000 * i, 460, "hostname")
        for i in range(4)
    ],
}


def dcgm_page(node: str) -> str:
    gpus = DCGM_NODES[node]
    lines: list[str] = []
    for metric, attr in (
        ("DCGM_FI_DEV_FB_FREE", "free_mib"),
        ("DCGM_FI_DEV_FB_USED", "used_mib"),
        ("DCGM_FI_DEV_FB_RESERVED", "reserved_mib"),
    ):
        lines.append(f"# HELP {metric} Framebuffer memory (in MiB).")
        lines.append(f"# TYPE {metric} gauge")
        for g in gpus:
            labels = (
                f'gpu="{g.index}",UUID="{g.uuid}",pci_bus_id="00000000:{g.index:02X}:00.0",'
                f'device="nvidia{g.index}",modelName="{g.product}",{g.host_label}="{g.hostname}",'
                'DCGM_FI_DRIVER_VERSION="580.95.05"'
            )
            lines.append(f"{metric}{{{labels}}} {getattr(g, attr)}")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------- vLLM

# Cumulative TTFT bucket increments per second of traffic volume 1 (upper bound -> count).
TtftShape = tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class FakeReplica:
    instance: str
    waiting: int
    running: int
    kv_usage: float
    volume: float  # multiplies every counter: a busier replica, same traffic shape


@dataclass(frozen=True)
class FakeKvCache:
    """What vLLM allocated at start-up, as its CacheConfig (and so `vllm:cache_config_info`) holds it."""

    num_gpu_blocks: int | None  # None: exported as the string "None" (the v0.8.5 V1 front end)
    block_size: int
    gpu_memory_utilization: float
    max_model_len: int
    cache_dtype: str = "auto"

    @property
    def tokens(self) -> int:
        assert self.num_gpu_blocks is not None
        return self.num_gpu_blocks * self.block_size


@dataclass(frozen=True)
class FakeModel:
    name: str  # catalog name = app.kubernetes.io/instance
    served_name: str  # vLLM's model_name label
    namespace: str
    repo: str  # with `revision`: a models.lock.json entry, so the calibration case finds its config
    revision: str
    vllm_release: str  # which release's metric names and cache_config_info labels the page carries
    prefix_queries_per_s: float
    prefix_hits_per_s: float
    ttft_shape: TtftShape
    kv: FakeKvCache
    predicted_kv_tokens: int  # the fit check's estimate, as the stack outputs publish it
    replicas: tuple[FakeReplica, ...]

    @property
    def legacy_names(self) -> bool:
        """Releases before 0.9 export only gpu_cache_usage_perc / gpu_prefix_cache_* (see vllm_metrics)."""
        return self.vllm_release == "0.8.5"

    def endpoint(self, predicted_kv_tokens: int | None = None) -> dict[str, Any]:
        """The model's `endpoints[...]` output, reduced to what `status` reads."""
        predicted = self.predicted_kv_tokens if predicted_kv_tokens is None else predicted_kv_tokens
        return {"name": self.name, "servedName": self.served_name, "namespace": self.namespace,
                "model": f"{self.repo}@{self.revision}", "maxContext": self.kv.max_model_len, "gpus": 1,
                "fit": {"kvCacheTokens": predicted}}


MODELS: tuple[FakeModel, ...] = (
    FakeModel(
        name="llama-3-1-8b",
        served_name="meta-llama/Llama-3.1-8B-Instruct",
        namespace="models",
        repo="meta-llama/Llama-3.1-8B-Instruct",
        revision="0e9e39f249a16976918f6564b8830bc894c89659",
        vllm_release="0.32.0",
        prefix_queries_per_s=40.0,
        prefix_hits_per_s=30.0,
        ttft_shape=((0.1, 2.0), (0.25, 10.0), (0.5, 16.0), (1.0, 18.0), (2.5, 20.0), (math.inf, 20.0)),
        # The blocks vLLM 0.19 gave this model on one H100 80GB at 0.95 (shared calibration cases.json).
        kv=FakeKvCache(num_gpu_blocks=29_751, block_size=16, gpu_memory_utilization=0.95, max_model_len=8192),
        predicted_kv_tokens=470_000,  # 476,016 observed: +1.3 %, inside the limit
        replicas=(
            FakeReplica("llama-a", waiting=3, running=5, kv_usage=0.42, volume=1.0),
            FakeReplica("llama-b", waiting=1, running=7, kv_usage=0.80, volume=2.0),
        ),
    ),
    FakeModel(
        name="qwen3-8b",
        served_name="Qwen/Qwen3-8B",
        namespace="models",
        repo="Qwen/Qwen3-8B",
        revision="b968826d9c46dd6066d109eabc6255188de91218",
        vllm_release="0.10.2",
        prefix_queries_per_s=50.0,
        prefix_hits_per_s=10.0,
        ttft_shape=((0.1, 1.0), (0.25, 4.0), (0.5, 12.0), (1.0, 18.0), (2.5, 20.0), (math.inf, 20.0)),
        kv=FakeKvCache(num_gpu_blocks=26_000, block_size=16, gpu_memory_utilization=0.9, max_model_len=16384),
        predicted_kv_tokens=420_000,  # 416,000 observed (blocks x block size): -1.0 %
        replicas=(FakeReplica("qwen3-a", waiting=2, running=4, kv_usage=0.30, volume=1.0),),
    ),
    FakeModel(
        name="qwen-legacy",
        served_name="qwen2.5-7b",
        namespace="models",
        repo="Qwen/Qwen2.5-7B-Instruct",
        revision="a09a35458c702b33eeacc393d103063234e8bc28",
        vllm_release="0.8.5",
        prefix_queries_per_s=25.0,
        prefix_hits_per_s=5.0,
        ttft_shape=((0.1, 0.0), (0.25, 0.0), (0.5, 1.0), (1.0, 3.0), (2.5, 10.0), (math.inf, 10.0)),
        kv=FakeKvCache(num_gpu_blocks=None, block_size=16, gpu_memory_utilization=0.9, max_model_len=32768),
        predicted_kv_tokens=200_000,  # cannot be compared: this release exports num_gpu_blocks="None"
        replicas=(FakeReplica("qwen-a", waiting=0, running=2, kv_usage=0.10, volume=1.0),),
    ),
)

# The dev stack's first model (Pulumi.dev.yaml: CPU profile, cpuKvCacheGiB 2, the pinned vLLM CPU image), so
# the CLI can be run against a real stack's outputs. Its blocks are what vLLM's V1 KV sizing gives for
# 2 GiB: 2**31 // (16 tokens x 2 (K, V) x 2 KV heads x 64 head dim x 2 bytes) // 24 layers = 10,922
# (vllm/v1/core/kv_cache_utils.py get_num_blocks), block size 16 being the CPU default; the real
# vLLM 0.32.0 tier (tests/vllm) measures the same capacity from VLLM_CPU_KVCACHE_SPACE.
DEV_MODEL = FakeModel(
    name="qwen-0-5b",
    served_name="qwen2.5-0.5b-instruct",
    namespace="llm-serving",
    repo="Qwen/Qwen2.5-0.5B-Instruct",
    revision="7ae557604adf67be50417f59c2c2f167def9a775",
    vllm_release="0.32.0",
    prefix_queries_per_s=10.0,
    prefix_hits_per_s=2.0,
    ttft_shape=((0.1, 0.0), (0.25, 2.0), (0.5, 5.0), (1.0, 10.0), (2.5, 10.0), (math.inf, 10.0)),
    kv=FakeKvCache(num_gpu_blocks=10_922, block_size=16, gpu_memory_utilization=0.9, max_model_len=4096),
    predicted_kv_tokens=174_752,
    replicas=(FakeReplica("qwen-0-5b-a", waiting=0, running=1, kv_usage=0.05, volume=0.5),),
)
MODELS = (*MODELS, DEV_MODEL)

# Published but never scraped: must show as "no data".
UNSCRAPED_ENDPOINT = {"name": "mistral-7b", "servedName": "mistral-7b-instruct", "namespace": "models"}

_CLOCK_ORIGIN = time.monotonic() - 1000.0  # counters start high, like a long-running server


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(bound)


def _cache_config_labels(model: FakeModel) -> dict[str, str]:
    """`CacheConfig.metrics_info()` of each release: str() of every attribute, in declaration order.

    Attribute lists read from the wheels on PyPI: v0.32.0 vllm/config/cache.py (class CacheConfig,
    l. 69-327), v0.10.2 vllm/config/cache.py (plus `swap_space_bytes`, set in __post_init__), v0.8.5
    vllm/config.py (class CacheConfig, l. 1297; same __post_init__); v0.11.0 has v0.10.2's list. V1
    loggers add `engine` (v0.32.0 / v0.11.0 / v0.10.2 `log_metrics_info`); v0.8.5's does not.
    """
    kv = model.kv
    blocks = str(kv.num_gpu_blocks)
    util = repr(kv.gpu_memory_utilization)
    if model.vllm_release == "0.32.0":
        return {
            "block_size": str(kv.block_size), "user_specified_block_size": "False", "kv_cache_layout": "None",
            "prefix_match_unit": "None", "gpu_memory_utilization": util, "cache_dtype": kv.cache_dtype,
            "is_attention_free": "False", "num_gpu_blocks_override": "None", "sliding_window": "None",
            "enable_prefix_caching": "True", "prefix_caching_hash_algo": "sha256",
            "prefix_cache_retention_interval": "0", "kv_cache_dtype_skip_layers": "[]",
            "mamba_page_size_padded": "None", "skip_page_size_padded": "None", "mamba_block_size": "None",
            "mamba_cache_dtype": "auto", "mamba_ssm_cache_dtype": "auto", "mamba_cache_mode": "none",
            "enable_mamba_shared_prefix_checkpoint": "False", "replayssm_buffer_len": "16",
            "use_replayssm": "False", "use_kda_recoverssm": "False", "num_gpu_blocks": blocks,
            "num_cpu_blocks": "None", "effective_attention_block_size": str(kv.block_size),
            "kv_cache_size_tokens": str(kv.tokens), "kv_cache_max_concurrency": repr(kv.tokens / kv.max_model_len),
            "hash_block_size": str(kv.block_size), "cache_hit_alignment_tokens": str(kv.block_size),
            "kv_sharing_fast_prefill": "False", "swa_bounded_replay": "True", "kv_cache_memory_bytes": "None",
            "kv_offloading_size": "None", "kv_offloading_backend": "native", "_block_size_resolved": "True",
            "engine": "0",
        }
    common = {
        "block_size": str(kv.block_size), "gpu_memory_utilization": util, "swap_space": "4",
        "cache_dtype": kv.cache_dtype, "is_attention_free": "False", "num_gpu_blocks_override": "None",
        "sliding_window": "None", "enable_prefix_caching": "True",
    }
    if model.vllm_release in ("0.10.2", "0.11.0"):  # same CacheConfig attributes in both releases
        cpu_space = str(2 * 2**30) if model.vllm_release == "0.11.0" else "None"  # the CPU model: 2 GiB
        return {
            **common, "prefix_caching_hash_algo": "sha256", "cpu_offload_gb": "0", "calculate_kv_scales": "False",
            "cpu_kvcache_space_bytes": cpu_space, "mamba_page_size_padded": "None", "mamba_cache_dtype": "auto",
            "mamba_ssm_cache_dtype": "auto", "num_gpu_blocks": blocks, "num_cpu_blocks": "None",
            "kv_sharing_fast_prefill": "False", "kv_cache_memory_bytes": "None", "swap_space_bytes": "4294967296",
            "engine": "0",
        }
    assert model.vllm_release == "0.8.5", model.vllm_release
    return {
        **common, "prefix_caching_hash_algo": "builtin", "cpu_offload_gb": "0", "calculate_kv_scales": "False",
        "num_gpu_blocks": blocks, "num_cpu_blocks": "None", "swap_space_bytes": "4294967296",
    }


#: Tokens each replica serves per second per unit of its `volume` (linear counters: rate() is exact).
PROMPT_TOKENS_PER_S = 120.0
GENERATION_TOKENS_PER_S = 40.0


def vllm_page(model: FakeModel, replica: FakeReplica) -> str:
    """One replica's /metrics in the release's shape (vllm_metrics' docstring cites each name)."""
    t = time.monotonic() - _CLOCK_ORIGIN
    v = replica.volume
    lbl = f'engine="0",model_name="{model.served_name}"'
    release = model.vllm_release
    kv_names = {"0.32.0": ["vllm:kv_cache_usage_perc"], "0.11.0": ["vllm:kv_cache_usage_perc"],
                "0.8.5": ["vllm:gpu_cache_usage_perc"],
                "0.10.2": ["vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc"]}[release]
    prefixes = {"0.32.0": ["vllm:prefix_cache"], "0.11.0": ["vllm:prefix_cache"], "0.8.5": ["vllm:gpu_prefix_cache"],
                "0.10.2": ["vllm:gpu_prefix_cache", "vllm:prefix_cache"]}[release]
    lines = [
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{{{lbl}}} {replica.waiting}",
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{{{lbl}}} {replica.running}",
    ]
    for kv_name in kv_names:
        lines += [f"# TYPE {kv_name} gauge", f"{kv_name}{{{lbl}}} {replica.kv_usage}"]
    for prefix in prefixes:
        lines += [
            f"# TYPE {prefix}_queries counter",
            f"{prefix}_queries_total{{{lbl}}} {model.prefix_queries_per_s * v * t!r}",
            f"# TYPE {prefix}_hits counter",
            f"{prefix}_hits_total{{{lbl}}} {model.prefix_hits_per_s * v * t!r}",
        ]
    lines += [
        "# TYPE vllm:prompt_tokens counter",
        f"vllm:prompt_tokens_total{{{lbl}}} {PROMPT_TOKENS_PER_S * v * t!r}",
        "# TYPE vllm:generation_tokens counter",
        f"vllm:generation_tokens_total{{{lbl}}} {GENERATION_TOKENS_PER_S * v * t!r}",
    ]
    info = ",".join(f'{k}="{value}"' for k, value in _cache_config_labels(model).items())
    lines += [
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
        "# TYPE vllm:cache_config_info gauge",
        f"vllm:cache_config_info{{{info}}} 1.0",
        "# TYPE vllm:time_to_first_token_seconds histogram",
    ]
    for bound, count in model.ttft_shape:
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{{lbl},le="{_le(bound)}"}} {count * v * t!r}')
    total = model.ttft_shape[-1][1] * v * t
    lines.append(f"vllm:time_to_first_token_seconds_count{{{lbl}}} {total!r}")
    lines.append(f"vllm:time_to_first_token_seconds_sum{{{lbl}}} {0.5 * total!r}")
    return "\n".join(lines) + "\n"


def histogram_quantile(q: float, shape: TtftShape) -> float:
    """Prometheus' linear interpolation within the bucket that holds rank q.

    Keep the fixture shapes' p95 strictly inside a bucket and off rounding ties of the table's
    two decimals: float noise in rate() would otherwise decide which side it lands on.
    """
    total = shape[-1][1]
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in shape:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = bound, count
    raise AssertionError("unreachable: the +Inf bucket holds every observation")
