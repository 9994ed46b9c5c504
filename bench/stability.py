"""How many models one added model moves on the MIG pool, laid out from scratch and around the last layout.

Usage: .venv/bin/python bench/stability.py [--sizes 100,300] [--seed 28]

Per size: the seed's MIG stack of `bench/packing.py` planned once (the "last run"), then again with one
1-replica model added (Qwen2.5-0.5B at each share below; named `a-added`, which sorts before the catalog's
models of its size, and `m<size>-mig`, the generator's next name, which sorts after them: from scratch, ties
are placed by name), from scratch (`previous_layout` None, the plan
before issue 28's stability change) and around the first plan's `gpuLayout` (what the program now passes).
A model moves when any of its instances' or whole GPUs' node, GPU index, profile or start slice differs
from the first plan; a node is re-partitioned when its mig-parted config name differs. GPUs: the MIG
pool's used cards after the addition. Prints a Markdown table (docs/performance.md, "Layout stability").
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.packing import LOCK, MIG_POOL, QWEN05, generate
from tkf_infra.config import validate_catalog
from tkf_infra.plan import plan_fleet
from tkf_infra.plan.pool_layout import PoolLayout
from tkf_infra.program import footprints

SHARES = ("mig:1g.10gb", "auto", "mig:3g.40gb")


def places(layout: PoolLayout) -> dict[str, list[tuple[Any, ...]]]:
    """Model → where each of its instances (replica, node, GPU, profile, start) and whole GPUs are."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    for c in layout.cards:
        if c.whole:
            out.setdefault(c.whole, []).append((c.node, c.index, "whole"))
        for i in c.instances:
            out.setdefault(i.model, []).append((i.replica, c.node, c.index, i.profile, i.start))
    return {m: sorted(v, key=str) for m, v in out.items()}


def plan(doc: dict[str, Any], previous: Any = None) -> PoolLayout:
    catalog = validate_catalog(doc)
    return plan_fleet(catalog, lock=LOCK, footprints=footprints(catalog), previous_layout=previous).layouts[MIG_POOL]


def used(layout: PoolLayout) -> int:
    return sum(1 for c in layout.cards if c.whole or c.instances)


def row(size: int, seed: int, share: str, name: str) -> str:
    doc = generate(size, seed)[0]
    first = plan(doc)
    before = places(first)
    grown = copy.deepcopy(doc)
    grown["models"].append({"name": name, "servedName": name, "replicas": 1, **QWEN05, "nodePool": MIG_POOL,
                            "gpuShare": share, "maxModelLen": 4096, "maxNumSeqs": 16})
    cells = []
    for layout in (plan(grown), plan(grown, {MIG_POOL: first.published()})):
        now = places(layout)
        moved = sum(1 for m, where in before.items() if now.get(m) != where)
        nodes = sum(1 for n, c in layout.node_configs().items() if first.node_configs().get(n) != c)
        cells.append((moved, nodes, used(layout), bool(layout.warnings)))
    (m0, n0, g0, _), (m1, n1, g1, fell) = cells
    return (f"| {size} | {share} `{name}` | {len(before)} | {m0} | {n0} | {m1} | {n1} | {g0} | {g1} "
            f"| {'yes' if fell else 'no'} |")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,300")
    ap.add_argument("--seed", type=int, default=28)
    args = ap.parse_args(argv)
    print("| models | added share | MIG-pool models before | moved, scratch | nodes re-partitioned, scratch "
          "| moved, sticky | nodes re-partitioned, sticky | GPUs scratch | GPUs sticky | fell back |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for size in (int(s) for s in args.sizes.split(",")):
        for share in SHARES:
            for name in ("a-added", f"m{size:03d}-mig"):
                print(row(size, args.seed, share, name), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
