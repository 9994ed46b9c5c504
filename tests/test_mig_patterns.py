"""MIG layouts that fill both of a GPU's budgets (8 memory, 7 compute slices): the pattern packer beside
first fit (tkf_infra/plan/mig_optimum.py; the gap bench/packing.py measured, docs/performance.md), with and
without each node's CPU and memory room."""

from __future__ import annotations

from collections import Counter

from tkf_infra.plan.layout import plan_mig
from tkf_infra.plan.mig_optimum import pack_patterns
from tkf_infra.plan.mig_pack import _pack
from tkf_infra.plan.pool_layout import Demand, PoolLayout
from tkf_infra.sizing.mig import MigBoard, mig_board


def used_gpus(layout: PoolLayout) -> int:
    return sum(1 for c in layout.cards if c.whole is not None or c.instances)


def h100() -> MigBoard:
    board = mig_board("H100-80GB")
    assert board is not None
    return board


def test_memory_bound_and_compute_bound_instances_share_a_gpu() -> None:
    """2 x 1g.20gb + 12 x 1g.10gb take 16 memory and 14 compute slices: two full GPUs. First fit by memory
    needs three (2 x 1g.20gb + 4 x 1g.10gb, then 7, then 1); the layout uses two, each 1g.20gb + 6 x 1g.10gb."""
    board = h100()
    big, small = board.profile("1g.20gb"), board.profile("1g.10gb")
    demands = [Demand("mem-bound", 2, big), Demand("compute-bound", 12, small)]
    keys = [(0, g) for g in range(4)]
    _, held, failed, _ = _pack(demands, keys)
    assert not failed and len({k for k, v in held.items() if v}) == 3, "first fit alone takes three"
    layout = plan_mig("p", board, ["n"], 4, demands)
    assert not layout.refused and used_gpus(layout) == 2
    for card in (c for c in layout.cards if c.instances):
        assert sorted(i.profile for i in card.instances) == ["1g.10gb"] * 6 + ["1g.20gb"]
        assert sum(i.slices for i in card.instances) == 8 and sum(i.compute for i in card.instances) == 7
    # Catalog order does not matter: the same layout from the demand given the other way round.
    assert plan_mig("p", board, ["n"], 4, demands[::-1]).cards == layout.cards


def test_whole_gpus_and_full_gpus_are_laid_out_as_before() -> None:
    """A demand first fit already packs tightly: one 7g.80gb GPU, one of 7 x 1g.10gb, whole GPUs on the same node."""
    board = h100()
    demands = [Demand("a", 7, board.profile("1g.10gb")), Demand("b", 1, board.profile("7g.80gb")),
               Demand("w", 1, None, 2)]
    layout = plan_mig("p", board, ["n"], 4, demands)
    assert not layout.refused and used_gpus(layout) == 4
    assert [c.whole for c in layout.cards[:2]] == ["w", "w"]
    assert [sorted({i.profile for i in c.instances}) for c in layout.cards[2:]] == [["7g.80gb"], ["1g.10gb"]]


def test_the_fuller_layout_keeps_each_node_within_its_room() -> None:
    """Two nodes of 2 GPUs, each with CPU for 7 pods of 1 core: the two full GPUs (1g.20gb + 6 x 1g.10gb)
    land one per node, 7 pods each, where first fit (room-aware too) takes three GPUs."""
    board = h100()
    big, small = board.profile("1g.20gb"), board.profile("1g.10gb")
    demands = [Demand("mem-bound", 2, big, cpu_millis=1000, memory_mib=1024),
               Demand("compute-bound", 12, small, cpu_millis=1000, memory_mib=1024)]
    rooms = [(7000, 64 * 1024), (7000, 64 * 1024)]
    keys = [(n, g) for n in range(2) for g in range(2)]
    _, held, failed, _ = _pack(demands, keys, rooms)
    assert not failed and len({k for k, v in held.items() if v}) == 3, "first fit alone takes three"
    layout = plan_mig("p", board, ["n1", "n2"], 2, demands, rooms=rooms)
    assert not layout.refused and used_gpus(layout) == 2
    pods = Counter(c.node for c in layout.cards for _ in c.instances)
    assert pods == {"n1": 7, "n2": 7}
    for card in (c for c in layout.cards if c.instances):
        assert sorted(i.profile for i in card.instances) == ["1g.10gb"] * 6 + ["1g.20gb"]


def test_first_fit_is_kept_when_the_fuller_sets_overrun_the_rooms() -> None:
    """56 x 1g.10gb on two nodes of 8 GPUs whose CPU holds 47 pods each (4.01 cores a pod, as the bench's
    p5 row): GPU by GPU the fullest sets take 9 GPUs (6 x 7 + 5 on the first node, 7 + 2 on the second),
    first fit's room-aware packing 8, so the layout is first fit's; and no node is given more pods than
    its room, in either packer."""
    board = h100()
    small = board.profile("1g.10gb")
    demands = [Demand("m", 56, small, cpu_millis=4010, memory_mib=1024)]
    rooms = [(191450, 2095697), (191450, 2095697)]
    keys = [(n, g) for n in range(2) for g in range(8)]
    by_sets = pack_patterns(demands, keys, rooms)
    assert by_sets is not None
    whole, held = by_sets
    assert not whole and len({k for k, v in held.items() if v}) == 9
    assert all(sum(len(v) for k, v in held.items() if k[0] == n) <= 47 for n in range(2))
    layout = plan_mig("p", board, ["n1", "n2"], 8, demands, rooms=rooms)
    assert not layout.refused and used_gpus(layout) == 8
    assert max(Counter(c.node for c in layout.cards for _ in c.instances).values()) <= 47


def test_the_fuller_packer_gives_up_when_the_rooms_cannot_hold_every_pod() -> None:
    """Rooms for 6 pods per node and 14 pods to place on two nodes: the sets packer places 12 and returns
    None (so plan_mig keeps first fit's refusal, it does not publish a partial layout)."""
    board = h100()
    demands = [Demand("mem-bound", 2, board.profile("1g.20gb"), cpu_millis=1000),
               Demand("compute-bound", 12, board.profile("1g.10gb"), cpu_millis=1000)]
    rooms = [(6000, 1024), (6000, 1024)]
    assert pack_patterns(demands, [(n, g) for n in range(2) for g in range(2)], rooms) is None
    layout = plan_mig("p", board, ["n1", "n2"], 2, demands, rooms=rooms)
    assert "compute-bound" in layout.refused and "compute-bound" in layout.short_of_room
    assert all(i.model != "compute-bound" for c in layout.cards for i in c.instances)
