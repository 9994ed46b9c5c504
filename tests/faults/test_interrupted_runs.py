"""An `up` interrupted mid-apply, killed with its runner, or run twice at once: nothing is lost.

Each fault is injected for real while `up` is in apply (holding the stack's lock, waiting for the
weight downloads; see tests/faults/harness.py): SIGINT and SIGKILL to the CLI's process, SIGKILL to
every process of the run at once (a lost CI runner), a second `up` of the same stack. After each, the
next `up` converges: every object in the namespace is managed exactly once, none is left unmanaged,
and nothing is pending (`assert_converged`).
"""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest
from pulumi import automation as auto

from tests.engine_fixtures import EngineStack
from tests.faults.harness import (
    CPU_MODELS,
    Cli,
    aim,
    assert_converged,
    download_jobs,
    kill_tree_at_once,
    lock_files,
    lock_holder_pid,
    process_tree,
    run_cli,
    state_of,
    still_running,
    wait_applying,
    wait_until,
)
from tests.kube.apiserver import KubeAPIServer
from tests.kube.client import KubeClient
from tests.kube.jobs import complete_job
from tkf_infra import names
from tkf_infra.exit_codes import ExitCode
from tkf_infra.ops.locks import ENGINE_LOCKED_MARKER

pytestmark = [pytest.mark.apiserver, pytest.mark.engine]

MODELS = sorted(m["name"] for m in CPU_MODELS)


def engine_of(tree: dict[int, str]) -> dict[int, str]:
    """The Pulumi processes of a run (engine, language host, providers, the program)."""
    return {pid: cmd for pid, cmd in tree.items() if "pulumi" in cmd}


def test_an_interrupted_up_stops_cleanly_and_the_next_up_converges(
        make_stack: Callable[..., EngineStack], kube_apiserver: KubeAPIServer, kube: KubeClient) -> None:
    es = make_stack()
    ns = aim(es, kube_apiserver)
    jobs = download_jobs()

    # 1. SIGINT to the CLI (Ctrl-C, `kill -INT`, a CI cancel): the engine cancels, saves, unlocks.
    run = Cli(es, ("up",)).start()
    first = wait_applying(es, run, kube, ns, jobs)
    tree = process_tree(run.pid)
    assert engine_of(tree), tree
    run.signal(signal.SIGINT)
    code, summary, err = run.wait()
    assert code == ExitCode.INTERRUPTED, (code, err)
    assert summary["interrupted"] == "SIGINT" and summary["ok"] is False
    assert {m: summary["models"][m]["status"] for m in MODELS} == dict.fromkeys(MODELS, "interrupted"), summary
    assert summary["failedModels"] == MODELS
    assert any("run `python -m tkf_infra up --stack" in e for e in summary["errors"]), summary["errors"]
    assert "Traceback" not in err and not any("Traceback" in e for e in summary["errors"]), summary["errors"]
    assert lock_files(es) == [], "the engine released the stack's lock"
    assert not state_of(es).get("pending_operations"), "the operations in flight were finished, not cut off"
    assert still_running(tree) == {}, "engine, language host, providers and program all ended"

    # 2. SIGKILL to the CLI alone: the engine gets its parent-death SIGTERM and cancels the same way.
    run = Cli(es, ("up",)).start()
    second = wait_applying(es, run, kube, ns, jobs, replacing=first)  # an unfinished Job is replaced
    tree = process_tree(run.pid)
    run.signal(signal.SIGKILL)
    run.wait()
    wait_until(lambda: not still_running(tree), "the engine and its plugins to end after the CLI was killed")
    assert lock_files(es) == []
    assert not state_of(es).get("pending_operations")

    # 3. The next up converges. While it runs, a second up of the stack is refused naming the holder,
    #    `unlock` refuses to clear a live run's lock, and the engine itself refuses a concurrent run.
    run = Cli(es, ("up",)).start()
    wait_applying(es, run, kube, ns, jobs, replacing=second)
    [lock] = lock_files(es)
    holder = lock_holder_pid(lock)
    assert holder in engine_of(process_tree(run.pid)), "the lock names the running engine"
    code, summary, err = run_cli(es, "up")
    assert code == ExitCode.LOCKED and summary == {}, (code, err)
    assert f"(pid {holder})" in err and "still going" in err and "Traceback" not in err, err
    code, _, err = run_cli(es, "unlock")
    assert code == ExitCode.LOCKED and f"(pid {holder})" in err, err
    assert lock_files(es) == [lock], "a live run's lock is never cleared"
    with pytest.raises(auto.CommandError) as refused:  # not just the CLI's check: the engine's own lock
        es.stack.refresh(color="never")
    assert ENGINE_LOCKED_MARKER in str(refused.value) and f"(pid {holder})" in str(refused.value)
    for job in jobs:
        complete_job(kube, ns, job)
    code, summary, err = run.wait()
    assert code == ExitCode.OK, (code, err, summary)
    for model in MODELS:  # its workload created now, its unfinished download Job replaced
        assert summary["models"][model]["status"] == "replaced", summary["models"][model]
        assert kube.get("apps/v1", "Deployment", names.workload(model), ns) is not None
    assert lock_files(es) == []
    assert_converged(es, kube, ns)


