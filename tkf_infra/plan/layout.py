"""The layout planner: where each model's share of a pool lands, and the proof that the pool holds them.

Why a planner: several models per GPU is only safe when the pool provably holds them all.

- **MIG pools.** Each replica of a `mig:<profile>` model needs one GPU instance; each replica of a
  whole-GPU model needs `gpusPerNode` GPUs of one node with MIG off. The planner packs them into
  per-GPU geometries that obey NVML's placement rules (`tkf_infra.sizing.mig`): instances on a GPU
  occupy disjoint runs of memory slices at allowed starts. A model whose replicas cannot all be
  placed is refused, naming the slices missing. Packed first fit decreasing, or GPU by GPU with the
  fullest set of instances left when that takes fewer GPUs (`tkf_infra.plan.mig_optimum`). The GPU
  Operator's mig-manager then carves each node as planned (`mig_parted_configs`; the node label
  `nvidia.com/mig.config` names its config).
- **Time-sliced pools.** Without memory isolation the guarantee is arithmetic: each pod takes one
  of the N replicas of a GPU, so at most N pods share one GPU, and the N largest memory footprints
  (budget + CUDA context) of the pool's pods must fit in the GPU. A model that would break it is
  refused (`tkf_infra.plan.time_slicing`; its proof is a `PoolLayout` of kind "time-slicing").

Node room: a MIG pod runs on the node whose GPU carries its instance, so given each node's CPU and
memory (`plan_mig(rooms=...)`, from the node-capacity sources of `tkf_infra.plan.admission`) the
planner puts an instance only on a node that still has room for its pod, spreading a catalog of
small instances over nodes instead of filling one node's GPUs beyond its CPU; a model that no node
has room for is refused at stage `capacity` (`PoolLayout.short_of_room`), the others at `placement`.

Stable: demand is ordered by deployed-or-not, priority, size and name, never by catalog position,
so reordering the catalog yields the same layout and nodes are not re-partitioned. Given the last
run's layout of the pool (`previous`, its `gpuLayout` entry), what it placed stays where it was and
only new or changed replicas are packed around it (`tkf_infra.plan.mig_sticky`), so one added model
re-partitions only the nodes it lands on; from scratch, with a warning naming what moves, when that
cannot place every admitted model. An overfull catalog refuses new models before those the last run
deployed, then its lowest priority, then its largest asks (models are admitted smallest first).
Pure: no Pulumi, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from tkf_infra.plan.mig_optimum import fewest_gpus
from tkf_infra.plan.mig_pack import Rooms, _order, _pack, _Packing
from tkf_infra.plan.mig_pack import placement as placement  # the placement rule, where it has been imported from
from tkf_infra.plan.mig_room import room_refusal
from tkf_infra.plan.mig_sticky import moved_warning, read_previous, sticky_cards
from tkf_infra.plan.pool_layout import Card, Demand, Instance, PoolLayout
from tkf_infra.sizing.mig import MEMORY_SLICES, MigBoard


def _footprint(d: Demand) -> int:
    """Memory slices a demand takes in all (a whole GPU: all of them)."""
    return d.replicas * (d.profile.slices if d.profile is not None else MEMORY_SLICES * d.gpus)


def _largest_first(d: Demand) -> tuple[Any, ...]:
    return (d.profile is not None, -d.gpus, *(_order(d.profile) if d.profile else (0, 0, "")), d.model)


def plan_mig(pool: str, board: MigBoard, nodes: Sequence[str], gpus_per_node: int, demands: Sequence[Demand],
             rooms: Rooms | None = None, rooms_from: str = "", previous: Any = None) -> PoolLayout:
    """Pack the demands into the pool's GPUs (see module docstring); refuse what cannot be placed.

    Models are admitted deployed ones first, then by priority, then smallest first (so an overfull
    catalog refuses its largest asks, not many small ones) and packed largest first (first-fit
    decreasing), or in admission order when that packs and largest first does not; then laid out by
    `mig_optimum` instead when that uses fewer GPUs. `rooms`: each node's CPU and memory (None: unchecked),
    read from `rooms_from`. `previous`: the last run's published layout of this pool (None: none, the
    layout is this packing; else the admitted models are laid out around it, `mig_sticky`)."""
    keys = [(n, g) for n in range(len(nodes)) for g in range(gpus_per_node)]
    order: list[Demand] = []
    refused: dict[str, str] = {}
    short_of_room: set[str] = set()
    # Trials re-place only from where they differ from the last one tried (`_Packing.packs`): the same answers
    # as packing each from scratch, without re-placing, for every new model, all those admitted before it.
    packing, gpus_only = _Packing(keys, rooms), _Packing(keys)
    rank = {id(d): _largest_first(d) for d in demands}  # sort keys taken once, not at every trial
    for d in sorted(demands, key=lambda d: (not d.held, -d.priority, _footprint(d), d.model)):
        if d.replicas <= 0:
            continue
        trials = (sorted([*order, d], key=lambda x: rank[id(x)]), [*order, d])
        fits = next((t for t in trials if packing.packs(t)), None)
        if fits is not None:
            order = list(fits)
            continue
        # `order` packs, so the second trial failed at `d` and `packing` holds `order`: place `d` once more
        # for how far it got and (with rooms) each node's room then, as `_pack([*order, d], ...)` reports.
        failed, short = packing.place(d)
        replica = failed or 0
        if rooms is not None and any(gpus_only.packs(t) for t in trials):  # the GPUs hold it, the nodes do not
            short_of_room.add(d.model)
            refused[d.model] = room_refusal(pool, nodes, d, replica, short or [], rooms_from)
            continue
        refused[d.model] = _refusal(pool, board, d, replica, keys, packing.whole, packing.held, len(nodes),
                                    gpus_per_node)
    whole, held = fewest_gpus(order, keys, rooms, *_pack(order, keys, rooms)[:2])
    cards = []
    for n, g in keys:
        items = sorted(held.get((n, g), []), key=lambda h: (_order(h[2]), h[0], h[1]))
        placed = placement([h[2] for h in items]) or []
        cards.append(Card(nodes[n], g, whole.get((n, g)), tuple(
            Instance(h[0], h[1], p.name, start, p.slices, p.compute) for h, (p, start) in zip(items, placed,
                                                                                              strict=True))))
    layout = PoolLayout(pool, "mig", board.gpu, tuple(cards), refused, short_of_room=frozenset(short_of_room))
    return layout if previous is None else _around(layout, previous, nodes, gpus_per_node, order, rooms, rank)


def _around(layout: PoolLayout, published: Any, nodes: Sequence[str], gpus_per_node: int, order: Sequence[Demand],
            rooms: Rooms | None, rank: dict[int, tuple[Any, ...]]) -> PoolLayout:
    """`layout` (from scratch) or, when every admitted model fits around the last run's, the sticky one."""
    last, warnings = read_previous(layout.pool, published)
    if last is None:
        return replace(layout, warnings=tuple(warnings))
    cards = sticky_cards(nodes, gpus_per_node, order, rooms, last, lambda d: rank[id(d)])
    if cards is not None:
        return replace(layout, cards=cards)
    return replace(layout, warnings=(moved_warning(layout.pool, last, layout.cards, layout.node_configs()),))


