"""What the fake exporters serve: a small GPU cluster (DCGM) and two vLLM models.

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
class FakeModel:
    name: str  # catalog name = app.kubernetes.io/instance
    served_name: str  # vLLM's model_name label
    namespace: str
    legacy_names: bool  # pre-rename vLLM: gpu_cache_usage_perc, gpu_prefix_cache_*
    prefix_queries_per_s: float
    prefix_hits_per_s: float
    ttft_shape: TtftShape
    replicas: tuple[FakeReplica, ...]

    def endpoint(self) -> dict[str, str]:
        return {"name": self.name, "servedName": self.served_name, "namespace": self.namespace}


MODELS: tuple[FakeModel, ...] = (
    FakeModel(
        name="llama-3-1-8b",
        served_name="meta-llama/Llama-3.1-8B-Instruct",
        namespace="models",
        legacy_names=False,
        prefix_queries_per_s=40.0,
        prefix_hits_per_s=30.0,
        ttft_shape=((0.1, 2.0), (0.25, 10.0), (0.5, 16.0), (1.0, 18.0), (2.5, 20.0), (math.inf, 20.0)),
        replicas=(
            FakeReplica("llama-a", waiting=3, running=5, kv_usage=0.42, volume=1.0),
            FakeReplica("llama-b", waiting=1, running=7, kv_usage=0.80, volume=2.0),
        ),
    ),
    FakeModel(
        name="qwen-legacy",
        served_name="qwen2.5-7b",
        namespace="models",
        legacy_names=True,
        prefix_queries_per_s=25.0,
        prefix_hits_per_s=5.0,
        ttft_shape=((0.1, 0.0), (0.25, 0.0), (0.5, 1.0), (1.0, 3.0), (2.5, 10.0), (math.inf, 10.0)),
        replicas=(FakeReplica("qwen-a", waiting=0, running=2, kv_usage=0.10, volume=1.0),),
    ),
)

# Published but never scraped: must show as "no data".
UNSCRAPED_ENDPOINT = {"name": "mistral-7b", "servedName": "mistral-7b-instruct", "namespace": "models"}

_CLOCK_ORIGIN = time.monotonic() - 1000.0  # counters start high, like a long-running server


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(bound)


def vllm_page(model: FakeModel, replica: FakeReplica) -> str:
    t = time.monotonic() - _CLOCK_ORIGIN
    v = replica.volume
    lbl = f'engine="0",model_name="{model.served_name}"'
    kv_name = "vllm:gpu_cache_usage_perc" if model.legacy_names else "vllm:kv_cache_usage_perc"
    prefix = "vllm:gpu_prefix_cache" if model.legacy_names else "vllm:prefix_cache"
    lines = [
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{{{lbl}}} {replica.waiting}",
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{{{lbl}}} {replica.running}",
        f"# TYPE {kv_name} gauge",
        f"{kv_name}{{{lbl}}} {replica.kv_usage}",
        f"# TYPE {prefix}_queries counter",
        f"{prefix}_queries_total{{{lbl}}} {model.prefix_queries_per_s * v * t!r}",
        f"# TYPE {prefix}_hits counter",
        f"{prefix}_hits_total{{{lbl}}} {model.prefix_hits_per_s * v * t!r}",
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
