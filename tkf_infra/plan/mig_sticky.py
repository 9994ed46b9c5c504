"""A MIG pool laid out around the last run's layout: what was placed stays where it is (issue 28, stable).

Why: a node whose mig-parted config changes is re-partitioned by the GPU Operator's mig-manager, which
stops the node's GPU pods first. First fit decreasing of the whole catalog (`tkf_infra.plan.mig_pack`)
puts a new model among the others in size order, so every smaller demand after it is placed again and
one added model re-partitions nodes it never lands on (47-48 of 157 MIG models moved at 300 models of
the packing bench). Given the last run's `gpuLayout` of the pool, each replica of a model still asked
with the same profile keeps its node, GPU and start slice while that is still valid (the node is still
in the pool, the GPU exists, the slices and compute are free, the node still has room for its pod), and
only new or changed replicas are packed, first fit largest first, into what is left. `plan_mig` falls
back to the from-scratch layout when this cannot place everything admitted, and says which models
move and which nodes' configs change (`moved_warning`); a previous layout it cannot read is ignored
with a warning (`read_previous`), never a crash: it comes from state a user may have edited.

Pure: no Pulumi, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tkf_infra.plan.admission import named
from tkf_infra.plan.mig_pack import Rooms, Shape, _order, _per_gpu, _shape, _whole_spot, solve_around
from tkf_infra.plan.pool_layout import Card, Demand, Instance
from tkf_infra.sizing.mig import COMPUTE_SLICES

W_LAYOUT_UNREADABLE = "mig-layout-unreadable"
W_LAYOUT_MOVED = "mig-layout-moved"


@dataclass(frozen=True)
class Previous:
    """The last run's layout of one MIG pool, as read from its `gpuLayout` output."""

    instances: dict[tuple[str, int], tuple[str, int, str, int]] = field(default_factory=dict)
    """(model, replica) → (node, GPU index, profile, start slice)."""
    whole: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    """Model → its whole GPUs (node, GPU index), in the order published."""
    configs: dict[str, str] = field(default_factory=dict)
    """Node → the mig-parted config it was labelled with."""


class _Malformed(ValueError):
    pass


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value or value < 0:
        raise _Malformed(f"{what} is {value!r}, not a whole number")
    return int(value)  # the engine may hand numbers back as floats


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise _Malformed(f"{what} is {value!r}, not a name")
    return value


def read_previous(pool: str, published: Any) -> tuple[Previous | None, list[str]]:
    """The last run's layout of `pool` (its `gpuLayout[pool]`), or None with why when it cannot be read.

    None without a warning when there is none (a first run, a new pool) or the pool was not a MIG pool."""
    if published is None:
        return None, []
    try:
        if not isinstance(published, Mapping):
            raise _Malformed(f"it is a {type(published).__name__}, not a mapping")
        if published.get("kind") != "mig":
            if isinstance(published.get("kind"), str):
                return None, []
            raise _Malformed(f"its kind is {published.get('kind')!r}")
        nodes = published.get("nodes")
        if not isinstance(nodes, Mapping):
            raise _Malformed("it has no `nodes` mapping")
        prev = Previous()
        for node, spec in nodes.items():
            _read_node(prev, _str(node, "a node name"), spec)
        return prev, []
    except _Malformed as exc:
        return None, [named(W_LAYOUT_UNREADABLE, (
            f"nodePool {pool}: the last run's gpuLayout of this pool cannot be read ({exc}); it was ignored and the "
            "pool laid out from scratch, so models placed before may move and their nodes be re-partitioned"))]


def _read_node(prev: Previous, node: str, spec: Any) -> None:
    """One node of a published layout into ``prev``: its mig-parted config, whole GPUs and instances."""
    if not isinstance(spec, Mapping) or not isinstance(spec.get("gpus"), list):
        raise _Malformed(f"node {node} has no `gpus` list")
    if isinstance(spec.get("migConfig"), str):
        prev.configs[node] = spec["migConfig"]
    for gpu in spec["gpus"]:
        if not isinstance(gpu, Mapping):
            raise _Malformed(f"a GPU of node {node} is {gpu!r}")
        index = _int(gpu.get("index"), f"a GPU index of node {node}")
        if gpu.get("whole") is not None:
            prev.whole.setdefault(_str(gpu["whole"], f"node {node} GPU {index} `whole`"), []).append((node, index))
        instances = gpu.get("instances") or []
        if not isinstance(instances, list):
            raise _Malformed(f"node {node} GPU {index} `instances` is not a list")
        for i in instances:
            _read_instance(prev, node, index, i)


