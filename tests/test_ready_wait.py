"""`up`'s readiness check after the engine (tkf_infra/live/ready_wait.py, tkf_infra/ops/ready_check.py): a model
the engine's wait let go too early is waited for, one that never turns Ready is named as failed with the reason
`status` gives, and stacks that do not wait on a cluster are left alone.

The cluster is httpx's own MockTransport serving the objects the workload controllers write, changed between
polls as a controller would; the cluster tier (tests/cluster) runs the same check after a real `up`.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import httpx

from tkf_infra import names
from tkf_infra.live.lifecycle import Phase, Workload
from tkf_infra.live.ready_wait import bound_seconds, settled, stale_status, wait_ready
from tkf_infra.ops.ready_check import READINESS_KEY, confirm_ready
from tkf_infra.ops.summary import failed_models, status_counts

NS = "serving"


def deployment(desired: int, ready: int, *, generation: int = 2, observed: int = 2, updated: int | None = None,
               timeout: int | None = 120, conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    ann = {names.TIMEOUT_ANNOTATION: str(timeout)} if timeout is not None else {}
    return {"metadata": {"generation": generation, "annotations": ann}, "spec": {"replicas": desired},
            "status": {"observedGeneration": observed, "readyReplicas": ready,
                       "updatedReplicas": desired if updated is None else updated, "conditions": conditions or []}}


class Cluster:
    """The objects a model's reader asks for, by model; each poll of a model takes its next Deployment."""

    def __init__(self, timeline: dict[str, list[dict[str, Any]]]) -> None:
        self.timeline = timeline
        self.reads: dict[str, int] = {m: 0 for m in timeline}

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/api/v1/nodes":
            return httpx.Response(200, json={"items": []})
        if path.endswith("/pods"):
            return httpx.Response(200, json={"items": [{"spec": {"nodeName": "n0"}, "status": {}}]})
        for model, steps in self.timeline.items():
            if path == f"/apis/apps/v1/namespaces/{NS}/deployments/{names.workload(model)}":
                i = min(self.reads[model], len(steps) - 1)
                self.reads[model] += 1
                return httpx.Response(200, json=steps[i])
        return httpx.Response(404, json={"kind": "Status", "code": 404})

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self.handle), base_url="https://cluster.test")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


def ep(model: str) -> dict[str, Any]:
    return {"name": model, "namespace": NS, "model": ""}


def test_a_scale_up_the_engine_let_go_at_three_of_four_is_waited_for_until_four_are_ready() -> None:
    """The race read in the provider's source: the Deployment's status is current (observedGeneration) and says
    3 of 4 ready — Available under maxUnavailable 25 % — when the engine ends; the check waits for the fourth."""
    cluster = Cluster({"scaled": [deployment(4, 3), deployment(4, 3), deployment(4, 4)],
                       "steady": [deployment(1, 1)]})
    clock = Clock()
    with cluster.client() as client:
        out = wait_ready(client, [ep("scaled"), ep("steady")], clock=clock, sleep=clock.sleep, poll_s=2)
    assert sorted(out.ready) == ["scaled", "steady"] and not out.not_ready
    assert cluster.reads["scaled"] == 3 and cluster.reads["steady"] == 1, "a settled model is not read again"
    assert out.seconds == 4


def test_a_status_written_for_the_old_spec_or_by_old_pods_is_not_ready() -> None:
    behind = Workload(workload=deployment(4, 4, generation=3, observed=2))
    row, done = settled("m", behind)
    assert not done and row.phase is Phase.DEGRADED and "generation 3, observed 2" in row.reason
    rolling = Workload(workload=deployment(2, 2, updated=1))
    assert "1/2 replicas run the latest spec" in (stale_status(rolling) or "")
    assert settled("m", Workload(workload=deployment(2, 2)))[1]
    assert settled("m", Workload(workload=deployment(0, 0)))[1], "scaled to zero by its autoscaler: Idle is done"


def test_a_model_never_ready_is_named_at_its_own_bound_and_a_failed_one_at_once() -> None:
    stalled = deployment(2, 1, timeout=90)
    deadline = deployment(1, 0, conditions=[{"type": "Progressing", "status": "False",
                                             "reason": "ProgressDeadlineExceeded", "message": "timed out"}])
    cluster = Cluster({"stalled": [stalled], "broken": [deadline]})
    clock = Clock()
    seen: list[str] = []
    with cluster.client() as client:
        out = wait_ready(client, [ep("stalled"), ep("broken")], clock=clock, sleep=clock.sleep, poll_s=2,
                         progress=seen.append)
    assert out.ready == []
    row, bound = out.not_ready["stalled"]
    assert (row.phase, bound) == (Phase.DEGRADED, 90) and "1/2 replicas ready" in row.reason
    assert out.not_ready["broken"][0].phase is Phase.FAILED and cluster.reads["broken"] == 1
    assert 90 <= out.seconds <= 92
    assert any("waiting for 1 model(s)" in line and "stalled" in line for line in seen), seen


