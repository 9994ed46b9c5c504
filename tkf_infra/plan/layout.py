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
so reordering the catalog yields the same layout and nodes are not re-partitioned. An overfull
catalog refuses new models before those the last run deployed, then its lowest priority, then its
largest asks (models are admitted smallest first). Pure: no Pulumi, no I/O.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import Any

from tkf_infra.plan.mig_room import room_refusal
from tkf_infra.plan.pool_layout import Card, Demand, Instance, PoolLayout
from tkf_infra.sizing.mig import COMPUTE_SLICES, MEMORY_SLICES, MigBoard, MigProfile


@lru_cache(maxsize=4096)
def _solve(shapes: tuple[tuple[int, int, tuple[int, ...]], ...]) -> tuple[int, ...] | None:
    """Start slices for (memory slices, compute, allowed starts) shapes, in the given order; None if none fit."""

    def place(i: int, used: int, compute: int) -> tuple[int, ...] | None:
        if i == len(shapes):
            return ()
        size, comp, starts = shapes[i]
        if compute + comp > COMPUTE_SLICES:
            return None
        for start in starts:
            mask = ((1 << size) - 1) << start
            if start + size <= MEMORY_SLICES and not used & mask:
                rest = place(i + 1, used | mask, compute + comp)
                if rest is not None:
                    return (start, *rest)
        return None

    return place(0, 0, 0)


def _order(profile: MigProfile) -> tuple[int, int, str]:
    return -profile.slices, -profile.compute, profile.name


def placement(profiles: Sequence[MigProfile]) -> list[tuple[MigProfile, int]] | None:
    """A valid placement of these instances on one GPU (largest first, lowest start), else None."""
    ordered = sorted(profiles, key=_order)
    starts = _solve(tuple((p.slices, p.compute, p.starts) for p in ordered))
    return None if starts is None else list(zip(ordered, starts, strict=True))


def _footprint(d: Demand) -> int:
    """Memory slices a demand takes in all (a whole GPU: all of them)."""
    return d.replicas * (d.profile.slices if d.profile is not None else MEMORY_SLICES * d.gpus)


def _largest_first(d: Demand) -> tuple[Any, ...]:
    return (d.profile is not None, -d.gpus, *(_order(d.profile) if d.profile else (0, 0, "")), d.model)


_Held = dict[tuple[int, int], list[tuple[str, int, MigProfile]]]
_Used = dict[tuple[int, int], tuple[int, int]]
"""Memory and compute slices the instances on each GPU take (what `_solve` budgets), kept beside `_Held`."""
Rooms = Sequence[tuple[int, int]]
"""Per node of the pool, in order: (CPU millicores, memory MiB) it can give pods."""


Short = list[tuple[int, int, bool]]
"""Per node, when a demand did not fit: (CPU, memory) left and whether its GPUs had a spot for it."""


