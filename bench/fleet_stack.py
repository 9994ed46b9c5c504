"""The fleet stack of a split environment (docs/stacks.md) through the real engine, against two engine
floors with the same resource count: a no-change `preview` and a one-model-change `up`, at 2, 50 and 200
models, interleaved in one run (best of `--repeat`), so machine noise hits all alike.

Each size is an environment of its own: `<env>-platform` (applied once, before the timed runs) and the
fleet `<env>` (applied once, then timed). Two floors, each a bare program through the same engine,
Kubernetes provider (render mode) and virtualenv, with as many resources as the fleet stack holds:

- the **count floor** (`bench/engine_preview.py`'s): plain ConfigMaps; its "one change" edits one;
- the **payload floor**: the fleet's own resources, dumped from its applied state (`pulumi stack export`)
  and registered again as they are there: every Kubernetes object with the same type, name, parent and
  inputs (through the SDK's generic `CustomResource`, so none of tkf's code runs), every component as a
  bare `ComponentResource` of the same type (no outputs), the same `dependsOn`; the FitCheck (tkf's
  dynamic provider) becomes a ConfigMap holding its inputs as JSON, and the stack exports nothing. Its
  "one change" is an annotation on the first model's workload and that ConfigMap: two updates, as the
  fleet's one-model `up` (the model's workload and the FitCheck).

fleet / count floor is the issue's ratio; payload floor / count floor is what the Kubernetes objects'
size costs the engine and the provider whatever program registers them; fleet / payload floor is
tkf-infra's own overhead (plan, FitCheck, component outputs, stack outputs and reads).

The fleet's **targeted** runs are measured beside its full ones, on the same stack: `preview` and the same
one-model `up` with `--models` of that model (tkf_infra/targeted.py), what it keeps resolved as the CLI resolves
it (the stack file, the last deployment) inside the timed run. The issue's bar: a targeted one-model `up` at
200 models within 1.5x of the same edit at 2.

`--engine-env KEY=VALUE` (repeatable) also measures the fleet with that in the engine's environment (an engine
switch such as `PULUMI_PARALLEL_DIFF=true`), in environments of its own, interleaved with the others.

`--cli ROOT` (repeatable) also measures the fleet, full and targeted, under the Pulumi CLI at `ROOT/bin/pulumi`
(a release built beside the pinned one), in environments of its own, interleaved with the others; the language
host, the Kubernetes provider and the program are the installed ones, so only the engine differs.

`--compare-with REF` also measures the fleet of a git ref (`git archive REF`, the same virtualenv), in
environments of its own, interleaved with the others: a before/after in one run.

`--platform` keeps the dev platform's charts in the platform stack (about 150 resources, minutes to
apply): the fleet's figures should not move, which is the point of the split.

`--trace` adds, after the timed rounds, one traced no-change preview and one traced one-change `up` of
each program (not timed: tracing is not free), and prints where each one's time went from the engine's
OpenTelemetry spans (`bench/engine_preview.py`'s `breakdown`; docs/performance.md reads the columns).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pulumi import automation as auto  # noqa: E402

from bench.catalogs import dev_stack_config, generated_models  # noqa: E402
from bench.engine_preview import (  # noqa: E402
    FLOOR_OVERHEAD,
    Program,
    _workspace,
    floor_program,
    load,
    traced_preview,
    untimed_up,
)
from bench.payload_floor import payload_program  # noqa: E402
from tkf_infra.ops.stacks import copy_project, pulumi_home  # noqa: E402
from tkf_infra.ops.targets import resolve  # noqa: E402


def fleet_env(tmp: Path, n: int, platform: bool, checkout: Path = ROOT, prefix: str = "f",
              engine_env: dict[str, str] | None = None, cli: Path | None = None) -> tuple[Program, auto.Stack, Path]:
    """Environment `<prefix><n>`: its platform applied, its fleet of `n` generated models applied once;
    `engine_env`: more of the engine's environment for its runs (an engine switch measured against the fleet);
    `cli`: another Pulumi CLI's root (`cli/bin/pulumi`) runs its engine, from the platform's first `up` on."""
    env_name = f"{prefix}{n}"
    project = copy_project(tmp / env_name, checkout)
    doc = dev_stack_config(platform)
    doc["config"]["tkf-infra:layer"] = "fleet"
    doc["config"]["tkf-infra:models"] = generated_models(n)
    doc["config"]["tkf-infra:nodePools"][0]["nodeCount"] = n  # a node per model: every model is admitted
    doc["config"]["tkf-infra:cluster"]["renderDir"] = str(tmp / f"rendered-{env_name}")
    path = project / f"Pulumi.{env_name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    env, opts = _workspace(project, tmp / f"state-{env_name}")
    env.update(engine_env or {})
    opts.env_vars = env
    if cli is not None:
        opts.pulumi_command = auto.PulumiCommand(root=str(cli))
    plat = auto.create_stack(f"{env_name}-platform", work_dir=str(project), opts=opts)
    untimed_up(plat)
    fleet = auto.create_stack(env_name, work_dir=str(project), opts=opts)
    untimed_up(fleet)
    return Program(f"fleet-{env_name}", fleet, env), plat, path


def cli_version(root: Path) -> str:
    """`pulumi version` of the CLI at `root/bin/pulumi` (the label of its rows)."""
    return subprocess.run([str(root / "bin" / "pulumi"), "version"], check=True, capture_output=True,
                          text=True).stdout.strip()


def print_cli_table(best: dict[tuple[int, str, str], float], sizes: list[int], label: str, repeat: int) -> None:
    """The fleet under another CLI (its rows' `label`) against the pinned one, per size: preview, up and the
    targeted up."""
    print(f"\nthe {label} against the pinned CLI {cli_version(pulumi_home())} (best of {repeat}, s; ratio: this "
          "CLI / the pinned one)")
    print("| models | preview | ratio | up | ratio | targeted up | ratio |\n|---|---|---|---|---|---|---|")
    for n in sizes:
        cells: list[Any] = [n]
        for key, kind in ((label, "preview"), (label, "up"), (f"{label} --models", "up")):
            mine, pinned = best[(n, key, kind)], best[(n, key.replace(label, "fleet"), kind)]
            cells += [round(mine, 2), round(mine / pinned, 2)]
        print("| " + " | ".join(str(c) for c in cells) + " |")


def ref_checkout(tmp: Path, ref: str) -> Path:
    """The program as committed at `ref` (`git archive`: no worktree is added), sharing this virtualenv."""
    dest = tmp / "ref-checkout"
    dest.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", ref], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    (dest / ".venv").symlink_to(ROOT / ".venv")
    if (ROOT / "policy" / ".venv").exists() and (dest / "policy").is_dir():
        (dest / "policy" / ".venv").symlink_to(ROOT / "policy" / ".venv")
    return dest


def toggle_model(path: Path) -> None:
    """One catalog edit: the first model's maxNumSeqs between 8 and 4."""
    doc = yaml.safe_load(path.read_text())
    first = doc["config"]["tkf-infra:models"][0]
    first["maxNumSeqs"] = 4 if first.get("maxNumSeqs", 8) == 8 else 8
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def toggle_salt(p: Program) -> None:
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

def timed(run: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = run()
    return time.perf_counter() - started, result


@dataclass
class Measured:
    """One program of one size, and how to make its one change; `targeted`: the models `--models` names (the
    fleet's targeted runs, `tkf_infra/targeted.py`)."""

    key: str
    program: Program
    change: Callable[[], None]
    targeted: tuple[str, ...] = ()

    def run(self, operation: str) -> Any:
        """`preview` or `up`, as `python -m tkf_infra … --models` runs it when targeted: what it keeps resolved from
        the stack file and its last deployment (timed with the run), the engine given its exclusions, the program
        told which models it names and keeps."""
        stack = self.program.stack
        call = stack.preview if operation == "preview" else stack.up
        if not self.targeted:
            return call()
        targeting = resolve(stack, self.targeted)
        saved = stack.workspace.env_vars
        stack.workspace.env_vars = {**saved, **targeting.env}
        try:
            return call(exclude=targeting.excludes)
        finally:
            stack.workspace.env_vars = saved


PHASES = ("total", "startup", "imports_plan", "registration", "k8s_provider", "dynamic_provider", "stack_reads",
          "state", "engine_logs", "shutdown")
UP = ("up", "--yes", "--skip-preview")


def print_phases(phases: list[tuple[int, str, dict[str, float]]]) -> None:
    print("\nWhere the time goes (one traced run each, s; engine logs = the program's Engine/Log calls)")
    print("| models | run | " + " | ".join(PHASES) + " |")
    print("|---|---|" + "---|" * len(PHASES))
    for n, label, ph in phases:
        cells = [f"{ph[k]:.0f}" if k == "engine_logs" else f"{ph[k]:.2f}" for k in PHASES]
        print(f"| {n} | {label} | " + " | ".join(cells) + " |")


def state_bytes(p: Program) -> int:
    """The size of the program's stack state file in its file backend."""
    backend = Path(p.env["PULUMI_BACKEND_URL"].removeprefix("file://"))
    return sum(f.stat().st_size for f in backend.glob(f".pulumi/stacks/*/{p.stack.name}.json"))


def main() -> None:  # noqa: C901 - one interleaved run: set-up, rounds, then the tables, in the order printed
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="2,50,200")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--platform", action="store_true", help="the dev platform's charts in the platform stack")
    ap.add_argument("--compare-with", metavar="REF", help="also measure the fleet of this git ref, interleaved")
    ap.add_argument("--engine-env", action="append", default=[], metavar="KEY=VALUE",
                    help="also measure the fleet with this in the engine's environment (PULUMI_PARALLEL_DIFF=true),"
                         " in environments of its own, interleaved; repeatable")
    ap.add_argument("--cli", action="append", default=[], type=Path, metavar="ROOT",
                    help="also measure the fleet, full and targeted, under the Pulumi CLI at ROOT/bin/pulumi, in "
                         "environments of its own, interleaved; repeatable")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--trace", action="store_true", help="also break one preview and one up of each down by phase")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    cli_labels = {root: f"fleet cli {cli_version(root)}" for root in args.cli}  # the rows of each --cli
    rows: list[dict[str, Any]] = []
    print(f"# start {time.strftime('%H:%M:%S', time.gmtime())} UTC {load()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="tkf-fleet-bench-") as tmpdir:
        tmp = Path(tmpdir)
        ref = ref_checkout(tmp, args.compare_with) if args.compare_with else None
        envs = {n: fleet_env(tmp, n, args.platform) for n in sizes}
        programs: dict[int, list[Measured]] = {}
        for n, (fleet, _, path) in envs.items():
            count = sum(fleet.stack.preview().change_summary.values())
            fleet.resources = count
            floor = floor_program(tmp, f"floor-{n}", count - FLOOR_OVERHEAD)
            (tmp / f"floor-{n}" / "__main__.py").write_text(FLOOR_SALTED)  # one ConfigMap can change
            untimed_up(floor.stack)
            floor.resources = sum(floor.stack.preview().change_summary.values())
            payload = payload_program(tmp, f"payload-{n}", fleet)
            payload.resources = sum(payload.stack.preview().change_summary.values())
            first = yaml.safe_load(path.read_text())["config"]["tkf-infra:models"][0]["name"]
            measured = [Measured("fleet", fleet, partial(toggle_model, path)),
                        Measured("fleet --models", fleet, partial(toggle_model, path), (first,)),
                        Measured("count floor", floor, partial(toggle_salt, floor)),
                        Measured("payload floor", payload, partial(toggle_salt, payload))]
            if ref is not None:
                other, _, other_path = fleet_env(tmp, n, args.platform, ref, "r")
                other.resources = sum(other.stack.preview().change_summary.values())
                measured.append(Measured("ref fleet", other, partial(toggle_model, other_path)))
            for i, setting in enumerate(args.engine_env):
                key, _, value = setting.partition("=")
                other, _, other_path = fleet_env(tmp, n, args.platform, prefix=f"e{i}-", engine_env={key: value})
                other.resources = fleet.resources
                measured.append(Measured(f"fleet {setting}", other, partial(toggle_model, other_path)))
            for i, (root, label) in enumerate(cli_labels.items()):
                other, _, other_path = fleet_env(tmp, n, args.platform, prefix=f"c{i}-", cli=root)
                other.resources = fleet.resources
                measured += [Measured(label, other, partial(toggle_model, other_path)),
                             Measured(f"{label} --models", other, partial(toggle_model, other_path), (first,))]
            programs[n] = measured
            print(f"# {n} models ready: " + ", ".join(f"{m.key} {m.program.resources} resources, state "
                                                      f"{state_bytes(m.program) / 1e6:.2f} MB" for m in measured),
                  flush=True)
        best: dict[tuple[int, str, str], float] = {}
        for _ in range(args.repeat):  # interleaved: every program once per round
            for n, measured in programs.items():
                for m in measured:
                    t, _ = timed(partial(m.run, "preview"))
                    best[(n, m.key, "preview")] = min(best.get((n, m.key, "preview"), float("inf")), t)
                for m in measured:
                    m.change()
                    t, res = timed(partial(m.run, "up"))
                    best[(n, m.key, "up")] = min(best.get((n, m.key, "up"), float("inf")), t)
                    changed = {k: v for k, v in (res.summary.resource_changes or {}).items() if k != "same"}
                    rows.append({"models": n, "program": m.key, "changes": changed})
                plat_changes = envs[n][1].preview().change_summary
                rows.append({"models": n, "program": "platform preview after the fleet's up",
                             "changes": {str(k): v for k, v in plat_changes.items()}})
        print(f"# timed rounds done {time.strftime('%H:%M:%S', time.gmtime())} UTC {load()}")
        table = []
        for n in sizes:
            row: dict[str, Any] = {"models": n, "resources": programs[n][0].program.resources}
            for m in programs[n]:
                for kind in ("preview", "up"):
                    row[f"{m.key} {kind}"] = round(best[(n, m.key, kind)], 2)
            for kind in ("preview", "up"):
                fleet_s, count_s, payload_s = (best[(n, k, kind)] for k in ("fleet", "count floor", "payload floor"))
                row[f"{kind}: fleet/count"] = round(fleet_s / count_s, 2)
                row[f"{kind}: payload/count"] = round(payload_s / count_s, 2)
                row[f"{kind}: fleet/payload"] = round(fleet_s / payload_s, 2)
                if ref is not None:
                    row[f"{kind}: ref/fleet"] = round(best[(n, "ref fleet", kind)] / fleet_s, 2)
                row[f"{kind}: targeted/fleet"] = round(best[(n, "fleet --models", kind)] / fleet_s, 2)
            table.append(row)
        print(f"\nBest of {args.repeat} (s); ratios: fleet / count floor (the issue's), payload floor / count floor, "
              "fleet / payload floor")
        for kind in ("preview", "up"):
            head = "no-change preview" if kind == "preview" else "one-model up"
            print(f"\n{head}\n| models | resources | fleet | count floor | payload floor | fleet/count | "
                  "payload/count | fleet/payload |" + (f" {args.compare_with} | ref/fleet |" if ref else ""))
            print("|---|---|---|---|---|---|---|---|" + ("---|---|" if ref else ""))
            for r in table:
                cells = [r["models"], r["resources"], r[f"fleet {kind}"], r[f"count floor {kind}"],
                         r[f"payload floor {kind}"], r[f"{kind}: fleet/count"], r[f"{kind}: payload/count"],
                         r[f"{kind}: fleet/payload"]]
                if ref is not None:
                    cells += [r[f"ref fleet {kind}"], r[f"{kind}: ref/fleet"]]
                print("| " + " | ".join(str(c) for c in cells) + " |")
        for setting in args.engine_env:
            print(f"\nthe fleet with {setting} against the fleet as shipped (best of {args.repeat}, s)")
            print("| models | preview | ratio | up | ratio |\n|---|---|---|---|---|")
            for n in sizes:
                cells = [n]
                for kind in ("preview", "up"):
                    mine = best[(n, f"fleet {setting}", kind)]
                    cells += [round(mine, 2), round(mine / best[(n, "fleet", kind)], 2)]
                print("| " + " | ".join(str(c) for c in cells) + " |")
        for label in cli_labels.values():
            print_cli_table(best, sizes, label, args.repeat)
        print("\ntargeted (--models, the first model): best (s), against the full run of its size, and its up against "
              "the targeted up of the smallest size")
        print("| models | preview | /fleet | up | /fleet | up / smallest |\n|---|---|---|---|---|---|")
        for r in table:
            up_s = r["fleet --models up"]
            print(f"| {r['models']} | {r['fleet --models preview']} | {r['preview: targeted/fleet']} | "
                  f"{up_s} | {r['up: targeted/fleet']} | {round(up_s / table[0]['fleet --models up'], 2)} |")
        print("\nlast round's changes:", json.dumps(rows[-(len(programs[sizes[-1]]) + 1):]), flush=True)
        if args.trace:  # after the timed table, while the environments still exist
            phases = []
            for n, measured in programs.items():
                for m in measured:
                    # a targeted run as the CLI makes it: what it keeps resolved first (not traced), then excluded
                    targeting = resolve(m.program.stack, m.targeted) if m.targeted else None
                    excludes = tuple(f"--exclude={g}" for g in targeting.excludes) if targeting else ()
                    env = targeting.env if targeting else None
                    phases.append((n, f"{m.key} preview", traced_preview(m.program, tmp / "trace.json",
                                                                         ("preview", *excludes), env)))
                    m.change()
                    phases.append((n, f"{m.key} up", traced_preview(m.program, tmp / "trace.json", (*UP, *excludes),
                                                                    env)))
            print_phases(phases)
    print(f"# end {time.strftime('%H:%M:%S', time.gmtime())} UTC {load()}")
    if args.json:
        args.json.write_text(json.dumps({"table": table, "rounds": rows}, indent=2))


if __name__ == "__main__":
    main()
