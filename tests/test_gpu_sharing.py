"""Several models per GPU, under mocks: what the program registers and publishes for MIG and time-sliced shares.

What a user notices: each model asks for its slice (`nvidia.com/mig-<profile>`) or one time-slicing
replica with a budget vLLM cannot exceed; the mig-manager config and node labels carve the node as
planned; the outputs show every model's share, budget and place; a catalog that does not fit is
refused naming the models and the missing slices, while the rest deploys.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from tests.mocks import SINGLE_GPU, TP4, Harness, Registered, program, stack_doc, unwrap_secrets
from tests.sharing_fixtures import NODE, POOL, QWEN05, QWEN3_8B, TEN_SMALL, WHOLE_TP2, mig_settings
from tkf_infra.config import validate_catalog
from tkf_infra.hub.lock import load_lock
from tkf_infra.names import MIG_CONFIG_KEY, MIG_CONFIG_LABEL, MIG_CONFIG_NAME
from tkf_infra.plan import Stage, plan_fleet

LOCK = load_lock()
DOCS = Path(__file__).resolve().parents[1] / "docs" / "outputs.md"


def mig_doc(models: list[dict[str, Any]], *, backend: str = "kserve", installed: bool = True,
            nodes: list[str] | None = None) -> dict[str, Any]:
    doc = stack_doc(backend=backend, installed=installed)
    extra = mig_settings(models, nodes=nodes)
    doc["platform"]["gpuOperator"].update({k: v for k, v in extra.pop("platform")["gpuOperator"].items()
                                           if k != "alreadyInstalled"})
    doc.update(extra)
    return doc


def sliced_doc(models: list[dict[str, Any]], replicas: int = 4, backend: str = "kserve") -> dict[str, Any]:
    doc = stack_doc(*models, backend=backend)
    doc["platform"]["gpuOperator"]["timeSlicingReplicas"] = replicas
    doc["nodePools"] = [{"name": "h100", "gpuProduct": "H100-80GB", "gpusPerNode": 8, "nodeCount": 1}]
    return doc


def run(doc: dict[str, Any]) -> tuple[Harness[Any], dict[str, Any]]:
    exported: dict[str, Any] = {}
    original = pulumi.export
    pulumi.export = lambda name, value: exported.__setitem__(name, value)
    try:
        h = program(doc, lock=LOCK)
    finally:
        pulumi.export = original
    return h, exported


def workloads(h: Harness[Any]) -> dict[str, Registered]:
    kinds = {"LLMInferenceService", "Deployment"}
    return {r.metadata["name"]: r for r in h.resources if r.custom and r.inputs.get("kind") in kinds}


def main(w: Registered) -> dict[str, Any]:
    pod = w.spec["template"] if w.inputs["kind"] == "LLMInferenceService" else w.spec["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == "main")


def argv(w: Registered) -> list[str]:
    c = main(w)
    return list(c.get("args") or c.get("command") or [])


def flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


# ------------------------------------------------------------------------------------------------
# MIG: ten small models on one 8-GPU node
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def packed() -> tuple[Harness[Any], dict[str, Any]]:
    return run(mig_doc([*TEN_SMALL, WHOLE_TP2]))


def test_ten_small_models_and_a_whole_gpu_model_share_one_node(packed: tuple[Harness[Any], dict[str, Any]]) -> None:
    h, out = packed
    assert h.error is None and h.errors() == [], h.errors()
    assert out["rejected"] == [] and out["problems"] == []
    got = workloads(h)
    assert set(got) == {m["name"] for m in [*TEN_SMALL, WHOLE_TP2]}
    layout = out["gpuLayout"][POOL]
    gpus = layout["nodes"][NODE]["gpus"]
    used = [g for g in gpus if "mig" in g or "whole" in g]
    assert len(used) <= 6, gpus  # 12 pods of 11 models on 6 of the 8 GPUs (2 of them whole)
    for name, w in got.items():
        share = out["endpoints"][name].get("share")
        requests, limits = main(w)["resources"]["requests"], main(w)["resources"]["limits"]
        if name == WHOLE_TP2["name"]:
            assert share is None and requests["nvidia.com/gpu"] == "2" == limits["nvidia.com/gpu"]
            assert sorted(g["index"] for g in gpus if g.get("whole") == name) == [0, 1]
            continue
        resource = share["resource"]
        assert resource == f"nvidia.com/mig-{share['profile']}" and "nvidia.com/gpu" not in requests
        assert requests[resource] == "1" == limits[resource]  # one slice per replica
        assert w.metadata["annotations"]["tkf.io/gpu-share"] == f"mig:{share['profile']}"
        assert len(share["placement"]) == out["endpoints"][name]["replicas"]  # where each replica lands
        assert share["budgetGiB"] == pytest.approx(share["memoryGiB"] * share["gpuMemoryUtilization"], abs=0.01)
        assert out["endpoints"][name]["fit"]["fits"] and out["endpoints"][name]["fit"]["kvCacheTokensBound"] > 0
    assert out["endpoints"]["qwen3-8b-3g"]["share"]["profile"] == "3g.40gb"  # pinned
    assert out["endpoints"]["qwen3-8b-3g"]["share"]["requested"] == "mig:3g.40gb"


def test_every_share_key_and_the_layout_output_are_documented(packed: tuple[Harness[Any], dict[str, Any]]) -> None:
    _, mig_out = packed
    _, sliced_out = run(sliced_doc([{**SINGLE_GPU, "gpuShare": "slice:2", "maxNumSeqs": 16}]))
    docs = DOCS.read_text()
    keys = {k for out in (mig_out, sliced_out) for e in out["endpoints"].values() for k in e.get("share", {})}
    assert {"kind", "share", "profile", "slices", "kvCacheMemoryBytes", "placement", "proof", "why"} <= keys
    for key in keys | {"gpuLayout", "share", "placement"}:
        assert f"`{key}`" in docs, f"docs/outputs.md does not document {key!r}"


def test_auto_takes_the_smallest_profile_that_fits_and_says_why(packed: tuple[Harness[Any], dict[str, Any]]) -> None:
    _, out = packed
    small = out["endpoints"]["qwen05-chat"]["share"]
    assert small["profile"] == "1g.10gb" and "smallest MIG profile that fits at maxModelLen 8192" in small["why"]
    long = out["endpoints"]["qwen3-8b"]["share"]  # 32K context: the 20 GB slices leave too little KV cache
    assert long["profile"] == "3g.40gb"
    assert "mig:1g.20gb does not fit" in long["why"] and "mig:2g.20gb does not fit" in long["why"]


def test_the_mig_manager_config_and_the_node_label_carve_the_node_as_planned(
        packed: tuple[Harness[Any], dict[str, Any]]) -> None:
    h, out = packed
    cm = next(r for r in h.resources if r.inputs.get("metadata", {}).get("name") == MIG_CONFIG_NAME)
    assert cm.metadata["namespace"] == "gpu-operator"
    config = yaml.safe_load(cm.inputs["data"][MIG_CONFIG_KEY])
    node = out["gpuLayout"][POOL]["nodes"][NODE]
    assert config["version"] == "v1" and config["mig-configs"]["all-disabled"] == [
        {"devices": "all", "mig-enabled": False}]
    planned = {g["index"]: g.get("mig", {}) for g in node["gpus"]}
    applied = {i: spec.get("mig-devices", {}) for spec in config["mig-configs"][node["migConfig"]]
               for i in spec["devices"]}
    assert applied == planned  # every GPU of the node, as laid out
    label = next(r for r in h.resources if r.type == "kubernetes:core/v1:NodePatch"
                 and MIG_CONFIG_LABEL in r.metadata.get("labels", {}))
    assert label.metadata["name"] == NODE and label.metadata["labels"] == {MIG_CONFIG_LABEL: node["migConfig"]}


def test_an_operator_tkf_installs_reads_the_config() -> None:
    h, _ = run(mig_doc(TEN_SMALL[:2], installed=False))
    chart = next(r for r in h.resources if r.type == "kubernetes:helm.sh/v4:Chart" and
                 r.inputs.get("name") == "gpu-operator")
    values = chart.inputs["values"]  # keys the chart reads: tests/engine/test_platform_charts.py
    assert values["migManager"] == {"config": {"name": MIG_CONFIG_NAME, "default": "all-disabled"}}
    assert values["mig"] == {"strategy": "mixed"}


def test_a_reordered_catalog_keeps_every_node_label() -> None:
    _, first = run(mig_doc([*TEN_SMALL, WHOLE_TP2]))
    _, again = run(mig_doc(list(reversed([*TEN_SMALL, WHOLE_TP2]))))
    assert again["gpuLayout"] == first["gpuLayout"]


def test_a_catalog_that_does_not_fit_is_refused_naming_the_models_and_the_missing_slices() -> None:
    big = [{"name": f"big-{i}", **QWEN3_8B, "servedName": f"big-{i}", "maxModelLen": 8192, "gpuShare": "mig:7g.80gb",
            "replicas": 2} for i in range(4)]
    h, out = run(mig_doc([*TEN_SMALL, *big]))
    refused = {r["name"]: r for r in out["rejected"]}
    assert set(refused) == {"big-2", "big-3"}, refused  # the largest asks; the 5 free GPUs hold two of them
    for name, r in refused.items():
        assert r["stage"] == Stage.PLACEMENT.value
        assert f"model {name}: cannot place 2 x MIG 7g.80gb in node pool {POOL}" in r["reasons"][0]
        assert "missing" in r["reasons"][0] and "memory slice(s)" in r["reasons"][0]
        assert name not in workloads(h)
    assert {m["name"] for m in TEN_SMALL} <= set(workloads(h))  # the others deploy
    assert isinstance(h.error, pulumi.RunError)  # and the run ends non-zero


# ------------------------------------------------------------------------------------------------
# Time-sliced shares
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["kserve", "vllm"])
def test_a_time_sliced_share_passes_its_budget_to_vllm_on_both_backends(backend: str) -> None:
    models = [{"name": f"q{i}", **QWEN05, "servedName": f"q{i}", "nodePool": "h100", "maxModelLen": 8192,
               "maxNumSeqs": 16, "gpuShare": "slice:1"} for i in range(6)]
    h, out = run(sliced_doc(models, backend=backend))
    assert out["rejected"] == [] and h.error is None
    for name, w in workloads(h).items():
        share = out["endpoints"][name]["share"]
        args = argv(w)
        if backend == "vllm":
            args = " ".join(args).split()
        assert flag(args, "--gpu-memory-utilization") == f"{share['gpuMemoryUtilization']:g}"
        assert flag(args, "--kv-cache-memory-bytes") == str(share["kvCacheMemoryBytes"])
        assert main(w)["resources"]["requests"]["nvidia.com/gpu"] == "1"  # one of the 4 replicas
        # 1/4 of the GPU less the process's CUDA context (0.51 GiB outside vLLM's budget)
        assert share["gpuMemoryUtilization"] == pytest.approx(0.25 - 0.51 / 79.19, abs=1e-4)
        fit = out["endpoints"][name]["fit"]
        pinned = share["kvCacheMemoryBytes"] / 2**30
        assert fit["kvCacheGiB"] == fit["kvCacheGiBBound"] == pytest.approx(pinned, abs=0.01)
    assert "any 4 of the 6 pod(s) on one H100-80GB take at most 79.19" in out["gpuLayout"]["h100"]["proof"]


def test_time_sliced_shares_that_could_overrun_one_gpu_are_refused() -> None:
    small = [{"name": f"q{i}", **QWEN05, "servedName": f"q{i}", "nodePool": "h100", "maxModelLen": 8192,
              "maxNumSeqs": 16, "gpuShare": "slice:1"} for i in range(4)]
    half = {**SINGLE_GPU, "gpuShare": "slice:2", "maxNumSeqs": 16}
    h, out = run(sliced_doc([*small, half]))
    refused = {r["name"]: r for r in out["rejected"]}
    assert set(refused) == {"qwen3-8b"} and refused["qwen3-8b"]["stage"] == "placement"
    assert "any 4 pods of node pool h100 may share one H100-80GB" in refused["qwen3-8b"]["reasons"][0]
    assert set(workloads(h)) == {"q0", "q1", "q2", "q3"}


def test_the_catalog_cannot_override_a_share_budget_from_extra_args() -> None:
    bad = {**SINGLE_GPU, "gpuShare": "slice:1", "extraArgs": ["--gpu-memory-utilization=0.9"]}
    cat = validate_catalog(sliced_doc([bad]))
    assert "set `gpuMemoryUtilization` instead" in str(cat.rejected[0].problems[0])


# ------------------------------------------------------------------------------------------------
# Bad shares and pools: every problem named, with the fix
# ------------------------------------------------------------------------------------------------


def refusals(doc: dict[str, Any]) -> dict[str, tuple[str, str]]:
    plan = plan_fleet(validate_catalog(doc), lock=LOCK)
    out = {x.name: (x.stage.value, " ".join(x.reasons)) for x in plan.excluded}
    out.update({"pool": ("pool", " ".join(plan.errors))} if plan.errors else {})
    return out


def test_share_problems_name_the_model_the_field_and_the_fix() -> None:
    on = {"nodePool": POOL}
    doc = mig_doc([
        {**SINGLE_GPU, **on, "name": "a", "servedName": "a", "gpuShare": "half"},
        {**TP4, **on, "name": "b", "servedName": "b", "gpuShare": "mig:3g.40gb"},
        {**SINGLE_GPU, **on, "name": "c", "servedName": "c", "gpuShare": "mig:3g.41gb"},
        {**SINGLE_GPU, **on, "name": "d", "servedName": "d", "gpuShare": "slice:2"},
    ])
    got = refusals(doc)
    assert got["a"][0] == "catalog" and "gpuShare 'half' is not one of whole, auto, mig:<profile>" in got["a"][1]
    assert "set gpusPerNode 1 and nodeCount 1" in got["b"][1]
    assert "3g.41gb is not a MIG profile of H100-80GB" in got["c"][1] and "1g.10gb, 1g.20gb" in got["c"][1]
    assert "needs time-sliced GPUs but node pool h100-mig is not time-sliced" in got["d"][1]
    plain = refusals(stack_doc({**SINGLE_GPU, "gpuShare": "mig:1g.20gb"}))
    assert "needs a MIG pool but node pool h100 is not one; set `mig: true`" in plain["qwen3-8b"][1]


@pytest.mark.parametrize(("change", "message"), [
    ({"platform": {"gpuOperator": {"migStrategy": "single"}}}, "migStrategy is 'single'; set it to 'mixed'"),
    ({"platform": {"gpuOperator": {"migStrategy": "mixed", "timeSlicingReplicas": 4}}},
     "timeSlicingReplicas is 4: the device plugin time-slices"),
    ({"nodes": []}, "must be kind existing and list its 1 node name(s) in `nodes` (it lists 0)"),
    ({"gpuProduct": "L40S"}, "L40S has no MIG profiles"),
])
def test_a_mig_pool_that_cannot_be_carved_is_a_pool_problem(change: dict[str, Any], message: str) -> None:
    doc = mig_doc(TEN_SMALL[:1])
    if "platform" in change:
        doc["platform"]["gpuOperator"].update(change["platform"]["gpuOperator"])
    else:
        doc["nodePools"][0].update(change)
    got = refusals(doc)
    assert message in got["pool"][1], got
    assert got["qwen05-chat"][0] == "pool"


# ------------------------------------------------------------------------------------------------
# Whole GPUs: unchanged
# ------------------------------------------------------------------------------------------------


def test_gpu_share_whole_is_the_default_and_registers_exactly_what_no_share_does() -> None:
    plain, plain_out = run(stack_doc(SINGLE_GPU, TP4))
    explicit, explicit_out = run(stack_doc({**SINGLE_GPU, "gpuShare": "whole"}, {**TP4, "gpuShare": "whole"}))
    def registered(h: Harness[Any]) -> list[tuple[str, str, Any, list[str]]]:
        return sorted((r.type, r.name, unwrap_secrets(r.inputs), sorted(r.depends_on)) for r in h.resources)

    assert registered(plain) == registered(explicit)
    assert plain_out["deployed"] == explicit_out["deployed"] and "gpuShare" not in plain_out["deployed"]["qwen3-8b"]
    assert plain_out["gpuLayout"] == {} and not any(r.type.startswith("tkf:platform:GpuSharing")
                                                    for r in plain.resources)
    auto = copy.deepcopy(stack_doc({**SINGLE_GPU, "gpuShare": "auto"}))  # auto on a whole-GPU pool: whole
    auto_run, _ = run(auto)
    assert main(workloads(auto_run)["qwen3-8b"])["resources"]["requests"]["nvidia.com/gpu"] == "1"


def test_a_multi_node_model_on_a_mig_pool_takes_whole_gpus_for_each_of_its_pods() -> None:
    multi = {**TP4, "name": "qwen-72b-pp2", "servedName": "qwen-72b-pp2", "nodePool": POOL, "nodeCount": 2,
             "pipelineParallelSize": 2, "gpuShare": "whole"}
    _, out = run(mig_doc([multi, *TEN_SMALL[:2]], nodes=["n1", "n2"]))
    assert out["rejected"] == [], out["rejected"]
    nodes = out["gpuLayout"][POOL]["nodes"]
    held = {n: sum(1 for g in nodes[n]["gpus"] if g.get("whole") == "qwen-72b-pp2") for n in nodes}
    # two pods (one per pipeline stage), each with 4 GPUs of one node: 8 whole GPUs in all
    assert sum(held.values()) == 8 and all(n % 4 == 0 for n in held.values()), held
