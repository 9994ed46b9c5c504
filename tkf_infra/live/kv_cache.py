"""The KV cache each running vLLM engine really got, from its `vllm:cache_config_info` (the series and its
labels: tkf_infra/vllm_metrics.py, whose docstring cites vLLM's source per release)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tkf_infra import vllm_metrics as vm
from tkf_infra.live.prometheus import PrometheusClient, Sample


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
        return _label_int(self.labels, vm.NUM_GPU_BLOCKS)

    @property
    def block_size(self) -> int | None:
        return _label_int(self.labels, vm.BLOCK_SIZE)

    @property
    def reported_tokens(self) -> int | None:
        return _label_int(self.labels, vm.KV_CACHE_SIZE_TOKENS)

    @property
    def max_concurrency(self) -> float | None:
        return _label_float(self.labels, vm.KV_CACHE_MAX_CONCURRENCY)

    @property
    def gpu_memory_utilization(self) -> float | None:
        return _label_float(self.labels, vm.GPU_MEMORY_UTILIZATION)

    @property
    def cache_dtype(self) -> str | None:
        value = self.labels.get(vm.CACHE_DTYPE)
        return None if value in (None, "", "None") else value

    @property
    def tokens(self) -> int | None:
        """KV tokens per engine: vLLM's own figure when it exports one, else blocks × block size (which
        counts every engine of a data-parallel front end, see tkf_infra/vllm_metrics.py; the catalog has no DP)."""
        if self.reported_tokens is not None:
            return self.reported_tokens
        if self.num_gpu_blocks is not None and self.block_size is not None:
            return self.num_gpu_blocks * self.block_size
        return None

    @property
    def tokens_source(self) -> str | None:
        if self.reported_tokens is not None:
            return vm.SOURCE_REPORTED
        return vm.SOURCE_BLOCKS if self.tokens is not None else None

    @property
    def where(self) -> str:
        return self.instance + (f" engine {self.engine}" if self.engine is not None else "")

    def exposition_labels(self) -> dict[str, str]:
        """The labels vLLM itself set: the scrape target's and the joined model_name removed."""
        return {k: v for k, v in sorted(self.labels.items())
                if k not in self.target_labels and k not in (vm.MODEL_LABEL, "__name__")}

    def exposition(self) -> str:
        """The series as vLLM exposed it on /metrics (labels sorted), for quoting in a case."""
        labels = ",".join(f'{k}="{v}"' for k, v in self.exposition_labels().items())
        return f"{vm.CACHE_CONFIG_INFO}{{{labels}}} 1"


def _observation(sample: Sample, target_labels: frozenset[str]) -> KvObservation:
    labels = dict(sample.labels)
    return KvObservation(
        model_name=labels.get(vm.MODEL_LABEL, ""),
        namespace=labels.get(vm.NAMESPACE_LABEL, ""),
        instance=labels.get("instance", ""),
        engine=labels.get(vm.ENGINE),
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
    samples = client.vector(vm.CACHE_CONFIG_QUERY)
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
