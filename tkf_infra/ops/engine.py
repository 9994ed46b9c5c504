"""How the CLI runs the Pulumi engine so that an interrupted run stops cleanly and leaves nothing behind.

Why not the Automation API's default runner: it starts `pulumi` in the CLI's process group with its
output on pipes. Measured on the pinned engine (docs/operations.md): a Ctrl-C reaches both the CLI
and the engine, and a signal that ends the CLI ends the engine at its next write (a broken pipe) —
either way mid-apply, leaving the stack's lock, pending operations and orphaned plugin processes.

Here instead:
- the engine runs in a session of its own, so a terminal's Ctrl-C reaches only the CLI, which
  forwards exactly one signal per signal it receives: the first makes the engine cancel gracefully
  (finish the operations in flight, save the state, release the lock); a second one makes it stop at
  once (`pkg/backend/cancellation_scope.go` of the engine: first SIGINT/SIGTERM cancels, the next
  terminates);
- its output goes to files the CLI follows, not pipes, so the CLI's death cannot break its writes;
- on Linux it gets exactly one SIGTERM when the CLI dies (`engine_supervisor`, its parent, holds the
  parent-death signal), so even `kill -9` of the CLI turns into that graceful cancel instead of an
  orphaned half-run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from pulumi import automation as auto
from pulumi.automation import CommandResult, OnOutput
from pulumi.automation.errors import create_command_error

_POLL_SECONDS = 0.05  # how often the output files are read while the engine runs
_RUNNING: set[subprocess.Popen[bytes]] = set()
_RUNNING_LOCK = threading.Lock()


def _launcher(run_dir: str) -> list[str]:
    """The engine's parent: `engine_supervisor.py` (one SIGTERM to the engine when the CLI dies)."""
    supervisor = Path(__file__).with_name("engine_supervisor.py")
    return [sys.executable, "-I", "-S", str(supervisor), str(os.getpid()), run_dir]


def _follow(path: Path, on_line: OnOutput | None, done: threading.Event) -> None:
    """Hand each complete line of a file that is still being written to `on_line`, until `done`."""
    buf = ""
    with path.open(encoding="utf-8", errors="replace", newline="") as f:
        while True:
            finished = done.is_set()  # read before the file, so the last write is never missed
            chunk = f.read()
            if chunk:
                buf += chunk
                *lines, buf = buf.split("\n")
                for line in lines:
                    if on_line:
                        on_line(line.rstrip())
            elif finished:
                if buf and on_line:
                    on_line(buf.rstrip())
                return
            else:
                done.wait(_POLL_SECONDS)


class EngineCommand(auto.PulumiCommand):
    """`pulumi`, run in its own session with file output and a parent-death signal (module docstring)."""

    def run(self, args: list[str], cwd: str, additional_env: Mapping[str, str],
            on_output: OnOutput | None = None, on_error: OnOutput | None = None) -> CommandResult:
        sep = args.index("--") if "--" in args else len(args)
        if "--non-interactive" not in args[:sep]:  # as the Automation API runs every command
            args.insert(0, "--non-interactive")
        env = {**os.environ, **additional_env, "PULUMI_AUTOMATION_API": "true"}
        if os.path.isabs(self.command):
            env["PATH"] = os.pathsep.join([os.path.dirname(self.command), env.get("PATH", "")])
        with tempfile.TemporaryDirectory(prefix="tkf-engine-") as tmp:
            out_path, err_path = Path(tmp, "stdout"), Path(tmp, "stderr")
            with out_path.open("wb") as out, err_path.open("wb") as err:
                proc = subprocess.Popen([*_launcher(tmp), self.command, *args], stdin=subprocess.DEVNULL,
                                        stdout=out, stderr=err, cwd=cwd, env=env, start_new_session=True)
            done = threading.Event()
            followers = [threading.Thread(target=_follow, args=(p, cb, done), daemon=True)
                         for p, cb in ((out_path, on_output), (err_path, on_error))]
            with _RUNNING_LOCK:
                _RUNNING.add(proc)
            try:
                for t in followers:
                    t.start()
                code = proc.wait()
            finally:
                with _RUNNING_LOCK:
                    _RUNNING.discard(proc)
                done.set()
                for t in followers:
                    t.join()
            stdout, stderr = (p.read_text(encoding="utf-8", errors="replace") for p in (out_path, err_path))
        result = CommandResult(stdout="\n".join(ln.rstrip() for ln in stdout.splitlines()),
                               stderr="\n".join(ln.rstrip() for ln in stderr.splitlines()), code=code)
        if code != 0:
            raise create_command_error(result)
        return result


def forward(signum: int) -> int:
    """Send `signum` to every engine this process is running; returns how many got it."""
    with _RUNNING_LOCK:
        procs = list(_RUNNING)
    sent = 0
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signum)
            sent += 1
    return sent


@dataclass
class Interrupts:
    """Signals received while `forwarding_interrupts` was active."""

    count: int = 0
    last: int | None = None

    @property
    def received(self) -> bool:
        return self.count > 0


@contextlib.contextmanager
def forwarding_interrupts(notify: Callable[[str], None]) -> Iterator[Interrupts]:
    """SIGINT / SIGTERM go to the running engine instead of killing the CLI (see the module docstring).

    Installed explicitly, whatever the inherited disposition: a CLI started in the background of a
    non-interactive shell inherits SIGINT ignored, and must still stop cleanly when asked to.
    """
    seen = Interrupts()

    def handler(signum: int, _frame: FrameType | None) -> None:
        seen.count += 1
        seen.last = signum
        name = signal.Signals(signum).name
        if seen.count == 1:
            notify(f"{name} received: the engine finishes the operations in flight, saves the state and releases "
                   "the stack's lock; send it again to stop at once (that can leave pending operations)")
        else:
            notify(f"{name} received again: stopping the engine at once")
        forward(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield seen
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