def _read_instance(prev: Previous, node: str, index: int, i: Any) -> None:
    where = f"an instance on node {node} GPU {index}"
    if not isinstance(i, Mapping):
        raise _Malformed(f"{where} is {i!r}")
    key = (_str(i.get("model"), f"{where}: model"), _int(i.get("replica"), f"{where}: replica"))
    if key in prev.instances:
        raise _Malformed(f"replica {key[1]} of {key[0]} is placed twice")
    prev.instances[key] = (node, index, _str(i.get("profile"), f"{where}: profile"),
                           _int(i.get("start"), f"{where}: start"))


def _largest(shapes: Sequence[Shape]) -> tuple[Shape, ...]:
    return tuple(sorted(shapes, key=lambda s: (-s[0], -s[1])))


@dataclass
class _Gpu:
    """One GPU as the sticky packing fills it: kept instances at their starts, new ones placed around them."""

    whole: str | None = None
    kept: list[tuple[str, int, Any, int]] = field(default_factory=list)
    """(model, replica, profile, start) kept from the last run."""
    fresh: list[tuple[str, int, Any]] = field(default_factory=list)
    """(model, replica, profile) placed by this run."""
    mask: int = 0
    compute: int = 0

    def empty(self) -> bool:
        return self.whole is None and not self.kept and not self.fresh

    def takes(self, shape: Shape) -> bool:
        """Whether one more new instance of `shape` fits beside the kept and new ones."""
        if self.whole is not None:
            return False
        shapes = _largest([*(_shape(p) for _, _, p in self.fresh), shape])
        used = self.compute + sum(s[1] for s in shapes)
        return used <= COMPUTE_SLICES and solve_around(self.mask, self.compute, shapes) is not None


def sticky_cards(nodes: Sequence[str], gpus_per_node: int, order: Sequence[Demand], rooms: Rooms | None,
                 previous: Previous, rank: Callable[[Demand], Any]) -> tuple[Card, ...] | None:
    """The pool's cards with every still-valid placement of `previous` kept and the rest packed first fit
    (largest first by `rank`); None when some replica of `order` finds no spot (the caller falls back)."""
    keys = [(n, g) for n in range(len(nodes)) for g in range(gpus_per_node)]
    node_index = {name: n for n, name in enumerate(nodes)}
    gpus = {k: _Gpu() for k in keys}
    left = [list(r) for r in rooms] if rooms is not None else None
    ranked = sorted(order, key=rank)

    def room(d: Demand) -> Callable[[int], bool]:
        return lambda n: left is None or (left[n][0] >= d.cpu_millis and left[n][1] >= d.memory_mib)

    def take_room(d: Demand, n: int) -> None:
        if left is not None:
            left[n][0] -= d.cpu_millis
            left[n][1] -= d.memory_mib

    missing: dict[str, list[int]] = {}
    for d in ranked:  # keep what still holds, larger demands first
        if d.profile is None:
            kept = _keep_whole(d, previous, node_index, gpus, gpus_per_node, room(d), take_room)
            missing[d.model] = list(range(len(kept), d.replicas))
            continue
        missing[d.model] = []
        for r in range(d.replicas):
            was = previous.instances.get((d.model, r))
            n = node_index.get(was[0], -1) if was is not None else -1
            gpu = gpus.get((n, was[1])) if was is not None else None
            if was is None or gpu is None or was[2] != d.profile.name or was[3] not in d.profile.starts \
                    or gpu.whole is not None or not room(d)(n):
                missing[d.model].append(r)
                continue
            mask = ((1 << d.profile.slices) - 1) << was[3]
            if gpu.mask & mask or gpu.compute + d.profile.compute > COMPUTE_SLICES:
                missing[d.model].append(r)
                continue
            gpu.kept.append((d.model, r, d.profile, was[3]))
            gpu.mask |= mask
            gpu.compute += d.profile.compute
            take_room(d, n)
    for d in ranked:  # then the rest, first fit largest first, as `mig_pack` places them
        for done, r in enumerate(missing[d.model]):
            if d.profile is None:
                unused = [k for k in keys if gpus[k].empty()]
                spot = _whole_spot(list(range(len(nodes))), unused, d.gpus, room(d))
                if spot is None:
                    return None
                for k in spot:
                    gpus[k].whole = d.model
                take_room(d, spot[0][0])
                continue
            want = min(_per_gpu(d.profile), len(missing[d.model]) - done)
            key = _mig_spot(keys, gpus, _shape(d.profile), room(d), _fills(d, want, left))
            if key is None:
                return None
            gpus[key].fresh.append((d.model, r, d.profile))
            take_room(d, key[0])
    return tuple(_card(nodes[n], g, gpus[(n, g)]) for n, g in keys)


