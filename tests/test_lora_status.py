"""`status`'s reading of vLLM's LoRA gauge (tkf_infra/live/lora_status.py) over series shaped as vLLM exports
them: one per label set ever seen, valued at the time it was last set (tests/vllm/test_lora_serving.py checks
the same against a real vLLM scraped by a real Prometheus)."""

from __future__ import annotations

from tkf_infra.live.lora_status import lora_status
from tkf_infra.live.prometheus import Sample

ENDPOINT = {"name": "qwen", "servedName": "qwen-chat", "namespace": "serving",
            "adapters": [{"name": "sql", "servedName": "qwen-sql"}, {"name": "law", "servedName": "qwen-law"}]}


def series(instance: str, when: float, in_flight: str, namespace: str = "serving", model: str = "qwen-chat") -> Sample:
    return Sample({"job": "vllm", "instance": instance, "namespace": namespace, "model_name": model, "max_lora": "2",
                   "running_lora_adapters": in_flight, "waiting_lora_adapters": in_flight}, when)


def test_each_replicas_newest_series_is_its_present() -> None:
    samples = [series("a", 100, "qwen-sql"), series("a", 200, ""),           # a: was busy, now idle
               series("b", 150, ""), series("b", 250, "qwen-sql,qwen-law"),  # b: now busy with both
               series("c", 300, "qwen-sql", namespace="other"),              # another namespace's replica
               series("d", 300, "qwen-sql", model="someone-else")]
    s = lora_status(ENDPOINT, samples)
    assert s is not None
    assert [(a.served_name, a.in_flight_replicas) for a in s.adapters] == [("qwen-sql", 1), ("qwen-law", 1)]
    assert s.replicas_reporting == 2 and s.max_loras == 2 and s.unknown_in_flight == ()


def test_an_adapter_the_catalog_does_not_publish_is_named() -> None:
    s = lora_status(ENDPOINT, [series("a", 1, "qwen-sql,runtime-loaded")])
    assert s is not None and s.unknown_in_flight == ("runtime-loaded",)


def test_no_series_is_zero_replicas_reporting_and_no_adapters_is_no_block() -> None:
    s = lora_status(ENDPOINT, [])
    assert s is not None and s.replicas_reporting == 0 and s.max_loras is None
    assert all(a.in_flight_replicas == 0 for a in s.adapters)
    assert lora_status({k: v for k, v in ENDPOINT.items() if k != "adapters"}, [series("a", 1, "qwen-sql")]) is None
