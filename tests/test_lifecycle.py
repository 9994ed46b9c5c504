"""Phase rules of tkf_infra/live/lifecycle.py on the object shapes the controllers write (the
controllers tier, tests/controllers/, checks them against KServe and the workload controllers live)."""

from __future__ import annotations

from typing import Any

from tkf_infra.live.lifecycle import CacheState, Phase, Workload, judge, pinned_nodes, render_table, unpublished


def cond(t: str, status: str, reason: str = "", message: str = "") -> dict[str, Any]:
    return {"type": t, "status": status, "reason": reason, "message": message}


def deployment(desired: int, ready: int, *conds: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"replicas": desired}, "status": {"readyReplicas": ready, "conditions": list(conds)}}


COMPLETE = {"status": {"conditions": [cond("Complete", "True")]}}
ON_NODE = {"spec": {"nodeName": "n0"}}
UNPLACED: dict[str, Any] = {"spec": {}}


def test_replicas_decide_ready_and_degraded() -> None:
    assert judge("m", Workload(workload=deployment(2, 2), job=COMPLETE)).phase is Phase.READY
    degraded = judge("m", Workload(workload=deployment(3, 1), job=COMPLETE, pods=(ON_NODE,) * 3))
    assert (degraded.phase, degraded.ready, degraded.desired) == (Phase.DEGRADED, 1, 3)


def test_no_ready_replica_is_downloading_pending_or_loading_by_where_it_waits() -> None:
    running_job = {"status": {"active": 1}}
    assert judge("m", Workload(workload=deployment(1, 0), job=running_job)).phase is Phase.DOWNLOADING
    assert judge("m", Workload(workload=deployment(1, 0), job=COMPLETE, pods=(UNPLACED,))).phase is Phase.PENDING
    assert judge("m", Workload(workload=deployment(1, 0), job=COMPLETE, pods=(ON_NODE,))).phase is Phase.LOADING
    assert judge("m", Workload(job=COMPLETE)).reason == "no workload written yet"


def test_failures_name_their_cause() -> None:
    failed_job = {"status": {"conditions": [cond("Failed", "True", "BackoffLimitExceeded", "Job has reached the "
                                                                                        "specified backoff limit")]}}
    r = judge("m", Workload(workload=deployment(1, 0), job=failed_job))
    assert (r.phase, r.cache) == (Phase.FAILED, CacheState.FAILED) and "BackoffLimitExceeded" in r.reason
    isvc = {"status": {"conditions": [cond("PresetsCombined", "False", "ConfigNotFound", "no such preset")]}}
    assert "ConfigNotFound" in judge("m", Workload(llmisvc=isvc)).reason
    kserve = {"status": {"conditions": [cond("MainWorkloadReady", "False", "",
                                             'failed to reconcile main workload: deployments.apps "m-kserve" '
                                             "already exists")]}}
    assert judge("m", Workload(llmisvc=kserve, job=COMPLETE)).phase is Phase.FAILED
    waiting = {"status": {"conditions": [cond("MainWorkloadReady", "False", "MinimumReplicasUnavailable",
                                              "Deployment does not have minimum availability.")]}}
    assert judge("m", Workload(llmisvc=waiting, workload=deployment(1, 0), job=COMPLETE)).phase is Phase.PENDING
    stalled = deployment(1, 0, cond("Progressing", "False", "ProgressDeadlineExceeded", "ReplicaSet timed out"))
    assert judge("m", Workload(workload=stalled, job=COMPLETE)).phase is Phase.FAILED


def test_the_table_lists_every_model() -> None:
    text = render_table([judge("a", Workload(workload=deployment(1, 1))), judge("b", Workload())])
    assert "a " in text and "Ready" in text and "1/1" in text and "b " in text and "Pending" in text


def test_a_model_its_autoscaler_took_to_zero_is_idle_not_pending() -> None:
    """Scale-to-zero (minReplicas 0): no pod is what the autoscaler chose, so `status` must not call it stuck."""
    idle = judge("m", Workload(workload=deployment(0, 0), job=COMPLETE))
    assert idle.phase is Phase.IDLE and "next request wakes it" in idle.reason
    waking = judge("m", Workload(workload=deployment(1, 0), job=COMPLETE, pods=(UNPLACED,)))
    assert waking.phase is Phase.PENDING, "woken: its autoscaler asked for a replica, which waits for a node"


