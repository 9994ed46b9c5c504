"""Node room on MIG pools, the re-layout after refusals, and `priority` (tkf_infra/plan/admit_fleet.py).

A MIG pod runs on the node whose GPU carries its instance, so its CPU and memory count there: the
layout must spread instances over nodes with room, refuse by name what no node has room for, and
carve (mig-parted config) only what is deployed. `priority` decides who is refused first when node
capacity, MIG slices or storage run short. Mocks; the plan as the program makes it, and the
mig-parted ConfigMap the whole program registers.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pulumi
import yaml

from tests.mocks import program, stack_doc
from tests.sharing_fixtures import CODER05, POOL, QWEN05, mig_settings
from tkf_infra.config import validate_catalog
from tkf_infra.config.quantity import mebibytes, millicores
from tkf_infra.hub.lock import load_lock
from tkf_infra.names import MIG_CONFIG_KEY, MIG_CONFIG_NAME
from tkf_infra.plan import plan_fleet
from tkf_infra.plan.admission import ClusterState, LiveNode
from tkf_infra.program import footprints

LOCK = load_lock()
P5 = {"cpu": "191450m", "memory": "2095697Mi"}
"""One p5.48xlarge's allocatable (docs/admission.md): CPU for 47 pods of 4.01 cores."""


def small(name: str, replicas: int, ref: dict[str, str] = QWEN05, **kw: Any) -> dict[str, Any]:
    return {"name": name, **ref, "servedName": name, "replicas": replicas, "gpuShare": "mig:1g.10gb",
            "maxModelLen": 4096, **kw}


def mig_doc(models: list[dict[str, Any]], nodes: int, **pool: Any) -> dict[str, Any]:
    doc = stack_doc()
    extra = mig_settings(models, nodes=[f"gpu-node-{i + 1}" for i in range(nodes)])
    doc["platform"]["gpuOperator"]["migStrategy"] = "mixed"
    extra.pop("platform")
    extra["nodePools"][0].update(pool)
    doc.update(extra)
    return doc


def plan(doc: dict[str, Any], cluster: ClusterState | None = None, previous: dict[str, Any] | None = None) -> Any:
    catalog = validate_catalog(doc)
    return plan_fleet(catalog, lock=LOCK, footprints=footprints(catalog), cluster=cluster, previous=previous)


def refused(p: Any) -> dict[str, tuple[str, str]]:
    return {x.name: (x.stage.value, " ".join(x.reasons)) for x in p.excluded}


def carved(p: Any) -> Counter[str]:
    """MIG instances of each profile the applied mig-parted configs carve, over every node."""
    out: Counter[str] = Counter()
    layout = p.layouts[POOL]
    for node, config in layout.node_configs().items():
        for spec in layout.mig_parted_configs()[config]:
            for profile, k in spec.get("mig-devices", {}).items():
                out[profile] += k * len(spec["devices"])
        assert node.startswith("gpu-node-")
    return out


def pods_on(p: Any, model: str) -> Counter[str]:
    """Where the layout put each MIG pod (one instance each): its pod runs on that node."""
    return Counter(spot["node"] for spot in p.layouts[POOL].placements(model))


def test_56_small_replicas_spread_where_the_cpu_is_and_admission_counts_them_there() -> None:
    """56 x 1g.10gb fit one node's GPUs (7 per GPU) but its CPU holds 47 (4.01 cores each): the layout
    puts 42 on the first node (6 full GPUs: a 7th would be left part-used) and 14 on the second, 8 GPUs
    in all, and the footprint names the same nodes."""
    p = plan(mig_doc([small("small", 56)], 2, nodeResources=P5))
    assert not p.excluded
    cpu, mem = p.footprints["small"]["pod"]["cpuMillis"], p.footprints["small"]["pod"]["memoryMiB"]
    where = pods_on(p, "small")
    assert where == Counter({"gpu-node-1": 42, "gpu-node-2": 14})
    assert sum(1 for c in p.layouts[POOL].cards if c.instances) == 8
    for node, k in where.items():
        assert k * cpu <= millicores(P5["cpu"]) and k * mem <= mebibytes(P5["memory"]), node
    assert Counter(n for r in p.footprints["small"]["nodes"] for n in r) == where, "admission counts them there"
    assert carved(p) == Counter({"1g.10gb": 56})


def test_a_catalog_one_node_holds_stays_on_that_node() -> None:
    """45 pods fit the first node's CPU: its 7th GPU takes the last 3 rather than a second node opening."""
    p = plan(mig_doc([small("small", 45)], 2, nodeResources=P5))
    assert pods_on(p, "small") == Counter({"gpu-node-1": 45})
    assert sum(1 for c in p.layouts[POOL].cards if c.instances) == 7


def test_what_no_node_has_room_for_is_refused_by_name_and_not_carved() -> None:
    """One node whose GPUs hold 56 x 1g.10gb and whose CPU holds 47 pods: beside a 2-replica sibling, 45 of 50
    would fit; the model is refused whole at `capacity`, with the numbers and the way out, and the mig-parted
    config carves nothing for it while its sibling deploys."""
    p = plan(mig_doc([small("small", 50), small("other", 2, CODER05)], 1, nodeResources=P5))
    stage, reason = refused(p)["small"]
    assert stage == "capacity"
    assert "replica 46 of 50 (MIG 1g.10gb, each pod asks 4.01 CPU" in reason
    assert "ran out of: CPU (at most" in reason and "a MIG pod runs on the node of its instance" in reason
    assert "lower replicas to 45" in reason and "higher priority" in reason
    assert p.deployed == {"other"}
    assert carved(p) == Counter({"1g.10gb": 2}), "only the deployed model's instances are carved"
    assert not pods_on(p, "small")


