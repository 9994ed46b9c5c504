"""What the fault tests share: a stack of the project aimed at the test API server, the CLI run as
an operator runs it (a process that can be signalled), and the checks that nothing was lost.

Why the weight-download Job: `up` waits for it (components/weight_cache.py) and the test API server
runs no job controller, so an `up` stays in apply, holding the stack's lock, until the test writes the
Job's status (tests/kube/jobs.py). That is the moment every fault here is injected: deterministic,
with no sleeps, and it is also where a real `up` spends its time.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.engine_fixtures import EngineStack, dev_config
from tests.kube.apiserver import KubeAPIServer
from tests.kube.client import KubeClient
from tkf_infra import names

#: The dev stack's two CPU models: distinct weights, so two caches and two download Jobs.
CPU_MODELS: list[dict[str, Any]] = dev_config()["config"]["tkf-infra:models"]
#: Bound on every wait here. Not an assertion on speed: it only keeps a broken run from hanging CI.
HANG_GUARD_S = 600.0


def wait_until(check: Callable[[], Any], what: str, timeout: float = HANG_GUARD_S) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        time.sleep(0.2)
    return result


def aim(es: EngineStack, server: KubeAPIServer, models: list[dict[str, Any]] | None = None) -> str:
    """Point the stack at the test API server; returns its serving namespace (fresh per stack).

    The vllm backend registers core kinds only (no CRDs needed). Every readiness wait is off
    (`cluster.skipAwait`: no controllers run there) except the weight downloads
    (`serving.awaitWeightDownload`), which the tests finish or fail as the job controller would.
    """
    path = es.project / f"Pulumi.{es.stack.name}.yaml"
    doc = yaml.safe_load(path.read_text())
    cfg = doc["config"]
    ns = f"llm-f{uuid.uuid4().hex[:8]}"
    cfg["tkf-infra:cluster"] = {"mode": "kubeconfig", "kubeconfig": str(server.kubeconfig), "skipAwait": True}
    cfg["tkf-infra:namespaces"]["serving"] = ns
    cfg["tkf-infra:serving"].update({"backend": "vllm", "awaitWeightDownload": True})
    cfg["tkf-infra:models"] = models if models is not None else CPU_MODELS
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return ns


def download_jobs(models: list[dict[str, Any]] | None = None) -> list[str]:
    return sorted({names.weight_download_job(m["repo"], m["revision"]) for m in models or CPU_MODELS})


STARTED: list[Cli] = []
"""Every run started by the current test (tests/faults/conftest.py ends those a failed test left running)."""


@dataclass
class Cli:
    """`python -m tkf_infra <command> --stack S --json` in the project copy, as CI runs it."""

    es: EngineStack
    args: tuple[str, ...]
    env: dict[str, str | None] = field(default_factory=dict)
    """Set (or, with None, unset) for this run only."""
    as_json: bool = True
    proc: subprocess.Popen[bytes] | None = None
    out: Path | None = None
    err: Path | None = None

    def start(self) -> Cli:
        STARTED.append(self)
        run_dir = self.es.project / ".runs"
        run_dir.mkdir(exist_ok=True)
        tag = uuid.uuid4().hex[:6]
        self.out, self.err = run_dir / f"{tag}.out", run_dir / f"{tag}.err"
        merged: dict[str, str | None] = {**os.environ, **self.es.env, **self.env}
        env = {k: v for k, v in merged.items() if v is not None}
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen(
                [str(self.es.project / ".venv" / "bin" / "python"), "-m", "tkf_infra", *self.args,
                 "--stack", self.es.stack.name, *(["--json"] if self.as_json else [])],
                cwd=self.es.project, env=env, stdout=out, stderr=err)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def wait(self, timeout: float = HANG_GUARD_S) -> tuple[int, dict[str, Any], str]:
        assert self.proc is not None and self.out is not None and self.err is not None
        code = self.proc.wait(timeout=timeout)
        text = self.out.read_text()
        try:
            summary: dict[str, Any] = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError:
            summary = {"unparsed": text}
        return code, summary, self.err.read_text()

    def signal(self, signum: int) -> None:
        os.kill(self.pid, signum)


def run_cli(es: EngineStack, *args: str, env: Mapping[str, str | None] | None = None,
            as_json: bool = True) -> tuple[int, dict[str, Any], str]:
    return Cli(es, args, dict(env or {}), as_json).start().wait()


def process_tree(root: int) -> dict[int, str]:
    """pid → command line of `root` and every live process whose parent chain reaches it."""
    parents: dict[int, int] = {}
    cmdlines: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            cmdlines[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
    tree = {root: cmdlines.get(root, "")} if root in cmdlines else {}
    for pid in parents:
        p, hops = pid, 0
        while p in parents and p != root and hops < 64:
            p, hops = parents[p], hops + 1
        if p == root and pid != root:
            tree[pid] = cmdlines.get(pid, "")
    return tree


def still_running(procs: dict[int, str]) -> dict[int, str]:
    """Those of `procs` that still run the same command (a reused pid runs something else)."""
    alive = {}
    for pid, cmd in procs.items():
        try:
            now = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        stat = Path(f"/proc/{pid}/stat").read_text() if Path(f"/proc/{pid}/stat").exists() else ""
        if now == cmd and ") Z " not in stat:
            alive[pid] = cmd
    return alive


def kill_tree_at_once(procs: dict[int, str]) -> None:
    """What losing a CI runner does: every process stops at the same instant, none gets to clean up.
    (Stopped first, so the engine's parent-death SIGTERM cannot run before its SIGKILL.)"""
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in procs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)


