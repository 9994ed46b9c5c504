"""`up`'s own last word on readiness (issue 39): after the engine returns, every model the run changed is read
from the cluster with the reader `status` uses, and waited for until it is Ready, fails, or its bound passes.

Why the engine's wait is not enough: the Kubernetes provider's Deployment await (pulumi-kubernetes
`pkg/await/deployment.go` at the pinned f47bc2d) waits for the Deployment's `status.observedGeneration`, then
judges a replicas-only edit from its *cached* ReplicaSet (`status.readyReplicas >= spec.replicas`; its
`changeTriggeredRollout()` is false, so nothing else is checked). The ReplicaSet's scale-up event can reach the
watch after the Deployment's status event; in that window the cache still says 1 of 1, and with the default
`maxUnavailable` of 25 % the Deployment is Available at 3 of 4 — so `up` ended with a replica not Ready
(bench/cluster_churn.py, 60 models: 73 pods bound, 72 Ready when `up` returned). Here the Deployment's own
status is read, and a status its controller wrote for an older spec does not count.

The bound is the one the program wrote on the workload (`names.TIMEOUT_ANNOTATION`: `cluster.readyTimeoutSeconds`
or the model's download and start-up budget), counted from when this check starts: the engine already waited for
the workload, so a model still not Ready here is usually seconds away, and one that never will be is named with
the phase and reason `status` would show.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from tkf_infra import names
from tkf_infra.live.lifecycle import Lifecycle, Phase, Workload, judge, read_endpoint, unusable_nodes

#: The provider's own await bound when an object carries no `pulumi.com/timeoutSeconds` (10 min: pulumi-kubernetes
#: `pkg/await` DefaultTimeout for Deployments and StatefulSets at f47bc2d).
PROVIDER_DEFAULT_TIMEOUT_S = 600
#: How often the cluster is read while models are still coming up (a handful of GETs per model).
POLL_S = 2.0
#: How often the models still waited for are named on the console.
PROGRESS_EVERY_S = 30.0
#: Why a model the engine changed has no workload on the cluster.
ABSENT = "its workload is not on the cluster after the engine's run (the run's errors say what stopped it)"
#: Phases in which a model needs nothing more from `up`.
DONE = (Phase.READY, Phase.IDLE)


@dataclass
class Outcome:
    """What the check saw: models Ready (or Idle), and the last row of each that was not, with its bound."""

    ready: list[str] = field(default_factory=list)
    not_ready: dict[str, tuple[Lifecycle, int]] = field(default_factory=dict)
    seconds: float = 0.0


def bound_seconds(w: Workload) -> int:
    """The wait the program asked of the provider for this model: our workload's annotation, else (KServe makes
    the Deployment) the LLMInferenceService's."""
    for obj in (w.workload, w.llmisvc):
        raw = ((obj or {}).get("metadata") or {}).get("annotations", {}).get(names.TIMEOUT_ANNOTATION)
        if raw is not None and str(raw).isdigit():
            return int(raw)
    return PROVIDER_DEFAULT_TIMEOUT_S


def stale_status(w: Workload) -> str | None:
    """Why the workload's readiness cannot be believed yet: its controller has not acted on the latest spec
    (`observedGeneration` behind `generation`), or fewer replicas run the latest template than are desired (a
    rollout whose ready pods are the old ones). None when its status describes its spec."""
    obj = w.workload
    if obj is None:
        return None
    generation = (obj.get("metadata") or {}).get("generation")
    status, spec = obj.get("status") or {}, obj.get("spec") or {}
    observed = status.get("observedGeneration")
    if isinstance(generation, int) and isinstance(observed, int) and observed < generation:
        return f"its controller has not acted on the latest spec yet (generation {generation}, observed {observed})"
    desired = int(spec.get("replicas", 1))
    updated = status.get("updatedReplicas")
    if desired > 0 and isinstance(updated, int) and updated < desired:
        return f"{updated}/{desired} replicas run the latest spec (a rollout in progress)"
    return None


def settled(model: str, w: Workload) -> tuple[Lifecycle, bool]:
    """The model's row, and whether `up` is done with it: Ready or Idle on a current status, or Failed, or
    nothing of it on the cluster — the engine writes a model's objects before it returns, so a model without
    any did not get them (a failed shared object it depends on: the summary's errors say which), and waiting
    would not bring them."""
    row = judge(model, w)
    if w.workload is None and w.llmisvc is None:
        return replace(row, phase=Phase.FAILED, reason=ABSENT), True
    if row.phase in DONE and (why := stale_status(w)) is not None:
        return Lifecycle(model, Phase.DEGRADED, row.desired, row.ready, row.cache, why, row.scaling), False
    return row, row.phase in DONE or row.phase is Phase.FAILED


def wait_ready(client: httpx.Client, endpoints: Iterable[Mapping[str, Any]], *,
               progress: Callable[[str], None] = lambda _: None, clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep, poll_s: float = POLL_S) -> Outcome:
    """Read each endpoint's model until every one is settled or past its bound (see the module docstring)."""
    start = clock()
    waiting = {str(ep["name"]): ep for ep in endpoints}
    bounds: dict[str, int] = {}  # each model's bound in seconds from `start`, read from its workload once
    out = Outcome()
    said = start
    while waiting:
        gone = unusable_nodes(client)
        for name, ep in list(waiting.items()):
            w = read_endpoint(client, ep, gone)
            if name not in bounds:
                bounds[name] = bound_seconds(w)
            bound = bounds[name]
            row, done = settled(name, w)
            if done and row.phase in DONE:
                out.ready.append(name)
            elif done or clock() >= start + bound:
                out.not_ready[name] = (row, bound)
            else:
                continue
            del waiting[name]
        if not waiting:
            break
        if clock() - said >= PROGRESS_EVERY_S:
            said = clock()
            progress(f"waiting for {len(waiting)} model(s) to be Ready on the cluster "
                     f"({round(said - start)} s): {', '.join(sorted(waiting))}")
        sleep(poll_s)
    out.seconds = clock() - start
    return out