def test_priority_decides_who_keeps_a_full_node() -> None:
    """40 + 16 replicas on one node that holds 47: the smaller is admitted first unless the larger has priority."""
    models = [small("big", 40), small("little", 16, CODER05)]
    assert refused(plan(mig_doc(models, 1, nodeResources=P5)))["big"][0] == "capacity"
    doc = mig_doc([{**models[0], "priority": 10}, models[1]], 1, nodeResources=P5)
    p = plan(doc)
    assert refused(p)["little"][0] == "capacity" and p.deployed == {"big"}
    assert carved(p) == Counter({"1g.10gb": 40})
    # Deployed by the last run, the little one keeps its instances whatever the newcomer's priority.
    little = next(m for m in validate_catalog(doc).models if m.name == "little")
    p = plan(doc, previous={"little": little.model_dump(by_alias=True)})
    assert refused(p)["big"][0] == "capacity" and p.deployed == {"little"}
    assert carved(p) == Counter({"1g.10gb": 16})


def test_live_nodes_give_the_layout_their_room_and_an_absent_node_gets_nothing() -> None:
    """Nodes read live: a cordoned node carves nothing; a node with less CPU takes fewer pods."""
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "tkf.io/pool": POOL}

    def node(name: str, cpu: str, cordoned: bool = False) -> LiveNode:
        return LiveNode(name, labels, (), {"cpu": cpu, "memory": "2095697Mi", "pods": "110"}, True, cordoned)

    cluster = ClusterState("a test cluster", nodes=(node("gpu-node-1", "40"), node("gpu-node-2", "191450m"),
                                                    node("gpu-node-3", "191450m", cordoned=True)))
    p = plan(mig_doc([small("small", 20)], 3), cluster)
    assert not p.excluded
    # 40 cores hold 9 pods of 4.01: one full GPU of 7 there, and the 13 others on the roomy node's 2 GPUs.
    assert pods_on(p, "small") == Counter({"gpu-node-1": 7, "gpu-node-2": 13})
    assert not any(c.instances for c in p.layouts[POOL].cards if c.node == "gpu-node-3")


def test_a_model_refused_at_storage_is_laid_out_again_without_its_instances() -> None:
    """The layout is redone after storage refusals, so the applied mig-parted config holds only admitted models."""
    doc = mig_doc([small("first", 3), small("second", 4, CODER05)], 1, nodeResources=P5)
    doc["serving"] = {**doc["serving"], "weightCacheBudgetGiB": 15}  # room for one 10 GiB cache
    p = plan(doc)
    assert refused(p)["second"][0] == "storage" and p.deployed == {"first"}
    assert carved(p) == Counter({"1g.10gb": 3})
    # The whole program registers that config.
    exported: dict[str, Any] = {}
    original = pulumi.export
    pulumi.export = lambda name, value: exported.__setitem__(name, value)
    try:
        h = program(doc, lock=LOCK)
    finally:
        pulumi.export = original
    cm = next(r for r in h.resources if r.inputs.get("metadata", {}).get("name") == MIG_CONFIG_NAME)
    configs = yaml.safe_load(cm.inputs["data"][MIG_CONFIG_KEY])["mig-configs"]
    assert sum(k * len(spec["devices"]) for name, specs in configs.items() for spec in specs
               for k in spec.get("mig-devices", {}).values()) == 3
    assert sorted(exported["gpuLayout"][POOL]["refused"]) == []
    assert [i["model"] for n in exported["gpuLayout"][POOL]["nodes"].values() for g in n["gpus"]
            for i in g.get("instances", [])] == ["first"] * 3


def test_priority_orders_storage_and_deployed_models_still_come_first() -> None:
    doc = mig_doc([small("first", 1), small("second", 1, CODER05, priority=5)], 1, nodeResources=P5)
    doc["serving"] = {**doc["serving"], "weightCacheBudgetGiB": 15}
    p = plan(doc)
    assert refused(p)["first"][0] == "storage" and p.deployed == {"second"}
    assert "the caches admitted before it claim" in refused(p)["first"][1]
    entries = {m.name: m for m in validate_catalog(doc).models}
    p = plan(doc, previous={"first": entries["first"].model_dump(by_alias=True)})
    assert refused(p)["second"][0] == "storage" and p.deployed == {"first"}, "a running model keeps its room"


def test_priority_is_validated_by_name() -> None:
    catalog = validate_catalog(stack_doc({**small("small", 1), "nodePool": "h100", "gpuShare": "whole",
                                          "priority": 5000}))
    (bad,) = catalog.rejected
    text = " ".join(str(x) for x in bad.problems)
    assert bad.name == "small" and "priority" in text and "1000" in text


def test_priority_changes_no_resource_of_the_model() -> None:
    """Read by admission only: the same catalog with and without priorities registers the same resources."""
    def registered(doc: dict[str, Any]) -> dict[str, Any]:
        return {r.urn: r.inputs for r in program(doc, lock=LOCK).resources}

    models = [small("first", 2), small("second", 2, CODER05)]
    plain = registered(mig_doc(models, 1, nodeResources=P5))
    ranked = registered(mig_doc([{**models[0], "priority": -3}, {**models[1], "priority": 7}], 1, nodeResources=P5))
    assert plain and plain == ranked