def test_the_bound_is_the_one_the_program_wrote_on_the_workload_or_the_providers_default() -> None:
    assert bound_seconds(Workload(workload=deployment(1, 1, timeout=4321))) == 4321
    isvc = {"metadata": {"annotations": {names.TIMEOUT_ANNOTATION: "777"}}}
    assert bound_seconds(Workload(llmisvc=isvc, workload=deployment(1, 1, timeout=None))) == 777
    assert bound_seconds(Workload()) == 600


def summary_of(**statuses: str) -> dict[str, Any]:
    """An `up` summary as the engine's run left it (a rejected model already among `failedModels`)."""
    models = {n: {"status": s, "changes": {}} for n, s in statuses.items()}
    return {"stack": "prod", "ok": not failed_models(models), "errors": [], "failedModels": failed_models(models),
            "models": models, "counts": status_counts(models)}


def kubeconfig_stack(**cluster: Any) -> Any:
    settings = {"mode": "kubeconfig", "kubeconfig": "/k", "context": None, "skip_await": False, **cluster}
    return SimpleNamespace(settings=SimpleNamespace(cluster=SimpleNamespace(**settings)))


def test_up_names_the_model_that_did_not_turn_ready_and_fails_the_run() -> None:
    cluster = Cluster({"late": [deployment(2, 1, timeout=60)], "fine": [deployment(1, 1)],
                       "old": [deployment(1, 0)]})
    summary = summary_of(late="updated", fine="created", old="unchanged", bad="rejected")
    outputs = {"endpoints": {"late": ep("late"), "fine": ep("fine"), "old": ep("old")}}
    clock = Clock()
    confirm_ready(summary, kubeconfig_stack, lambda: outputs, lambda _: None,
                  connect=lambda _k, _c: cluster.client(), clock=clock, sleep=clock.sleep)
    assert summary["ok"] is False and summary["failedModels"] == ["bad", "late"]
    late = summary["models"]["late"]
    assert late["status"] == "failed"
    assert late["reasons"][0].startswith("not Ready 60 s after the engine's wait: Degraded, 1/2 replicas ready")
    assert "status --stack prod" in late["reasons"][0]
    assert summary["models"]["fine"]["status"] == "created"
    assert summary[READINESS_KEY]["models"] == ["fine", "late"], "only the models this run changed are read"
    assert summary[READINESS_KEY]["notReady"] == ["late"] and cluster.reads["old"] == 0
    assert summary["counts"] == {"created": 1, "failed": 1, "rejected": 1, "unchanged": 1}


def test_stacks_that_do_not_wait_on_a_cluster_are_not_read() -> None:
    def never(*_: Any) -> Any:
        raise AssertionError("read although the stack does not wait on a cluster")

    for stack in (lambda: kubeconfig_stack(skip_await=True), lambda: kubeconfig_stack(mode="render"), lambda: None):
        summary = summary_of(m="created")
        confirm_ready(summary, stack, lambda: {"endpoints": {"m": ep("m")}}, lambda _: None, connect=never)
        assert summary["ok"] is True and READINESS_KEY not in summary
    unchanged = summary_of(m="unchanged")
    confirm_ready(unchanged, never, never, lambda _: None, connect=never)
    assert unchanged["ok"] is True


def test_an_unreadable_cluster_is_a_warning_not_a_failed_run() -> None:
    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    summary = summary_of(m="created")
    confirm_ready(summary, kubeconfig_stack, lambda: {"endpoints": {"m": ep("m")}}, lambda _: None,
                  connect=lambda _k, _c: httpx.Client(transport=httpx.MockTransport(refused),
                                                      base_url="https://cluster.test"))
    assert summary["ok"] is True and summary["models"]["m"]["status"] == "created"
    assert "did not answer as expected (ConnectError" in summary[READINESS_KEY]["unreadable"]


def test_a_model_whose_workload_the_engine_never_wrote_is_named_at_once_not_waited_for() -> None:
    """A shared object the workloads depend on failed (the engine's errors say which): its models were
    `created` (their weight caches were), but no Deployment will appear by waiting."""
    cluster = Cluster({})
    clock = Clock()
    with cluster.client() as client:
        out = wait_ready(client, [ep("orphan")], clock=clock, sleep=clock.sleep)
    row, _ = out.not_ready["orphan"]
    assert row.phase is Phase.FAILED and "not on the cluster" in row.reason and out.seconds == 0