class _Packing:
    """First fit in progress: the demands placed so far, in order, each one able to be taken back (last first).

    Why: admission tries each new model on the packing of every model admitted before it (`plan_mig`), and
    that packing first fit decreasing puts the new model among the others; the state after a prefix of demands
    depends on that prefix alone, so a trial re-places only from the first demand where it differs from the
    packing at hand (`packs`) instead of from scratch, with the same result. A demand taken back leaves its
    GPUs' entries empty (`[]`, `(0, 0)`) rather than absent, which every reader treats alike.

    The spot searches walk only the GPUs that can matter, kept in `keys` order as placements change: those
    carrying instances with a memory and a compute slice still free (`open`; every profile takes at least one
    of each) and the unused ones (`unused`), instead of every GPU of the pool, most of them full."""

    def __init__(self, keys: list[tuple[int, int]], rooms: Rooms | None = None) -> None:
        self.keys = keys
        self.nodes = list(dict.fromkeys(n for n, _ in keys))
        self.index = {k: i for i, k in enumerate(keys)}
        self.whole: dict[tuple[int, int], str] = {}
        self.held: _Held = {}
        self.used: _Used = {}
        self.left = [list(r) for r in rooms] if rooms is not None else None
        self.placed: list[tuple[Demand, list[tuple[int, int]], list[int]]] = []
        """Each demand placed, in order, with the GPUs its replicas took and the node of each replica's pod."""
        self.open: list[int] = []
        """Positions in `keys` of the GPUs carrying instances with a memory and a compute slice free, ascending."""
        self.unused: list[int] = list(range(len(keys)))
        """Positions in `keys` of the GPUs neither whole nor carrying an instance, ascending."""

    def _mark(self, key: tuple[int, int]) -> None:
        """Put `key` in or out of `open` and `unused` after its GPU changed."""
        items = self.held.get(key)
        mem, compute = self.used.get(key, (0, 0))
        _member(self.open, self.index[key], bool(items) and mem < MEMORY_SLICES and compute < COMPUTE_SLICES)
        _member(self.unused, self.index[key], not items and key not in self.whole)

    def spot(self, d: Demand, room: Callable[[int], bool],
             fills: Callable[[int], bool] | None = None) -> list[tuple[int, int]] | None:
        """Where one replica of `d` goes: `gpus` unused GPUs of one node, or one instance (`_mig_spot`)."""
        if d.profile is None:
            return _whole_spot(self.nodes, [self.keys[i] for i in self.unused], d.gpus, room)
        return _mig_spot((self.keys[i] for i in self.open), (self.keys[i] for i in self.unused), self.held,
                         self.used, d.profile, room, fills)

    def gpu_spots(self, d: Demand) -> set[int]:
        """The nodes whose GPUs could still take one replica of `d`, whatever their CPU and memory."""
        out: set[int] = set()
        for n in self.nodes:
            def only(m: int, n: int = n) -> bool:
                return m == n

            if self.spot(d, only) is not None:
                out.add(n)
        return out

    def place(self, d: Demand, explain: bool = True) -> tuple[int | None, Short | None]:
        """Place all replicas of `d`, or none (first fit). None when placed; else how many of its replicas
        did, and (with rooms and `explain`) each node's room and GPU spot when it failed."""
        whole, held, used, left = self.whole, self.held, self.used, self.left
        taken: list[tuple[int, int]] = []
        pods: list[int] = []  # the node of each replica's pod
        failed: int | None = None
        short: Short | None = None

        def room(node: int) -> bool:
            return left is None or (left[node][0] >= d.cpu_millis and left[node][1] >= d.memory_mib)

        def pods_room(node: int) -> int:
            """How many more of this demand's pods the node's CPU and memory hold."""
            if left is None:
                return d.replicas
            return min(left[node][0] // d.cpu_millis if d.cpu_millis else d.replicas,
                       left[node][1] // d.memory_mib if d.memory_mib else d.replicas)

        for replica in range(d.replicas):
            # A fresh GPU goes first to a node that can fill it with this demand's pods (as many as a GPU
            # holds, or as are left): a node whose room runs out sooner would leave its last GPU part-used.
            want = min(_per_gpu(d.profile), d.replicas - replica) if d.profile is not None else 0

            def fills(node: int, want: int = want) -> bool:
                return pods_room(node) >= want

            spot = self.spot(d, room, fills if d.profile is not None else None)
            if spot is None:
                failed = replica
                if left is not None and explain:
                    gpu_ok = self.gpu_spots(d)
                    short = [(c, m, n in gpu_ok) for n, (c, m) in enumerate(left)]
                break
            for key in spot:
                if d.profile is None:
                    whole[key] = d.model
                else:
                    held.setdefault(key, []).append((d.model, replica, d.profile))
                    mem, compute = used.get(key, (0, 0))
                    used[key] = (mem + d.profile.slices, compute + d.profile.compute)
                self._mark(key)
            if left is not None:
                left[spot[0][0]][0] -= d.cpu_millis
                left[spot[0][0]][1] -= d.memory_mib
            pods.append(spot[0][0])
            taken += spot
        if failed is None:
            self.placed.append((d, taken, pods))
            return None, None
        for key in taken:  # all or nothing: free what its first replicas took
            whole.pop(key, None)
            if key in held:
                held[key] = [h for h in held[key] if h[0] != d.model]
                used[key] = (sum(h[2].slices for h in held[key]), sum(h[2].compute for h in held[key]))
            self._mark(key)
        for node in pods:
            if left is not None:
                left[node][0] += d.cpu_millis
                left[node][1] += d.memory_mib
        return failed, short

    def undo(self) -> None:
        """Take back the last demand placed."""
        d, taken, pods = self.placed.pop()
        for key in reversed(taken):
            if d.profile is None:
                del self.whole[key]
            else:
                self.held[key].pop()
                mem, compute = self.used[key]
                self.used[key] = (mem - d.profile.slices, compute - d.profile.compute)
            self._mark(key)
        if self.left is not None:
            for node in pods:
                self.left[node][0] += d.cpu_millis
                self.left[node][1] += d.memory_mib

    def packs(self, order: Sequence[Demand]) -> bool:
        """Whether first fit places every demand of `order` (as `_pack` would find): kept from the packing at
        hand up to the first demand where the two differ, re-placed from there, stopped at the first failure.
        Afterwards the packing holds `order` (when True) or its prefix before the demand that failed."""
        same = 0
        for (done, _, _), d in zip(self.placed, order, strict=False):
            if done is not d:
                break
            same += 1
        while len(self.placed) > same:
            self.undo()
        return all(self.place(d, explain=False)[0] is None for d in order[same:])


def _pack(order: Sequence[Demand], keys: list[tuple[int, int]],
          rooms: Rooms | None = None) -> tuple[dict[tuple[int, int], str], _Held, dict[str, int], dict[str, Short]]:
    """Place the demands in this order (first fit, all replicas of a model or none): whole GPUs, instances,
    and for each model that did not fit, how many of its replicas did. With `rooms`, a replica goes only
    to a node that still has its pod's CPU and memory; for a model that did not fit, each node's
    (CPU, memory) left and whether its GPUs had a spot, when it failed."""
    packing = _Packing(keys, rooms)
    failed: dict[str, int] = {}
    short: dict[str, Short] = {}
    for d in order:
        replica, nodes = packing.place(d)
        if replica is not None:
            failed[d.model] = replica
            if nodes is not None:
                short[d.model] = nodes
    return packing.whole, packing.held, failed, short


def plan_mig(pool: str, board: MigBoard, nodes: Sequence[str], gpus_per_node: int, demands: Sequence[Demand],
             rooms: Rooms | None = None, rooms_from: str = "") -> PoolLayout:
    """Pack the demands into the pool's GPUs (see module docstring); refuse what cannot be placed.

    Models are admitted deployed ones first, then by priority, then smallest first (so an overfull
    catalog refuses its largest asks, not many small ones) and packed largest first (first-fit
    decreasing), or in admission order when that packs and largest first does not; then laid out by
    `mig_optimum` instead when that uses fewer GPUs. `rooms`: each node's CPU and memory (None: unchecked),
    read from `rooms_from`."""
    keys = [(n, g) for n in range(len(nodes)) for g in range(gpus_per_node)]
    order: list[Demand] = []
    refused: dict[str, str] = {}
    short_of_room: set[str] = set()
    # Trials re-place only from where they differ from the last one tried (`_Packing.packs`): the same answers
    # as packing each from scratch, without re-placing, for every new model, all those admitted before it.
    packing, gpus_only = _Packing(keys, rooms), _Packing(keys)
    for d in sorted(demands, key=lambda d: (not d.held, -d.priority, _footprint(d), d.model)):
        if d.replicas <= 0:
            continue
        trials = (sorted([*order, d], key=_largest_first), [*order, d])
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
    from tkf_infra.plan.mig_optimum import fewest_gpus  # it builds on this module's packer

    whole, held = fewest_gpus(order, keys, rooms, *_pack(order, keys, rooms)[:2])
    cards = []
    for n, g in keys:
        items = sorted(held.get((n, g), []), key=lambda h: (_order(h[2]), h[0], h[1]))
        placed = placement([h[2] for h in items]) or []
        cards.append(Card(nodes[n], g, whole.get((n, g)), tuple(
            Instance(h[0], h[1], p.name, start, p.slices, p.compute) for h, (p, start) in zip(items, placed,
                                                                                              strict=True))))
    return PoolLayout(pool, "mig", board.gpu, tuple(cards), refused, short_of_room=frozenset(short_of_room))


def _member(positions: list[int], i: int, inside: bool) -> None:
    """Keep `i` in the ascending list `positions` exactly when `inside`."""
    at = bisect_left(positions, i)
    there = at < len(positions) and positions[at] == i
    if inside and not there:
        positions.insert(at, i)
    elif there and not inside:
        del positions[at]


def _whole_spot(nodes: Sequence[int], unused: Sequence[tuple[int, int]], gpus: int,
                room: Callable[[int], bool]) -> list[tuple[int, int]] | None:
    """The first `gpus` unused GPUs (in pool order) of the first node with room that has that many."""
    for node in nodes:
        if not room(node):
            continue
        free = [k for k in unused if k[0] == node]
        if len(free) >= gpus:
            return free[:gpus]
    return None


@lru_cache(maxsize=256)
def _per_gpu(profile: MigProfile) -> int:
    """How many instances of one profile a GPU holds (placement rules, both slice budgets)."""
    k = 0
    while k < MEMORY_SLICES and placement([profile] * (k + 1)) is not None:
        k += 1
    return max(k, 1)


def _mig_spot(parted: Iterable[tuple[int, int]], unused: Iterable[tuple[int, int]], held: _Held, used: _Used,
              profile: MigProfile, room: Callable[[int], bool],
              fills: Callable[[int], bool] | None = None) -> list[tuple[int, int]] | None:
    """The first partitioned GPU the instance still fits on, else the first unused GPU (of a node with room;
    first of a node that `fills` says can fill it, if any).

    `parted`: in pool order, the GPUs carrying instances that may have room (at least every one with a memory
    and a compute slice free), and `unused` those neither whole nor carrying any; each GPU's slices (`used`)
    are tested before `_solve`'s search, each node's room asked once: this runs for every instance of every
    trial packing."""
    ok: dict[int, bool] = {}

    def fine(node: int) -> bool:
        if node not in ok:
            ok[node] = room(node)
        return ok[node]

    for key in parted:
        mem, compute = used[key]
        if mem + profile.slices > MEMORY_SLICES or compute + profile.compute > COMPUTE_SLICES or not fine(key[0]):
            continue
        if placement([*(h[2] for h in held[key]), profile]) is not None:
            return [key]
    first: tuple[int, int] | None = None  # the first unused GPU of a node with room
    filled: tuple[int, int] | None = None  # ... of a node that `fills` says can fill it
    full: dict[int, bool] = {}
    for key in unused:
        if not fine(key[0]):
            continue
        first = first or key
        if fills is None:
            filled = key
            break
        if key[0] not in full:
            full[key[0]] = fills(key[0])
        if full[key[0]]:
            filled = key
            break
    spot = filled or first
    return [spot] if spot is not None and placement([profile]) is not None else None


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
