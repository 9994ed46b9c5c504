"""A MIG layout that stays put: one model added, removed or changed moves no other model (issue 28).

Why: a node whose mig-parted config changes is re-partitioned by the GPU Operator's mig-manager, which
stops its GPU pods; the layout from scratch placed a new model among the others in size order and moved
every smaller one. With the last run's `gpuLayout` (`plan_mig(previous=...)`, `plan_fleet(previous_layout=
...)`, the program's own last outputs) what was placed keeps its node, GPU and start slice; what cannot be
kept is laid out from scratch with a warning that names what moves, and a layout the program cannot read
is ignored with a warning. Mocks and plain data; bounded generated pools, no timing.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pulumi
import pytest

from bench.stability import places
from tests.mocks import program, stack_doc
from tests.sharing_fixtures import POOL, QWEN05, TEN_SMALL, mig_settings
from tests.test_mig_pack import random_pool
from tkf_infra.config import validate_catalog
from tkf_infra.hub.lock import load_lock
from tkf_infra.plan import plan_fleet
from tkf_infra.plan.layout import plan_mig
from tkf_infra.plan.mig_sticky import W_LAYOUT_MOVED, W_LAYOUT_UNREADABLE
from tkf_infra.plan.pool_layout import Demand, PoolLayout
from tkf_infra.program import footprints
from tkf_infra.sizing.mig import COMPUTE_SLICES, MEMORY_SLICES, MigBoard, mig_board

LOCK = load_lock()


def _h100() -> MigBoard:
    board = mig_board("H100-80GB")
    assert board is not None
    return board


H100 = _h100()


def assert_valid(layout: PoolLayout, board: MigBoard, demands: Sequence[Demand],
                 rooms: Sequence[tuple[int, int]] | None) -> None:
    """Every card obeys the placement rule, every admitted model has all its replicas, every node its room."""
    by_name = {d.model: d for d in demands}
    pods: dict[str, list[Demand]] = {}
    for c in layout.cards:
        assert not (c.whole and c.instances)
        used = 0
        for i in c.instances:
            p = board.profile(i.profile)
            assert p is not None and i.start in p.starts and by_name[i.model].profile == p
            mask = ((1 << p.slices) - 1) << i.start
            assert not used & mask, f"overlap on {c.node}/{c.index}"
            used |= mask
            pods.setdefault(c.node, []).append(by_name[i.model])
        assert used < 1 << MEMORY_SLICES
        assert sum(i.compute for i in c.instances) <= COMPUTE_SLICES
    for d in demands:
        if d.model in layout.refused or d.replicas <= 0:
            continue
        if d.profile is None:
            wholes = [c.node for c in layout.cards if c.whole == d.model]
            assert len(wholes) == d.replicas * d.gpus
            for node in set(wholes):
                pods.setdefault(node, []).extend([d] * (wholes.count(node) // d.gpus))
        else:
            assert sorted(i.replica for c in layout.cards for i in c.instances if i.model == d.model) == \
                list(range(d.replicas))
    if rooms is not None:
        names = list(dict.fromkeys(c.node for c in layout.cards))
        for n, (cpu, mem) in enumerate(rooms):
            on = pods.get(names[n], [])
            assert sum(d.cpu_millis for d in on) <= cpu and sum(d.memory_mib for d in on) <= mem


def nodes_of(layout: PoolLayout, models: set[str]) -> set[str]:
    return {c.node for c in layout.cards if c.whole in models or any(i.model in models for i in c.instances)}


def _deployed(first: PoolLayout, demands: Sequence[Demand]) -> list[Demand]:
    """What the program passes the second run: the models the first placed, held (deployed by the last run)."""
    return [replace(d, held=True) for d in demands if d.model not in first.refused and d.replicas > 0]


def _check_moves(first: PoolLayout, second: PoolLayout, scratch: PoolLayout, changed: set[str],
                 freed: frozenset[str] = frozenset()) -> bool:
    """Kept: no model outside `changed` moves, and only the nodes of `changed` and `freed` models get a new
    config. Fallen back: the layout is the one from scratch and the warning names every model that moved.
    True when kept."""
    before, now = places(first), places(second)
    if second.warnings:
        assert second.cards == scratch.cards
        (warning,) = second.warnings
        assert warning.startswith(f"[{W_LAYOUT_MOVED}]")
        for m, where in before.items():
            if m in now and now[m] != where:
                assert m in warning, (m, warning)
        return False
    for m, where in before.items():
        if m not in changed and m not in freed and m not in second.refused:
            assert now[m] == where, m
    touched = nodes_of(first, changed | freed | set(second.refused)) | nodes_of(second, changed)
    old, new = first.node_configs(), second.node_configs()
    assert {n for n in new if new[n] != old.get(n)} <= touched
    return True


@pytest.mark.parametrize("seed", range(4))
def test_an_added_model_moves_no_other_model_and_reconfigures_only_its_nodes(seed: int) -> None:
    rnd = random.Random(seed)
    kept = 0
    for _ in range(30):
        board, nodes, per_node, demands, rooms = random_pool(rnd)
        first = plan_mig("p", board, nodes, per_node, demands, rooms, "test")
        new = Demand("new", rnd.choice([1, 1, 2]), rnd.choice(board.profiles), 1, rnd.choice([0, 2000]),
                     rnd.choice([0, 8192]))
        again = [*_deployed(first, demands), new]
        second = plan_mig("p", board, nodes, per_node, again, rooms, "test", previous=first.published())
        scratch = plan_mig("p", board, nodes, per_node, again, rooms, "test")
        assert_valid(second, board, again, rooms)
        assert second.refused == scratch.refused, "admission is the same as from scratch"
        kept += _check_moves(first, second, scratch, {"new"})
    assert kept >= 20, "most additions fit around the last layout"


@pytest.mark.parametrize("seed", range(4))
def test_a_removed_model_frees_its_slices_and_moves_nobody(seed: int) -> None:
    rnd = random.Random(100 + seed)
    for _ in range(30):
        board, nodes, per_node, demands, rooms = random_pool(rnd)
        first = plan_mig("p", board, nodes, per_node, demands, rooms, "test")
        deployed = _deployed(first, demands)
        if not deployed:
            continue
        gone = rnd.choice(deployed).model
        again = [d for d in deployed if d.model != gone]
        second = plan_mig("p", board, nodes, per_node, again, rooms, "test", previous=first.published())
        assert_valid(second, board, again, rooms)
        assert not second.warnings
        assert gone not in places(second)
        assert _check_moves(first, second, second, set(), frozenset({gone}))


@pytest.mark.parametrize("seed", range(4))
def test_a_changed_profile_moves_only_that_model(seed: int) -> None:
    rnd = random.Random(200 + seed)
    kept = 0
    for _ in range(30):
        board, nodes, per_node, demands, rooms = random_pool(rnd)
        first = plan_mig("p", board, nodes, per_node, demands, rooms, "test")
        deployed = _deployed(first, demands)
        shared = [d for d in deployed if d.profile is not None]
        if not shared:
            continue
        changed = rnd.choice(shared)
        again = [replace(d, profile=rnd.choice(board.profiles)) if d is changed else d for d in deployed]
        second = plan_mig("p", board, nodes, per_node, again, rooms, "test", previous=first.published())
        scratch = plan_mig("p", board, nodes, per_node, again, rooms, "test")
        assert_valid(second, board, again, rooms)
        kept += _check_moves(first, second, scratch, {changed.model})
    assert kept >= 15


@pytest.mark.parametrize("seed", range(3))
def test_an_unchanged_catalog_keeps_its_layout_exactly(seed: int) -> None:
    """The second run of the same catalog with its own last layout: the same cards, so the same configs."""
    rnd = random.Random(300 + seed)
    for _ in range(30):
        board, nodes, per_node, demands, rooms = random_pool(rnd)
        first = plan_mig("p", board, nodes, per_node, demands, rooms, "test")
        deployed = _deployed(first, demands)
        again = plan_mig("p", board, nodes, per_node, deployed, rooms, "test", previous=first.published())
        scratch = plan_mig("p", board, nodes, per_node, deployed, rooms, "test")
        if scratch.refused:  # first fit of the deployed models alone refused one (its order differs): not this test
            continue
        assert again.cards == first.cards and not again.warnings  # `refused` differs: those are not asked again


def test_a_layout_the_new_models_do_not_fit_around_falls_back_with_the_models_and_nodes_named() -> None:
    """A `1g.10gb` at slice 2 leaves no start for a `4g.40gb` (start 0 only) on the pool's one GPU; from scratch
    both fit (4g at 0, 1g at 4): the pool is laid out from scratch and the warning says what moves."""
    one = H100.profile("1g.10gb")
    last = {"kind": "mig", "gpu": "H100-80GB", "refused": [], "nodes": {"gpu-a": {"migConfig": "tkf-p-old", "gpus": [
        {"index": 0, "mig": {"1g.10gb": 1}, "instances": [
            {"model": "small-one", "replica": 0, "profile": "1g.10gb", "start": 2, "size": 1}]}]}}}
    demands = [Demand("small-one", 1, one), Demand("big-new", 1, H100.profile("4g.40gb"))]
    got = plan_mig("p", H100, ["gpu-a"], 1, demands, previous=last)
    scratch = plan_mig("p", H100, ["gpu-a"], 1, demands)
    assert got.cards == scratch.cards and not got.refused
    assert places(got)["small-one"] == [(0, "gpu-a", 0, "1g.10gb", 4)]
    (warning,) = got.warnings
    assert warning.startswith(f"[{W_LAYOUT_MOVED}] nodePool p:")
    assert "1 model(s) placed before move (small-one)" in warning
    assert "1 node(s) get a new MIG config (gpu-a)" in warning


def _published(instances: list[Any]) -> dict[str, Any]:
    return {"kind": "mig", "gpu": "H100-80GB", "nodes": {"gpu-a": {"migConfig": "x", "gpus": [
        {"index": 0, "instances": instances}]}}}


GOOD = {"model": "a", "replica": 0, "profile": "1g.10gb", "start": 3, "size": 1}


@pytest.mark.parametrize("last", [
    "not a layout", ["kind", "mig"], {"kind": "mig"}, {"kind": None, "nodes": {}},
    {"kind": "mig", "nodes": {"gpu-a": {"gpus": "0,1"}}},
    {"kind": "mig", "nodes": {"gpu-a": {"gpus": [{"index": "zero"}]}}},
    {"kind": "mig", "nodes": {"gpu-a": {"gpus": [{"index": True}]}}},
    _published([{**GOOD, "replica": -1}]), _published([{**GOOD, "start": 1.5}]), _published([GOOD, GOOD]),
    _published([{**GOOD, "model": 7}]), _published(["a"]), _published({"a": GOOD}),  # type: ignore[arg-type]
])
def test_a_malformed_last_layout_is_ignored_with_a_warning(last: Any) -> None:
    demands = [Demand("a", 2, H100.profile("1g.10gb")), Demand("b", 1, H100.profile("3g.40gb"))]
    scratch = plan_mig("p", H100, ["gpu-a"], 2, demands)
    got = plan_mig("p", H100, ["gpu-a"], 2, demands, previous=last)
    assert got.cards == scratch.cards and got.refused == scratch.refused
    (warning,) = got.warnings
    assert warning.startswith(f"[{W_LAYOUT_UNREADABLE}] nodePool p: the last run's gpuLayout of this pool cannot be "
                              "read (")


def test_what_cannot_be_kept_is_placed_again_and_the_rest_kept() -> None:
    """A node gone from the pool, a GPU index past gpusPerNode, a start the profile does not allow, a replica
    no longer asked: those replicas are placed anew (the engine's floats read as whole numbers); the rest stay."""
    one = H100.profile("1g.10gb")
    last = {"kind": "mig", "gpu": "H100-80GB", "nodes": {
        "gone": {"gpus": [{"index": 0, "instances": [{"model": "a", "replica": 0, "profile": "1g.10gb", "start": 0}]}]},
        "gpu-a": {"gpus": [{"index": 0.0, "instances": [
            {"model": "b", "replica": 0.0, "profile": "1g.10gb", "start": 5.0},
            {"model": "c", "replica": 0, "profile": "2g.20gb", "start": 1},
            {"model": "b", "replica": 3, "profile": "1g.10gb", "start": 6}]},
            {"index": 9, "instances": [{"model": "d", "replica": 0, "profile": "1g.10gb", "start": 0}]}]}}}
    demands = [Demand(m, 1, one if m != "c" else H100.profile("2g.20gb")) for m in "abcd"]
    got = plan_mig("p", H100, ["gpu-a"], 2, demands, previous=last)
    assert not got.warnings and not got.refused
    assert_valid(got, H100, demands, None)
    assert places(got)["b"] == [(0, "gpu-a", 0, "1g.10gb", 5)]
    assert places(got)["c"] == [(0, "gpu-a", 0, "2g.20gb", 0)], "start 1 is not a 2g.20gb start: placed anew"


def test_without_a_last_layout_the_plan_is_the_one_from_scratch() -> None:
    rnd = random.Random(7)
    for _ in range(20):
        board, nodes, per_node, demands, rooms = random_pool(rnd)
        assert plan_mig("p", board, nodes, per_node, demands, rooms, "t", previous=None) == \
            plan_mig("p", board, nodes, per_node, demands, rooms, "t")
        time_sliced = {"kind": "time-slicing", "gpu": "H100-80GB", "proof": "", "refused": []}
        assert plan_mig("p", board, nodes, per_node, demands, rooms, "t", previous=time_sliced) == \
            plan_mig("p", board, nodes, per_node, demands, rooms, "t")


# ------------------------------------------------------------------------------------------------
# Through the fleet plan and the whole program
# ------------------------------------------------------------------------------------------------

ADDED = {"name": "added-3g", **QWEN05, "servedName": "added-3g", "maxModelLen": 4096, "gpuShare": "mig:3g.40gb"}


def mig_doc(models: list[dict[str, Any]]) -> dict[str, Any]:
    doc = stack_doc()
    extra = mig_settings(models)
    doc["platform"]["gpuOperator"].update({k: v for k, v in extra.pop("platform")["gpuOperator"].items()
                                           if k != "alreadyInstalled"})
    doc.update(extra)
    return doc


def run(doc: dict[str, Any], previous: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
    exported: dict[str, Any] = {}
    original = pulumi.export
    pulumi.export = lambda name, value: exported.__setitem__(name, value)
    try:
        h = program(doc, lock=LOCK, previous=previous)
    finally:
        pulumi.export = original
    return h, exported


def _models_of(published: dict[str, Any]) -> dict[str, list[Any]]:
    """Model → its instances and whole GPUs in a published `gpuLayout` pool, with their node and GPU."""
    out: dict[str, list[Any]] = {}
    for node, spec in published["nodes"].items():
        for gpu in spec["gpus"]:
            if gpu.get("whole"):
                out.setdefault(gpu["whole"], []).append((node, gpu["index"]))
            for i in gpu.get("instances", []):
                out.setdefault(i["model"], []).append((node, gpu["index"], json.dumps(i, sort_keys=True)))
    return {m: sorted(v) for m, v in out.items()}


def test_a_second_run_with_one_model_added_keeps_every_other_models_gpu_layout() -> None:
    """What a user sees: `up`, then `up` with one more model; `gpuLayout` of the ten others is unchanged, and
    only the node it lands on could change config. From scratch the same addition moves others."""
    nodes = ["gpu-node-1", "gpu-node-2"]
    doc = mig_doc(TEN_SMALL)
    doc["nodePools"][0].update(nodes=nodes, nodeCount=2)
    h1, out1 = run(doc)
    assert h1.error is None, h1.errors()
    first = out1["gpuLayout"][POOL]
    # What readStackOutputs hands back: JSON, with the deployed entries the program exported.
    previous = json.loads(json.dumps({"gpuLayout": out1["gpuLayout"], "deployed": {
        m.entry.name: m.entry.model_dump(by_alias=True, mode="json", exclude_none=True)
        for m in h1.result.plan.models}}))
    grown = copy.deepcopy(doc)
    grown["models"].append(copy.deepcopy(ADDED))
    h2, out2 = run(grown, previous)
    assert h2.error is None, h2.errors()
    second = out2["gpuLayout"][POOL]
    before, after = _models_of(first), _models_of(second)
    assert set(after) == set(before) | {"added-3g"}
    assert {m: after[m] for m in before} == before
    landed = {n for n, *_ in after["added-3g"]}
    changed = {n for n in nodes if second["nodes"][n]["migConfig"] != first["nodes"][n]["migConfig"]}
    assert changed <= landed
    assert not [w for w in h2.warnings() if "mig-layout" in w]
    # The same addition from scratch (the plan before issue 28's stability change) moves others.
    catalog = validate_catalog(grown)
    scratch = plan_fleet(catalog, lock=LOCK, footprints=footprints(catalog), previous=previous["deployed"])
    moved = _models_of(scratch.layouts[POOL].published())
    assert any(moved[m] != before[m] for m in before), "the test catalog would move models from scratch"


def test_a_malformed_last_layout_in_the_stack_outputs_is_warned_and_the_run_goes_on() -> None:
    doc = mig_doc(TEN_SMALL[:3])
    h, out = run(doc, {"gpuLayout": {POOL: {"kind": "mig", "nodes": ["gpu-node-1"]}}})
    assert h.error is None, h.errors()
    assert any(W_LAYOUT_UNREADABLE in w and f"nodePool {POOL}" in w for w in h.warnings())
    assert out["gpuLayout"][POOL]["nodes"]
