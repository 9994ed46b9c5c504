"""The packing bench (bench/packing.py) at its smallest size: its figures stay consistent, so it cannot rot.

The plan's GPUs and nodes come from the product's planner; the optimum from HiGHS with a short
time limit. Whatever the solver proves, the plan can never beat it, and a catalog that fills one
node exactly is solved to that node.
"""

from __future__ import annotations

import math

from bench.packing import cpu_bound_doc, exact_node_doc, generate, measure, table

LIMIT = 2.0


def test_smallest_size_plan_never_beats_the_bound_and_the_optimum_never_exceeds_the_plan() -> None:
    rows = measure(generate(20, 28), "20", LIMIT)
    assert {r.figs.kind for r in rows} == {"mig", "whole", "time-sliced"}, table(rows)
    for r in rows:
        f = r.figs
        assert f.placed_replicas > 0 and not f.refused, table(rows)
        assert f.plan_gpus >= math.ceil(r.gpus.bound - 1e-6), table(rows)
        assert f.plan_nodes >= math.ceil(r.nodes.bound - 1e-6), table(rows)
        for solved, plan in ((r.gpus, f.plan_gpus), (r.nodes, f.plan_nodes)):
            if solved.optimal:
                assert solved.value is not None and solved.value <= plan, table(rows)
    assert "| 20 | h100-mig | mig |" in table(rows)
    assert all(r.figs.split == 0 and r.figs.overfull == 0 for r in rows if r.figs.kind == "mig"), table(rows)


def test_a_catalog_that_fills_one_node_is_solved_to_that_node() -> None:
    rows = measure([exact_node_doc()], "exact", LIMIT)
    assert [r.figs.kind for r in rows] == ["whole", "mig"], table(rows)
    for r in rows:
        assert r.gpus.optimal and r.gpus.value == 8, table(rows)
        assert r.nodes.optimal and r.nodes.value == 1, table(rows)
        assert (r.figs.plan_gpus, r.figs.plan_nodes) == (8, 1), table(rows)


def test_the_optimum_keeps_each_replicas_cpu_on_the_node_of_its_gpu() -> None:
    """56 x 1g.10gb: one node's GPUs hold them all (7 per GPU), its CPU only 47 (4.01 cores each), so the
    optimum spreads them over two nodes with the same 8 GPUs; the plan can use no fewer nodes."""
    (row,) = measure([cpu_bound_doc()], "cpu", LIMIT)
    assert row.gpus.optimal and row.gpus.value == 8, table([row])
    assert row.nodes.optimal and row.nodes.value == 2, table([row])
    assert row.figs.plan_nodes >= 2 and row.figs.placed_replicas == 56, table([row])
    # The layout puts each instance where its pod's CPU is, and admission counts the pod there (issue 26).
    assert row.figs.split == 0 and row.figs.overfull == 0, table([row])
