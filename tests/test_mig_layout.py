"""The MIG table and the layout planner: NVIDIA's geometries place, the planner's layouts are valid.

Why property tests: a layout that overlaps two instances, or puts more on a GPU than it has, would
make mig-manager fail on the node (the GPU is then unusable until someone fixes the label) — for
any catalog, not the few a hand-written test thinks of. The planner is also checked against NVIDIA's
own configs (the GPU Operator's default mig-parted config, tests/data/mig) so the placement rules
are NVML's, not ours.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tkf_infra.plan.layout import placement, plan_mig
from tkf_infra.plan.pool_layout import Demand, PoolLayout
from tkf_infra.plan.time_slicing import SliceDemand, prove_time_slicing
from tkf_infra.sizing.gpus import find_gpu, lookup_gpu
from tkf_infra.sizing.mig import BOARDS, COMPUTE_SLICES, MEMORY_SLICES, MIG_DERIVED_FRACTION, mig_board, mig_gpu

DEFAULT_CONFIG = Path(__file__).parent / "data" / "mig" / "gpu-operator-v26.7.0-default-config.yaml"
# PCI device-filter groups of the default config → our boards (the config's comments name them).
FILTER_BOARDS = {
    frozenset({"0x233010DE", "0x233110DE", "0x232210DE", "0x20B210DE", "0x20B510DE", "0x20F310DE", "0x20F510DE",
               "0x232410DE"}): ("H100-80GB", "H100-PCIe", "H800", "A100-80GB", "A800-80GB"),
    frozenset({"0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"}): ("A100-40GB",),
    frozenset({"0x233510DE", "0x233B10DE"}): ("H200", "H200-NVL"),
    frozenset({"0x232110DE", "0x233A10DE"}): ("H100-NVL",),
    frozenset({"0x290110DE"}): ("B200",),
}


def default_geometries() -> list[tuple[str, str, dict[str, int]]]:
    """(config, board, geometry) for every spec of NVIDIA's default config that names one of our boards."""
    doc = yaml.safe_load(DEFAULT_CONFIG.read_text())
    out = []
    for name, specs in doc["mig-configs"].items():
        for spec in specs:
            geometry = spec.get("mig-devices") or {}
            if not spec["mig-enabled"] or not geometry or any("+" in p or "-" in p for p in geometry):
                continue  # media-extension / graphics variants are not in our table
            flt = spec.get("device-filter")
            if flt is not None:
                ids = frozenset([flt] if isinstance(flt, str) else flt)
                boards = next((b for group, b in FILTER_BOARDS.items() if ids <= group), ())
            else:  # no filter: every board that has each profile
                boards = tuple(b.gpu for b in BOARDS if all(b.profile(p) for p in geometry))
            out += [(name, board, geometry) for board in boards]
    return out


GEOMETRIES = default_geometries()


def test_the_default_config_covers_every_board_and_profile_of_the_table() -> None:
    names = {p for _, _, g in GEOMETRIES for p in g}
    assert {b for _, b, _ in GEOMETRIES} == {b.gpu for b in BOARDS}
    for board in BOARDS:  # our profile names are NVIDIA's
        assert {p.name for p in board.profiles} <= names, board.gpu


@pytest.mark.parametrize(("config", "board", "geometry"), GEOMETRIES,
                         ids=[f"{c}-{b}" for c, b, _ in GEOMETRIES])
def test_every_nvidia_geometry_places_on_its_board(config: str, board: str, geometry: dict[str, int]) -> None:
    table = mig_board(board)
    assert table is not None
    profiles = [table.profile(p) for p, n in geometry.items() for _ in range(n)]
    assert all(profiles), (config, board, geometry)
    assert placement([p for p in profiles if p is not None]) is not None, (config, board, geometry)


