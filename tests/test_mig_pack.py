"""The fast plan is the plan: the MIG packer and the sizing shortcuts against the slow paths they replaced.

Why: admission tries every new model on the packing of all those before it, and `tkf_infra.plan.mig_pack`
does it without packing from scratch (trials resumed from the first demand that differs, spot searches over
the GPUs that can matter, the placement rule cached by shape); the plan also sizes each estimate once
(`sized_once`) and skips the way out of candidates `gpuShare: auto` passes over (`explain=False`). Each is
meant to change nothing but the time (issue 28). Here the reference is the packer as it was: every trial
packed from scratch over every GPU (`reference_plan_mig`, the code of `tkf_infra.plan.layout` before the
change), and the whole plan of the packing bench's catalogs, on generous and on overfull pools, is the same
through both paths. Any difference in a layout, a refusal's text or a fit fails here.
"""

from __future__ import annotations

import contextlib
import copy
import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest

import tkf_infra.plan.admit_fleet as admit_fleet
import tkf_infra.plan.fleet as fleet
import tkf_infra.plan.mig_optimum as mig_optimum
import tkf_infra.plan.share as share
from bench.packing import generate, plan_doc
from tkf_infra.plan.layout import _footprint, _largest_first, _refusal, plan_mig
from tkf_infra.plan.mig_pack import _order, _per_gpu, placement
from tkf_infra.plan.mig_room import room_refusal
from tkf_infra.plan.pool_layout import Card, Demand, Instance, PoolLayout
from tkf_infra.sizing.contract import FitInputs, FitResult, evaluate
from tkf_infra.sizing.mig import COMPUTE_SLICES, MEMORY_SLICES, MigBoard, MigProfile, mig_board

Key = tuple[int, int]
Held = dict[Key, list[tuple[str, int, MigProfile]]]


def _whole_spot(keys: list[Key], whole: dict[Key, str], held: Held, gpus: int,
                room: Callable[[int], bool]) -> list[Key] | None:
    for node in dict.fromkeys(n for n, _ in keys):
        if not room(node):
            continue
        free = [k for k in keys if k[0] == node and k not in whole and not held.get(k)]
        if len(free) >= gpus:
            return free[:gpus]
    return None


def _mig_spot(keys: list[Key], whole: dict[Key, str], held: Held, profile: MigProfile, room: Callable[[int], bool],
              fills: Callable[[int], bool] | None = None) -> list[Key] | None:
    """Every GPU in pool order: the first partitioned one the instance fits on, else the first unused one."""
    first: Key | None = None
    filled: Key | None = None
    for key in keys:
        items = held.get(key)
        if not items:
            if filled is None and key not in whole and room(key[0]):
                first = first or key
                filled = key if fills is None or fills(key[0]) else None
            continue
        if room(key[0]) and placement([*(h[2] for h in items), profile]) is not None:
            return [key]
    spot = filled or first
    return [spot] if spot is not None and placement([profile]) is not None else None


def _only(n: int) -> Callable[[int], bool]:
    return lambda m: m == n


