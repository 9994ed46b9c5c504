"""First fit of a MIG pool's demands onto its GPUs: the placement rule, and the packer `plan_mig` tries
each admission with (`tkf_infra.plan.layout`), which `mig_optimum` also starts from.

Why a module of its own: admission packs the admitted models once per new model, so this runs for every
instance of every trial packing and is written for it: trials re-place only from the first demand where
they differ from the packing at hand (`_Packing.packs`), the spot search walks only GPUs that can take an
instance, and one GPU's fit of one more instance is decided once per set of shapes (`_adds`). Each is the
same first fit as placing every demand from scratch over every GPU, so the layout does not change
(`tests/test_mig_pack.py` compares them on generated catalogs). Pure: no Pulumi, no I/O.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache

from tkf_infra.plan.pool_layout import Demand
from tkf_infra.sizing.mig import COMPUTE_SLICES, MEMORY_SLICES, MigProfile

Shape = tuple[int, int, tuple[int, ...]]
"""What the placement rule sees of an instance: (memory slices, compute slices, allowed starts)."""


@lru_cache(maxsize=4096)
def solve_around(fixed: int, compute: int, shapes: tuple[Shape, ...]) -> tuple[int, ...] | None:
    """Start slices for (memory slices, compute, allowed starts) shapes, in the given order, on a GPU whose
    instances already take the memory slices of the bit mask `fixed` and `compute` compute slices (0, 0: an
    empty GPU; mig_sticky keeps instances where they are); None if they do not all fit."""

    def place(i: int, used: int, comp_used: int) -> tuple[int, ...] | None:
        if i == len(shapes):
            return ()
        size, comp, starts = shapes[i]
        if comp_used + comp > COMPUTE_SLICES:
            return None
        for start in starts:
            mask = ((1 << size) - 1) << start
            if start + size <= MEMORY_SLICES and not used & mask:
                rest = place(i + 1, used | mask, comp_used + comp)
                if rest is not None:
                    return (start, *rest)
        return None

    return place(0, fixed, compute)


def _solve(shapes: tuple[Shape, ...]) -> tuple[int, ...] | None:
    """`solve_around` on an empty GPU."""
    return solve_around(0, 0, shapes)


def _order(profile: MigProfile) -> tuple[int, int, str]:
    return -profile.slices, -profile.compute, profile.name


def placement(profiles: Sequence[MigProfile]) -> list[tuple[MigProfile, int]] | None:
    """A valid placement of these instances on one GPU (largest first, lowest start), else None."""
    ordered = sorted(profiles, key=_order)
    starts = _solve(tuple(_shape(p) for p in ordered))
    return None if starts is None else list(zip(ordered, starts, strict=True))


def _shape(p: MigProfile) -> Shape:
    return p.slices, p.compute, p.starts


@lru_cache(maxsize=4096)
def _adds(shapes: tuple[Shape, ...], shape: Shape) -> bool:
    """Whether one more instance of `shape` fits on a GPU carrying instances of `shapes` (`placement`'s rule).

    By shape rather than profile: `placement` orders instances by memory then compute slices, and profiles
    of one shape have the same starts, so the shapes alone decide; a key of small ints is cheap to hash."""
    return _solve(tuple(sorted((*shapes, shape), key=lambda s: (-s[0], -s[1])))) is not None


_Held = dict[tuple[int, int], list[tuple[str, int, MigProfile]]]
_Used = dict[tuple[int, int], tuple[int, int]]
"""Memory and compute slices the instances on each GPU take (what `_solve` budgets), kept beside `_Held`."""
Rooms = Sequence[tuple[int, int]]
"""Per node of the pool, in order: (CPU millicores, memory MiB) it can give pods."""


Short = list[tuple[int, int, bool]]
"""Per node, when a demand did not fit: (CPU, memory) left and whether its GPUs had a spot for it."""


class _Packing:
    """First fit in progress: the demands placed so far, in order, each one able to be taken back (last first).

    Why: admission packs each new model with every model admitted before it (`plan_mig`), first fit
    decreasing, so the new model lands among the others; the state after a prefix of demands depends on that
    prefix alone, so a trial re-places only from the first demand where it differs from the packing at hand
    (`packs`) instead of from scratch, with the same result. A demand taken back leaves its GPUs' entries
    empty (`[]`, `(0, 0)`, `()`) rather than absent, which every reader treats alike.

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
        self.shapes: dict[tuple[int, int], tuple[Shape, ...]] = {}
        """The shapes of the instances on each GPU, in `held`'s order (what `_adds` is asked with)."""
        self.left = [list(r) for r in rooms] if rooms is not None else None
        self.placed: list[tuple[Demand, list[tuple[int, int]], list[int]]] = []
        """Each demand placed, in order, with the GPUs its replicas took and the node of each replica's pod."""
        self.open = _Ascending()
        """Positions in `keys` of the GPUs carrying instances with a memory and a compute slice free."""
        self.unused = _Ascending(range(len(keys)))
        """Positions in `keys` of the GPUs neither whole nor carrying an instance."""

    def _mark(self, key: tuple[int, int]) -> None:
        """Put `key` in or out of `open` and `unused` after its GPU changed."""
        items = self.held.get(key)
        mem, compute = self.used.get(key, (0, 0))
        self.open.keep(self.index[key], bool(items) and mem < MEMORY_SLICES and compute < COMPUTE_SLICES)
        self.unused.keep(self.index[key], not items and key not in self.whole)

    def spot(self, d: Demand, room: Callable[[int], bool],
             fills: Callable[[int], bool] | None = None) -> list[tuple[int, int]] | None:
        """Where one replica of `d` goes: `gpus` unused GPUs of one node, or one instance (`_mig_spot`)."""
        if d.profile is None:
            return _whole_spot(self.nodes, [self.keys[i] for i in self.unused.items], d.gpus, room)
        return _mig_spot((self.keys[i] for i in self.open.items), (self.keys[i] for i in self.unused.items),
                         self.shapes, self.used, d.profile, room, fills)

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
        left = self.left
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

        per_gpu = _per_gpu(d.profile) if d.profile is not None else 0
        for replica in range(d.replicas):
            # A fresh GPU goes first to a node that can fill it with this demand's pods (as many as a GPU
            # holds, or as are left): a node whose room runs out sooner would leave its last GPU part-used.
            want = min(per_gpu, d.replicas - replica) if d.profile is not None else 0

            def fills(node: int, want: int = want) -> bool:
                return pods_room(node) >= want

            spot = self.spot(d, room, fills if d.profile is not None else None)
            if spot is None:
                failed = replica
                if left is not None and explain:
                    gpu_ok = self.gpu_spots(d)
                    short = [(c, m, n in gpu_ok) for n, (c, m) in enumerate(left)]
                break
            self._take(d, replica, spot)
            pods.append(spot[0][0])
            taken += spot
        if failed is None:
            self.placed.append((d, taken, pods))
            return None, None
        self._give_back(d, taken, pods)  # all or nothing: free what its first replicas took
        return failed, short

    def _take(self, d: Demand, replica: int, spot: list[tuple[int, int]]) -> None:
        """One replica of ``d`` on the GPUs of ``spot``, its pod on their node."""
        for key in spot:
            if d.profile is None:
                self.whole[key] = d.model
            else:
                self.held.setdefault(key, []).append((d.model, replica, d.profile))
                mem, compute = self.used.get(key, (0, 0))
                self.used[key] = (mem + d.profile.slices, compute + d.profile.compute)
                self.shapes[key] = (*self.shapes.get(key, ()), _shape(d.profile))
            self._mark(key)
        if self.left is not None:
            self.left[spot[0][0]][0] -= d.cpu_millis
            self.left[spot[0][0]][1] -= d.memory_mib

    def _give_back(self, d: Demand, taken: list[tuple[int, int]], pods: list[int]) -> None:
        """Every GPU and pod room ``d``'s replicas took (a demand that did not place whole)."""
        for key in taken:
            self.whole.pop(key, None)
            if key in self.held:
                held = self.held[key] = [h for h in self.held[key] if h[0] != d.model]
                self.used[key] = (sum(h[2].slices for h in held), sum(h[2].compute for h in held))
                self.shapes[key] = tuple(_shape(h[2]) for h in held)
            self._mark(key)
        if self.left is not None:
            for node in pods:
                self.left[node][0] += d.cpu_millis
                self.left[node][1] += d.memory_mib

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
                self.shapes[key] = self.shapes[key][:-1]
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


class _Ascending:
    """Positions kept in ascending order, with a set beside them so that a membership that does not change
    (most of them: an instance added to a GPU that stays open) costs no search."""

    __slots__ = ("items", "members")

    def __init__(self, items: Iterable[int] = ()) -> None:
        self.items = sorted(items)
        self.members = set(self.items)

    def keep(self, i: int, inside: bool) -> None:
        """Have `i` among the positions exactly when `inside`."""
        if (i in self.members) == inside:
            return
        if inside:
            insort(self.items, i)
            self.members.add(i)
        else:
            del self.items[bisect_left(self.items, i)]
            self.members.discard(i)


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


def _mig_spot(parted: Iterable[tuple[int, int]], unused: Iterable[tuple[int, int]],
              shapes: dict[tuple[int, int], tuple[Shape, ...]], used: _Used,
              profile: MigProfile, room: Callable[[int], bool],
              fills: Callable[[int], bool] | None = None) -> list[tuple[int, int]] | None:
    """The first partitioned GPU the instance still fits on, else the first unused GPU (of a node with room;
    first of a node that `fills` says can fill it, if any).

    `parted`: in pool order, the GPUs carrying instances that may have room (at least every one with a memory
    and a compute slice free), and `unused` those neither whole nor carrying any; each GPU's slices (`used`)
    are tested before the placement rule (`_adds`, on the `shapes` of its instances), each node's room asked
    once: this runs for every instance of every trial packing."""
    shape = _shape(profile)
    ok: dict[int, bool] = {}

    def fine(node: int) -> bool:
        if node not in ok:
            ok[node] = room(node)
        return ok[node]

    for key in parted:
        mem, compute = used[key]
        if mem + profile.slices > MEMORY_SLICES or compute + profile.compute > COMPUTE_SLICES or not fine(key[0]):
            continue
        if _adds(shapes[key], shape):
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
    return [spot] if spot is not None and _adds((), shape) else None
