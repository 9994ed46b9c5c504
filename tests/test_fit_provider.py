"""FitCheck provider called as Pulumi's plugin process would: check/diff/create, pickling, messages."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import dill  # type: ignore[import-untyped]
from pulumi.output import UNKNOWN

from providers.fit import FitProvider, ModelDemand, PoolCapacity, fit_inputs, fleet_capacity_errors
from tkf_infra.sizing.engine import ServingParams
from tkf_infra.sizing.facts import ModelFacts
from tkf_infra.sizing.gpus import lookup_gpu

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = Path(__file__).parent / "data" / "models" / "configs"


def inputs(config: str, gpu: str | None, **serving: Any) -> dict[str, Any]:
    facts = ModelFacts("org/" + config, "0" * 40, json.loads((CONFIGS / config).read_text()))
    spec = lookup_gpu(gpu).to_dict() if gpu else None
    return fit_inputs(
        "chat", facts.repo, facts.revision, facts.to_dict(), spec, ServingParams(**serving).to_dict()
    )


def test_check_refuses_70b_on_one_h100_with_numbers_and_way_out() -> None:
    news = inputs("meta-llama__Meta-Llama-3.1-70B.json", "H100-80GB", max_model_len=131072)
    result = FitProvider().check({}, news)
    assert len(result.failures) == 1
    reason = result.failures[0].reason
    assert reason.startswith("model chat: ")
    assert "no memory left for the KV cache" in reason
    assert "GiB of weights" in reason
    assert "fits with tensorParallelSize 4" in reason


def test_check_message_for_kv_shortfall_names_max_model_len() -> None:
    news = inputs("Qwen__Qwen3-8B.json", "L4", max_model_len=40960)
    reason = FitProvider().check({}, news).failures[0].reason
    assert "needs 5.6 GiB KV cache for maxModelLen 40960" in reason
    assert "on one L4 at utilization 0.90" in reason
    assert "maxModelLen <= " in reason


def test_check_passes_when_it_fits() -> None:
    news = inputs("meta-llama__Llama-3.1-8B-Instruct.json", "H100-80GB", max_model_len=8192)
    assert FitProvider().check({}, news).failures == []


def test_unknown_inputs_are_skipped_at_preview() -> None:
    news = inputs("meta-llama__Meta-Llama-3.1-70B.json", "L4", max_model_len=131072)
    news["gpu"] = UNKNOWN
    assert FitProvider().check({}, news).failures == []
    news["gpu"] = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
    assert FitProvider().check({}, news).failures == []


def test_create_outputs_estimates() -> None:
    props = inputs("meta-llama__Llama-3.1-8B-Instruct.json", "H100-80GB", max_model_len=8192)
    outs = FitProvider().create(props).outs
    assert outs is not None
    assert outs["fits"] is True
    assert 14.9 < outs["weightsGiB"] < 15.1
    assert outs["kvCacheTokens"] > 300_000
    assert outs["maxConcurrency"] > 30


def test_diff_reports_input_changes_only() -> None:
    old = inputs("Qwen__Qwen3-8B.json", "H100-80GB", max_model_len=8192)
    same = FitProvider().diff("id", {**old, "weightsGiB": 1.0}, old)
    assert same.changes is False
    new = inputs("Qwen__Qwen3-8B.json", "H100-80GB", max_model_len=16384)
    assert FitProvider().diff("id", old, new).changes is True


def test_provider_pickles_and_still_works() -> None:
    for module in (pickle, dill):
        clone = module.loads(module.dumps(FitProvider()))
        news = inputs("meta-llama__Meta-Llama-3.1-70B.json", "L4", max_model_len=8192)
        assert clone.check({}, news).failures


def test_module_imports_cleanly_in_a_fresh_process() -> None:
    code = "import providers.fit as f; print(f.FitProvider.__name__)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "FitProvider"


def test_fleet_capacity() -> None:
    pools = [PoolCapacity("gpu", gpus_per_node=4, node_count=2)]
    ok = [ModelDemand("a", "gpu", 4, 1, 1), ModelDemand("b", "gpu", 2, 1, 2)]
    assert fleet_capacity_errors(ok, pools) == []
    over = [*ok, ModelDemand("c", "gpu", 1, 1, 1)]
    errors = fleet_capacity_errors(over, pools)
    assert errors == [
        "nodePool gpu: models need 9 GPUs (a 4, b 4, c 1) but the pool has 8 (2 nodes x 4); "
        "raise nodeCount or lower replicas"
    ]
    wide = fleet_capacity_errors([ModelDemand("d", "gpu", 8)], pools)
    assert "tensorParallelSize 8 needs 8 GPUs on one node but nodePool gpu has 4 per node" in wide[0]
    assert fleet_capacity_errors([ModelDemand("e", "nope")], pools)[0].startswith("model e: nodePool 'nope'")
    assert fleet_capacity_errors([ModelDemand("cpu", "nope", gpus_per_node=0)], pools) == []