def test_a_pod_the_scheduler_cannot_place_says_what_it_waits_for_in_the_schedulers_words() -> None:
    """Issue 39: "waiting for GPUs" with the scheduler's own message (PodScheduled False, Unschedulable)."""
    message = ("0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: "
               "4 No preemption victims found for incoming pod.")
    stuck = {"spec": {}, "status": {"conditions": [cond("PodScheduled", "False", "Unschedulable", message)]}}
    r = judge("m", Workload(workload=deployment(1, 0), job=COMPLETE, pods=(stuck,)))
    assert r.phase is Phase.PENDING and r.reason == f"waiting for GPUs: {message}"
    tainted = {"spec": {}, "status": {"conditions": [cond("PodScheduled", "False", "Unschedulable",
                                                          "0/4 nodes are available: 4 node(s) had untolerated taint "
                                                          "{nvidia.com/gpu: present}.")]}}
    assert judge("m", Workload(workload=deployment(1, 0), job=COMPLETE, pods=(tainted,))).reason.startswith(
        "waiting for a node whose taints it tolerates: 0/4 nodes")
    degraded = judge("m", Workload(workload=deployment(2, 1), job=COMPLETE, pods=(ON_NODE, stuck)))
    assert degraded.phase is Phase.DEGRADED and degraded.reason == f"1/2 replicas ready; waiting for GPUs: {message}"
    assert judge("m", Workload(workload=deployment(1, 0), job=COMPLETE, pods=(UNPLACED,))).reason == (
        "1 pod(s), none on a node yet"), "no scheduler verdict yet: nothing invented"


def crash_looping(name: str = "m-0") -> dict[str, Any]:
    """A server pod as the kubelet writes it after its container exited three times (kubelet v1.36 shape)."""
    return {"metadata": {"name": name}, "spec": {"nodeName": "n0"}, "status": {
        "phase": "Running", "conditions": [cond("Ready", "False", "ContainersNotReady",
                                                "containers with unready status: [vllm]")],
        "containerStatuses": [{"name": "vllm", "ready": False, "restartCount": 3,
                               "state": {"waiting": {"reason": "CrashLoopBackOff",
                                                     "message": "back-off 40s restarting failed container=vllm"}},
                               "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                                                            "message": "torch.OutOfMemoryError"}}}]}}


def test_a_pod_whose_container_cannot_run_fails_the_model_in_the_kubelets_words() -> None:
    """Issue 39: a server that crash-loops is Failed (no replica ready) or Degraded (some), never "Loading"."""
    r = judge("m", Workload(workload=deployment(1, 0), job=COMPLETE, pods=(crash_looping(),)))
    assert r.phase is Phase.FAILED
    assert "pod m-0: container vllm CrashLoopBackOff" in r.reason and "restarted 3 times" in r.reason
    assert "last exit 1 (Error): torch.OutOfMemoryError" in r.reason
    some = judge("m", Workload(workload=deployment(2, 1), job=COMPLETE, pods=(ON_NODE, crash_looping("m-1"))))
    assert some.phase is Phase.DEGRADED and some.reason.startswith("1/2 replicas ready; pod m-1: container vllm")


def test_a_loading_model_says_what_its_pod_waits_on() -> None:
    """Running, not ready (vLLM still loading, or a readiness probe failing): Loading, with the Ready condition."""
    loading = {"metadata": {"name": "m-0"}, "spec": {"nodeName": "n0"}, "status": {"conditions": [
        cond("Ready", "False", "ContainersNotReady", "containers with unready status: [vllm]")]}}
    r = judge("m", Workload(workload=deployment(1, 0), job=COMPLETE, pods=(loading,)))
    assert r.phase is Phase.LOADING
    assert r.reason.endswith("(pod m-0 Ready=False: ContainersNotReady containers with unready status: [vllm])")


def test_a_pod_pinned_to_a_lost_node_says_up_re_plans_it() -> None:
    """Issue 39: the plan pins pods to nodes; a pin whose nodes are gone waits for `up`, not for capacity."""
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-0"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}]}}}
    message = ("0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) didn't "
               "match pod topology spread constraints, 1 node(s) had untolerated taint {node.kubernetes.io/"
               "unreachable: }.")
    stuck = {"spec": {"affinity": affinity}, "status": {"conditions": [
        cond("PodScheduled", "False", "Unschedulable", message)]}}
    lost = judge("m", Workload(workload=deployment(1, 0), job=COMPLETE, pods=(stuck,),
                               unusable_nodes=frozenset({"gpu-1"})))
    assert lost.phase is Phase.PENDING
    assert lost.reason.startswith("waiting for its pinned node(s) gpu-1, not Ready or cordoned: run `up`")
    assert message in lost.reason
    healthy = judge("m", Workload(workload=deployment(1, 0), job=COMPLETE, pods=(stuck,)))
    assert healthy.reason.startswith("waiting for a node whose taints it tolerates")
    assert pinned_nodes(stuck) == {"gpu-0", "gpu-1"}


def test_a_catalog_model_without_outputs_says_whether_up_has_not_reached_it_or_the_plan_refused_it() -> None:
    """`status` during a first `up` lists the catalog's models; nothing on the cluster is not "waiting"."""
    nothing = judge("m", Workload())
    assert "an `up` in progress" in unpublished(nothing).reason
    assert unpublished(nothing, "fit").reason.startswith("not deployed: the last run's plan refused it at fit")
    ready = judge("m", Workload(workload=deployment(1, 1)))
    assert unpublished(ready) == ready, "a model the cluster runs is shown as it is"
