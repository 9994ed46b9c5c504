"""An autoscaled model's scaling objects, as each backend's controller expects them (docs/scaling.md).

Why KEDA on both backends: KServe v0.20.0's only autoscaling path for an LLMInferenceService is
`spec.scaling` {minReplicas, maxReplicas, wva: {hpa | keda}} — its controller writes a VariantAutoscaling
for llm-d's Workload Variant Autoscaler and, with `keda`, a KEDA ScaledObject on `wva_desired_replicas`
(pkg/controller/v1alpha2/llmisvc/scaling.go: `expectedVA`, `expectedScaledObject`); its `hpa` actuator
would need a Prometheus Adapter serving external metrics besides. On the vllm backend we render the
ScaledObject ourselves, on the Deployment, with a Prometheus trigger on vLLM's own gauge: KEDA queries
Prometheus directly and serves the HPA it creates, so no metrics adapter is needed and a single
component (KEDA, pinned at v2.18.0, the release KServe v0.20.0's go.mod builds against) serves both
backends. tkf-infra installs KEDA when the stack asks (`platform.keda`, components/prerequisites.py) but not
WVA (no chart of it is vendored): `tkf_infra/plan/scaling.py` refuses a scaled model on a cluster that will
not serve the APIs it needs.

- The trigger's query sums the gauge over the model's replicas (`model_name` is its servedName, as vLLM
  labels every series; `namespace` is what the usual scrape relabelling adds, as `status` reads it), and
  `metricType: AverageValue` makes the HPA divide by the replica count: the target is per replica.
- `cooldownSeconds` is the HPA's scale-down stabilization window, and KEDA's own `cooldownPeriod` (which
  only governs the step from one replica to zero) when `minReplicas` is 0. Not on KServe: its v0.20.0
  CRD's CEL rules on `wva.keda` read `advanced.scalingModifiers.formula` and
  `advanced.horizontalPodAutoscalerConfig.name` without `has()`, so any `advanced` without both is refused
  ("no such key"), and `scalingModifiers.metricType` cannot be empty (an enum): `advanced` is unusable
  there (found by the API-server tier, tests/kube/test_scaling_apiserver.py); the plan warns.
- `initialCooldownPeriod` is the model's start-up budget, so the first load is not read as idleness.
- **Scale-to-zero** (`minReplicas: 0`): vLLM's gauges vanish with the last pod, so a second trigger reads
  the gateway's request counter for the model's served names (its own and its LoRA adapters'; the series
  are `tkf_infra.gateway_metrics`'s): it counts every request it takes, answered or failed, so the
  first request to a model at zero — refused, since its Service has no endpoint yet —
  is what wakes it. The trigger only wakes and holds one replica (clamped to 1, threshold 1): the
  replicas beyond come from vLLM's own signal, and traffic too light for that still lets the model go
  back to zero `cooldownSeconds` after its last request.
- The Deployment / LLMInferenceService carries no `replicas` then: the autoscaler owns the count.
- **A secured Prometheus** (`serving.prometheusAuth`, tkf_infra/config/prometheus_auth.py): every trigger
  names the stack's TriggerAuthentication and authModes, or skips certificate verification, exactly as
  KServe adds them to the trigger of the ScaledObject it writes from its inferenceservice-config.
"""

from __future__ import annotations

from typing import Any

from components import pod_sizes
from tkf_infra import gateway_metrics as gm
from tkf_infra import names
from tkf_infra import vllm_metrics as vm
from tkf_infra.config import ModelEntry, Namespaces, Serving
from tkf_infra.config.scaling import Scaling, ScalingMetric

KEDA_API_VERSION = "keda.sh/v1alpha1"
SCALED_OBJECT_KIND = "ScaledObject"
#: The name of the trigger that wakes a model at zero (`minReplicas: 0`) on the gateway's requests.
WAKE_TRIGGER = "gatewayrequests"

#: The vLLM gauge each catalog signal reads (vLLM ≥ 0.11's names, `tkf_infra.vllm_metrics`).
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


