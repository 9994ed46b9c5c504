"""The fleet plan's time at fleet scale, in fresh processes (issue 28: "well under a second" at 300 models).

Each run is a new Python process that plans the packing bench's generated catalog (`bench/packing.py`,
its two stacks: MIG and whole pools, and the time-sliced one) with `plan_doc` (validation, sizing,
admission, layouts) twice: the first time is what a `pulumi preview` pays, the second has the
process's caches warm. `--roots` compares checkouts interleaved, run by run, so they share the
machine's load; the load average is printed beside each run, and the process's CPU time beside
the wall time (less bent by other processes on the cores).

    .venv/bin/python bench/plan_time.py                                   # 300 and 600 models, this tree
    git archive <commit> | tar -x -C /tmp/base
    .venv/bin/python bench/plan_time.py --roots /tmp/base,. --repeat 3    # before / after, interleaved
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Run in the child: the root's bench and planner, the seed's catalog, both passes.
CHILD = """
import sys, time
sys.path.insert(0, sys.argv[1])
from bench.packing import generate, plan_doc
docs = generate(int(sys.argv[2]), int(sys.argv[3]))
times = []
for _ in range(2):
    t0, c0 = time.perf_counter(), time.process_time()
    for doc in docs:
        plan_doc(doc)
    times += [time.perf_counter() - t0, time.process_time() - c0]
print(" ".join(f"{t:.3f}" for t in times))
"""


def run(root: Path, size: int, seed: int) -> list[float]:
    """Seconds of one fresh process: first pass wall and CPU, then again wall and CPU."""
    out = subprocess.run([sys.executable, "-c", CHILD, str(root), str(size), str(seed)], check=True,
                         capture_output=True, text=True, cwd=root).stdout.split()
    return [float(x) for x in out]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--sizes", default="300,600", help="catalog sizes (models), comma-separated")
    ap.add_argument("--seed", type=int, default=28)
    ap.add_argument("--repeat", type=int, default=3, help="fresh processes per root and size")
    ap.add_argument("--roots", default=".", help="checkouts to compare, comma-separated (interleaved)")
    args = ap.parse_args(argv)
    roots = [Path(r).resolve() for r in args.roots.split(",")]
    print("| models | run | root | load (1 min) | first s (CPU s) | again s (CPU s) |")
    print("|---|---|---|---|---|---|")
    for size in (int(s) for s in args.sizes.split(",")):
        for i in range(args.repeat):
            for root in roots:
                load = os.getloadavg()[0]
                first, first_cpu, again, again_cpu = run(root, size, args.seed)
                print(f"| {size} | {i + 1} | {root} | {load:.1f} | {first:.2f} ({first_cpu:.2f}) | "
                      f"{again:.2f} ({again_cpu:.2f}) |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
