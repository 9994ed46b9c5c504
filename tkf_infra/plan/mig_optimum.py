"""A MIG pool laid out GPU by GPU, each GPU given the fullest set of instances left: the layout planner's
second packer, kept when it takes fewer GPUs than first fit (`tkf_infra.plan.layout.plan_mig`).

Why beside first fit: MIG has two budgets per GPU (8 memory, 7 compute slices), and first fit by memory
puts compute-bound instances (`1g.10gb`: seven fill the compute, one memory slice stays empty) and
memory-bound ones (`1g.20gb`: four fill the memory, 4 of 7 compute) on GPUs of their own, where one GPU
of both (`1g.20gb` + 6 x `1g.10gb`) fills both budgets: the one-GPU gap `bench/packing.py` measured
against the optimum (docs/performance.md). `plan_mig` keeps first fit on a tie, so a catalog first fit
already packs tightly keeps its layout.

Node room: a MIG pod runs on the node of its instance, so with rooms (`plan_mig(rooms=...)`) a GPU gets
only a set whose pods the node's CPU and memory left still hold (the fullest such set, or none), whole
GPUs are placed first as first fit places them (with their pods' room), and a pool this packer cannot
place entirely keeps first fit. Pure: no Pulumi, no I/O.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from tkf_infra.plan.mig_pack import Rooms, _Held, _order, _pack, placement
from tkf_infra.plan.pool_layout import Demand
from tkf_infra.sizing.mig import COMPUTE_SLICES, MEMORY_SLICES, MigProfile

Whole = dict[tuple[int, int], str]


def cards_used(whole: Whole, held: _Held) -> int:
    """GPUs a layout uses: whole, or carrying any instance."""
    return len(set(whole) | {k for k, items in held.items() if items})


def fewest_gpus(order: Sequence[Demand], keys: list[tuple[int, int]], rooms: Rooms | None, whole: Whole,
                held: _Held) -> tuple[Whole, _Held]:
    """First fit's layout (`whole`, `held`) or this packer's, whichever uses fewer GPUs (first fit on a tie or
    when this one cannot place every replica within the nodes' room)."""
    other = pack_patterns(order, keys, rooms)
    if other is not None and cards_used(*other) < cards_used(whole, held):
        return other
    return whole, held


@lru_cache(maxsize=64)
def patterns(profiles: frozenset[MigProfile]) -> tuple[tuple[tuple[MigProfile, ...], Counter[MigProfile]], ...]:
    """Every set of instances of these profiles one GPU can carry (the placement rule), fullest first: memory
    and compute slices used, weighed alike; then larger instances first, so the choice does not depend on the
    input's order. A few hundred sets per board: enumerated once per set of profiles."""
    ordered = sorted(profiles, key=_order)
    found = [combo for size in range(1, COMPUTE_SLICES + 1)
             for combo in itertools.combinations_with_replacement(ordered, size)
             if sum(p.slices for p in combo) <= MEMORY_SLICES and sum(p.compute for p in combo) <= COMPUTE_SLICES
             and placement(combo) is not None]

    def fullest(combo: tuple[MigProfile, ...]) -> tuple[Any, ...]:
        used = sum(p.slices for p in combo) * COMPUTE_SLICES + sum(p.compute for p in combo) * MEMORY_SLICES
        return -used, tuple(_order(p) for p in combo)

    return tuple((combo, Counter(combo)) for combo in sorted(found, key=fullest))


def pack_patterns(order: Sequence[Demand], keys: list[tuple[int, int]],
                  rooms: Rooms | None = None) -> tuple[Whole, _Held] | None:
    """Whole GPUs as first fit places them, then each remaining GPU, in order, given the fullest set of
    instances the demand left can fill and its node's room can run; None if a replica is left over.

    Replicas of one profile are taken in `order` (the planner's, by size and name), so a reordered catalog
    gets the same layout."""
    wholes = [d for d in order if d.profile is None]
    whole, _, failed, _ = _pack(wholes, keys, rooms)
    if failed:
        return None
    left = _room_left(wholes, whole, rooms)
    queue: dict[MigProfile, list[tuple[Demand, int]]] = {}
    for d in order:
        if d.profile is not None:
            queue.setdefault(d.profile, []).extend((d, r) for r in range(d.replicas))
    taken = Counter[MigProfile]()
    sets = patterns(frozenset(queue)) if queue else ()
    held: _Held = {}
    for key in keys:
        if all(taken[p] == len(q) for p, q in queue.items()):
            break
        if key not in whole:
            _fill(key, sets, queue, taken, left, held)
    if any(taken[p] < len(q) for p, q in queue.items()):
        return None
    return whole, held


def _room_left(wholes: Sequence[Demand], whole: Whole, rooms: Rooms | None) -> list[list[int]] | None:
    """Each node's room (CPU millis, memory MiB) once the whole-GPU replicas' pods are on their GPUs' nodes."""
    if rooms is None:
        return None
    left = [list(r) for r in rooms]
    for d in wholes:
        for node, gpus in Counter(k[0] for k, m in whole.items() if m == d.model).items():
            left[node][0] -= d.cpu_millis * (gpus // max(1, d.gpus))
            left[node][1] -= d.memory_mib * (gpus // max(1, d.gpus))
    return left


def _fill(key: tuple[int, int], sets: Sequence[tuple[tuple[MigProfile, ...], Counter[MigProfile]]],
          queue: Mapping[MigProfile, list[tuple[Demand, int]]], taken: Counter[MigProfile],
          left: list[list[int]] | None, held: _Held) -> None:
    """GPU ``key`` gets the first (fullest) set of instances the queue still has replicas for and its node has
    room for; their replicas are taken from the queue and held on it."""
    for combo, need in sets:
        if any(taken[p] + n > len(queue[p]) for p, n in need.items()):
            continue
        pods = [queue[p][taken[p] + i][0] for p, n in need.items() for i in range(n)]
        if left is not None:
            cpu, mem = sum(d.cpu_millis for d in pods), sum(d.memory_mib for d in pods)
            if cpu > left[key[0]][0] or mem > left[key[0]][1]:
                continue
            left[key[0]][0] -= cpu
            left[key[0]][1] -= mem
        for p in combo:
            d, replica = queue[p][taken[p]]
            held.setdefault(key, []).append((d.model, replica, p))
            taken[p] += 1
        return
