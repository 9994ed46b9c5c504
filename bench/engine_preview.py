"""Real `pulumi preview` wall time of the dev stack with generated catalogs of N models, against the
engine's own floor: programs that register only plain ConfigMaps through the same engine, the same
Kubernetes provider (render mode) and the same virtualenv.

Two floors per size: `floor_per_model` (one ConfigMap per model) and `floor_same_count` (as many
resources as the tkf preview registers, stack and provider included). The three programs are timed
interleaved, best of `--repeat`, so machine noise hits all alike; the ratio that matters is tkf over
the same-count floor (target <= 1.5 at 50, 200 and 500 models).

Where the time goes comes from the engine's own OpenTelemetry spans (`pulumi preview --otel-traces
file://…`, one extra traced preview per program after the timed ones; tracing is not free, so those
runs are not the timed ones): startup before the program runs, the program's imports and planning
(language host Run → first RegisterResource), the registration window, the busy time of the Python
dynamic provider's Check calls (the fit checks) and of the Kubernetes provider's calls, and the
shutdown after the program exits. Needs the engine (scripts/setup.sh). Each program gets a fresh
temporary project and file backend.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pulumi import automation as auto  # noqa: E402

from bench.catalogs import dev_stack_config, generated_models  # noqa: E402
from tkf_infra.ops.stacks import DEV_PASSPHRASE, copy_project, engine_env, pulumi_home  # noqa: E402

QUICK_SIZES = "10,50"
ALL_SIZES = "10,50,200,500"

FLOOR_MAIN = '''
import pulumi, pulumi_kubernetes as k8s
n = pulumi.Config().require_int("count")
prov = k8s.Provider("render", render_yaml_to_directory=pulumi.Config().require("renderDir"))
for i in range(n):
    k8s.core.v1.ConfigMap(f"cm-{i}", metadata={"name": f"cm-{i}", "namespace": "bench"}, data={"i": str(i)},
                          opts=pulumi.ResourceOptions(provider=prov))
'''
#: Resources a floor program registers besides its ConfigMaps: the stack and the provider.
FLOOR_OVERHEAD = 2


@dataclass
class Program:
    label: str
    stack: auto.Stack
    env: dict[str, str]
    best: float = float("inf")
    resources: int = 0


def _workspace(project: Path, state: Path) -> tuple[dict[str, str], auto.LocalWorkspaceOptions]:
    state.mkdir(exist_ok=True)
    env = engine_env("dev", project, f"file://{state}")
    env["PULUMI_CONFIG_PASSPHRASE"] = DEV_PASSPHRASE
    return env, auto.LocalWorkspaceOptions(env_vars=env, pulumi_command=auto.PulumiCommand(root=str(pulumi_home())))


def tkf_program(tmp: Path, n: int, label: str = "tkf", checkout: Path = ROOT, platform: bool = False) -> Program:
    """The dev stack with `n` generated models, from `checkout` (this one, or another to compare with)."""
    project = copy_project(tmp / label, checkout)
    doc = dev_stack_config(platform)
    doc["config"]["tkf-infra:models"] = generated_models(n)
    doc["config"]["tkf-infra:cluster"]["renderDir"] = str(tmp / f"rendered-{label}")
    (project / "Pulumi.bench.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    env, opts = _workspace(project, tmp / f"state-{label}")
    return Program(label, auto.create_stack("bench", work_dir=str(project), opts=opts), env)


def bare_program(tmp: Path, label: str, main: str, config: dict[str, Any]) -> Program:
    """A floor: project `tkf-floor` running `main` in the project's virtualenv, stack `bench` with `config`
    (`tkf-floor:` keys) and a render directory of its own."""
    project = tmp / label
    project.mkdir()
    (project / "Pulumi.yaml").write_text("name: tkf-floor\nruntime:\n  name: python\n  options:\n"
                                         "    virtualenv: .venv\n")
    (project / "__main__.py").write_text(main)
    (project / ".venv").symlink_to(ROOT / ".venv")
    (project / "Pulumi.bench.yaml").write_text(yaml.safe_dump(
        {"config": {**{f"tkf-floor:{k}": v for k, v in config.items()},
                    "tkf-floor:renderDir": str(tmp / f"rendered-{label}")}}))
    env, opts = _workspace(project, tmp / f"state-{label}")
    return Program(label, auto.create_stack("bench", work_dir=str(project), opts=opts), env)


def untimed_up(stack: auto.Stack) -> None:
    """An environment's first `up`, before any timed run, without the engine's per-step checkpoints
    (`PULUMI_SKIP_CHECKPOINTS`, Pulumi's documented, experimental switch: only the final state is written).
    Each checkpoint rewrites the whole growing state file, so at 800 resources the checkpoints alone took
    minutes (800 ConfigMaps of 5 KB: 343 s with them, 15 s without, on this machine under load); the timed
    runs keep them, as a user's `up` does."""
    os.environ["PULUMI_SKIP_CHECKPOINTS"] = "true"
    try:
        stack.up()
    finally:
        del os.environ["PULUMI_SKIP_CHECKPOINTS"]


def floor_program(tmp: Path, label: str, configmaps: int) -> Program:
    return bare_program(tmp, label, FLOOR_MAIN, {"count": configmaps})


def timed_preview(p: Program) -> float:
    started = time.perf_counter()
    result = p.stack.preview()
    elapsed = time.perf_counter() - started
    p.best = min(p.best, elapsed)
    p.resources = sum(result.change_summary.values())
    return elapsed


# ------------------------------------------------------------------------------------------------
# Where the time goes: the engine's OpenTelemetry spans
# ------------------------------------------------------------------------------------------------


@dataclass
class Span:
    service: str
    name: str
    span_id: str
    parent: str
    start: float
    end: float
    peer: str


def read_spans(path: Path) -> list[Span]:
    spans = []
    for line in path.read_text().splitlines():
        for rs in json.loads(line).get("resourceSpans", []):
            service = next((a["value"].get("stringValue", "") for a in rs["resource"]["attributes"]
                            if a["key"] == "service.name"), "")
            for ss in rs.get("scopeSpans", []):
                for sp in ss.get("spans", []):
                    attrs = {a["key"]: a["value"] for a in sp.get("attributes", [])}
                    spans.append(Span(service, sp["name"], sp["spanId"], sp.get("parentSpanId", ""),
                                      int(sp["startTimeUnixNano"]) / 1e9, int(sp["endTimeUnixNano"]) / 1e9,
                                      attrs.get("net.peer.name", {}).get("stringValue", "")))
    return spans


def busy(intervals: Iterable[tuple[float, float]]) -> float:
    """Wall time covered by at least one interval (concurrent calls counted once)."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            total += 0.0 if cur_e is None or cur_s is None else cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_s is not None and cur_e is not None:
        total += cur_e - cur_s
    return total


def breakdown(spans: list[Span]) -> dict[str, float]:
    """Phases of one preview from its spans (seconds).

    Provider calls are told apart by the provider they went to: the Kubernetes provider (Go) traces
    its side of each call (a server span inside the engine's client span: matched on Configure); the
    Python dynamic provider traces nothing, so calls to any other address went to it.
    """
    t0 = min(s.start for s in spans)
    t1 = max(s.end for s in spans)
    run = next(s for s in spans if s.service == "pulumi-cli" and s.name == "pulumirpc.LanguageRuntime/Run")
    regs = [s for s in spans if s.service == "pulumi-cli" and s.name.startswith("pulumirpc.ResourceMonitor/Register")]
    served = [s for s in spans if s.service == "pulumi-resource-provider"]
    calls = [s for s in spans if s.service == "pulumi-cli" and s.name.startswith("pulumirpc.ResourceProvider/")]
    go_peers = {c.peer for c in calls if c.name.endswith("/Configure") and any(
        s.name == "/" + c.name and c.start <= s.start <= s.end <= c.end for s in served)}
    dynamic = [(s.start, s.end) for s in calls if s.peer not in go_peers and s.name.endswith("/Check")]
    k8s = [(s.start, s.end) for s in calls if s.peer in go_peers]
    first = min((s.start for s in regs), default=run.start)
    last = max((s.end for s in regs), default=run.end)
    dynamic_all = [(s.start, s.end) for s in calls if s.peer not in go_peers and not s.name.endswith(
        ("/Handshake", "/GetPluginInfo", "/Cancel"))]
    stack_reads = [(s.start, s.end) for s in spans if s.name == "builtinProvider.readStackReference"]
    state = [(s.start, s.end) for s in spans if s.name.startswith("diyBackend.") and "StackOutputs" not in s.name]
    logs = [s for s in spans if s.service == "pulumi-cli" and s.name == "pulumirpc.Engine/Log"]
    return {"total": t1 - t0, "startup": run.start - t0, "imports_plan": first - run.start,
            "registration": last - first, "fit_checks": busy(dynamic), "fit_check_calls": float(len(dynamic)),
            "k8s_provider": busy(k8s), "shutdown": t1 - run.end,
            # Used by bench/fleet_stack.py: every call to the Python dynamic provider (Check, Diff, Update ...),
            # the engine's reads of stack outputs (the platform contract, the stack's own last outputs),
            # its state file reads and writes, and the program's Engine/Log calls (each one a round trip).
            "dynamic_provider": busy(dynamic_all), "stack_reads": busy(stack_reads), "state": busy(state),
            "engine_logs": float(len(logs))}


def traced_preview(p: Program, trace: Path, command: tuple[str, ...] = ("preview",),
                   extra_env: dict[str, str] | None = None) -> dict[str, float]:
    """One preview (or `command`, e.g. `up --yes --skip-preview` as the Automation API runs it) of the
    program's stack through the CLI, with the engine's OpenTelemetry export to a file; `extra_env` for the
    program (a targeted run's)."""
    env = {**os.environ, **p.env, **(extra_env or {}), "PULUMI_TRACING_NO_PAYLOADS": "true"}
    subprocess.run([str(pulumi_home() / "bin" / "pulumi"), *command, "--stack", p.stack.name, "--non-interactive",
                    "--otel-traces", f"file://{trace}"],
                   cwd=p.stack.workspace.work_dir, env=env, check=True, capture_output=True)
    try:
        return breakdown(read_spans(trace))
    finally:
        trace.unlink(missing_ok=True)  # the trace records the environment, passphrase included


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load1={one:.2f} load5={five:.2f} cpus={os.cpu_count()}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=QUICK_SIZES, help=f"comma-separated model counts (all: {ALL_SIZES})")
    ap.add_argument("--repeat", type=int, default=2, help="previews per program and size; the best is kept")
    ap.add_argument("--no-trace", action="store_true", help="skip the traced previews (no time breakdown)")
    ap.add_argument("--compare-with", type=Path, metavar="CHECKOUT",
                    help="also time the program of another checkout (e.g. `git worktree add /tmp/main main`), "
                         "interleaved with the others: a before/after in one run")
    ap.add_argument("--platform", action="store_true",
                    help="keep the dev stack's platform charts in the tkf preview (a fixed ~145 resources); by "
                         "default each piece is alreadyInstalled, so the catalog's own cost is what scales")
    args = ap.parse_args()
    rows: list[tuple[int, Program, Program, Program]] = []
    others: list[tuple[int, Program, Program]] = []
    phases: list[tuple[int, str, dict[str, float]]] = []
    print(f"# start {load()}", flush=True)
    for n in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            tkf = tkf_program(tmp, n, platform=args.platform)
            timed_preview(tkf)  # also learns how many resources tkf registers
            same = floor_program(tmp, "floor-same-count", tkf.resources - FLOOR_OVERHEAD)
            per_model = floor_program(tmp, "floor-per-model", n)
            programs = [per_model, same, tkf]
            if args.compare_with:
                other = tkf_program(tmp, n, "other", args.compare_with.resolve(), args.platform)
                programs.append(other)
            for _ in range(args.repeat):  # interleaved, so machine noise hits all alike
                for p in programs:
                    timed_preview(p)
            if same.resources != tkf.resources:
                raise SystemExit(f"floor registered {same.resources} resources, tkf {tkf.resources}")
            rows.append((n, tkf, same, per_model))
            print(f"models={n:4d} resources={tkf.resources:5d} tkf_s={tkf.best:6.2f} "
                  f"floor_same_count_s={same.best:6.2f} floor_per_model_s={per_model.best:6.2f} "
                  f"ratio_same_count={tkf.best / same.best:.2f} ratio_per_model={tkf.best / per_model.best:.2f} "
                  f"({load()})", flush=True)
            if args.compare_with:
                others.append((n, other, tkf))
                print(f"models={n:4d} other_checkout_s={other.best:6.2f} resources={other.resources} "
                      f"this_checkout_s={tkf.best:6.2f} speedup={other.best / tkf.best:.2f}", flush=True)
            if not args.no_trace:
                for p in programs[1:]:
                    phases.append((n, p.label, traced_preview(p, tmp / f"trace-{p.label}.json")))
    print()
    print("| models | resources | tkf preview | floor, same count | ratio | floor, one ConfigMap per model | ratio |")
    print("|---|---|---|---|---|---|---|")
    for n, tkf, same, per_model in rows:
        print(f"| {n} | {tkf.resources} | {tkf.best:.2f} s | {same.best:.2f} s | {tkf.best / same.best:.2f} | "
              f"{per_model.best:.2f} s | {tkf.best / per_model.best:.2f} |")
    if others:
        print(f"\nThis checkout against {args.compare_with} (same run, interleaved)")
        print("| models | other: resources | other: preview | this: resources | this: preview | other / this |")
        print("|---|---|---|---|---|---|")
        for n, other, tkf in others:
            print(f"| {n} | {other.resources} | {other.best:.2f} s | {tkf.resources} | {tkf.best:.2f} s | "
                  f"{other.best / tkf.best:.2f} |")
    if phases:
        print()
        print("Where the time goes (one traced preview each; seconds; fit checks = busy time of the Python "
              "dynamic provider's Check calls)")
        print("| models | program | total | startup | imports+plan | registration | fit checks (calls) | "
              "k8s provider | shutdown |")
        print("|---|---|---|---|---|---|---|---|---|")
        for n, label, ph in phases:
            print(f"| {n} | {label} | {ph['total']:.2f} | {ph['startup']:.2f} | {ph['imports_plan']:.2f} | "
                  f"{ph['registration']:.2f} | {ph['fit_checks']:.2f} ({ph['fit_check_calls']:.0f}) | "
                  f"{ph['k8s_provider']:.2f} | {ph['shutdown']:.2f} |")
    print(f"\n# end {load()}")
    worst = max((tkf.best / same.best for n, tkf, same, _ in rows if n >= 50), default=0.0)
    print(f"summary worst_ratio_same_count_at_50_plus={worst:.2f} target<=1.5")


if __name__ == "__main__":
    main()
