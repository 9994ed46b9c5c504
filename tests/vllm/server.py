"""Start a real server process (vLLM from a pod's argv + env, the LiteLLM proxy) and stop it leaving
nothing behind.

The process gets what a container would: its own process group (SIGTERM to the group is what the
kubelet's stop does to the container's processes), a port on 127.0.0.1 nobody else can take (it binds
port 0 itself, or is given a reservation: tests/ports.py), and fresh directories
for the pod's emptyDir mounts (``HOME`` → ``/home``, ``TMPDIR`` → ``/tmp``): ZMQ sockets and torch's
inductor scratch land there, never in the user's home or the shared /tmp. One exception, like a node's
warm cache: vLLM's compile cache (``VLLM_CACHE_ROOT``, which holds torch.compile's and inductor's
artifacts) is one directory beside the vLLM virtualenv, shared by every start of every run (see
``compile_cache``). ``vllm`` is found on ``PATH`` (the vLLM virtualenv first), as in the image.

Teardown checks what a user would notice: every process of the group gone after SIGTERM (SIGKILL
is a failure, not a fallback), the port free again, and no new POSIX shared-memory objects.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import httpx

from tests.ports import Reservation, listening_port

START_TIMEOUT_S = 600  # cold compile on a busy 2-core CI machine; ~100 s measured idle
STOP_TIMEOUT_S = 60

#: For every vLLM process the tests run (servers, the parser oracle, the route listing): usage
#: statistics would try to reach the internet.
NO_TELEMETRY_ENV = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
#: Not in the pod spec, set for every vLLM server: the test host is not a pod (the directories
#: replace the pod's emptyDirs, see module doc), and pods share its two cores where a cluster gives
#: each pod cores of its own. vLLM's CPU worker otherwise pins its compute thread ("auto": core 0 for
#: every instance), and a worker pinned and busy starved every process that came to its core:
#: torch's CPU probe at import pins itself to each core in turn (strace: sched_setaffinity [0], [1],
#: [0 1]), so a pod starting beside a serving one stalled there for minutes (py-spy,
#: /proc/PID/stack: sched_setaffinity). Measured on this machine, a probe process moving onto the
#: core of a serving pod got 7k-50k loop turns in 5 s with the worker pinned, 13-15 M unpinned.
#: One thread per worker, as the pinned setting gave it. ``PYTHONPATH``: host_site/sitecustomize.py asks
#: Linux for AMX before vLLM 0.32.0's CPU attention uses it (its docstring: vLLM's bug, SIGILL on AMX hosts).
HOST_ENV = {**NO_TELEMETRY_ENV, "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(Path(__file__).parent / "host_site")}


def port_is_listening(port: int) -> bool:
    """Whether any socket LISTENs on ``port`` (any address), from /proc/net/tcp{,6}; TIME_WAIT is not."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                return True
    return False


