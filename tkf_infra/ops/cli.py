"""`python -m tkf_infra`: the command line CI and operators use (Automation API on this project).

Exit codes tell CI what happened without parsing text; every command uses the one table in
`tkf_infra.exit_codes` (printed by `--help`).
"""

from __future__ import annotations

import contextlib
import json
import sys
import traceback
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.markup import escape
from rich.table import Table

from tkf_infra.exit_codes import ExitCode
from tkf_infra.ops.cli_common import (
    JsonOpt,
    StackOpt,
    app,
    err_console,
    fail,
    open_stack,
    operator_errors,
    read_outputs,
)
from tkf_infra.ops.layer_runs import Only, layer_stacks

#: `app` here has every command registered (this module imports the command modules below).
__all__ = ["app", "main"]


class Format(StrEnum):
    litellm = "litellm"
    json = "json"


def _operation(stack_name: str, operation: str, as_json: bool, create: bool = False,
               clear_pending_creates: bool = False, models: str | None = None) -> None:
    from tkf_infra.ops import automation, engine, interrupted, locks, stacks

    stack = open_stack(stack_name, create=create)
    targeting = None
    if models is not None:  # a targeted run (tkf_infra/targeted.py): the engine steps these models' objects only
        from tkf_infra.ops import targets

        with operator_errors(stack_name):
            targeting = targets.resolve(stack, targets.parse_models(models))
    if operation != "preview":  # the engine locks these: refuse before a long preview, naming the holder
        held = stacks.read_locks(stack_name, stack.workspace.env_vars["PULUMI_BACKEND_URL"])
        if held:
            raise fail(locks.locked_message(stack_name, held), ExitCode.LOCKED)

    def stream(line: str) -> None:
        if not as_json:
            err_console.out(line.rstrip("\n"), highlight=False)

    def notify(message: str) -> None:
        err_console.print(f"[bold yellow]{escape(message)}[/]", highlight=False, soft_wrap=True)

    results: list[dict[str, Any]] = []
    before = None
    refused: dict[str, list[str]] = {}
    with engine.forwarding_interrupts(notify) as interrupts, operator_errors(stack_name):
        if operation == "up":  # preview first: Automation `up` skips the preview, and CI wants it
            preview_run = automation.run_operation(stack, "preview", on_output=stream, targeting=targeting)
            before, refused = preview_run.tracker, preview_run.policy_refusals
            results.append(preview_run.summary)
        if not interrupts.received:
            results.append(automation.run_operation(stack, operation, on_output=stream, after=before,
                                                    refused_by_policy=refused, targeting=targeting,
                                                    clear_pending_creates=clear_pending_creates).summary)
        final = results[-1]
        if interrupts.received:
            interrupted.mark_interrupted(final, results[0] if len(results) > 1 else None,
                                     stacks.signal_name(interrupts.last), operation)
        deployment = stacks.state_deployment(stack)
        if deployment:
            interrupted.add_pending(final, deployment)
    if operation == "up" and not interrupts.received:  # outside the engine's signal forwarding: ^C stops this wait
        from tkf_infra.ops import ready_check

        with operator_errors(stack_name):
            ready_check.confirm_ready(final, lambda: stacks.stack_catalog(stack),
                                      lambda: stacks.stack_outputs(stack), notify)
    if as_json:
        print(json.dumps(final if len(results) == 1 else {**final, "preview": results[0]}, indent=2))
    else:
        _print_summary(final)
    if interrupts.received:
        raise typer.Exit(ExitCode.INTERRUPTED)
    raise typer.Exit(ExitCode.OK if final["ok"] else ExitCode.REFUSED)


def _print_summary(summary: dict[str, Any]) -> None:
    table = Table(title=f"{summary['operation']} of stack {summary['stack']}")
    for col in ("model", "status", "fit", "changes", "reasons / drift"):
        table.add_column(col)
    for name, m in summary["models"].items():
        changes = ", ".join(f"{k} {v}" for k, v in m["changes"].items() if k != "same") or "-"
        notes = "\n".join(m.get("reasons", []) + m.get("warnings", []) + m.get("drift", []))
        table.add_row(escape(name), m["status"], m.get("fit", "-"), changes, escape(notes))
    err_console.print(table)
    for e in summary["errors"]:
        err_console.print(f"[red]stack error:[/] {escape(e)}", highlight=False)
    for w in summary.get("policyWarnings", []):
        err_console.print(f"[yellow]stack warning:[/] {escape(w)}", highlight=False)
    unreadable = (summary.get("readiness") or {}).get("unreadable")
    if unreadable:
        err_console.print(f"[yellow]stack warning:[/] readiness not confirmed: {escape(unreadable)}", highlight=False)
    pending = summary.get("pendingOperations")
    if pending:
        for model, m in summary["models"].items():
            for line in m.get("pending", []):
                err_console.print(f"[yellow]pending ({escape(model)}):[/] {escape(line)}", highlight=False)
        for line in pending["stack"]:
            err_console.print(f"[yellow]pending:[/] {escape(line)}", highlight=False)
        err_console.print(f"[yellow]{escape(pending['note'])}:[/] {escape(pending['clear'])}", highlight=False,
                          soft_wrap=True)
    if summary["failedModels"]:
        err_console.print(f"[bold red]failed, rejected or interrupted:[/] {escape(', '.join(summary['failedModels']))}")


