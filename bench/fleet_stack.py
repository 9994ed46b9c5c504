"""The fleet stack of a split environment (docs/stacks.md) through the real engine, against the engine's
floor with the same resource count: a no-change `preview` and a one-model-change `up`, at 2, 50 and 200
models, interleaved in one run (best of `--repeat`), so machine noise hits all alike.

Each size is an environment of its own: `<env>-platform` (applied once, before the timed runs) and the
fleet `<env>` (applied once, then timed). The floor is `bench/engine_preview.py`'s: a program of plain
ConfigMaps through the same engine, Kubernetes provider (render mode) and virtualenv, with as many
resources as the fleet stack holds; its "one change" edits one ConfigMap. `--platform` keeps the dev
platform's charts in the platform stack (about 150 resources, minutes to apply): the fleet's figures
should not move, which is the point of the split.

`--trace` adds, after the timed rounds, one traced no-change preview and one traced one-change `up` of
each program (not timed: tracing is not free), and prints where each one's time went from the engine's
OpenTelemetry spans (`bench/engine_preview.py`'s `breakdown`; docs/performance.md reads the columns).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pulumi import automation as auto  # noqa: E402

from bench.catalogs import dev_stack_config, generated_models  # noqa: E402
from bench.engine_preview import FLOOR_OVERHEAD, Program, _workspace, floor_program, load, traced_preview  # noqa: E402
from tkf_infra.ops.stacks import copy_project  # noqa: E402


def fleet_env(tmp: Path, n: int, platform: bool) -> tuple[Program, auto.Stack, Path]:
    """Environment `f<n>`: its platform applied, its fleet of `n` generated models applied once."""
    env_name = f"f{n}"
    project = copy_project(tmp / env_name)
    doc = dev_stack_config(platform)
    doc["config"]["tkf-infra:layer"] = "fleet"
    doc["config"]["tkf-infra:models"] = generated_models(n)
    doc["config"]["tkf-infra:nodePools"][0]["nodeCount"] = n  # a node per model: every model is admitted
    doc["config"]["tkf-infra:cluster"]["renderDir"] = str(tmp / f"rendered-{env_name}")
    path = project / f"Pulumi.{env_name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    env, opts = _workspace(project, tmp / f"state-{env_name}")
    plat = auto.create_stack(f"{env_name}-platform", work_dir=str(project), opts=opts)
    plat.up()
    fleet = auto.create_stack(env_name, work_dir=str(project), opts=opts)
    fleet.up()
    return Program(f"fleet-{n}", fleet, env), plat, path


def toggle_model(path: Path) -> None:
    """One catalog edit: the first model's maxNumSeqs between 8 and 4."""
    doc = yaml.safe_load(path.read_text())
    first = doc["config"]["tkf-infra:models"][0]
    first["maxNumSeqs"] = 4 if first.get("maxNumSeqs", 8) == 8 else 8
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def toggle_configmap(p: Program) -> None:
    p.stack.set_config("tkf-floor:salt", auto.ConfigValue(str(time.time_ns())))


FLOOR_SALTED = '''
import pulumi, pulumi_kubernetes as k8s
cfg = pulumi.Config()
n = cfg.require_int("count")
prov = k8s.Provider("render", render_yaml_to_directory=cfg.require("renderDir"))
for i in range(n):
    data = {"i": str(i), **({"salt": cfg.get("salt") or ""} if i == 0 else {})}
    k8s.core.v1.ConfigMap(f"cm-{i}", metadata={"name": f"cm-{i}", "namespace": "bench"}, data=data,
                          opts=pulumi.ResourceOptions(provider=prov))
'''


