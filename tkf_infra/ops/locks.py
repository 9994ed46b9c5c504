"""The stack lock of a self-managed (file or S3) state backend: who holds it, and clearing it safely.

Facts from the pinned engine (Pulumi v3.260.0, `pkg/backend/diy/lock.go`, `backend.go`), so nothing
here guesses:
- locking is always on: `update`, `refresh`, `destroy` and `import` take the lock, `preview` does not
  (backend.go:1200-1290); there is no switch (the old `PULUMI_SELF_MANAGED_STATE_LOCKING` is gone);
- a lock is one object `.pulumi/locks/organization/<project>/<stack>/<uuid>.json` under the backend's
  root (lock.go:166-178, backend.go:191-195) holding `{"pid", "username", "hostname", "timestamp"}`
  of the `pulumi` process that took it (lock.go:39-61);
- a run that finds another lock fails, naming each holder (lock.go:63-112); `pulumi cancel` deletes
  every lock of the stack without looking at who holds it (backend.go:1687-1715).

So a run killed before it could release its lock leaves it behind, and every later run is refused.
`clear_stale` is the safe way out: it deletes only locks whose holder is provably gone — same host,
and no process with that pid that started before the lock was written — and, with `force`, locks of
other hosts (which cannot be checked from here); never one whose holder still runs.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs, urlparse

LOCK_DIR = ".pulumi/locks/organization"
#: The engine's refusal when another lock exists (lock.go:87).
ENGINE_LOCKED_MARKER = "the stack is currently locked by"
#: The lock's timestamp and /proc's start time are both wall-clock readings at ~1 s resolution.
_CLOCK_SLACK_S = 2.0


class Holder(StrEnum):
    RUNNING = "running"
    GONE = "gone"
    UNKNOWN = "unknown"  # on another host


@dataclass(frozen=True)
class StackLock:
    key: str
    """Where the lock is (bucket key), for deleting it."""
    where: str
    """The lock as a URL, for messages."""
    pid: int
    username: str
    hostname: str
    timestamp: datetime

    @property
    def holder(self) -> Holder:
        if self.hostname != socket.gethostname():
            return Holder.UNKNOWN
        return Holder.RUNNING if _started_before(self.pid, self.timestamp) else Holder.GONE

    def describe(self) -> str:
        when = self.timestamp.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"{self.username}@{self.hostname} (pid {self.pid}) since {when}"


def _started_before(pid: int, when: datetime) -> bool:
    """Whether a process `pid` runs now and started before `when` — i.e. is the one that wrote the lock
    (a pid is reused only after its process ended, so a live process older than the lock is that one)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (not Linux): a live pid is all we can see
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": field 3 is the state
    if fields[0] in {"Z", "X"}:  # ended, not yet reaped by its parent
        return False
    ticks = int(fields[19])  # field 22 (starttime), in clock ticks after boot
    started = _boot_time() + ticks / os.sysconf("SC_CLK_TCK")
    return started <= when.timestamp() + _CLOCK_SLACK_S


def _boot_time() -> float:
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return time.time() - time.monotonic()  # pragma: no cover - every Linux /proc/stat has btime


class LockStore(Protocol):
    def keys(self, prefix: str) -> list[str]: ...
    def read(self, key: str) -> bytes: ...
    def delete(self, key: str) -> None: ...
    def url(self, key: str) -> str: ...


class FileStore:
    """A `file://` backend: the bucket is a directory (the engine resolves `~` and relative paths)."""

    def __init__(self, url: str) -> None:
        path = url.removeprefix("file://").split("?", 1)[0]
        self.root = Path(path).expanduser().resolve()

    def keys(self, prefix: str) -> list[str]:
        base = self.root / prefix
        return sorted(str(p.relative_to(self.root)) for p in base.glob("*.json")) if base.is_dir() else []

    def read(self, key: str) -> bytes:
        return (self.root / key).read_bytes()

    def delete(self, key: str) -> None:
        for path in (self.root / key, self.root / f"{key}.attrs"):  # fileblob's metadata sidecar
            path.unlink(missing_ok=True)

    def url(self, key: str) -> str:
        return f"file://{self.root / key}"


