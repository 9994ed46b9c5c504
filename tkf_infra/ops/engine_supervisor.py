"""Between the CLI and the Pulumi engine: `python -I -S engine_supervisor.py CLI_PID RUN_DIR PULUMI ARGS...`.

Why a process of its own (stdlib only, single-threaded): when the CLI dies, the engine must get
exactly one SIGTERM, i.e. cancel gracefully. The kernel's parent-death signal cannot give that
directly: it fires when the *thread* that started the child ends, and the child is then re-parented
to the next thread of the CLI, and signalled again (prctl(2), PR_SET_PDEATHSIG) — a dying
multi-threaded CLI sends several. The second SIGTERM makes the engine stop at once
(`pkg/backend/cancellation_scope.go`), leaving pending operations. Measured: it happened in about
one run out of three before this process existed.

So this process takes the parent-death signal (SIGUSR1, on Linux), and turns any number of them
into one SIGTERM to the engine; every SIGINT or SIGTERM the CLI sends on purpose is relayed as is.
It is also the engine's subreaper (PR_SET_CHILD_SUBREAPER): an engine that crashes leaves its
language host and providers running — measured: the pinned engine panics after a state backend
outage (docs/operations.md) and they lingered, re-parented to init. Here they are re-parented to
this process instead, which ends them once the engine has exited.

It exits with the engine's exit code, and removes RUN_DIR (the engine's output files) when the CLI
that would have removed it is gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36  # linux/prctl.h
_ORPHAN_GRACE_S = 10.0  # SIGTERM first; SIGKILL whatever still runs after this


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def _end_orphans() -> None:
    """End the engine's descendants left behind (re-parented here), then reap them."""
    deadline = time.monotonic() + _ORPHAN_GRACE_S
    while kids := _children(os.getpid()):
        for kid in kids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(kid, signal.SIGTERM if time.monotonic() < deadline else signal.SIGKILL)
        time.sleep(0.1)
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break


def main(argv: list[str]) -> int:
    cli_pid, run_dir, command = int(argv[1]), argv[2], argv[3:]
    engine: int | None = None
    early: list[int] = []  # signals that came before the engine existed
    parent_gone = False

    def send(signum: int) -> None:
        if engine is None:
            early.append(signum)
        else:
            os.kill(engine, signum)

    def on_parent_death(_signum: int, _frame: FrameType | None) -> None:
        nonlocal parent_gone
        if not parent_gone:
            parent_gone = True
            send(signal.SIGTERM)

    def relay(signum: int, _frame: FrameType | None) -> None:
        send(signum)

    signal.signal(signal.SIGINT, relay)
    signal.signal(signal.SIGTERM, relay)
    if sys.platform.startswith("linux"):
        import ctypes

        signal.signal(signal.SIGUSR1, on_parent_death)
        libc = ctypes.CDLL(None)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGUSR1)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1)
    if os.getppid() != cli_pid:  # the CLI died before the line above
        on_parent_death(signal.SIGUSR1, None)
    pid = os.fork()
    if pid == 0:  # the engine (exec restores default signal handling)
        os.execv(command[0], command)
    engine = pid
    for signum in early:
        os.kill(engine, signum)
    _, status = os.waitpid(engine, 0)
    if sys.platform.startswith("linux"):
        _end_orphans()
    if parent_gone:
        import shutil

        shutil.rmtree(run_dir, ignore_errors=True)
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