def timed(run: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = run()
    return time.perf_counter() - started, result


PHASES = ("total", "startup", "imports_plan", "registration", "k8s_provider", "dynamic_provider", "stack_reads",
          "state", "engine_logs", "shutdown")


def traced_phases(tmp: Path, envs: dict[int, tuple[Program, auto.Stack, Path]],
                  floors: dict[int, Program]) -> list[tuple[int, str, dict[str, float]]]:
    """One traced no-change preview and one traced one-change `up` (as the Automation API runs it) of each
    fleet and floor, broken down by phase."""
    up = ("up", "--yes", "--skip-preview")
    out = []
    for n, (fleet, _, path) in envs.items():
        floor = floors[n]
        out.append((n, "fleet preview", traced_preview(fleet, tmp / "trace.json")))
        out.append((n, "floor preview", traced_preview(floor, tmp / "trace.json")))
        toggle_model(path)
        out.append((n, "fleet up", traced_preview(fleet, tmp / "trace.json", up)))
        toggle_configmap(floor)
        out.append((n, "floor up", traced_preview(floor, tmp / "trace.json", up)))
    return out


def print_phases(phases: list[tuple[int, str, dict[str, float]]]) -> None:
    print("\nWhere the time goes (one traced run each, s; engine logs = the program's Engine/Log calls)")
    print("| models | run | " + " | ".join(PHASES) + " |")
    print("|---|---|" + "---|" * len(PHASES))
    for n, label, ph in phases:
        cells = [f"{ph[k]:.0f}" if k == "engine_logs" else f"{ph[k]:.2f}" for k in PHASES]
        print(f"| {n} | {label} | " + " | ".join(cells) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2,50,200")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--platform", action="store_true", help="the dev platform's charts in the platform stack")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--trace", action="store_true", help="also break one preview and one up of each down by phase")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows: list[dict[str, Any]] = []
    print(f"# start {load()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="tkf-fleet-bench-") as tmpdir:
        tmp = Path(tmpdir)
        envs = {n: fleet_env(tmp, n, args.platform) for n in sizes}
        floors: dict[int, Program] = {}
        for n, (fleet, _, _) in envs.items():
            count = sum(fleet.stack.preview().change_summary.values())
            fleet.resources = count
            floor = floor_program(tmp, f"floor-{n}", count - FLOOR_OVERHEAD)
            (tmp / f"floor-{n}" / "__main__.py").write_text(FLOOR_SALTED)  # one ConfigMap can change
            floor.stack.up()
            floors[n] = floor
        best: dict[tuple[int, str], float] = {}
        for _ in range(args.repeat):  # interleaved: every program once per round
            for n, (fleet, plat, path) in envs.items():
                floor = floors[n]
                for key, run in (("fleet-preview", fleet.stack.preview), ("floor-preview", floor.stack.preview)):
                    t, _ = timed(run)
                    best[(n, key)] = min(best.get((n, key), float("inf")), t)
                toggle_model(path)
                t, res = timed(fleet.stack.up)
                changed = {k: v for k, v in (res.summary.resource_changes or {}).items() if k != "same"}
                best[(n, "fleet-up")] = min(best.get((n, "fleet-up"), float("inf")), t)
                toggle_configmap(floor)
                t, _ = timed(floor.stack.up)
                best[(n, "floor-up")] = min(best.get((n, "floor-up"), float("inf")), t)
                plat_changes = plat.preview().change_summary
                rows.append({"models": n, "fleetChanges": changed, "platformPreview": {str(k): v for k, v in
                                                                                         plat_changes.items()}})
        table = []
        for n in sizes:
            table.append({"models": n, "resources": envs[n][0].resources,
                          **{k: round(best[(n, k)], 2) for k in ("fleet-preview", "floor-preview", "fleet-up",
                                                                 "floor-up")},
                          "previewRatio": round(best[(n, "fleet-preview")] / best[(n, "floor-preview")], 2),
                          "upRatio": round(best[(n, "fleet-up")] / best[(n, "floor-up")], 2)})
        print(f"# timed rounds done {load()}")
        print("models resources | fleet preview  floor preview  ratio | fleet up  floor up  ratio  (best of "
              f"{args.repeat}, s)")
        for r in table:
            print(f"{r['models']:>6} {r['resources']:>9} | {r['fleet-preview']:>13} {r['floor-preview']:>14} "
                  f"{r['previewRatio']:>6} | {r['fleet-up']:>8} {r['floor-up']:>9} {r['upRatio']:>6}")
        print("per round, the fleet's one-model up changed:", json.dumps(rows[-len(sizes):]), flush=True)
        if args.trace:  # after the timed table, while the environments still exist
            print_phases(traced_phases(tmp, envs, floors))
    print(f"# end {load()}")
    if args.json:
        args.json.write_text(json.dumps({"table": table, "rounds": rows}, indent=2))


if __name__ == "__main__":
    main()