def _refusal(pool: str, board: MigBoard, d: Demand, replica: int, keys: list[tuple[int, int]],
             whole: dict[tuple[int, int], str], held: dict[tuple[int, int], list[Any]], nodes: int,
             per_node: int) -> str:
    where = f"node pool {pool} ({nodes} node(s) x {per_node} {board.gpu})"
    if d.profile is None:
        free = sum(1 for k in keys if k not in whole and not held.get(k))
        return (f"model {d.model}: cannot place {d.replicas} replica(s) of {d.gpus} whole GPU(s) on one node in "
                f"{where}: {replica} placed, {free} unused GPU(s) left across nodes after the smaller demands; missing "
                f"{d.replicas - replica} x {d.gpus} whole GPU(s). Add nodes, lower replicas or give it gpuShare mig:…")
    p = d.profile
    free_slices = sum(MEMORY_SLICES - sum(h[2].slices for h in held.get(k, [])) for k in keys if k not in whole)
    missing = d.replicas - replica
    return (f"model {d.model}: cannot place {d.replicas} x MIG {p.name} in {where}: room for {replica} after the "
            f"smaller demands ({free_slices} memory slice(s) left, none at a {p.name} placement); missing {missing} x "
            f"{p.name} = {missing * p.slices} memory slice(s). Add a node (nodeCount and nodes), lower replicas or "
            "use a smaller profile")