class S3Store:
    """An `s3://bucket/prefix?region=…&endpoint=…` backend, with the query parameters the engine reads."""

    def __init__(self, url: str) -> None:
        import boto3
        from botocore.config import Config

        parsed = urlparse(url)
        q = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
        self.bucket, self.prefix = parsed.netloc, parsed.path.strip("/")
        self._url = f"s3://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")
        insecure = (q.get("disableSSL") or q.get("disable_https") or "").lower() in {"1", "true"}
        endpoint = q.get("endpoint")
        if endpoint and "://" not in endpoint:
            endpoint = ("http://" if insecure else "https://") + endpoint
        path_style = (q.get("s3ForcePathStyle") or q.get("use_path_style") or "").lower() in {"1", "true"}
        session = boto3.Session(profile_name=q.get("profile")) if q.get("profile") else boto3.Session()
        self.client: Any = session.client(
            "s3", region_name=q.get("region"), endpoint_url=endpoint,
            config=Config(s3={"addressing_style": "path"} if path_style else {}, retries={"max_attempts": 2},
                          connect_timeout=10, read_timeout=30))

    def _full(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def keys(self, prefix: str) -> list[str]:
        out: list[str] = []
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                          Prefix=self._full(prefix) + "/"):
            out += [o["Key"].removeprefix(f"{self.prefix}/" if self.prefix else "") for o in page.get("Contents", [])]
        return sorted(k for k in out if k.endswith(".json"))

    def read(self, key: str) -> bytes:
        body: bytes = self.client.get_object(Bucket=self.bucket, Key=self._full(key))["Body"].read()
        return body

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self._full(key))

    def url(self, key: str) -> str:
        return f"{self._url}/{key}"


class UnsupportedBackend(Exception):
    """A backend whose locks this module cannot read (only file:// and s3:// are supported)."""


def open_store(backend_url: str) -> LockStore:
    if backend_url.startswith("file://"):
        return FileStore(backend_url)
    if backend_url.startswith("s3://"):
        return S3Store(backend_url)
    raise UnsupportedBackend(f"tkf-infra reads locks of file:// and s3:// backends only, not {backend_url!r}")


def stack_locks(store: LockStore, project: str, stack: str) -> list[StackLock]:
    """Every lock of one stack, oldest first."""
    prefix = f"{LOCK_DIR}/{project}/{stack}"
    locks = []
    for key in store.keys(prefix):
        doc = json.loads(store.read(key))
        stamp = datetime.fromisoformat(str(doc["timestamp"]))  # RFC 3339 with nanoseconds, as Go writes it
        locks.append(StackLock(key, store.url(key), int(doc["pid"]), str(doc["username"]), str(doc["hostname"]),
                               stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)))
    return sorted(locks, key=lambda lk: lk.timestamp)


def locked_message(stack: str, locks: Iterable[StackLock]) -> str:
    """Why a run of `stack` is refused, with the way out for each holder."""
    parts = []
    for lk in locks:
        state = lk.holder
        if state is Holder.RUNNING:
            how = (f"that run is still going: wait for it to end, or interrupt it (kill -INT {lk.pid}: it releases "
                   f"the lock itself); a lock whose run is gone is cleared with "
                   f"`python -m tkf_infra unlock --stack {stack}`")
        elif state is Holder.GONE:
            how = ("that process is gone (the run was killed): clear the stale lock with "
                   f"`python -m tkf_infra unlock --stack {stack}`")
        else:
            how = (f"on another host, which cannot be checked from here: if that run is gone (e.g. a lost CI "
                   f"runner), clear the lock with `python -m tkf_infra unlock --stack {stack} --force`")
        parts.append(f"{lk.describe()} ({lk.where}): {how}")
    if not parts:
        return f"stack {stack!r} was locked by another run, which has ended since; run the command again"
    return f"stack {stack!r} is locked by another run: " + "; ".join(parts)


@dataclass(frozen=True)
class Cleared:
    cleared: list[StackLock]
    refused: list[StackLock]


def clear_stale(store: LockStore, project: str, stack: str, *, force: bool = False) -> Cleared:
    """Delete the stack's locks whose holder is gone (and, with `force`, those of other hosts).

    Nothing is deleted when any holder still runs here: the run then ends and unlocks by itself.
    """
    locks = stack_locks(store, project, stack)
    running = [lk for lk in locks if lk.holder is Holder.RUNNING]
    if running:
        return Cleared([], locks)
    clear = [lk for lk in locks if lk.holder is Holder.GONE or force]
    for lk in clear:
        store.delete(lk.key)
    return Cleared(clear, [lk for lk in locks if lk not in clear])
