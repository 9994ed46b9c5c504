"""Stack locks of self-managed backends (tkf_infra/ops/locks.py): who holds one, and clearing only stale ones.

The lock files are written as the pinned engine writes them (pkg/backend/diy/lock.go: JSON with pid,
username, hostname and an RFC 3339 timestamp with nanoseconds, plus fileblob's `.attrs` sidecar),
and their holders are real processes of this machine — alive, ended, or a pid that outlived the run.
The engine itself writes and honours them in tests/faults/.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from tests.aws import AWS_ENV, REGION
from tkf_infra.ops import locks

PROJECT, STACK = "tkf-infra", "prod"


def write_lock(root: Path, pid: int, when: datetime, host: str | None = None, name: str = "a1") -> Path:
    lock_dir = root / locks.LOCK_DIR / PROJECT / STACK
    lock_dir.mkdir(parents=True, exist_ok=True)
    stamp = when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z"  # nanoseconds, as Go prints them
    path = lock_dir / f"{name}.json"
    path.write_text(json.dumps({"pid": pid, "username": "ci", "hostname": host or socket.gethostname(),
                                "timestamp": stamp}))
    (lock_dir / f"{name}.json.attrs").write_text("{}")
    return path


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_a_running_holder_is_never_cleared(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    path = write_lock(tmp_path, sleeper.pid, datetime.now(UTC))  # written after its holder started, as the engine does
    store = locks.FileStore(f"file://{tmp_path}")
    [lock] = locks.stack_locks(store, PROJECT, STACK)
    assert lock.holder is locks.Holder.RUNNING and lock.pid == sleeper.pid
    done = locks.clear_stale(store, PROJECT, STACK, force=True)
    assert done.cleared == [] and done.refused == [lock] and path.exists()
    message = locks.locked_message(STACK, done.refused)
    assert f"(pid {sleeper.pid})" in message and "still going" in message and f"kill -INT {sleeper.pid}" in message


def test_a_holder_that_ended_is_stale_and_cleared_with_its_sidecar(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    path = write_lock(tmp_path, proc.pid, datetime.now(UTC))
    store = locks.FileStore(f"file://{tmp_path}")
    [lock] = locks.stack_locks(store, PROJECT, STACK)
    assert lock.holder is locks.Holder.GONE
    assert "that process is gone" in locks.locked_message(STACK, [lock])
    assert f"python -m tkf_infra unlock --stack {STACK}`" in locks.locked_message(STACK, [lock])
    done = locks.clear_stale(store, PROJECT, STACK)
    assert done.cleared == [lock] and done.refused == []
    assert not path.exists() and not Path(f"{path}.attrs").exists()


def test_a_reused_pid_does_not_keep_a_dead_runs_lock(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    # The lock predates the process now holding that pid: the run that wrote it is gone.
    write_lock(tmp_path, sleeper.pid, datetime.now(UTC) - timedelta(hours=1))
    [lock] = locks.stack_locks(locks.FileStore(f"file://{tmp_path}"), PROJECT, STACK)
    assert lock.holder is locks.Holder.GONE


def test_another_hosts_lock_needs_force(tmp_path: Path) -> None:
    path = write_lock(tmp_path, 4242, datetime.now(UTC), host="ci-runner-7")
    store = locks.FileStore(f"file://{tmp_path}")
    done = locks.clear_stale(store, PROJECT, STACK)
    assert done.cleared == [] and [lk.hostname for lk in done.refused] == ["ci-runner-7"] and path.exists()
    message = locks.locked_message(STACK, done.refused)
    assert "ci@ci-runner-7 (pid 4242)" in message and f"unlock --stack {STACK} --force`" in message
    assert locks.clear_stale(store, PROJECT, STACK, force=True).refused == [] and not path.exists()


def test_only_this_stacks_locks_are_read(tmp_path: Path) -> None:
    write_lock(tmp_path, 1, datetime.now(UTC), host="elsewhere")
    other = tmp_path / locks.LOCK_DIR / PROJECT / "dev"
    other.mkdir(parents=True)
    (other / "b2.json").write_text("{}")
    assert [lk.key.rsplit("/", 1)[1] for lk in locks.stack_locks(locks.FileStore(f"file://{tmp_path}"),
                                                                  PROJECT, STACK)] == ["a1.json"]
    assert locks.stack_locks(locks.FileStore(f"file://{tmp_path / 'empty'}"), PROJECT, STACK) == []


def test_s3_locks_under_a_bucket_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in AWS_ENV.items():
        monkeypatch.setenv(key, value)
    with mock_aws():
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket="state")
        key = f"team-a/{locks.LOCK_DIR}/{PROJECT}/{STACK}/c3.json"
        s3.put_object(Bucket="state", Key=key, Body=json.dumps(
            {"pid": 7, "username": "ci", "hostname": "gone-runner", "timestamp": "2026-01-02T03:04:05.123456789Z"}))
        s3.put_object(Bucket="state", Key=f"{locks.LOCK_DIR}/{PROJECT}/{STACK}/outside-prefix.json", Body=b"{}")
        store = locks.open_store("s3://state/team-a?region=us-east-1")
        [lock] = locks.stack_locks(store, PROJECT, STACK)
        assert lock.where == f"s3://state/team-a/{locks.LOCK_DIR}/{PROJECT}/{STACK}/c3.json"
        assert lock.timestamp == datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
        assert locks.clear_stale(store, PROJECT, STACK, force=True).cleared == [lock]
        assert "Contents" not in s3.list_objects_v2(Bucket="state", Prefix="team-a/")


def test_backends_whose_locks_cannot_be_read_are_named() -> None:
    with pytest.raises(locks.UnsupportedBackend, match="gs://bucket"):
        locks.open_store("gs://bucket")


def test_the_engines_own_refusals_become_one_line_each(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    """The engine's messages as the pinned engine prints them (lock.go:87-106; the passphrase
    manager; gocloud's blob errors), mapped to the operator's one line and exit code."""
    from tkf_infra.exit_codes import ExitCode
    from tkf_infra.ops.stacks import engine_error

    project = tmp_path / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text(f"name: {PROJECT}\nruntime: python\n")
    write_lock(tmp_path, sleeper.pid, datetime.now(UTC))
    url = f"file://{tmp_path}"
    locked = engine_error(
        "error: the stack is currently locked by 1 lock(s). Either wait for the other process(es) to end or "
        f"delete the lock file with `pulumi cancel`.\n  {url}/.pulumi/locks/organization/{PROJECT}/{STACK}/a1.json: "
        f"created by ci@host (pid {sleeper.pid}) at 2026-01-01T00:00:00Z", STACK, url, project)
    assert locked is not None and locked.code == ExitCode.LOCKED
    assert f"(pid {sleeper.pid})" in str(locked) and "still going" in str(locked)
    wrong = engine_error("error: getting stack configuration: get stack secrets manager: incorrect passphrase",
                         STACK, url, project)
    assert wrong is not None and wrong.code == ExitCode.USAGE
    assert f"the passphrase of stack '{STACK}' is wrong" in str(wrong)
    down = engine_error(
        'error: post-step event returned an error: failed to save snapshot: An IO error occurred while writing the '
        'new snapshot file: blob (key ".pulumi/stacks/tkf-infra/prod.json") (code=Unknown): operation error S3: '
        "PutObject, exceeded maximum number of attempts, 3, https response error StatusCode: 0, RequestID: , "
        "HostID: , request send failed, Put \"http://127.0.0.1:9/tkf-state/x\": dial tcp 127.0.0.1:9: connect: "
        "connection refused", STACK, "s3://tkf-state?endpoint=127.0.0.1:9&disableSSL=true", project)
    assert down is not None and down.code == ExitCode.UNAVAILABLE
    assert str(down).startswith("the state backend s3://tkf-state (endpoint 127.0.0.1:9) did not answer (saving "
                                "the state: dial tcp 127.0.0.1:9: connect: connection refused)")
    assert engine_error("error: preview failed: 2 resources failed", STACK, url, project) is None