def lock_files(es: EngineStack) -> list[Path]:
    state = Path(es.env["PULUMI_BACKEND_URL"].removeprefix("file://"))
    return sorted((state / ".pulumi" / "locks").rglob("*.json"))


def state_of(es: EngineStack) -> dict[str, Any]:
    return dict(es.stack.export_stack().deployment or {})


def workload_objects(model: str) -> set[tuple[str, str]]:
    """(apiVersion/kind, name) of a model's objects on the vllm backend (single node)."""
    return {("apps/v1/Deployment", names.workload(model)), ("v1/Service", names.alias_service(model)),
            ("networking.k8s.io/v1/NetworkPolicy", names.network_policy(model))}


def server_objects(kube: KubeClient, namespace: str) -> list[tuple[str, str]]:
    """(apiVersion/kind, name) of every object in the namespace, as the server holds them."""
    return sorted((key, o["metadata"]["name"]) for key, items in kube.all_objects(namespace).items() for o in items)


def state_objects(deployment: dict[str, Any], namespace: str) -> list[tuple[str, str]]:
    """(apiVersion/kind, name) of every namespaced Kubernetes object the state manages, duplicates kept."""
    found = []
    for res in deployment.get("resources") or []:
        outs = res.get("outputs") or {}
        meta = outs.get("metadata") or {}
        if res["type"].startswith("kubernetes:") and meta.get("namespace") == namespace:
            found.append((f"{outs['apiVersion']}/{outs['kind']}", meta["name"]))
    return sorted(found)


def assert_converged(es: EngineStack, kube: KubeClient, namespace: str) -> None:
    """No duplicate, no orphan: every object in the namespace is managed by exactly one state entry,
    every state entry exists, and nothing is left pending."""
    deployment = state_of(es)
    managed, live = state_objects(deployment, namespace), server_objects(kube, namespace)
    assert len(managed) == len(set(managed)), f"managed twice: {managed}"
    assert managed == live, {"only in state": sorted(set(managed) - set(live)),
                             "only on the server (orphans)": sorted(set(live) - set(managed))}
    assert not deployment.get("pending_operations"), deployment.get("pending_operations")


def engine_output(pid: int) -> str:
    """What a running engine has printed so far (the CLI gives it a file for stdout; tkf_infra.ops.engine)."""
    try:
        return Path(f"/proc/{pid}/fd/1").read_text(errors="replace")
    except OSError:
        return ""


def lock_holder_pid(path: Path) -> int:
    return int(json.loads(path.read_text())["pid"])


def job_uids(kube: KubeClient, namespace: str, jobs: list[str]) -> dict[str, str]:
    found = {j: kube.get("batch/v1", "Job", j, namespace) for j in jobs}
    return {j: o["metadata"]["uid"] for j, o in found.items() if o is not None}


def wait_applying(es: EngineStack, run: Cli, kube: KubeClient, namespace: str, jobs: list[str],
                  replacing: dict[str, str] | None = None,
                  holders: Callable[[], list[int]] | None = None) -> dict[str, str]:
    """Wait until `run` is in apply: its engine holds the stack's lock and waits for every download Job
    (new ones, when `replacing` gives the uids of Jobs the run must replace). Returns the Jobs' uids.

    `holders`: the pids in the stack's lock files (default: those of the stack's file backend)."""
    def file_holders() -> list[int]:
        return [lock_holder_pid(p) for p in lock_files(es)]

    doc = yaml.safe_load((es.project / f"Pulumi.{es.stack.name}.yaml").read_text())
    workloads = [o for m in doc["config"]["tkf-infra:models"] for o in workload_objects(m["name"])]

    def ready() -> dict[str, str] | None:
        assert run.proc is not None and run.proc.poll() is None, f"the run ended early: {run.wait()}"
        pids = (holders or file_holders)()
        if len(pids) != 1 or (engine := pids[0]) not in process_tree(run.pid):
            return None
        uids = job_uids(kube, namespace, jobs)
        if len(uids) != len(jobs) or any(uids[j] == (replacing or {}).get(j) for j in jobs):
            return None
        # The provider says it waits: the Jobs are created and the run is inside their await. And
        # everything else is applied (the workloads do not wait for the downloads), so the run's one
        # operation in flight is the wait.
        output = engine_output(engine)
        if not all(f'Waiting for Job "{namespace}/{j}"' in output for j in jobs):
            return None
        live = set(server_objects(kube, namespace))
        return uids if all(w in live for w in workloads) else None

    found: dict[str, str] = wait_until(ready, f"{run.args} to hold the lock and wait for {jobs}")
    return found
