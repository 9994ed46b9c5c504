"""What every command module of the CLI shares: the typer `app` they register on, the error console, the
common options, and how a stack is opened with an operator's problem reported as one line and its exit code.

Why a module of its own: cli.py and the command modules (cli_models.py, cli_live.py) all use these, and
cli.py imports the command modules to register them; with these in cli.py the two imported each other.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from tkf_infra.exit_codes import ExitCode, describe

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="tkf-infra: preview, deploy and inspect the LLM inference fleet.",
                  epilog="Exit codes:\n\n" + describe().replace("\n", "\n\n"))
err_console = Console(stderr=True)

StackOpt = Annotated[str, typer.Option("--stack", "-s", help="Stack name (dev, prod, ...).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print a machine-readable summary on stdout.")]


def fail(message: str, code: int = ExitCode.USAGE) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


@contextlib.contextmanager
def operator_errors(stack_name: str) -> Iterator[None]:
    """An operator's problem (passphrase, lock, backend down) as one line and its exit code."""
    from pulumi import automation as auto

    from tkf_infra.ops import stacks

    try:
        yield
    except stacks.OperatorError as err:
        raise fail(str(err), err.code) from None
    except auto.CommandError as err:
        known = stacks.engine_error(str(err), stack_name, stacks.engine_env(stack_name)["PULUMI_BACKEND_URL"])
        if known is None:
            raise
        raise fail(str(known), known.code) from None


def open_stack(stack_name: str, create: bool = False) -> Any:
    """The project's stack, or a one-line error (exit 2 for usage, see the exit-code table)."""
    from tkf_infra.ops import stacks

    with operator_errors(stack_name):
        return stacks.open_stack(stack_name, create=create)


def read_outputs(stack_name: str) -> tuple[Any, dict[str, Any]]:
    """The stack and its outputs, or a one-line error."""
    from tkf_infra.ops import stacks

    st = open_stack(stack_name)
    with operator_errors(stack_name):
        return st, stacks.stack_outputs(st)
