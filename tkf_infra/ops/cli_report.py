"""`report`: a picture of a stack's plan, offline (tkf_infra/ops/report.py says how it is planned).

Registered on `app` (tkf_infra/ops/cli_common.py) when tkf_infra/ops/cli.py imports this one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from tkf_infra.exit_codes import ExitCode
from tkf_infra.ops.cli_common import StackOpt, app, err_console, fail


@app.command()
def report(
    output: Annotated[Path, typer.Option("-o", "--output", help="The HTML page to write (the SVG goes beside it).")],
    stack: StackOpt = "dev",
) -> None:
    """Draw the stack's plan: each pool's nodes and GPUs and what holds them, each model's fit, the headroom and
    the refusals, as one static HTML page and an SVG of the layout beside it (no server, no network)."""
    from tkf_infra.config import SettingsError
    from tkf_infra.ops.report import offline_plan, report_data
    from tkf_infra.ops.report_html import layout_svg, page
    from tkf_infra.outputs import PROBLEMS_OUTPUT, REJECTED_OUTPUT

    try:
        plan, warnings = offline_plan(stack)
    except FileNotFoundError as err:
        raise fail(str(err)) from None
    except SettingsError as err:
        raise fail(err.render()) from None
    data = report_data(plan, stack, warnings)
    svg = layout_svg(data)
    svg_path = output.with_suffix(".svg")
    try:
        output.write_text(page(data, svg))
        svg_path.write_text(svg)
    except OSError as err:
        raise fail(f"cannot write the report to {output} ({err}); choose a writable path with -o") from None
    gpus = sum(len(n["gpus"]) for p in data["pools"] for n in p["nodes"])
    err_console.print(escape(f"wrote {output} and {svg_path}: {len(data['models'])} model(s), {gpus} GPU(s), "
                             f"{len(data[REJECTED_OUTPUT])} refused"), highlight=False)
    raise typer.Exit(ExitCode.REFUSED if data[REJECTED_OUTPUT] or data[PROBLEMS_OUTPUT] else ExitCode.OK)