OnlyOpt = Annotated[Only, typer.Option(
    "--only", help="A split environment (docs/stacks.md): both stacks, platform first (the default), or one.")]
ModelsOpt = Annotated[str | None, typer.Option(
    "--models", metavar="NAME[,NAME]",
    help="Step only these models' objects (and the stack's shared ones and outputs); the plan still sees the "
         "whole fleet. A split environment's platform stack is not run. Refused when another model changed.")]


def _operations(stack: str, operation: str, as_json: bool, only: Only, models: str | None = None) -> None:
    """Each stack in turn; the fleet does not run when its platform's run failed. With --json, one document
    on stdout as before: the last stack's summary, with the platform's under `platform`. A targeted run
    (`--models`) runs the fleet's stack alone: a catalog edit never reaches the platform stack."""
    import io

    if models is not None:
        from tkf_infra import layers

        if only == Only.platform or layers.is_platform_stack(stack):
            raise fail("--models names models, which the platform stack does not hold; drop --only platform")
        only = Only.fleet
    names = layer_stacks(stack, only)
    earlier: dict[str, Any] = {}
    for name in names[:-1]:
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                _operation(name, operation, as_json, create=True)
        except typer.Exit as done:
            if done.exit_code != ExitCode.OK:
                sys.stdout.write(out.getvalue())
                err_console.print(f"[bold red]{escape(operation)} of {escape(name)} failed: {escape(names[-1])} "
                                  "not run[/]", highlight=False)
                raise
        if as_json:
            earlier[name] = json.loads(out.getvalue())
    if not earlier:
        _operation(names[-1], operation, as_json, create=True, models=models)
        return
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            _operation(names[-1], operation, as_json, create=True)
    finally:
        text = out.getvalue()
        if text.strip():
            print(json.dumps({**json.loads(text), "platform": next(iter(earlier.values()))}, indent=2))


@app.command()
def preview(stack: StackOpt = "dev", as_json: JsonOpt = False, only: OnlyOpt = Only.both,
            models: ModelsOpt = None) -> None:
    """Preview the stack (a split environment: its platform, then its fleet): every fit check runs; bad models are
    named."""
    _operations(stack, "preview", as_json, only, models)


@app.command()
def up(stack: StackOpt = "dev", as_json: JsonOpt = False, only: OnlyOpt = Only.both,
       models: ModelsOpt = None) -> None:
    """Preview, then deploy (a split environment: its platform, then its fleet); a failed model does not stop the
    others (continue-on-error)."""
    _operations(stack, "up", as_json, only, models)


@app.command("split")
def split_command(stack: StackOpt = "dev") -> None:
    """Move a one-stack environment's platform resources into stack <stack>-platform; nothing is deleted or
    recreated (docs/stacks.md)."""
    from tkf_infra.ops import split

    with operator_errors(stack):
        done = split.split(stack)
    err_console.print(f"moved {len(done.moved)} resources from {done.source} to {done.dest}. Next: set "
                      f"`tkf-infra:layer: fleet` in Pulumi.{done.source}.yaml, then `python -m tkf_infra up --stack "
                      f"{done.source}` (platform first; both report no change to the cluster)",
                      highlight=False, soft_wrap=True)


@app.command()
def refresh(
    stack: StackOpt = "dev", as_json: JsonOpt = False,
    clear_pending_creates: Annotated[bool, typer.Option(
        help="Also drop the records of creates a killed run left pending (the summary lists them); "
             "`up` re-applies those objects by name.")] = False,
) -> None:
    """Read the real state back and report drift (objects changed or deleted out of band) per model."""
    from tkf_infra.ops import stacks

    catalog = stacks.stack_catalog(open_stack(stack))
    if catalog is not None and catalog.settings.cluster.mode == "render":
        raise fail(f"stack {stack!r} renders manifests to {catalog.settings.cluster.render_dir} "
                    "(cluster.mode render): there is no cluster to compare against; "
                    "refresh a stack with cluster.mode kubeconfig")
    _operation(stack, "refresh", as_json, clear_pending_creates=clear_pending_creates)


