"""A catalog entry's `scaling`: how many replicas an autoscaler may run, on which vLLM signal.

Why a block of its own: with it, the fleet no longer runs a fixed `replicas` but anything from
`minReplicas` to `maxReplicas`, and the plan must hold room for the maximum (docs/scaling.md), so
every rule about that range is written here once: the range itself, the signal and its target,
and where autoscaling cannot go.

- **Signals** are vLLM's own gauges, per replica (the series names are `tkf_infra.vllm_metrics`'s,
  mapped in `components/autoscaling.py`): waiting requests (the queue: the earliest sign a replica is
  saturated), running requests, or the KV cache's use (a fraction, 0-1).
- **Multi-node models do not autoscale**: one replica is a LeaderWorkerSet group of `nodeCount` pods
  started as one pipeline; adding or removing a group moves whole nodes and a half-started group holds
  them all (the Themelio design keeps them fixed). Give them a fixed `replicas`.
- **Scale-to-zero** (`minReplicas: 0`, vllm backend only): vLLM's gauges vanish with the last pod, so
  what wakes a model at zero is the gateway's own request counter (every request it takes for the model,
  answered or failed, is counted before it reaches a pod): `components/autoscaling.py` renders it as a
  second trigger. A model at zero stays in the gateway's `model_list`; its first request waits at most the
  published `coldStartSeconds` (docs/scaling.md). KServe v0.20.0 cannot go below one replica (its CRD's
  `minReplicas` and `idleReplicaCount` start at 1): refused there by the plan (tkf_infra/plan/scaling.py).
  Down to `minReplicas` after `cooldownSeconds` without load.
- `replicas` and `scaling` are exclusive (as in KServe's CRD): the autoscaler owns the count.
- **Overcommit** is the stack's choice, never a silent one (`serving.overcommit`, Overcommit).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, model_validator

from tkf_infra.config.base import SettingsModel


class ScalingMetric(StrEnum):
    WAITING_REQUESTS = "waitingRequests"
    RUNNING_REQUESTS = "runningRequests"
    KV_CACHE_USAGE = "kvCacheUsage"


#: The target per replica when the entry gives none: a short queue, a busy batch, a KV cache 80 % full.
DEFAULT_TARGETS: dict[ScalingMetric, float] = {
    ScalingMetric.WAITING_REQUESTS: 2.0,
    ScalingMetric.RUNNING_REQUESTS: 32.0,
    ScalingMetric.KV_CACHE_USAGE: 0.8,
}

MAX_REPLICAS = 100  # as `replicas`
#: The HPA's scale-down stabilization window at most (KEDA v2.18.0's ScaledObject CRD: `maximum: 3600`).
MAX_COOLDOWN_SECONDS = 3600


class Overcommit(StrEnum):
    """What the plan does with an autoscaled model whose maxReplicas its pool cannot hold beside the others.

    `refuse` (the default) fails closed: the model is left out by name, so no busy hour ends in Pending
    pods or evicted neighbours. `allow` admits it with room held for minReplicas only, in admission order
    (deployed, `priority`, catalog), and says per model how many replicas the autoscaler may ask for
    that would sit Pending: for a stack that would rather serve a model at its floor than not at all.
    """

    REFUSE = "refuse"
    ALLOW = "allow"


class Scaling(SettingsModel):
    """Autoscaling between `minReplicas` and `maxReplicas` on one vLLM signal (module docstring)."""

    min_replicas: int = Field(1, ge=0, le=MAX_REPLICAS, description="Replicas kept however idle; 0 scales to zero "
                                                                  "(vllm backend; woken by the gateway's requests).")
    max_replicas: int = Field(ge=1, le=MAX_REPLICAS, description="Most replicas the autoscaler may run; the fleet "
                                                                 "plan reserves GPUs, CPU and memory for all of them.")
    metric: ScalingMetric = Field(ScalingMetric.WAITING_REQUESTS,
                                  description="waitingRequests (vllm:num_requests_waiting), runningRequests "
                                              "(vllm:num_requests_running) or kvCacheUsage (vllm:kv_cache_usage_perc).")
    target: float | None = Field(None, gt=0, description="The signal's value per replica the autoscaler holds: "
                                                         "requests (waiting/running) or a fraction 0-1 (kvCacheUsage). "
                                                         "Default 2 waiting, 32 running, 0.8 KV cache.")
    cooldown_seconds: int = Field(300, ge=0, le=86400, description="Seconds without load before scaling down "
                                  "(to zero too, when minReplicas is 0).")
    polling_seconds: int = Field(15, ge=1, le=3600, description="How often the autoscaler reads the signal.")

    @model_validator(mode="after")
    def _range(self) -> Scaling:
        problems = []
        if self.min_replicas > self.max_replicas:
            problems.append(f"minReplicas {self.min_replicas} is above maxReplicas {self.max_replicas}; raise "
                            f"maxReplicas to at least {self.min_replicas} or lower minReplicas")
        if self.cooldown_seconds > MAX_COOLDOWN_SECONDS:
            problems.append(f"cooldownSeconds {self.cooldown_seconds} is above {MAX_COOLDOWN_SECONDS}: it becomes the "
                            "HPA's scale-down stabilization window, which KEDA's ScaledObject (v2.18.0 CRD, as the "
                            "HPA itself) caps at one hour; set at most 3600")
        if self.metric == ScalingMetric.KV_CACHE_USAGE and self.target is not None and self.target > 1:
            problems.append(f"target {self.target:g} is above 1, but kvCacheUsage is a fraction of the KV cache "
                            "(0-1); write e.g. 0.8 for 80 %")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def target_value(self) -> float:
        return self.target if self.target is not None else DEFAULT_TARGETS[self.metric]


def entry_scaling_problem(scaling: Scaling | None, node_count: int, replicas_given: bool) -> str | None:
    """What the rest of an entry forbids of its `scaling` (the entry's validator calls it)."""
    if scaling is None:
        return None
    if node_count > 1:
        return (f"scaling: a multi-node model (nodeCount {node_count}) cannot autoscale: each replica is a group of "
                f"{node_count} pods started as one pipeline, added or removed whole; drop `scaling` and set a fixed "
                "`replicas`, or serve it on one node")
    if replicas_given:
        return (f"replicas and scaling are exclusive (the autoscaler sets the count, from minReplicas "
                f"{scaling.min_replicas} to maxReplicas {scaling.max_replicas}); drop `replicas` (from the entry or "
                "modelDefaults) or drop `scaling`")
    return None
