"""`status` and `calibrate`: the commands that read the running fleet (Prometheus, the cluster).

Registered on `app` (tkf_infra/ops/cli_common.py) when tkf_infra/ops/cli.py imports this one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from tkf_infra.exit_codes import ExitCode
from tkf_infra.ops.cli_common import JsonOpt, StackOpt, app, err_console, fail, read_outputs


@app.command()
def status(
    stack: StackOpt = "dev",
    prometheus_url: Annotated[str | None, typer.Option(help="Default: the stack's prometheusUrl.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Per model: its lifecycle phase from the cluster (kubeconfig stacks) and the capacity signal from
    Prometheus: replicas, queue depth, KV-cache use, hit rate, TTFT."""
    from tkf_infra.live import lifecycle
    from tkf_infra.live.status_view import status_command
    from tkf_infra.ops import stacks
    from tkf_infra.outputs import ENDPOINTS_OUTPUT, REJECTED_OUTPUT, endpoint

    st, outs = read_outputs(stack)
    catalog = stacks.stack_catalog(st)
    url = prometheus_url or (catalog.settings.prometheus_url if catalog else None)
    endpoints = list((outs.get(ENDPOINTS_OUTPUT) or {}).values())
    # Each model's phase from what the cluster's controllers wrote, when the stack deploys to one.
    cluster = catalog.settings.cluster if catalog else None
    # During the first `up` (no outputs yet) or for a model an `up` is adding, the catalog names the model.
    known = {str(ep.get("name")) for ep in endpoints}
    unpublished = [endpoint(m, catalog.settings.namespaces.serving) for m in catalog.models
                   if m.name not in known] if catalog else []
    rows: list[lifecycle.Lifecycle] | None = None
    unreadable: str | None = None
    if cluster is not None and cluster.mode == "kubeconfig" and cluster.kubeconfig:
        rows, unreadable = lifecycle.lifecycle_of(endpoints + unpublished, cluster.kubeconfig, cluster.context)
        refused = {str(x.get("name")): str(x.get("stage")) for x in outs.get(REJECTED_OUTPUT) or []
                   if isinstance(x, dict)}
        rows = rows and [lifecycle.unpublished(r, refused.get(r.model)) if r.model not in known else r
                         for r in rows]
    if not url and rows is None:
        raise fail(f"stack {stack!r} sets no prometheusUrl; pass --prometheus-url"
                    + (f" (and its cluster could not be read: {unreadable})" if unreadable else ""))
    failed = rows is not None and any(r.phase.value == "Failed" for r in rows)
    if not url:  # the cluster's view only
        assert rows is not None
        print(json.dumps({"lifecycle": {r.model: r.to_json() for r in rows}}, indent=2) if as_json
              else lifecycle.render_table(rows))
        raise typer.Exit(ExitCode.REFUSED if failed else ExitCode.OK)
    text, code = status_command(endpoints, url, as_json)
    if rows is not None and as_json:
        doc = json.loads(text)
        doc["lifecycle"] = {r.model: r.to_json() for r in rows}
        text = json.dumps(doc, indent=2)
    elif rows is not None:
        text = lifecycle.render_table(rows) + "\n\n" + text
    elif unreadable:
        text += f"\nlifecycle: the cluster could not be read: {unreadable}"
    print(text)
    raise typer.Exit(ExitCode.REFUSED if failed and code == ExitCode.OK else code)


@app.command()
def calibrate(
    output: Annotated[Path, typer.Option("-o", "--output", help="Case file to write (a JSON list of cases).")],
    stack: StackOpt = "dev",
    prometheus_url: Annotated[str | None, typer.Option(help="Default: the stack's prometheusUrl.")] = None,
    append: Annotated[bool, typer.Option(help="Merge into an existing case file (a case_id seen again is replaced).")]
    = False,
) -> None:
    """Write each running model's KV cache, as its vLLM reports it, as calibration cases for the sizing engine."""
    from tkf_infra.hub.lock import load_lock
    from tkf_infra.live.calibrate import calibrate_command
    from tkf_infra.ops import stacks
    from tkf_infra.outputs import ENDPOINTS_OUTPUT

    st, outs = read_outputs(stack)
    catalog = stacks.stack_catalog(st)
    url = prometheus_url or (catalog.settings.prometheus_url if catalog else None)
    if not url:
        raise fail(f"stack {stack!r} sets no prometheusUrl; pass --prometheus-url")
    text, code = calibrate_command(list((outs.get(ENDPOINTS_OUTPUT) or {}).values()), url, output, stack=stack,
                                   catalog=catalog, lock=load_lock(), append=append)
    err_console.print(escape(text), highlight=False, soft_wrap=True)
    raise typer.Exit(code)