def reference_pack(  # noqa: C901 - the packer before issue 28's speed-up, kept whole as the reference it is
        order: Sequence[Demand], keys: list[Key], rooms: Sequence[tuple[int, int]] | None = None
        ) -> tuple[dict[Key, str], Held, dict[str, int], dict[str, list[tuple[int, int, bool]]]]:
    """First fit from scratch, every GPU searched for every instance (the packer before issue 28's speed-up)."""
    whole: dict[Key, str] = {}
    held: Held = {}
    failed: dict[str, int] = {}
    short: dict[str, list[tuple[int, int, bool]]] = {}
    left = [list(r) for r in rooms] if rooms is not None else None
    for d in order:
        taken: list[Key] = []
        pods: list[int] = []

        def room(node: int, d: Demand = d) -> bool:
            return left is None or (left[node][0] >= d.cpu_millis and left[node][1] >= d.memory_mib)

        def pods_room(node: int, d: Demand = d) -> int:
            if left is None:
                return d.replicas
            return min(left[node][0] // d.cpu_millis if d.cpu_millis else d.replicas,
                       left[node][1] // d.memory_mib if d.memory_mib else d.replicas)

        for replica in range(d.replicas):
            want = min(_per_gpu(d.profile), d.replicas - replica) if d.profile is not None else 0

            def fills(node: int, want: int = want) -> bool:
                return pods_room(node) >= want

            spot = (_whole_spot(keys, whole, held, d.gpus, room) if d.profile is None
                    else _mig_spot(keys, whole, held, d.profile, room, fills))
            if spot is None:
                failed[d.model] = replica
                if left is not None:
                    gpu_ok = {n for n in dict.fromkeys(k[0] for k in keys)
                              if (_whole_spot(keys, whole, held, d.gpus, _only(n)) if d.profile is None
                                  else _mig_spot(keys, whole, held, d.profile, _only(n))) is not None}
                    short[d.model] = [(c, m, n in gpu_ok) for n, (c, m) in enumerate(left)]
                break
            for key in spot:
                if d.profile is None:
                    whole[key] = d.model
                else:
                    held.setdefault(key, []).append((d.model, replica, d.profile))
            if left is not None:
                left[spot[0][0]][0] -= d.cpu_millis
                left[spot[0][0]][1] -= d.memory_mib
            pods.append(spot[0][0])
            taken += spot
        if d.model in failed:
            for key in taken:
                whole.pop(key, None)
                if key in held:
                    held[key] = [h for h in held[key] if h[0] != d.model]
            for node in pods:
                if left is not None:
                    left[node][0] += d.cpu_millis
                    left[node][1] += d.memory_mib
    return whole, held, failed, short


def reference_plan_mig(pool: str, board: MigBoard, nodes: Sequence[str], gpus_per_node: int,
                       demands: Sequence[Demand], rooms: Sequence[tuple[int, int]] | None = None,
                       rooms_from: str = "", previous: Any = None) -> PoolLayout:
    """`plan_mig` as it was: each admission trial packed from scratch with `reference_pack` (no last layout)."""
    assert previous is None, "the catalogs compared here are planned from scratch"
    keys = [(n, g) for n in range(len(nodes)) for g in range(gpus_per_node)]
    order: list[Demand] = []
    refused: dict[str, str] = {}
    short_of_room: set[str] = set()
    for d in sorted(demands, key=lambda d: (not d.held, -d.priority, _footprint(d), d.model)):
        if d.replicas <= 0:
            continue
        trials = (sorted([*order, d], key=_largest_first), [*order, d])
        fits = next((t for t in trials if not reference_pack(t, keys, rooms)[2]), None)
        if fits is not None:
            order = list(fits)
            continue
        whole, held, failed, short = reference_pack([*order, d], keys, rooms)
        if rooms is not None and any(not reference_pack(t, keys)[2] for t in trials):
            short_of_room.add(d.model)
            refused[d.model] = room_refusal(pool, nodes, d, failed.get(d.model, 0), short[d.model], rooms_from)
            continue
        refused[d.model] = _refusal(pool, board, d, failed.get(d.model, 0), keys, whole, held, len(nodes),
                                    gpus_per_node)
    with pytest.MonkeyPatch.context() as m:  # the fuller packer places whole GPUs with first fit: the reference's
        m.setattr(mig_optimum, "_pack", reference_pack)
        whole, held = mig_optimum.fewest_gpus(order, keys, rooms, *reference_pack(order, keys, rooms)[:2])
    cards = []
    for n, g in keys:
        items = sorted(held.get((n, g), []), key=lambda h: (_order(h[2]), h[0], h[1]))
        placed = placement([h[2] for h in items]) or []
        cards.append(Card(nodes[n], g, whole.get((n, g)), tuple(
            Instance(h[0], h[1], p.name, start, p.slices, p.compute)
            for h, (p, start) in zip(items, placed, strict=True))))
    return PoolLayout(pool, "mig", board.gpu, tuple(cards), refused, short_of_room=frozenset(short_of_room))


def random_pool(rnd: random.Random) -> tuple[MigBoard, list[str], int, list[Demand], list[tuple[int, int]] | None]:
    """A MIG pool and its demands, from roomy to overfull, with and without node rooms."""
    board = mig_board(rnd.choice(["H100-80GB", "A100-40GB"]))
    assert board is not None
    nodes = [f"n{i}" for i in range(rnd.randint(1, 4))]
    per_node = rnd.randint(1, 8)
    demands = []
    for i in range(rnd.randint(1, 24)):
        whole = rnd.random() < 0.15
        demands.append(Demand(f"m{i:02d}", rnd.choice([0, 1, 1, 1, 2, 3, 5]),
                              None if whole else rnd.choice(board.profiles), rnd.choice([1, 2]) if whole else 1,
                              rnd.choice([0, 2000, 4010, 16000]), rnd.choice([0, 8192, 22560, 90000]),
                              priority=rnd.choice([0, 0, 1]), held=rnd.random() < 0.2))
    rooms = None
    if rnd.random() < 0.6:
        rooms = [(rnd.choice([8000, 40000, 191450]), rnd.choice([100_000, 400_000, 2_095_697])) for _ in nodes]
    return board, nodes, per_node, demands, rooms


@pytest.mark.parametrize("seed", range(8))
def test_plan_mig_lays_out_as_the_from_scratch_packer(seed: int) -> None:
    rnd = random.Random(seed)
    for _ in range(40):
        board, nodes, per_node, demands, rooms = random_pool(rnd)
        fast = plan_mig("p", board, nodes, per_node, demands, rooms, "test")
        assert fast == reference_plan_mig("p", board, nodes, per_node, demands, rooms, "test"), (demands, rooms)


def _overfull(doc: dict[str, Any]) -> dict[str, Any]:
    """The bench's MIG pool at a third of its nodes with a third of a p5's CPU: refusals at placement and
    for node room."""
    out = copy.deepcopy(doc)
    for p in out["nodePools"]:
        if p.get("mig"):
            k = max(1, p["nodeCount"] // 3)
            p["nodeCount"], p["nodes"] = k, p["nodes"][:k]
            p["nodeResources"] = {"cpu": "60000m", "memory": "2095697Mi"}
    return out


def _explained(inputs: FitInputs, explain: bool = True) -> FitResult:
    return evaluate(inputs)


def _plan(doc: dict[str, Any]) -> tuple[Any, ...]:
    plan, _ = plan_doc(doc)
    return plan.models, plan.excluded, plan.errors, plan.warnings, dict(plan.layouts), plan.footprints, plan.floors


def test_the_bench_catalogs_plan_the_same_through_the_slow_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """100 generated models (their two stacks) and the overfull variant of their MIG stack."""
    docs = generate(100, 28)
    docs.append(_overfull(docs[0]))
    fast = [_plan(d) for d in docs]
    assert any("h100-mig" in p[4] and p[4]["h100-mig"].refused for p in fast), "the overfull pool refuses"
    assert any(p[4].get("h100-mig") and p[4]["h100-mig"].short_of_room for p in fast), "... some for node room"
    monkeypatch.setattr(fleet, "sized_once", contextlib.nullcontext)
    monkeypatch.setattr(share, "evaluate", _explained)
    monkeypatch.setattr(admit_fleet, "plan_mig", reference_plan_mig)
    for doc, got in zip(docs, fast, strict=True):
        assert got == _plan(doc)


def test_a_reordered_bench_catalog_keeps_its_layout() -> None:
    doc = generate(100, 28)[0]
    shuffled = copy.deepcopy(doc)
    random.Random(28).shuffle(shuffled["models"])
    assert _plan(shuffled)[4] == _plan(doc)[4]


def test_every_profile_adds_to_a_gpu_exactly_when_the_placement_rule_places_it() -> None:
    """`_adds` (by shape, cached) against `placement` (by profile) on every set of instances a GPU can carry."""
    from tkf_infra.plan.mig_optimum import patterns
    from tkf_infra.plan.mig_pack import _adds, _shape

    for name in ("H100-80GB", "A100-40GB"):
        board = mig_board(name)
        assert board is not None
        for combo, _ in patterns(frozenset(board.profiles)):
            for p in board.profiles:
                expected = placement([*combo, p]) is not None
                assert _adds(tuple(_shape(c) for c in combo), _shape(p)) is expected, (combo, p)
                assert expected <= (sum(c.slices for c in (*combo, p)) <= MEMORY_SLICES
                                    and sum(c.compute for c in (*combo, p)) <= COMPUTE_SLICES)


def test_a_memoised_estimate_is_a_fresh_copy_named_for_its_model() -> None:
    from bench.packing import LOCK, QWEN05
    from tkf_infra.sizing.estimate import estimate, sized_once
    from tkf_infra.sizing.gpus import lookup_gpu
    from tkf_infra.sizing.params import SizingParams

    facts = LOCK.get(QWEN05["repo"], QWEN05["revision"])
    assert facts is not None
    gpu, params = lookup_gpu("H100-80GB"), SizingParams(vllm_version="0.32.0", max_model_len=4096)
    plain = estimate(facts, gpu, params, model="a")
    with sized_once():
        first = estimate(facts, gpu, params, model="a")
        first.problems.append("changed by its caller")
        first.doubts.clear()
        again = estimate(facts, gpu, params, model="b")
    assert again.model == "b" and again.model_copy(update={"model": "a"}) == plain
    assert estimate(facts, gpu, params, model="a") == plain  # outside the block: sized afresh