@pytest.mark.parametrize(("geometry", "valid"), [
    # MIG user guide, "Getting Started with MIG" (A100-40GB): 3-2-1-1 and 2-1-1-1-1-1 are created there.
    ({"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}, True),
    ({"2g.10gb": 1, "1g.5gb": 5}, True),
    ({"4g.20gb": 1, "3g.20gb": 1}, True),
    ({"3g.20gb": 1, "2g.10gb": 2}, True),   # the 3g goes to slice 4, the 2g's to 0 and 2
    ({"1g.5gb": 8}, False),                 # seven 1g placements: {0..6}
    ({"4g.20gb": 2}, False),                # a 4g only at 0
    ({"3g.20gb": 1, "2g.10gb": 1, "1g.10gb": 2}, False),  # 4 + 2 + 2 + 2 memory slices
    ({"1g.10gb": 5}, False),                # 1g.10gb takes two memory slices: at most 4
    ({"7g.40gb": 1, "1g.5gb": 1}, False),
])
def test_placement_rules_match_the_mig_user_guide(geometry: dict[str, int], valid: bool) -> None:
    board = mig_board("A100-40GB")
    assert board is not None
    profiles = [board.profile(p) for p, n in geometry.items() for _ in range(n)]
    assert (placement([p for p in profiles if p]) is not None) is valid


def test_profile_memory_is_conservative_and_never_above_the_board() -> None:
    measured = [p for b in BOARDS for p in b.profiles if p.measured]
    assert measured, "the table must carry public -lgip figures"
    for p in measured:  # the derivation is below every measured profile
        assert p.nominal_gb * MIG_DERIVED_FRACTION <= p.memory_gib + 1e-9, p
    for board in BOARDS:
        gpu = find_gpu(board.gpu)
        assert gpu is not None, board.gpu
        by_slices: dict[int, set[float]] = {}
        for p in board.profiles:
            assert mig_gpu(gpu, p).memory_gib <= gpu.memory_gib
            by_slices.setdefault(p.slices, set()).add(p.memory_gib)
        assert all(len(v) == 1 for v in by_slices.values()), board.gpu  # same memory slices, same memory
        sizes = [p.memory_gib for p in sorted(board.profiles, key=lambda p: p.slices)]
        assert sizes == sorted(sizes)


def test_a_mig_device_is_sized_as_one_gpu_with_the_instance_memory() -> None:
    h100 = lookup_gpu("H100-80GB")
    board = mig_board(h100)
    assert board is not None and [p.name for p in board.by_size()] == [
        "1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
    device = mig_gpu(h100, board.by_size()[1])
    assert device.memory_gib == 19.50 and device.name == "H100-80GB-MIG-1g.20gb" and not device.shared
    assert device.memory_gib < h100.memory_gib and mig_board("L40S") is None


# ------------------------------------------------------------------------------------------------
# The planner, for any demand
# ------------------------------------------------------------------------------------------------

BOARD_NAMES = [b.gpu for b in BOARDS]


@st.composite
def mig_pools(draw: st.DrawFn) -> tuple[Any, list[str], int, list[Demand]]:
    board = mig_board(draw(st.sampled_from(BOARD_NAMES)))
    assert board is not None
    nodes = [f"node-{i}" for i in range(draw(st.integers(1, 3)))]
    per_node = draw(st.integers(1, 8))
    demands = []
    for i in range(draw(st.integers(0, 12))):
        if draw(st.integers(0, 5)) == 0:
            demands.append(Demand(f"whole-{i}", draw(st.integers(1, 2)), None, draw(st.sampled_from([1, 2, 4]))))
        else:
            demands.append(Demand(f"m-{i}", draw(st.integers(1, 4)), draw(st.sampled_from(board.profiles))))
    return board, nodes, per_node, demands


def check_layout(layout: PoolLayout, demands: list[Demand], per_node: int, nodes: list[str]) -> None:
    assert len(layout.cards) == per_node * len(nodes)
    for card in layout.cards:
        used = 0
        assert not (card.whole and card.instances), "a whole GPU has MIG off"
        for inst in card.instances:
            profile = next(d.profile for d in demands if d.model == inst.model)
            assert profile is not None and inst.profile == profile.name  # the model's own profile
            assert inst.start in profile.starts and inst.start + inst.slices <= MEMORY_SLICES
            mask = ((1 << inst.slices) - 1) << inst.start
            assert not used & mask, f"instances overlap on {card}"
            used |= mask
        assert sum(i.compute for i in card.instances) <= COMPUTE_SLICES
        assert sum(i.slices for i in card.instances) <= MEMORY_SLICES
    for d in demands:
        held = [i for c in layout.cards for i in c.instances if i.model == d.model]
        whole = [c for c in layout.cards if c.whole == d.model]
        if d.model in layout.refused:
            assert not held and not whole, "a refused model holds nothing"
            assert "missing" in layout.refused[d.model]
        elif d.profile is not None:
            assert sorted(i.replica for i in held) == list(range(d.replicas))
        else:
            assert len(whole) == d.replicas * d.gpus
            per_replica_nodes = Counter(c.node for c in whole)
            assert all(n % d.gpus == 0 for n in per_replica_nodes.values())  # a replica's GPUs share a node


@settings(max_examples=300, deadline=None)
@given(mig_pools(), st.randoms(use_true_random=False))
def test_layouts_never_overlap_never_overflow_respect_profiles_and_ignore_catalog_order(
        pool: tuple[Any, list[str], int, list[Demand]], rnd: random.Random) -> None:
    board, nodes, per_node, demands = pool
    layout = plan_mig("p", board, nodes, per_node, demands)
    check_layout(layout, demands, per_node, nodes)
    shuffled = list(demands)
    rnd.shuffle(shuffled)
    assert plan_mig("p", board, nodes, per_node, shuffled) == layout  # a reordered catalog: the same layout


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(BOARD_NAMES), st.integers(1, 16), st.integers(1, 8))
def test_uniform_demand_that_fits_the_slices_is_never_refused(board_name: str, count: int, gpus: int) -> None:
    board = mig_board(board_name)
    assert board is not None
    for profile in board.profiles:
        per_gpu = len(profile.starts)  # one profile alone: one instance per allowed placement
        layout = plan_mig("p", board, ["n"], gpus, [Demand("m", count, profile)])
        assert ("m" in layout.refused) is (count > per_gpu * gpus), (profile, count, gpus)


def test_a_refusal_names_the_model_and_the_missing_slices() -> None:
    board = mig_board("H100-80GB")
    assert board is not None
    big = board.profile("3g.40gb")
    small = board.profile("1g.10gb")
    layout = plan_mig("h100", board, ["n1"], 1, [Demand("a", 2, big), Demand("b", 2, small)])
    assert set(layout.refused) == {"a"}  # the larger ask: 2 x 3g.40gb does not fit beside 2 x 1g.10gb
    assert "model a: cannot place 2 x MIG 3g.40gb in node pool h100 (1 node(s) x 1 H100-80GB): room for 1" \
        in layout.refused["a"]
    assert "missing 1 x 3g.40gb = 4 memory slice(s)" in layout.refused["a"]


def test_mig_parted_configs_group_equal_gpus_and_name_configs_by_geometry() -> None:
    board = mig_board("H100-80GB")
    assert board is not None
    one = board.profile("1g.10gb")
    layout = plan_mig("h100", board, ["n1", "n2"], 2, [Demand("a", 14, one), Demand("w", 1, None, 2)])
    configs = layout.mig_parted_configs()
    names = layout.node_configs()
    assert names["n1"] != names["n2"]  # whole GPUs first (n1), then 2 x 7 x 1g.10gb (n2)
    assert configs[names["n1"]] == [{"devices": [0, 1], "mig-enabled": False}]
    assert configs[names["n2"]] == [{"devices": [0, 1], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]
    again = plan_mig("h100", board, ["n1", "n2"], 2, [Demand("w", 1, None, 2), Demand("a", 14, one)])
    assert again.node_configs() == names  # unchanged geometry, unchanged label: no re-partitioning


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(1, 6)), max_size=10), st.integers(2, 8),
       st.integers(1, 16), st.randoms(use_true_random=False))
def test_time_slicing_admits_only_what_any_n_pods_on_one_gpu_can_hold(
        asks: list[tuple[int, int]], n: int, gpus: int, rnd: random.Random) -> None:
    total = 79.19
    demands = [SliceDemand(f"m{i}", pods, min(k, n) * total / n) for i, (k, pods) in enumerate(asks)]
    layout = prove_time_slicing("p", "H100-80GB", n, gpus, total, demands)
    admitted = sorted((d.footprint_gib for d in demands if d.model not in layout.refused
                       for _ in range(d.pods)), reverse=True)
    assert sum(admitted[:n]) <= total + 1e-6 and len(admitted) <= n * gpus
    for d in demands:  # a refused model would have broken the proof on its own or with the admitted
        if d.model in layout.refused:
            assert "may share one H100-80GB" in layout.refused[d.model]
    rnd.shuffle(demands)
    assert prove_time_slicing("p", "H100-80GB", n, gpus, total, demands) == layout