@app.command()
def unlock(
    stack: StackOpt = "dev",
    force: Annotated[bool, typer.Option(
        help="Also clear locks taken on other hosts (their runs cannot be checked from here).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Clear the lock a killed run left on the stack; refused while the run holding it is still going."""
    from tkf_infra.ops import locks, stacks

    url = stacks.engine_env(stack)["PULUMI_BACKEND_URL"]
    try:
        done = locks.clear_stale(locks.open_store(url), stacks.project_name(), stack, force=force)
    except locks.UnsupportedBackend as err:
        raise fail(f"{err}; make sure no run of stack {stack!r} is going, then `pulumi cancel --stack {stack}`") \
            from None
    except Exception as err:  # the bucket did not answer (botocore, OSError)
        raise fail(f"the state backend {stacks.redact(url)} did not answer ({err}); try again once it is back",
                    ExitCode.UNAVAILABLE) from None
    for lk in done.cleared:
        err_console.print(escape(f"cleared the lock of {lk.describe()} ({lk.where})"), highlight=False, soft_wrap=True)
    if as_json:
        print(json.dumps({"stack": stack, "cleared": [lk.where for lk in done.cleared],
                          "refused": [lk.where for lk in done.refused]}, indent=2))
    if done.refused:
        raise fail(locks.locked_message(stack, done.refused), ExitCode.LOCKED)
    if not done.cleared:
        err_console.print(f"stack {stack!r} is not locked")
    else:
        err_console.print(f"run `python -m tkf_infra up --stack {stack}` again: it reports any operations the "
                          "killed run left pending", highlight=False, soft_wrap=True)


@app.command()
def destroy(stack: StackOpt = "dev", as_json: JsonOpt = False) -> None:
    """Delete the stack's resources (weight caches are retained unless pruning is configured)."""
    _operation(stack, "destroy", as_json)


@app.command()
def outputs(stack: StackOpt = "dev",
            show_secrets: Annotated[bool, typer.Option(help="Include secret outputs.")] = False) -> None:
    """Print the stack outputs (the gateway contract) as JSON."""
    from tkf_infra.ops import stacks

    st = open_stack(stack)
    with operator_errors(stack):
        print(json.dumps(stacks.stack_outputs(st, show_secrets=show_secrets), indent=2))


@app.command("gateway-config")
def gateway_config(
    stack: StackOpt = "dev",
    fmt: Annotated[Format, typer.Option("--format", help="litellm (proxy config YAML) or json.")] = Format.litellm,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write here instead of stdout.")] = None,
) -> None:
    """Write the gateway's model list from the stack outputs; secrets stay environment references."""
    from tkf_infra.gateway_metrics import gateway_settings
    from tkf_infra.outputs import ENDPOINTS_OUTPUT, GATEWAY_MODEL_LIST_OUTPUT

    _, outs = read_outputs(stack)
    model_list = outs.get(GATEWAY_MODEL_LIST_OUTPUT)
    if model_list is None:
        raise fail(f"stack {stack!r} has no {GATEWAY_MODEL_LIST_OUTPUT} output yet; "
                    f"run `python -m tkf_infra up --stack {stack}`", ExitCode.REFUSED)
    doc = {"model_list": model_list, **gateway_settings(outs.get(ENDPOINTS_OUTPUT) or {})}
    text = yaml.safe_dump(doc, sort_keys=False) if fmt is Format.litellm else json.dumps(doc, indent=2) + "\n"
    if output:
        output.write_text(text)
        err_console.print(f"wrote {len(model_list)} models to {output}")
    else:
        sys.stdout.write(text)


@app.command()
def schema(output: Annotated[Path | None, typer.Option("-o", "--output")] = None) -> None:
    """Print the JSON Schema of the stack settings and the catalog (for editors)."""
    from tkf_infra.config import catalog_json_schema

    text = json.dumps(catalog_json_schema(), indent=2) + "\n"
    if output:
        output.write_text(text)
    else:
        sys.stdout.write(text)


# The commands kept in modules of their own register on `app` when imported (after `app` exists).
from tkf_infra.ops import cli_live, cli_models, cli_report  # noqa: E402, F401


def main() -> None:
    """Entry point: usage errors exit 2 with one line; a crash exits 3 with the traceback."""
    import warnings

    # The Automation SDK's event-stream thread warns when the engine dies mid-run; the run's own
    # error (e.g. the state backend gone) is what the operator needs, once.
    warnings.filterwarnings("ignore", message="Error in event stream", category=UserWarning)
    try:
        code = app(standalone_mode=False)
        sys.exit(code if isinstance(code, int) else ExitCode.OK)
    except typer.Exit as done:
        sys.exit(done.exit_code)
    except (typer.BadParameter, typer.Abort) as err:  # pragma: no cover - typer formats these itself
        err_console.print(f"error: {err}")
        sys.exit(ExitCode.USAGE)
    except Exception as err:
        import click

        # typer >= 0.24 raises its vendored click's exceptions (typer.TyperException), not click's.
        if isinstance(err, click.ClickException | typer.TyperException) and hasattr(err, "show"):
            err.show()
            sys.exit(ExitCode.USAGE)
        traceback.print_exc()
        err_console.print("[bold red]tkf-infra crashed[/] (a bug, not your input): please report the traceback above")
        sys.exit(ExitCode.CRASH)
