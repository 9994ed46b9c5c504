"""Each model's lifecycle phase, read from what the cluster's controllers wrote (issue 25).

Why from the controllers' own objects: the phase a platform team acts on is the one Kubernetes
holds — KServe's ``LLMInferenceService`` conditions, the Deployment or LeaderWorkerSet readiness the
workload controllers keep, and the weight download Job's conditions — not a guess from metrics. The
phases are the TKF design's status block:

| phase | when |
|---|---|
| Failed | the download failed; KServe could not combine presets or reconcile; the rollout passed its deadline; |
|        | no replica ready and a pod's container cannot run (CrashLoopBackOff, image pull: the kubelet's words) |
| Downloading | the weight cache's download Job has not completed |
| Pending | no replica is ready and no pod of the model is on a node yet (`unschedulable`: "waiting for GPUs" … |
|         | with the scheduler's own message when a pod's PodScheduled is False; else waiting for one)               |
| Loading | pods are on nodes, none ready yet (vLLM loading weights, compiling) |
| Degraded | some replicas ready, fewer than desired (with why the others are not: scheduler or kubelet) |
| Ready | every desired replica ready |
| Idle | scaled to zero by its autoscaler (`minReplicas: 0`), no pod: the gateway's next request wakes it |

`judge` is pure (plain objects in, a `Lifecycle` out); `read_lifecycle` reads them with the edge's
httpx client (tkf_infra/live/cluster.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import httpx

from tkf_infra import names
from tkf_infra.live.cluster import KubeconfigError, client_from_kubeconfig, live_node

#: The reason of a model the cluster holds nothing of yet.
NO_WORKLOAD = "no workload written yet"


class Phase(StrEnum):
    PENDING = "Pending"
    DOWNLOADING = "Downloading"
    LOADING = "Loading"
    READY = "Ready"
    DEGRADED = "Degraded"
    FAILED = "Failed"
    IDLE = "Idle"


class CacheState(StrEnum):
    COMPLETE = "complete"
    DOWNLOADING = "downloading"
    FAILED = "failed"
    NONE = "none"
    """No download Job: no weight cache for this model (fetched by KServe or vLLM itself), or not created yet."""


#: KServe's conditions whose False means it could not do its part (not "waiting for pods").
KSERVE_FAILURE_CONDITIONS = ("PresetsCombined",)
#: Messages KServe v0.20.0 writes on a workload condition when a reconcile failed (controller.go:245).
KSERVE_RECONCILE_FAILURE = "failed to reconcile"


@dataclass(frozen=True)
class Workload:
    """What the cluster holds for one model; any part may be absent (None / empty)."""

    llmisvc: Mapping[str, Any] | None = None
    workload: Mapping[str, Any] | None = None
    """The Deployment or LeaderWorkerSet that runs the pods (KServe's or ours)."""
    job: Mapping[str, Any] | None = None
    pods: tuple[Mapping[str, Any], ...] = ()
    unusable_nodes: frozenset[str] = frozenset()
    """Nodes not Ready or cordoned: a pod pinned to one of them waits there for an `up` to re-plan it."""


@dataclass(frozen=True)
class Lifecycle:
    model: str
    phase: Phase
    desired: int | None
    ready: int | None
    cache: CacheState
    reason: str
    scaling: tuple[int, int] | None = None
    """An autoscaled model's (minReplicas, maxReplicas) from the `endpoints` output: `desired` is what its
    autoscaler asks now, between the two (docs/scaling.md)."""

    def to_json(self) -> dict[str, Any]:
        replicas: dict[str, Any] = {"desired": self.desired, "ready": self.ready}
        if self.scaling is not None:
            replicas.update(min=self.scaling[0], max=self.scaling[1])
        return {"phase": self.phase.value, "replicas": replicas,
                "weightCache": self.cache.value, "reason": self.reason}


def _conditions(obj: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    status = (obj or {}).get("status") or {}
    return {str(c.get("type")): c for c in status.get("conditions") or [] if isinstance(c, Mapping)}


def cache_state(job: Mapping[str, Any] | None) -> CacheState:
    if job is None:
        return CacheState.NONE
    conds = _conditions(job)
    if conds.get("Complete", {}).get("status") == "True":
        return CacheState.COMPLETE
    if conds.get("Failed", {}).get("status") == "True":
        return CacheState.FAILED
    return CacheState.DOWNLOADING


def _replicas(w: Workload) -> tuple[int | None, int | None]:
    """(desired, ready): from the workload's spec and status (LWS counts groups, as replicas)."""
    if w.workload is None:
        desired = (w.llmisvc or {}).get("spec", {}).get("replicas")
        return (int(desired) if isinstance(desired, int) else None), None
    spec, status = w.workload.get("spec") or {}, w.workload.get("status") or {}
    desired = spec.get("replicas", 1)
    return int(desired), int(status.get("readyReplicas") or 0)


def _failure(w: Workload) -> str | None:
    job_conds = _conditions(w.job)
    if job_conds.get("Failed", {}).get("status") == "True":
        c = job_conds["Failed"]
        return f"weight download failed: {c.get('reason', '')}: {c.get('message', '')}".rstrip(": ")
    for t, c in _conditions(w.llmisvc).items():
        if c.get("status") != "False":
            continue
        if t in KSERVE_FAILURE_CONDITIONS or str(c.get("message", "")).startswith(KSERVE_RECONCILE_FAILURE):
            return f"KServe {t}: {c.get('reason') or ''} {c.get('message') or ''}".strip()
    progressing = _conditions(w.workload).get("Progressing", {})
    if progressing.get("status") == "False" and progressing.get("reason") == "ProgressDeadlineExceeded":
        return f"rollout stalled: {progressing.get('message', '')}"
    return None


#: What a scheduler's "0/N nodes are available: ..." message says a pod waits for (first match wins).
_WAITING_FOR = (("Insufficient nvidia.com/mig-", "MIG slices"), ("Insufficient nvidia.com/gpu", "GPUs"),
                ("Insufficient cpu", "CPU"), ("Insufficient memory", "memory"),
                ("untolerated taint", "a node whose taints it tolerates"),
                ("didn't match pod topology spread constraints", "room on the nodes it is pinned to"),
                ("didn't match Pod's node affinity/selector", "a node its pool selector and pin allow"),
                ("Too many pods", "a node under its maxPods"))


def pinned_nodes(pod: Mapping[str, Any]) -> set[str]:
    """The nodes a pod's required node affinity names by `metadata.name` (the plan's pin, tkf_infra/plan/pins.py)."""
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    terms = (affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    return {str(v) for t in terms for f in t.get("matchFields") or []
            if f.get("key") == "metadata.name" and f.get("operator") == "In" for v in f.get("values") or []}


def unschedulable(pods: Iterable[Mapping[str, Any]], unusable_nodes: frozenset[str] = frozenset()) -> str | None:
    """"waiting for GPUs (or what else): <the scheduler's own message>" when a pod of the model is Pending with
    PodScheduled False (reason Unschedulable); None when none is. A pod pinned to a node that is gone (not
    Ready, cordoned) waits for no capacity that will come back by itself: it says so, and what re-plans it."""
    for p in pods:
        cond = _conditions(p).get("PodScheduled", {})
        if (p.get("spec") or {}).get("nodeName") or cond.get("status") != "False":
            continue
        message = str(cond.get("message") or cond.get("reason") or "unschedulable")
        # The plan kept room for the pod on each pinned node and the spread constraint sends it to the node
        # that lacks its share: with a pinned node gone, that is where it waits (docs/admission.md).
        if lost := sorted(pinned_nodes(p) & unusable_nodes):
            return (f"waiting for its pinned node(s) {', '.join(lost)}, not Ready or cordoned: run `up` to "
                    f"re-plan the model onto usable nodes (the scheduler: {message})")
        what = next((w for key, w in _WAITING_FOR if key in message), "a node")
        return f"waiting for {what}: {message}"
    return None


#: Container waiting reasons a kubelet writes when a container cannot run (not "still starting"): the
#: kubelet's own (pkg/kubelet/images/types.go ErrImagePull, ImagePullBackOff, InvalidImageName;
#: pkg/kubelet/kuberuntime CrashLoopBackOff, CreateContainerConfigError, CreateContainerError,
#: RunContainerError; Kubernetes v1.36).
CONTAINER_FAILURES = ("CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "InvalidImageName",
                      "CreateContainerConfigError", "CreateContainerError", "RunContainerError")


def _container_trouble(pod: Mapping[str, Any]) -> str | None:
    """What keeps a placed pod from running, in the kubelet's words: a container waiting for a reason that is
    not start-up (CrashLoopBackOff, an image that cannot be pulled, ...), with its restarts and last exit."""
    status = pod.get("status") or {}
    for c in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        waiting = (c.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") not in CONTAINER_FAILURES:
            continue
        last = (c.get("lastState") or {}).get("terminated") or {}
        exit_ = (f"; last exit {last.get('exitCode')} ({last.get('reason') or 'no reason'})"
                 + (f": {str(last['message'])[:200]}" if last.get("message") else "")) if last else ""
        message = f": {str(waiting['message'])[:200]}" if waiting.get("message") else ""
        name = (pod.get("metadata") or {}).get("name", "?")
        return (f"pod {name}: container {c.get('name')} {waiting['reason']}{message} "
                f"(restarted {c.get('restartCount', 0)} times{exit_})")
    return None


def pod_trouble(placed: Iterable[Mapping[str, Any]]) -> str | None:
    """The first container failure (see `_container_trouble`) among pods on nodes, or None."""
    return next((t for p in placed if (t := _container_trouble(p))), None)


def _not_ready_why(placed: Iterable[Mapping[str, Any]]) -> str:
    """An unready pod's Ready condition as the kubelet wrote it (e.g. "containers with unready status:
    [vllm]"): what a Loading model is waiting on."""
    for p in placed:
        ready = _conditions(p).get("Ready", {})
        if ready.get("status") == "False":
            name = (p.get("metadata") or {}).get("name", "?")
            return f" (pod {name} Ready=False: {ready.get('reason') or ''} {ready.get('message') or ''}".rstrip() + ")"
    return ""


def judge(model: str, w: Workload) -> Lifecycle:
    """The phase of one model from its objects (see the module docstring's table)."""
    cache = cache_state(w.job)
    desired, ready = _replicas(w)
    placed = [p for p in w.pods if (p.get("spec") or {}).get("nodeName")]
    if (why := _failure(w)) is not None:
        return Lifecycle(model, Phase.FAILED, desired, ready, cache, why)
    if desired is not None and ready is not None and desired > 0:
        if ready >= desired:
            return Lifecycle(model, Phase.READY, desired, ready, cache, f"{ready}/{desired} replicas ready")
        if ready > 0:
            waiting = unschedulable(w.pods, w.unusable_nodes) or pod_trouble(placed)
            return Lifecycle(model, Phase.DEGRADED, desired, ready, cache,
                             f"{ready}/{desired} replicas ready" + (f"; {waiting}" if waiting else ""))
    if desired == 0 and not w.pods and cache is not CacheState.DOWNLOADING:
        return Lifecycle(model, Phase.IDLE, desired, ready, cache,
                         "scaled to zero; the gateway's next request wakes it (endpoints: coldStartSeconds)")
    if cache is CacheState.DOWNLOADING:
        return Lifecycle(model, Phase.DOWNLOADING, desired, ready, cache, "the weight download Job has not completed")
    if w.workload is None:
        return Lifecycle(model, Phase.PENDING, desired, ready, cache, NO_WORKLOAD)
    if (trouble := pod_trouble(placed)) is not None:
        return Lifecycle(model, Phase.FAILED, desired, ready, cache, f"no replica ready; {trouble}")
    if placed:
        return Lifecycle(model, Phase.LOADING, desired, ready, cache,
                         f"{len(placed)} pod(s) on nodes, none ready yet{_not_ready_why(placed)}")
    reason = (unschedulable(w.pods, w.unusable_nodes)
              or (f"{len(w.pods)} pod(s), none on a node yet" if w.pods else "no pod yet"))
    return Lifecycle(model, Phase.PENDING, desired, ready, cache, reason)


# --------------------------------------------------------------------------------------------
# Reading (the edge)
# --------------------------------------------------------------------------------------------

_LLMISVC = "/apis/serving.kserve.io/v1alpha2/namespaces/{ns}/llminferenceservices/{name}"
_DEPLOYMENT = "/apis/apps/v1/namespaces/{ns}/deployments/{name}"
_LWS = "/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets/{name}"
_JOB = "/apis/batch/v1/namespaces/{ns}/jobs/{name}"
_PODS = "/api/v1/namespaces/{ns}/pods"


def _get(client: httpx.Client, path: str) -> dict[str, Any] | None:
    """The object, or None when the server says it does not exist (or serves no such kind)."""
    response = client.get(path)
    if response.status_code == 404:
        return None
    response.raise_for_status()
    body: dict[str, Any] = response.json()
    return body


def unusable_nodes(client: httpx.Client) -> frozenset[str]:
    """Nodes not Ready or cordoned (spec.unschedulable), read once per `status`; none when the credentials may
    not list Nodes (a namespace-scoped role): the phases stand without them, only the lost-node hint is lost."""
    response = client.get("/api/v1/nodes")
    if not response.is_success:
        return frozenset()
    nodes = (live_node(i) for i in response.json().get("items") or [])
    return frozenset(n.name for n in nodes if not n.ready or n.unschedulable)


def read_workload(client: httpx.Client, namespace: str, model: str, repo: str | None,
                  revision: str | None, gone: frozenset[str] = frozenset()) -> Workload:
    """One model's objects: KServe's if it has an LLMInferenceService, else our own Deployment/LWS."""
    name = names.workload(model)
    isvc = _get(client, _LLMISVC.format(ns=namespace, name=name))
    candidates = ([_DEPLOYMENT.format(ns=namespace, name=f"{name}-kserve"),
                   _LWS.format(ns=namespace, name=f"{name}-kserve-mn")] if isvc is not None
                  else [_DEPLOYMENT.format(ns=namespace, name=name), _LWS.format(ns=namespace, name=name)])
    workload = next((o for o in (_get(client, p) for p in candidates) if o is not None), None)
    job = (_get(client, _JOB.format(ns=namespace, name=names.weight_download_job(repo, revision)))
           if repo and revision else None)
    response = client.get(_PODS.format(ns=namespace), params={"labelSelector": f"{names.MODEL_LABEL}={model}"})
    response.raise_for_status()
    pods = tuple(p for p in response.json().get("items", []) if isinstance(p, Mapping))
    return Workload(isvc, workload, job, pods, gone)


def read_endpoint(client: httpx.Client, ep: Mapping[str, Any], gone: frozenset[str]) -> Workload:
    """The objects of one row of the stack's `endpoints` output (its `model` is `repo@revision`)."""
    repo, _, revision = str(ep.get("model", "")).partition("@")
    return read_workload(client, str(ep["namespace"]), str(ep["name"]), repo or None, revision or None, gone)


def read_lifecycle(client: httpx.Client, endpoints: Iterable[Mapping[str, Any]]) -> list[Lifecycle]:
    """Every model of the stack's `endpoints` output, judged from the cluster."""
    out: list[Lifecycle] = []
    gone = unusable_nodes(client)
    for ep in endpoints:
        row = judge(str(ep["name"]), read_endpoint(client, ep, gone))
        scaling = ep.get("scaling")
        if isinstance(scaling, Mapping) and isinstance(scaling.get("minReplicas"), int | float) and isinstance(
                scaling.get("maxReplicas"), int | float):
            row = replace(row, scaling=(int(scaling["minReplicas"]), int(scaling["maxReplicas"])))
        out.append(row)
    return out


# --------------------------------------------------------------------------------------------
# The `status` command's lifecycle part
# --------------------------------------------------------------------------------------------


def unpublished(row: Lifecycle, refused_at: str | None = None) -> Lifecycle:
    """A catalog model the stack's outputs do not list: nothing on the cluster means `up` has not reached it,
    or the last run's plan refused it (``refused_at``: the stage its `rejected` output row names), not that it
    waits for a node."""
    if row.phase is not Phase.PENDING or row.reason != NO_WORKLOAD:
        return row
    if refused_at is not None:
        return replace(row, reason=f"not deployed: the last run's plan refused it at {refused_at} (`preview` "
                                   "names why)")
    return replace(row, reason="not deployed yet: in the catalog, not in the stack's outputs (an `up` in "
                               "progress, or a model added since the last run)")


def render_table(rows: Iterable[Lifecycle]) -> str:
    lines = [f"{'model':<30} {'phase':<12} {'replicas':<9} {'weights':<12} why"]
    for r in rows:
        replicas = f"{r.ready if r.ready is not None else '-'}/{r.desired if r.desired is not None else '-'}"
        if r.scaling is not None:
            replicas += f" ({r.scaling[0]}-{r.scaling[1]})"
        lines.append(f"{r.model:<30} {r.phase.value:<12} {replicas:<9} {r.cache.value:<12} {r.reason}")
    return "\n".join(lines)


def lifecycle_of(endpoints: Iterable[Mapping[str, Any]], kubeconfig: str,
                 context: str | None) -> tuple[list[Lifecycle] | None, str | None]:
    """(rows, None), or (None, why the cluster could not be read): a reason, never a traceback."""
    try:
        with client_from_kubeconfig(kubeconfig, context) as client:
            return read_lifecycle(client, endpoints), None
    except KubeconfigError as exc:
        return None, f"{exc}; fix cluster.kubeconfig / cluster.context"
    except httpx.HTTPError as exc:
        return None, f"the cluster of {kubeconfig} did not answer as expected ({type(exc).__name__}: {exc})"
