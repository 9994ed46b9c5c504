"""MIG layouts that fill both of a GPU's budgets (8 memory, 7 compute slices): the pattern packer beside
first fit (tkf_infra/plan/layout.py `_pack_patterns`; the gap bench/packing.py measured, docs/performance.md)."""

from __future__ import annotations

from tkf_infra.plan.layout import Demand, PoolLayout, _pack, plan_mig
from tkf_infra.sizing.mig import mig_board


def used_gpus(layout: PoolLayout) -> int:
    return sum(1 for c in layout.cards if c.whole is not None or c.instances)


def test_memory_bound_and_compute_bound_instances_share_a_gpu() -> None:
    """2 x 1g.20gb + 12 x 1g.10gb take 16 memory and 14 compute slices: two full GPUs. First fit by memory
    needs three (2 x 1g.20gb + 4 x 1g.10gb, then 7, then 1); the layout uses two, each 1g.20gb + 6 x 1g.10gb."""
    board = mig_board("H100-80GB")
    assert board is not None
    big, small = board.profile("1g.20gb"), board.profile("1g.10gb")
    demands = [Demand("mem-bound", 2, big), Demand("compute-bound", 12, small)]
    keys = [(0, g) for g in range(4)]
    _, held, failed = _pack(demands, keys)
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
    board = mig_board("H100-80GB")
    assert board is not None
    demands = [Demand("a", 7, board.profile("1g.10gb")), Demand("b", 1, board.profile("7g.80gb")),
               Demand("w", 1, None, 2)]
    layout = plan_mig("p", board, ["n"], 4, demands)
    assert not layout.refused and used_gpus(layout) == 4
    assert [c.whole for c in layout.cards[:2]] == ["w", "w"]
    assert [sorted({i.profile for i in c.instances}) for c in layout.cards[2:]] == [["7g.80gb"], ["1g.10gb"]]
