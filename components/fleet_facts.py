"""The plan's facts every metrics sidecar serves to Prometheus, as one mutable ConfigMap per fleet stack.

Why: the dashboards and alert rules hold what vLLM reports against what the plan decided — the fit check's
predicted KV tokens, each model's replica range, the GPUs its replicas hold, how long its start-up may take,
each pool's GPUs and what the plan reserves at both ends of the autoscalers' ranges — and Prometheus can only
compare what it scrapes. The sidecar beside vLLM (components/metrics_proxy.py) reads this file at every
scrape and serves its own model's and pool's figures with vLLM's `model_name` label, so a panel or an
alert compares like with like. One ConfigMap, not pod arguments: a run that changes a pool's figures (a
model added elsewhere in the pool) must not restart every pod on it; the kubelet refreshes a mounted
ConfigMap in place.
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import metrics_proxy as mp
from components import pod_meta, pod_sizes
from tkf_infra import names
from tkf_infra.plan import FleetPlan, ModelPlan


def ready_within_seconds(m: ModelPlan) -> int:
    """The longest a replica's start-up may take before the kubelet restarts it: the startup probe's whole
    budget (components/pod_sizes.py) and one readiness period."""
    threshold = pod_sizes.startup_failure_threshold(m.entry, m.weight_bytes)
    return (threshold + 1) * pod_sizes.PROBE_PERIOD_SECONDS


def model_facts(m: ModelPlan) -> dict[str, Any]:
    """One deployed model's facts (the sidecar's keys). A replica on part of a GPU (MIG, time-slicing) or on
    CPU holds no whole GPU: `poolHeadroom` counts those apart too (tkf_infra/outputs.py)."""
    e, s = m.entry, m.entry.scaling
    low, high = (s.min_replicas, s.max_replicas) if s is not None else (e.replicas, e.replicas)
    facts: dict[str, Any] = {
        mp.FACT_SERVED_NAME: e.served_name, mp.FACT_POOL: m.pool.name if m.pool else (e.node_pool or "cpu"),
        mp.FACT_MIN_REPLICAS: low, mp.FACT_MAX_REPLICAS: high,
        mp.FACT_REPLICA_GPUS: 0 if m.share is not None or e.is_cpu else e.gpus,
        mp.FACT_READY_WITHIN_SECONDS: ready_within_seconds(m),
    }
    if m.fit.kv_cache_tokens > 0:
        facts[mp.FACT_PREDICTED_KV_TOKENS] = m.fit.kv_cache_tokens
    return facts


def fleet_facts(plan: FleetPlan) -> dict[str, Any]:
    """Every deployed model's facts, and every pool's: its whole GPUs and what the deployed models hold at
    their minimum and maximum (the `poolHeadroom` output's figures; a CPU pool has 0 of each)."""
    from tkf_infra.plan.headroom import pool_headroom

    headroom = pool_headroom(plan)
    models = {m.entry.name: model_facts(m) for m in plan.models}
    pools: dict[str, Any] = {}
    for name in sorted({str(f[mp.FACT_POOL]) for f in models.values()} | set(plan.pools)):
        h = headroom.get(name) or {}
        pools[name] = {mp.FACT_POOL_GPUS: h.get("gpus", 0),
                       mp.FACT_RESERVED_AT_MINIMUM: (h.get("atMinimum") or {}).get("gpus", 0),
                       mp.FACT_RESERVED_AT_MAXIMUM: (h.get("atMaximum") or {}).get("gpus", 0)}
    return {mp.FACT_MODELS: models, mp.FACT_POOLS: pools}


def fleet_facts_configmap(plan: FleetPlan, namespace_name: str, provider: k8s.Provider,
                          namespace: pulumi.Resource) -> k8s.core.v1.ConfigMap:
    """The ConfigMap every serving pod mounts at `pod_meta.FLEET_FACTS_DIR` (optional there: a pod never waits
    for it). Mutable on purpose: the file changes in place under running pods."""
    text = json.dumps(fleet_facts(plan), indent=1, sort_keys=True) + "\n"
    return k8s.core.v1.ConfigMap(
        names.FLEET_FACTS_RESOURCE,
        metadata=k8s.meta.v1.ObjectMetaArgs(name=names.FLEET_FACTS_CONFIGMAP, namespace=namespace_name,
                                            labels={names.PART_OF_LABEL: names.PART_OF}),
        data={pod_meta.FLEET_FACTS_FILE: text},
        opts=pulumi.ResourceOptions(provider=provider, depends_on=[namespace]),
    )
