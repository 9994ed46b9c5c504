"""The fit check against what the GPUs really report: pool facts confirmed by DCGM, shared GPUs'
free memory, and a preview through the real engine with the stack's prometheusUrl set."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml
from pulumi import automation as auto

from tests.engine_fixtures import EngineStack
from tests.prom.conftest import PromServer
from tests.prom.metrics_fixtures import DCGM_NODES
from tkf_infra.config import validate_catalog
from tkf_infra.live.inventory import check_against_inventory, read_gpu_inventory

pytestmark = pytest.mark.prometheus
SHA = "b968826d9c46dd6066d109eabc6255188de91218"  # Qwen/Qwen3-8B, in models.lock.json


def stack_doc(pool: dict[str, Any], util: float = 0.9, slicing: int = 0) -> dict[str, Any]:
    return {
        "nodePools": [pool],
        "platform": {"gpuOperator": {"timeSlicingReplicas": slicing}},
        "models": [{"name": "qwen3", "repo": "Qwen/Qwen3-8B", "revision": SHA, "servedName": "qwen3",
                    "nodePool": pool["name"], "maxModelLen": 8192, "gpuMemoryUtilization": util}],
    }


def test_pool_matching_its_nodes_passes(prom: PromServer) -> None:
    cat = validate_catalog(stack_doc({"name": "h100", "gpuProduct": "H100-80GB", "gpusPerNode": 2,
                                      "nodes": ["gpu-node-a"]}))
    live = check_against_inventory(cat, read_gpu_inventory(prom.url))
    assert live.pool_errors == {} and live.model_problems == {}


def test_pool_whose_nodes_report_another_gpu_is_refused_with_its_models(prom: PromServer) -> None:
    cat = validate_catalog(stack_doc({"name": "h100", "gpuProduct": "H100-80GB", "gpusPerNode": 4,
                                      "nodes": ["gpu-node-b"]}))
    live = check_against_inventory(cat, read_gpu_inventory(prom.url))
    (error,) = live.pool_errors["h100"]
    assert "GPU pool 'h100' is configured as H100-80GB" in error and "A100" in error and "gpu-node-b" in error
    assert live.model_problems["qwen3"].startswith("model qwen3: not deployed because its node pool is wrong")


def test_shared_gpu_checked_against_free_memory(prom: PromServer) -> None:
    pool = {"name": "h100", "gpuProduct": "H100-80GB", "gpusPerNode": 2, "nodes": ["gpu-node-a"]}
    fullest_free_gib = min(g.free_mib for g in DCGM_NODES["gpu-node-a"]) / 1024
    greedy = validate_catalog(stack_doc(pool, util=0.9, slicing=4))
    live = check_against_inventory(greedy, read_gpu_inventory(prom.url))
    problem = live.model_problems["qwen3"]
    assert f"the fullest has {fullest_free_gib:.1f} GiB free according to DCGM" in problem
    assert "time-slicing, 4 per GPU" in problem and "Lower gpuMemoryUtilization to at most 0.11" in problem
    modest = validate_catalog(stack_doc(pool, util=0.1, slicing=4))
    assert check_against_inventory(modest, read_gpu_inventory(prom.url)).model_problems == {}


def test_unreachable_prometheus_is_a_warning_and_configured_facts_stand(dead_prometheus_url: str) -> None:
    cat = validate_catalog(stack_doc({"name": "h100", "gpuProduct": "H100-80GB", "gpusPerNode": 4,
                                      "nodes": ["gpu-node-b"]}))
    live = check_against_inventory(cat, read_gpu_inventory(dead_prometheus_url, timeout_s=2))
    assert live.pool_errors == {} and live.model_problems == {}
    assert live.warnings and dead_prometheus_url in live.warnings[0]


@pytest.mark.engine
def test_preview_with_prometheus_url_refuses_a_mislabelled_pool(prom: PromServer,
                                                                make_stack: Callable[..., EngineStack]) -> None:
    es = make_stack()
    path = es.project / f"Pulumi.{es.stack.name}.yaml"
    doc = yaml.safe_load(path.read_text())
    cfg = doc["config"]
    cfg["tkf-infra:prometheusUrl"] = prom.url
    cfg["tkf-infra:nodePools"].append({"name": "h100", "gpuProduct": "H100-80GB", "gpusPerNode": 4,
                                       "nodes": ["gpu-node-b"]})
    cfg["tkf-infra:models"].append({"name": "qwen3", "repo": "Qwen/Qwen3-8B", "revision": SHA,
                                    "servedName": "qwen3", "nodePool": "h100", "gpusPerNode": 1,
                                    "maxModelLen": 8192, "cpuKvCacheGiB": 4})
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(auto.CommandError) as err:
        es.stack.up()
    text = " ".join(str(err.value).split())
    assert "GPU pool 'h100' is configured as H100-80GB with 4 GPU(s) per node" in text
    assert "model qwen3: not deployed because its node pool is wrong" in text
    rendered = es.manifests()
    assert ("LLMInferenceService", "qwen-0-5b") in rendered  # the CPU models still deploy
    assert ("LLMInferenceService", "qwen3") not in rendered
    rejected = {r["name"]: r for r in es.stack.outputs()["rejected"].value}
    assert "node pool is wrong" in rejected["qwen3"]["reasons"][0]
