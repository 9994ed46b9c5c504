"""The job controller's status writes, for the test API server (which runs no job controller).

`up` waits for each weight-download Job (components/weight_cache.py). On a real cluster the job
controller ends that wait by writing the Job's status; here the tests write exactly what it writes,
through the same status subresource, and the API server validates it as it would the controller's
(kubernetes v1.36.3 pkg/apis/batch/validation/validation.go: a finished Job needs startTime; Failed
needs FailureTarget; Complete needs SuccessCriteriaMet and completionTime). The reasons and messages
are the controller's own (pkg/controller/job/job_controller.go, v1.36.3).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.kube.client import KubeClient

BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
BACKOFF_LIMIT_MESSAGE = "Job has reached the specified backoff limit"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(kind: str, reason: str, message: str) -> dict[str, Any]:
    now = _now()
    return {"type": kind, "status": "True", "reason": reason, "message": message,
            "lastProbeTime": now, "lastTransitionTime": now}


def _write_status(kube: KubeClient, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
    path = kube.resource("batch/v1", "Job").path(namespace, name) + "/status"
    job = kube.request("GET", path)
    # A running job controller may have set startTime already: it is immutable once set.
    started = (job.get("status") or {}).get("startTime")
    job["status"] = {**status, "startTime": started} if started else status
    # resourceVersion from the read: a concurrent writer fails with 409, as for the controller
    return kube.request("PUT", path, json=job)


def fail_job(kube: KubeClient, namespace: str, name: str, *, pod_failures: int = 7,
             reason: str = BACKOFF_LIMIT_EXCEEDED, message: str = BACKOFF_LIMIT_MESSAGE) -> dict[str, Any]:
    """The Job's pods failed past its backoffLimit: FailureTarget, then (pods gone) Failed."""
    started = _now()
    target = _condition("FailureTarget", reason, message)
    _write_status(kube, namespace, name, {"startTime": started, "failed": pod_failures, "active": 0,
                                          "terminating": 0, "ready": 0, "conditions": [target]})
    return _write_status(kube, namespace, name, {
        "startTime": started, "failed": pod_failures, "active": 0, "terminating": 0, "ready": 0,
        "conditions": [target, _condition("Failed", reason, message)]})


def complete_job(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    """The Job's pod succeeded: SuccessCriteriaMet, then Complete with a completionTime."""
    started = _now()
    met = _condition("SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods")
    _write_status(kube, namespace, name, {"startTime": started, "succeeded": 1, "active": 0, "terminating": 0,
                                          "ready": 0, "conditions": [met]})
    done = _condition("Complete", "CompletionsReached", "Reached expected number of succeeded pods")
    return _write_status(kube, namespace, name, {
        "startTime": started, "completionTime": _now(), "succeeded": 1, "active": 0, "terminating": 0,
        "ready": 0, "conditions": [met, done]})