def test_a_lost_runner_leaves_a_stale_lock_and_pending_creates_that_are_reported_and_cleared(
        make_stack: Callable[..., EngineStack], kube_apiserver: KubeAPIServer, kube: KubeClient) -> None:
    es = make_stack()
    ns = aim(es, kube_apiserver)
    jobs = download_jobs()

    run = Cli(es, ("up",)).start()
    wait_applying(es, run, kube, ns, jobs)
    tree = process_tree(run.pid)
    kill_tree_at_once(tree)
    run.wait()
    wait_until(lambda: not still_running(tree), "every process of the run to be gone")
    [lock] = lock_files(es)
    holder = lock_holder_pid(lock)
    pending = state_of(es)["pending_operations"]
    assert set(jobs) <= {op["resource"]["urn"].rsplit("::", 1)[1] for op in pending}, "cut off mid-create"
    assert {op["type"] for op in pending} == {"creating"}

    # The next up is refused: the holder is named, found gone, and the way out given.
    code, summary, err = run_cli(es, "up")
    assert code == ExitCode.LOCKED, (code, err)
    assert f"(pid {holder})" in err and "that process is gone" in err
    assert f"python -m tkf_infra unlock --stack {es.stack.name}" in err and "Traceback" not in err, err
    code, _, err = run_cli(es, "unlock")
    assert code == ExitCode.OK and "cleared the lock" in err and f"(pid {holder})" in err, err
    assert lock_files(es) == []

    # up re-applies the interrupted creates by name (no duplicate) and reports them per model.
    run = Cli(es, ("up",)).start()
    wait_applying(es, run, kube, ns, jobs)
    for job in jobs:
        complete_job(kube, ns, job)
    code, summary, err = run.wait()
    assert code == ExitCode.OK, (code, err, summary)
    clear = f"python -m tkf_infra refresh --stack {es.stack.name} --clear-pending-creates"
    assert summary["pendingOperations"]["clear"] == clear
    assert summary["pendingOperations"]["count"] == len(pending) and summary["pendingOperations"]["stack"] == []
    for model in CPU_MODELS:
        job = download_jobs([model])[0]
        assert summary["models"][model["name"]]["status"] in {"created", "unchanged"}
        assert f"create of Job {job} interrupted: the object may or may not exist" in \
            summary["models"][model["name"]]["pending"]

    # The one command clears them; the stack is then exactly what the cluster holds.
    code, summary, err = run_cli(es, "refresh", "--clear-pending-creates")  # the command above, as run_cli runs it
    assert code == ExitCode.OK and "pendingOperations" not in summary, (code, err, summary)
    assert_converged(es, kube, ns)
