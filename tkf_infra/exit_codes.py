"""Exit codes of every `python -m tkf_infra` command: one table, so CI can tell outcomes apart.

Why a table of its own: each command used to pick numbers locally, and "3" meant "crash" in one
command and "Prometheus unavailable" in another. Scripts branch on these; they never change meaning.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    REFUSED = 1
    USAGE = 2
    CRASH = 3
    UNAVAILABLE = 4
    NO_DATA = 5
    LOCKED = 6
    INTERRUPTED = 7


MEANING: dict[ExitCode, str] = {
    ExitCode.OK: "everything went through",
    ExitCode.REFUSED: "the plan refused something: a rejected entry, a model that does not fit, a failed "
                      "deploy, a policy violation, a capacity deviation `status` flags",
    ExitCode.USAGE: "the command was used wrongly (unknown stack, bad option, missing passphrase): one line",
    ExitCode.CRASH: "tkf-infra itself failed (a bug): the traceback is printed for the report",
    ExitCode.UNAVAILABLE: "a service the command needs did not answer (the state backend, Prometheus, the "
                          "Hugging Face Hub)",
    ExitCode.NO_DATA: "the service answered but had nothing for this stack (e.g. no vLLM metrics yet)",
    ExitCode.LOCKED: "another run holds the stack's lock, or a killed run left it: the message names the holder "
                     "and how to clear a stale lock (`unlock`)",
    ExitCode.INTERRUPTED: "interrupted (SIGINT/SIGTERM): the engine stopped cleanly after the operations in flight; "
                          "run the command again to finish",
}


def describe() -> str:
    """The table as text, for `--help` epilogues and docs."""
    return "\n".join(f"{code.value}  {MEANING[code]}" for code in ExitCode)
