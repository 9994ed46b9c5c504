"""Ports for the servers the tests start, chosen so that nothing can take one between choosing and binding.

Why: the suite runs several pytest processes side by side (scripts/test_suite.sh), each starting API servers,
controller managers, vLLM, LiteLLM and Prometheus, and other checkouts' suites may run on the same machine.
The old way — bind port 0, read the number, close, hand it to a server that binds it seconds later — let
another server take the number in between (a CI run: the API server's call to KServe's webhook was answered
by someone else's plain-HTTP server, "tls: first record does not look like a TLS handshake").

Three ways, in order of preference:

- **The server binds port 0 itself** and the harness reads the port it got: an in-process server is
  handed :func:`listener`'s socket; a program told ``--port 0`` (or ``HOST:0``) is asked the kernel for its
  listening socket (:func:`listening_port`, from /proc: no log format to parse).
- **A port where connections are refused** (a URL to something that is down): :func:`refused_port`
  holds a bound socket that does not listen, so the port stays refused and nobody else can take it.
- **A reserved port** when a server must be named before it starts (a webhook port the API server is
  given at its own start; a server that restarts on the same port; a replica that appears later):
  :func:`reserve` hands out a port from a block outside the kernel's ephemeral range
  (``/proc/sys/net/ipv4/ip_local_port_range``), so no ``bind(0)`` and no outgoing connection anywhere on
  the machine is ever given it, and claims it with a byte-range lock (``fcntl.lockf``, one byte per port)
  on one file every process shares (``/tmp/tkf-ports-<uid>.lock``), so no other process that reserves
  through this module gets it while it is held. The lock lives as long as the reservation (or the
  process: the kernel drops a dead process's locks), not as long as the server: once the server has
  bound the port, :func:`reserve` skips it anyway (it test-binds each candidate).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

LOCK_FILE = Path(os.environ.get("TKF_PORTS_LOCK", f"/tmp/tkf-ports-{os.getuid()}.lock"))
#: How many ports below the ephemeral range :func:`reserve` hands out from.
BLOCK_SIZE = 10000
LOCALHOST = "127.0.0.1"
_LISTEN_STATE = "0A"  # TCP_LISTEN in /proc/net/tcp's `st` column


def listener(host: str = LOCALHOST) -> socket.socket:
    """A TCP socket bound to a port the kernel picks, listening: an in-process server serves on it
    (``socketserver``: ``bind_and_activate=False`` and this socket) and its port is ``getsockname()[1]``."""
    sock = socket.socket()
    sock.bind((host, 0))
    sock.listen()
    return sock


@contextlib.contextmanager
def refused_port(host: str = LOCALHOST) -> Iterator[int]:
    """A port on which every connection is refused while the context lasts: bound, never listening.
    Nothing else can bind it meanwhile, so "nothing listens there" stays true for the whole test."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        yield int(sock.getsockname()[1])


# --------------------------------------------------------------------------------------------
# Reserved ports
# --------------------------------------------------------------------------------------------


def reserved_block() -> range:
    """The ports :func:`reserve` hands out: the ``BLOCK_SIZE`` ports right below the ephemeral range."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    if low - BLOCK_SIZE < 1024:
        raise RuntimeError(f"the ephemeral port range starts at {low}: no {BLOCK_SIZE} ports below it to reserve "
                           "from (sysctl net.ipv4.ip_local_port_range)")
    return range(low - BLOCK_SIZE, low)


class _Claims:
    """This process's claims: one open lock file (closing any descriptor of it would drop every lock the
    process holds, so there is only this one) and the ports held, since a process's own locks never
    conflict with each other."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._fd: int | None = None
        self._pid = 0
        self.held: set[int] = set()

    def _lock_fd(self) -> int:
        if self._fd is None or self._pid != os.getpid():  # a forked child inherits no lock: start afresh
            self._fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
            self._pid, self.held = os.getpid(), set()
        return self._fd

    def claim(self, port: int, host: str) -> bool:
        with self._mutex:
            if port in self.held:
                return False
            fd = self._lock_fd()
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port)
            except OSError:
                return False  # another process holds it
            if not _bindable(port, host):
                fcntl.lockf(fd, fcntl.LOCK_UN, 1, port)
                return False
            self.held.add(port)
            return True

    def release(self, port: int) -> None:
        with self._mutex:
            if port in self.held and self._fd is not None and self._pid == os.getpid():
                fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, port)
            self.held.discard(port)


_CLAIMS = _Claims()


def _bindable(port: int, host: str) -> bool:
    """Nothing listens on ``port`` and nothing else holds it (a bind without SO_REUSEADDR would fail)."""
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


class Reservation:
    """A port held for a server that is told it before it starts; :meth:`release` (or the ``with``
    block's end) gives it back. Holding it after the server has bound it costs nothing."""

    def __init__(self, port: int) -> None:
        self.port = port

    def release(self) -> None:
        _CLAIMS.release(self.port)

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"Reservation({self.port})"


def reserve(host: str = LOCALHOST) -> Reservation:
    """A port of :func:`reserved_block` that no other reservation holds and nothing is bound to, held for
    the caller (see the module doc). Starts at a random place in the block, so processes rarely meet."""
    block = reserved_block()
    start = random.randrange(len(block))
    for i in range(len(block)):
        port = block[(start + i) % len(block)]
        if _CLAIMS.claim(port, host):
            return Reservation(port)
    raise RuntimeError(f"every port of {block.start}-{block.stop - 1} is reserved or in use")


# --------------------------------------------------------------------------------------------
# The port a program bound itself
# --------------------------------------------------------------------------------------------


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    with contextlib.suppress(OSError):  # gone meanwhile
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:["):-1])
    return inodes


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process ``pid`` itself has a listening socket on (IPv4 or IPv6), from /proc."""
    inodes = _socket_inodes(pid)
    ports = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == _LISTEN_STATE and fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def listening_port(pid: int, *, alive: object = None, timeout: float = 600.0, ignore: frozenset[int] = frozenset()
                   ) -> int:
    """The one TCP port process ``pid`` (a program told to bind port 0) comes to listen on, ``ignore`` aside.

    ``alive``: a ``subprocess.Popen`` whose exit ends the wait (raises). Fails on a process that listens
    on more than one port: which of them is the server's would be a guess."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ports = listening_ports(pid) - ignore
        if len(ports) == 1:
            return ports.pop()
        if len(ports) > 1:
            raise AssertionError(f"process {pid} listens on {sorted(ports)}: which one is the server's?")
        poll = getattr(alive, "poll", None)
        if poll is not None and poll() is not None:
            raise AssertionError(f"process {pid} exited before it listened on any port")
        time.sleep(0.1)
    raise TimeoutError(f"process {pid} listened on no port within {timeout:.0f} s")
