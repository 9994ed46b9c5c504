"""Which LoRA adapters of an endpoint are in use, from vLLM's `vllm:lora_requests_info` (vllm_metrics.py).

Why its own module: the gauge has a shape of its own (one series per label set ever seen, valued at the
time it was last set, no `model_name`), so a replica's present is its newest series, matched to the
endpoint through the scrape target. `status` then says, per adapter of the published endpoint, on how
many replicas it has requests in flight, and names adapters vLLM serves that the catalog does not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tkf_infra import vllm_metrics as vm
from tkf_infra.live.prometheus import PrometheusClient, Sample

#: Every replica's LoRA series with the model name of its scrape target.
LORA_INFO_QUERY = (f"{vm.LORA_INFO} * on (job, instance) group_left ({vm.MODEL_LABEL}) "
                   f"group by (job, instance, {vm.MODEL_LABEL}) ({vm.RUNNING})")


@dataclass(frozen=True)
class AdapterStatus:
    name: str
    served_name: str
    in_flight_replicas: int
    """Replicas on which this adapter has a request waiting or running now."""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "servedName": self.served_name, "inFlightReplicas": self.in_flight_replicas}


@dataclass(frozen=True)
class LoraStatus:
    adapters: tuple[AdapterStatus, ...]
    replicas_reporting: int
    """Replicas exporting the LoRA gauge (0: none has LoRA on, or none was scraped)."""
    max_loras: int | None
    """vLLM's `--max-loras` as the replicas report it."""
    unknown_in_flight: tuple[str, ...]
    """Adapter names vLLM has requests for that the endpoint does not publish."""

    def to_json(self) -> dict[str, Any]:
        return {"adapters": [a.to_json() for a in self.adapters], "replicasReporting": self.replicas_reporting,
                "maxLoras": self.max_loras, "unknownInFlight": list(self.unknown_in_flight)}

    def warnings(self, model: str, where: str) -> list[str]:
        """For a base with data: replicas that export no LoRA gauge run without its adapters; an adapter in
        flight that the catalog does not publish was loaded by someone else."""
        out = []
        if self.replicas_reporting == 0:
            out.append(f"model '{model}' ({where}): it publishes {len(self.adapters)} LoRA adapter(s) but its vLLM "
                       f"exports no {vm.LORA_INFO}: the running pods have LoRA off (started before the adapters were "
                       "added?); check that the last `up` rolled them")
        if self.unknown_in_flight:
            out.append(f"model '{model}' ({where}): vLLM has requests for adapter(s) "
                       f"{', '.join(self.unknown_in_flight)} that the catalog does not publish (loaded at runtime?)")
        return out

    def text(self) -> str:
        """One line for the table: each adapter in flight on how many replicas, or idle."""
        return "; ".join(f"{a.served_name} " + (f"in flight on {a.in_flight_replicas} of {self.replicas_reporting} "
                                                "replica(s)" if a.in_flight_replicas else "idle")
                         for a in self.adapters)


def read_lora_samples(client: PrometheusClient) -> list[Sample]:
    return client.vector(LORA_INFO_QUERY)


def _published(endpoint: Mapping[str, Any]) -> list[tuple[str, str]]:
    raw = endpoint.get("adapters")
    if not isinstance(raw, list):
        return []
    return [(str(a.get("name", "")), str(a.get("servedName", ""))) for a in raw if isinstance(a, Mapping)]


def lora_status(endpoint: Mapping[str, Any], samples: Sequence[Sample]) -> LoraStatus | None:
    """The endpoint's adapters as its replicas report them; None when it publishes no adapters."""
    published = _published(endpoint)
    if not published:
        return None
    served = str(endpoint.get("servedName") or endpoint.get("name", ""))
    namespace = str(endpoint.get("namespace", ""))
    newest: dict[tuple[str, str], Sample] = {}
    for s in samples:
        if s.labels.get(vm.MODEL_LABEL) != served or s.labels.get(vm.NAMESPACE_LABEL, "") not in (namespace, ""):
            continue
        key = (s.labels.get("job", ""), s.labels.get("instance", ""))
        if key not in newest or (s.value or 0) > (newest[key].value or 0):
            newest[key] = s
    in_flight = [{n for n in s.labels.get(vm.LORA_IN_FLIGHT, "").split(",") if n} for s in newest.values()]
    limits = {s.labels.get(vm.MAX_LORA, "") for s in newest.values()}
    max_loras = int(next(iter(limits))) if len(limits) == 1 and next(iter(limits)).isdigit() else None
    names = {sn for _, sn in published}
    return LoraStatus(
        adapters=tuple(AdapterStatus(n, sn, sum(sn in f for f in in_flight)) for n, sn in published),
        replicas_reporting=len(newest), max_loras=max_loras,
        unknown_in_flight=tuple(sorted(set().union(*in_flight) - names)) if in_flight else ())