def group_members(pgid: int) -> list[str]:
    """Processes still in a process group: ``pid cmdline`` of each, read from /proc."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(fields[2]) == pgid:  # fields after "(comm)": state, ppid, pgrp, ...
            out.append(f"{stat.parent.name} {cmdline.strip()[:160]}")
    return out


def shm_objects() -> set[str]:
    return {p.name for p in Path("/dev/shm").iterdir()} if Path("/dev/shm").is_dir() else set()


def shm_in_use(names: set[str]) -> set[str]:
    """Those of ``names`` a living process maps or holds open: another server's, not a leak (two vLLM
    run side by side in a key rotation, each creating objects while the other runs)."""
    used: set[str] = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            held = {line.rsplit("/dev/shm/", 1)[1].split()[0] for line in (proc / "maps").read_text().splitlines()
                    if "/dev/shm/" in line}
            held |= {os.readlink(fd).rsplit("/dev/shm/", 1)[1] for fd in (proc / "fd").iterdir()
                     if os.readlink(fd).startswith("/dev/shm/")}
        except OSError:  # gone meanwhile, or not ours to read
            continue
        used |= held & names
    return used


@dataclass
class Service:
    """A running server: its base URL, the API key it was given (None = open), its log."""

    name: str
    url: str
    port: int
    api_key: str | None
    process: subprocess.Popen[bytes]
    log: Path
    started_in_s: float
    shm_before: set[str] | None
    """/dev/shm before the start; None: not checked (a process that cannot create any)."""
    reservation: Reservation | None = None
    """The port's reservation when the program was told a port, given back once it has stopped."""
    stopped: bool = False

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def log_tail(self, chars: int = 4000) -> str:
        """The log's end, and its first traceback (a worker's root cause comes long before the end)."""
        text = self.log.read_text(errors="replace")
        first = text.find("Traceback")
        head = f"{text[first:first + 3000]}\n[...]\n" if 0 <= first < len(text) - chars else ""
        return head + text[-chars:]

    def stop(self, *, check_shm: bool = True) -> None:
        """SIGTERM to the process group; fail loudly on anything left behind. Once: later calls do nothing.

        ``check_shm=False`` while another server started after this one still runs: a name in /dev/shm
        does not say whose it is (vLLM's resource tracker keeps its semaphores' names without mapping
        them, measured), so the caller checks /dev/shm once every server it overlapped has stopped."""
        if self.stopped:
            return
        self.stopped = True
        try:
            self._stop(check_shm)
        finally:
            if self.reservation is not None:
                self.reservation.release()

    def _stop(self, check_shm: bool) -> None:
        pgid = self.process.pid  # start_new_session: the leader's pid is the group id
        if self.process.poll() is None:
            os.killpg(pgid, signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(pgid, signal.SIGKILL)
            self.process.wait()
            raise AssertionError(f"{self.name} did not exit within {STOP_TIMEOUT_S} s of SIGTERM:\n"
                                 f"{self.log_tail()}") from None
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while (left := group_members(pgid)) and time.monotonic() < deadline:
            time.sleep(0.5)
        if left:
            os.killpg(pgid, signal.SIGKILL)
            raise AssertionError(f"processes of {self.name}'s group outlived it after SIGTERM: {left}")
        listening = self.port and port_is_listening(self.port)
        assert not listening, f"something still listens on port {self.port} after {self.name} exited"
        new = shm_objects() - self.shm_before if self.shm_before is not None and check_shm else set()
        leaked = new - shm_in_use(new)
        assert not leaked, f"{self.name} left shared-memory objects in /dev/shm: {sorted(leaked)}"


def start_service(name: str, argv: list[str], env: Mapping[str, str], *, port: Reservation | None,
                  health_path: str, workdir: Path, api_key: str | None = None,
                  path: str = "/usr/local/bin:/usr/bin:/bin", check_shm: bool = True) -> Service:
    """Start ``argv`` in its own process group with exactly ``env`` (plus PATH) and wait for ``health_path``.

    ``port``: None when ``argv`` has the program bind port 0 (the port it got is read from /proc once it
    listens: tests/ports.py ``listening_port``); else the reservation of the port ``argv`` names, given back
    when the service stops."""
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / f"{name}.log"
    full_env = {"PATH": path, "LANG": "C.UTF-8", **env}
    shm_before = shm_objects() if check_shm else None
    started = time.monotonic()
    with log.open("wb") as out:
        process = subprocess.Popen(argv, env=full_env, cwd=workdir, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    server = Service(name, "", 0, api_key, process, log, 0.0, shm_before, port)
    try:
        server.port = port.port if port is not None else listening_port(process.pid, alive=process,
                                                                          timeout=START_TIMEOUT_S)
    except (AssertionError, TimeoutError) as err:
        _stop_after_failed_start(server, f"{name} did not come to listen on one port: {err}")
    server.url = f"http://127.0.0.1:{server.port}"
    deadline = started + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            _stop_after_failed_start(server, f"{name} exited with {process.returncode} before {health_path} "
                                             f"answered")
        try:
            if httpx.get(f"{server.url}{health_path}", timeout=2).status_code == 200:
                server.started_in_s = time.monotonic() - started
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    _stop_after_failed_start(server, f"{name} did not answer {health_path} within {START_TIMEOUT_S} s")


def _stop_after_failed_start(server: Service, why: str) -> NoReturn:
    """Raise ``why`` with the log's tail, after stopping what is left; a failure to stop is added to the
    message instead of replacing it (the start's failure is the one to read first)."""
    tail = server.log_tail()
    try:
        server.stop()
    except AssertionError as err:
        why += f" (and stopping it failed too: {err})"
    raise AssertionError(f"{why}:\n{tail}")


def compile_cache(venv: Path) -> dict[str, str]:
    """``VLLM_CACHE_ROOT`` for a server started from ``venv``: ``<venv>-compile-cache`` beside it.

    Why: a pod's fresh ``HOME`` makes every start compile the model with torch.compile (inductor, C++ on
    CPU) from nothing, and a start is ~a dozen per test run. Measured on this machine with a Go build on
    both cores, the tiny Qwen2 at the dev catalog's 4096 tokens: 86–89 s to ``/health`` cold (38 s of it
    in "init engine": compile and warm-up), 54 s with this cache warm (19 s). vLLM keys the cache by
    its config and code hashes and recompiles on a miss or an unreadable entry, so a shared cache
    changes how long a start takes, not what it serves. Kept beside the virtualenv (a new vLLM pin is a
    new virtualenv, so a new cache), so later runs start warm too."""
    return {"VLLM_CACHE_ROOT": str(venv.parent / f"{venv.name}-compile-cache")}


def start_vllm(argv: list[str], env: Mapping[str, str], *, port: Reservation | None, api_key: str | None, venv: Path,
               workdir: Path) -> Service:
    """A pod's command + args (already localized), ``vllm`` found in the vLLM virtualenv as in the image."""
    return start_service("vllm", argv, {**HOST_ENV, **compile_cache(venv), **env}, port=port, health_path="/health",
                         workdir=workdir, api_key=api_key, path=f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin")


def start_litellm(name: str, config: Path, env: Mapping[str, str], *, workdir: Path,
                  port: Reservation | None = None) -> Service:
    """The LiteLLM proxy (this virtualenv's ``litellm``) on ``config``, one worker, on a port it binds itself
    (or the reserved ``port``: a server that must appear at an address named beforehand)."""
    litellm = Path(sys.executable).parent / "litellm"
    return start_service(name, [str(litellm), "--config", str(config), "--host", "127.0.0.1", "--port",
                                str(port.port if port else 0), "--num_workers", "1"],
                         env, port=port, health_path="/health/liveliness", workdir=workdir, check_shm=False)
