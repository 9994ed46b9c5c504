"""What the engine's per-resource cost follows: property leaves or bytes. Programs of N plain ConfigMaps
through the same engine, Kubernetes provider (render mode) and virtualenv as the fleet, differing only in
each ConfigMap's `data`: K keys (K + 3 property leaves with the name, namespace and kind's fixed fields)
holding B bytes in all. A no-change `preview` and a one-change `up` (one ConfigMap's one key edited) of
each, interleaved, best of `--repeat`, each against the smallest shape in the same round.

Why: `bench/fleet_stack.py` measures the fleet against a floor of 4-leaf ConfigMaps; its workloads carry
~145 leaves and, before the metrics sidecar's source moved to a ConfigMap, ~10 KB. Which of the two a cut
must shrink is this bench's answer (docs/performance.md, "What the engine's time follows").

    source scripts/env.sh && .venv/bin/python bench/engine_leaves.py --count 800
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pulumi import automation as auto  # noqa: E402

from bench.engine_preview import Program, bare_program, load, untimed_up  # noqa: E402
from bench.fleet_stack import timed  # noqa: E402

MAIN = '''
import pulumi, pulumi_kubernetes as k8s
cfg = pulumi.Config()
n, keys, size = cfg.require_int("count"), cfg.require_int("keys"), cfg.require_int("bytes")
salt = cfg.get("salt") or ""
prov = k8s.Provider("render", render_yaml_to_directory=cfg.require("renderDir"))
for i in range(n):
    data = {f"k{j}": "x" * max(1, size // keys) for j in range(keys)}
    if i == 0:
        data["k0"] += salt
    k8s.core.v1.ConfigMap(f"cm-{i}", metadata={"name": f"cm-{i}", "namespace": "bench"}, data=data,
                          opts=pulumi.ResourceOptions(provider=prov))
'''
#: (data keys, data bytes): a floor ConfigMap's size, and a workload's leaves at both of its sizes.
SHAPES = {"1 key, 10 B": (1, 10), "1 key, 5 KB": (1, 5_000), "1 key, 10 KB": (1, 10_000),
          "137 keys, 411 B": (137, 411), "137 keys, 5 KB": (137, 5_000), "137 keys, 10 KB": (137, 10_000)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=800, help="ConfigMaps per program (the 200-model fleet: 811)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    print(f"# start {time.strftime('%H:%M:%S', time.gmtime())} UTC {load()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="tkf-leaves-bench-") as tmpdir:
        tmp = Path(tmpdir)
        programs: dict[str, Program] = {}
        for i, (label, (keys, size)) in enumerate(SHAPES.items()):
            programs[label] = bare_program(tmp, f"shape-{i}", MAIN, {"count": args.count, "keys": keys, "bytes": size})
            untimed_up(programs[label].stack)
        preview: dict[str, float] = {k: float("inf") for k in programs}
        up: dict[str, float] = {k: float("inf") for k in programs}
        for r in range(args.repeat):
            for label, p in programs.items():
                preview[label] = min(preview[label], timed(p.stack.preview)[0])
                p.stack.set_config("tkf-floor:salt", auto.ConfigValue(str(time.time_ns())))
                up[label] = min(up[label], timed(p.stack.up)[0])
            print(f"# round {r + 1} done {load()}", flush=True)
    base = next(iter(SHAPES))
    print(f"\n{args.count} ConfigMaps per program, best of {args.repeat}; ratios against `{base}` in the same run")
    print("| shape | no-change preview (s) | ratio | one-change up (s) | ratio |")
    print("|---|---|---|---|---|")
    for label in SHAPES:
        print(f"| {label} | {preview[label]:.2f} | {preview[label] / preview[base]:.2f} | {up[label]:.2f} | "
              f"{up[label] / up[base]:.2f} |")
    print(f"\n# end {time.strftime('%H:%M:%S', time.gmtime())} UTC {load()}")


if __name__ == "__main__":
    main()
