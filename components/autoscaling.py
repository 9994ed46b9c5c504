"""An autoscaled model's scaling objects, as each backend's controller expects them (docs/scaling.md).

Why KEDA on both backends: KServe v0.20.0's only autoscaling path for an LLMInferenceService is
`spec.scaling` {minReplicas, maxReplicas, wva: {hpa | keda}} — its controller writes a VariantAutoscaling
for llm-d's Workload Variant Autoscaler and, with `keda`, a KEDA ScaledObject on `wva_desired_replicas`
(pkg/controller/v1alpha2/llmisvc/scaling.go: `expectedVA`, `expectedScaledObject`); its `hpa` actuator
would need a Prometheus Adapter serving external metrics besides. On the vllm backend we render the
ScaledObject ourselves, on the Deployment, with a Prometheus trigger on vLLM's own gauge: KEDA queries
Prometheus directly and serves the HPA it creates, so no metrics adapter is needed and a single
component (KEDA, pinned at v2.18.0, the release KServe v0.20.0's go.mod builds against) serves both
backends. Neither KEDA nor WVA is installed by tkf-infra (no chart of theirs is vendored here):
`tkf_infra/plan/scaling.py` refuses a scaled model on a cluster that does not serve their APIs.

- The trigger's query sums the gauge over the model's replicas (`model_name` is its servedName, as vLLM
  labels every series; `namespace` is what the usual scrape relabelling adds, as `status` reads it), and
  `metricType: AverageValue` makes the HPA divide by the replica count: the target is per replica.
- `cooldownSeconds` is the HPA's scale-down stabilization window (KEDA's own `cooldownPeriod` only
  governs scaling to zero, which is refused: `tkf_infra/config/scaling.py`). Not on KServe: its v0.20.0
  CRD's CEL rules on `wva.keda` read `advanced.scalingModifiers.formula` and
  `advanced.horizontalPodAutoscalerConfig.name` without `has()`, so any `advanced` without both is refused
  ("no such key"), and `scalingModifiers.metricType` cannot be empty (an enum): `advanced` is unusable
  there (found by the API-server tier, tests/kube/test_scaling_apiserver.py); the plan warns.
- `initialCooldownPeriod` is the model's start-up budget, so the first load is not read as idleness.
- The Deployment / LLMInferenceService carries no `replicas` then: the autoscaler owns the count.
"""

from __future__ import annotations

from typing import Any

from components import pod_sizes
from tkf_infra import names
from tkf_infra.config import ModelEntry
from tkf_infra.config.scaling import Scaling, ScalingMetric
from tkf_infra.live import vllm_metrics as vm

KEDA_API_VERSION = "keda.sh/v1alpha1"
SCALED_OBJECT_KIND = "ScaledObject"

#: The vLLM gauge each catalog signal reads (vLLM ≥ 0.11's names, `tkf_infra.live.vllm_metrics`).
METRIC_SERIES: dict[ScalingMetric, str] = {
    ScalingMetric.WAITING_REQUESTS: vm.WAITING,
    ScalingMetric.RUNNING_REQUESTS: vm.RUNNING,
    ScalingMetric.KV_CACHE_USAGE: vm.KV_CACHE_USAGE,
}


def _scaling(entry: ModelEntry) -> Scaling:
    if entry.scaling is None:
        raise ValueError(f"model {entry.name} has no scaling")  # a caller's bug: only scaled entries come here
    return entry.scaling


def signal_query(entry: ModelEntry, namespace: str) -> str:
    """The PromQL the trigger reads: the signal summed over the model's replicas."""
    series = METRIC_SERIES[_scaling(entry).metric]
    return f'sum({series}{{{vm.NAMESPACE_LABEL}="{namespace}",{vm.MODEL_LABEL}="{entry.served_name}"}})'


def _behavior(s: Scaling) -> dict[str, Any]:
    return {"scaleDown": {"stabilizationWindowSeconds": s.cooldown_seconds}}


def llmisvc_scaling(entry: ModelEntry, weight_bytes: int) -> dict[str, Any]:
    """`spec.scaling` of the LLMInferenceService (KServe v0.20.0's CRD: wva with the keda actuator)."""
    s = _scaling(entry)
    return {
        "minReplicas": s.min_replicas,
        "maxReplicas": s.max_replicas,
        "wva": {"keda": {
            "pollingInterval": s.polling_seconds,
            "initialCooldownPeriod": pod_sizes.ready_timeout_seconds(entry, weight_bytes),
        }},
    }


def scaled_object(entry: ModelEntry, namespace: str, prometheus_url: str, weight_bytes: int) -> dict[str, Any]:
    """The KEDA ScaledObject on the vllm backend's Deployment: `spec` only (metadata is the component's)."""
    s = _scaling(entry)
    return {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": names.workload(entry.name)},
        "minReplicaCount": s.min_replicas,
        "maxReplicaCount": s.max_replicas,
        "pollingInterval": s.polling_seconds,
        "initialCooldownPeriod": pod_sizes.ready_timeout_seconds(entry, weight_bytes),
        "advanced": {"horizontalPodAutoscalerConfig": {"behavior": _behavior(s)}},
        "triggers": [{
            "type": "prometheus",
            "name": s.metric.value.lower(),
            "metricType": "AverageValue",
            "metadata": {
                "serverAddress": prometheus_url,
                "query": signal_query(entry, namespace),
                "threshold": f"{s.target_value:g}",
            },
        }],
    }