def _keep_whole(d: Demand, previous: Previous, node_index: Mapping[str, int], gpus: dict[tuple[int, int], _Gpu],
                per_node: int, room: Callable[[int], bool], take_room: Callable[[Demand, int], None]) -> list[int]:
    """Keep a whole-GPU model's replicas on the GPUs they had (each `d.gpus` free GPUs of one node); the
    kept replicas' numbers. A replica's GPUs are not published as such: its node's GPUs, in order, by `d.gpus`."""
    by_node: dict[str, list[int]] = {}
    for node, index in previous.whole.get(d.model, []):
        by_node.setdefault(node, []).append(index)
    kept: list[int] = []
    for node, indexes in by_node.items():
        n = node_index.get(node)
        if n is None:
            continue
        for i in range(0, len(indexes) - d.gpus + 1, d.gpus):
            if len(kept) == d.replicas:
                return kept
            group = [(n, g) for g in indexes[i:i + d.gpus]]
            if all(g < per_node and gpus[(n, g)].empty() for _, g in group) and room(n):
                for k in group:
                    gpus[k].whole = d.model
                take_room(d, n)
                kept.append(len(kept))
    return kept


def _fills(d: Demand, want: int, left: list[list[int]] | None) -> Callable[[int], bool]:
    """Whether a node's room holds `want` more of `d`'s pods (`mig_pack`'s rule for taking a fresh GPU)."""

    def fills(n: int) -> bool:
        if left is None:
            return True
        cpu = left[n][0] // d.cpu_millis if d.cpu_millis else want
        mem = left[n][1] // d.memory_mib if d.memory_mib else want
        return min(cpu, mem) >= want

    return fills


def _mig_spot(keys: Sequence[tuple[int, int]], gpus: Mapping[tuple[int, int], _Gpu], shape: Shape,
              room: Callable[[int], bool], fills: Callable[[int], bool]) -> tuple[int, int] | None:
    """The first partitioned GPU the instance fits on, else the first unused GPU of a node with room (the
    first of a node that `fills`, if any): `mig_pack._mig_spot` with kept instances that do not move."""
    first: tuple[int, int] | None = None
    for key in keys:
        gpu = gpus[key]
        if not gpu.empty() and gpu.takes(shape) and room(key[0]):
            return key
    for key in keys:
        if gpus[key].empty() and room(key[0]):
            first = first or key
            if fills(key[0]):
                return key
    return first if first is not None and gpus[first].takes(shape) else None


def _card(node: str, index: int, gpu: _Gpu) -> Card:
    shapes = _largest([_shape(p) for _, _, p in gpu.fresh])
    starts = list(solve_around(gpu.mask, gpu.compute, shapes) or ())
    fresh = sorted(gpu.fresh, key=lambda f: (-f[2].slices, -f[2].compute))  # `_largest`'s order (stable)
    placed = [*gpu.kept, *((m, r, p, starts[i]) for i, (m, r, p) in enumerate(fresh))]
    placed.sort(key=lambda h: (_order(h[2]), h[0], h[1]))
    return Card(node, index, gpu.whole, tuple(Instance(m, r, p.name, s, p.slices, p.compute) for m, r, p, s in placed))


def moved_warning(pool: str, previous: Previous, cards: Sequence[Card], configs: Mapping[str, str]) -> str:
    """Why the pool was laid out from scratch: the models of the last run that move and the nodes whose
    mig-parted config changes (so mig-manager re-partitions them, stopping their GPU pods)."""
    now: dict[tuple[str, int], tuple[str, int, str, int]] = {
        (i.model, i.replica): (c.node, c.index, i.profile, i.start) for c in cards for i in c.instances}
    whole_now: dict[str, list[tuple[str, int]]] = {}
    for c in cards:
        if c.whole:
            whole_now.setdefault(c.whole, []).append((c.node, c.index))
    laid_out = {model for model, _ in now} | set(whole_now)  # models of the last run still placed
    models = {model for (model, r), was in previous.instances.items()
              if model in laid_out and now.get((model, r)) != was}
    models |= {model for model, was in previous.whole.items() if model in laid_out and whole_now.get(model) != was}
    nodes = sorted(n for n, config in configs.items() if previous.configs.get(n) != config)
    return named(W_LAYOUT_MOVED, (
        f"nodePool {pool}: the models admitted do not all fit around the last run's MIG layout, so the pool was laid "
        f"out from scratch: {len(models)} model(s) placed before move ({', '.join(sorted(models)) or 'none'}) and "
        f"{len(nodes)} node(s) get a new MIG config ({', '.join(nodes) or 'none'}), which the GPU Operator's "
        "mig-manager applies by stopping that node's GPU pods. Add a node to the pool to keep the layout"))