def wake_window_seconds(s: Scaling, serving: Serving) -> int:
    """The gateway-request window the wake trigger sums: two scrapes at least (an `increase` needs two
    samples) and one polling interval, so no request falls between two reads of KEDA's."""
    return 2 * serving.scrape_seconds + s.polling_seconds


def wake_query(entry: ModelEntry, namespaces: Namespaces, serving: Serving) -> str:
    """1 while the gateway took a request for the model (or an adapter of it) within the window, else 0.

    `increase` misses a series' first sample (a counter LiteLLM creates on its first request for the
    model after a restart), so a series that is new within the window counts too (`unless ... offset`)."""
    # Served names hold [A-Za-z0-9._:/-] (config/identity.py): "." is the one regex metacharacter; "[.]"
    # needs no backslash, which a PromQL string would read as an escape of its own.
    names = "|".join(n.replace(".", "[.]") for n in served_names(entry))
    w = f"{wake_window_seconds(_scaling(entry), serving)}s"
    series = f'{gm.REQUESTS}{{{vm.NAMESPACE_LABEL}="{namespaces.gateway}",{gm.MODEL_LABEL}=~"{names}"}}'
    return (f"clamp_max((sum(increase({series}[{w}])) or vector(0)) + "
            f"(count({series} unless {series} offset {w}) or vector(0)), 1)")


def served_names(entry: ModelEntry) -> list[str]:
    """The names the gateway takes requests for that land on this model's pods."""
    return [entry.served_name, *(a.served_name for a in (entry.lora.adapters if entry.lora else ()))]


def cold_start_seconds(entry: ModelEntry, weight_bytes: int, serving: Serving) -> int:
    """The most a new replica takes from the request that asks for it to Ready, weights on the cache PVC:
    the gateway scrape and KEDA's poll that see the request, then the startup probe's whole budget (after
    which the kubelet restarts the pod: `components/pod_sizes.py`), then one readiness period. It assumes
    the vLLM image is on the node (a first pull on a new node adds its own time) and room in the pool
    (which the plan holds for `maxReplicas`)."""
    s = _scaling(entry)
    probe = pod_sizes.startup_failure_threshold(entry, weight_bytes) * pod_sizes.PROBE_PERIOD_SECONDS
    return serving.scrape_seconds + s.polling_seconds + probe + pod_sizes.PROBE_PERIOD_SECONDS


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


def scaled_object(entry: ModelEntry, namespaces: Namespaces, serving: Serving, prometheus_url: str,
                  weight_bytes: int) -> dict[str, Any]:
    """The KEDA ScaledObject on the vllm backend's Deployment: `spec` only (metadata is the component's)."""
    s = _scaling(entry)
    triggers: list[dict[str, Any]] = [{
        "type": "prometheus",
        "name": s.metric.value.lower(),
        "metricType": "AverageValue",
        "metadata": {
            "serverAddress": prometheus_url,
            "query": signal_query(entry, namespaces.serving),
            "threshold": f"{s.target_value:g}",
        },
    }]
    at_zero: dict[str, Any] = {}
    if s.min_replicas == 0:
        at_zero = {"cooldownPeriod": s.cooldown_seconds}
        triggers.append({
            "type": "prometheus",
            "name": WAKE_TRIGGER,
            "metricType": "AverageValue",
            "metadata": {"serverAddress": prometheus_url, "query": wake_query(entry, namespaces, serving),
                         "threshold": "1", "activationThreshold": "0"},
        })
    if serving.prometheus_auth is not None:
        triggers = [serving.prometheus_auth.trigger(t) for t in triggers]
    return {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": names.workload(entry.name)},
        "minReplicaCount": s.min_replicas,
        "maxReplicaCount": s.max_replicas,
        "pollingInterval": s.polling_seconds,
        "initialCooldownPeriod": pod_sizes.ready_timeout_seconds(entry, weight_bytes),
        **at_zero,
        "advanced": {"horizontalPodAutoscalerConfig": {"behavior": _behavior(s)}},
        "triggers": triggers,
    }
