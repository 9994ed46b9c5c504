"""tests/ports.py: no two servers of the suite (nor anything else binding port 0) can race for one port.

The case that failed CI: two pytest processes side by side, each naming ports to servers that bind them
later. Here two processes each reserve many ports at once from several threads, and only then bind every
one of them (as a webhook port is named to the API server long before the manager binds it), beside as
many sockets the kernel gives port 0: no bind may fail and no port may be handed out twice. The same run
with a lock file per process (no claim visible across processes) must collide, or the test proves nothing.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.ports import listening_port, refused_port, reserve, reserved_block

ROOT = Path(__file__).resolve().parents[1]
PER_PROCESS = 400  # ports each process reserves; two processes drawing this many without claims meet ~16 times

_CHILD = textwrap.dedent("""
    import json, socket, sys, threading
    from tests.ports import reserve
    count = int(sys.argv[1])
    reserved, lock = [], threading.Lock()

    def take(n):
        for _ in range(n):
            r = reserve()
            with lock:
                reserved.append(r.port)

    threads = [threading.Thread(target=take, args=(count // 4,)) for _ in range(4)]
    for t in threads: t.start()
    for t in threads: t.join()
    print("reserved", flush=True)
    sys.stdin.readline()  # the parent says when both processes have reserved everything
    held, failures, kernel = [], [], []
    for port in reserved:
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port)); s.listen()
        except OSError as err:
            failures.append(f"{port}: {err}")
        held.append(s)
        k = socket.socket(); k.bind(("127.0.0.1", 0)); k.listen(); held.append(k)
        kernel.append(k.getsockname()[1])
    print(json.dumps({"reserved": reserved, "failures": failures, "kernel": kernel}))
    sys.stdout.flush()
    sys.stdin.read()  # hold every socket until the parent has read both processes' reports
""")


def _side_by_side(tmp_path: Path, lock_files: tuple[str, str] | None) -> list[dict[str, list[Any]]]:
    procs = []
    for i in range(2):
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
        if lock_files:
            env["TKF_PORTS_LOCK"] = str(tmp_path / lock_files[i])
        procs.append(subprocess.Popen([sys.executable, "-c", _CHILD, str(PER_PROCESS)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      env=env, cwd=ROOT, text=True))
    reports = []
    try:
        for p in procs:
            assert p.stdout is not None and p.stdin is not None
            assert p.stdout.readline() == "reserved\n", f"a reserving process failed: {p.stderr and p.stderr.read()}"
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("bind\n")
            p.stdin.flush()
        for p in procs:
            assert p.stdout is not None
            reports.append(json.loads(p.stdout.readline()))
    finally:
        for p in procs:
            p.communicate(timeout=60)
    return reports


def test_two_processes_reserving_side_by_side_never_get_one_port(tmp_path: Path) -> None:
    a, b = _side_by_side(tmp_path, None)
    assert a["failures"] == [] and b["failures"] == [], "a reserved port was taken before its holder bound it"
    assert len(set(a["reserved"])) == len(set(b["reserved"])) == PER_PROCESS
    assert not set(a["reserved"]) & set(b["reserved"])
    block = reserved_block()
    assert all(p in block for p in a["reserved"] + b["reserved"])
    assert not set(a["kernel"] + b["kernel"]) & set(block), "the kernel gave port 0 a port of the reserved block"


def test_without_a_claim_every_process_sees_the_same_run_collides(tmp_path: Path) -> None:
    """The control: each process with a lock file of its own (claims invisible to the other) meets the other."""
    a, b = _side_by_side(tmp_path, ("a.lock", "b.lock"))
    assert set(a["reserved"]) & set(b["reserved"])
    assert a["failures"] or b["failures"]


def test_a_reservation_is_not_handed_out_again_until_released() -> None:
    held = [reserve() for _ in range(50)]
    again = reserve()
    try:
        assert again.port not in {r.port for r in held}
    finally:
        for r in [*held, again]:
            r.release()


def test_a_refused_port_refuses_and_cannot_be_taken() -> None:
    with refused_port() as port:
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{port}/", timeout=2)
        with socket.socket() as other, pytest.raises(OSError):
            other.bind(("127.0.0.1", port))


def test_the_port_a_program_bound_itself_is_read_back(tmp_path: Path) -> None:
    server = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "0"], cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port = listening_port(server.pid, alive=server, timeout=60)
        assert port not in reserved_block()
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=10).status_code == 200  # listening: it answers
    finally:
        server.terminate()
        server.wait(timeout=10)
