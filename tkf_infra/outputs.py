"""The stack outputs contract: what the LLM gateway's deploy and CI read from a stack.

One function per shape, shared by the Pulumi program and the CLI, so the contract has exactly one
definition (docs/outputs.md documents it; tests pin it). Version it: a consumer checks
`contractVersion` before reading anything else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tkf_infra.config import Catalog, Mode, ModelEntry
from tkf_infra.config.api_keys import ApiKeys
from tkf_infra.names import base_url

if TYPE_CHECKING:
    from tkf_infra.plan import FleetPlan, ModelPlan

CONTRACT_VERSION = 1
# The output keys (docs/outputs.md): exported below, read by the CLI (tkf_infra/ops/) and the program.
CONTRACT_VERSION_OUTPUT = "contractVersion"
ENDPOINTS_OUTPUT = "endpoints"
GATEWAY_MODEL_LIST_OUTPUT = "gatewayModelList"
#: Every catalog entry left out, with its stage and reasons (`Exclusion.as_output`); ops/summary.py reads it.
REJECTED_OUTPUT = "rejected"
PROBLEMS_OUTPUT = "problems"
GPU_LAYOUT_OUTPUT = "gpuLayout"
#: The catalog entries as deployed (name → entry): the program's memory of each model's last good
#: settings, read back by the next run (`tkf_infra.program.previous_deployment`).
DEPLOYED_OUTPUT = "deployed"
API_KEY_ENV_OUTPUT = "apiKeyEnv"
RUNTIME_API_KEY_OUTPUT = "runtimeApiKey"
API_KEY_ROTATION_OUTPUT = "apiKeyRotation"
#: Per GPU pool: its GPUs, and what the deployed models hold at their minimum and at their maximum.
POOL_HEADROOM_OUTPUT = "poolHeadroom"
#: Every output a stack may export (the last two only when the stack sets `apiKey`).
OUTPUT_KEYS = (CONTRACT_VERSION_OUTPUT, ENDPOINTS_OUTPUT, GATEWAY_MODEL_LIST_OUTPUT, REJECTED_OUTPUT, PROBLEMS_OUTPUT,
               GPU_LAYOUT_OUTPUT, POOL_HEADROOM_OUTPUT, DEPLOYED_OUTPUT, API_KEY_ENV_OUTPUT, RUNTIME_API_KEY_OUTPUT,
               API_KEY_ROTATION_OUTPUT)

# LiteLLM provider prefixes by serving mode. `openai/` serves chat and embeddings against vLLM's
# OpenAI-compatible API. Rerank needs its own provider, and the choice is about billing:
# - `openai/` is refused for rerank ("Unsupported provider", litellm/rerank_api/main.py);
# - `hosted_vllm/` calls vLLM's /rerank but is always billed 0: it inherits
#   BaseRerankConfig.calculate_rerank_cost (litellm/llms/base_llm/rerank/transformation.py), which
#   charges `input_cost_per_query` × billed_units.search_units, and its response transformation
#   (litellm/llms/hosted_vllm/rerank/transformation.py) never sets search_units;
# - `jina_ai/` sends the same request body to <host>/v1/rerank (vLLM's rerank endpoint, where
#   hosted_vllm/ posts too) and its calculate_rerank_cost (litellm/llms/jina_ai/rerank/transformation.py) bills
#   `input_cost_per_token` × usage.total_tokens — the catalog's own per-token price, no assumption.
# Checked against litellm 1.110.2 (tests/test_outputs.py runs it). See docs/outputs.md.
LITELLM_PROVIDER = {Mode.CHAT: "openai", Mode.EMBEDDING: "openai", Mode.RERANK: "jina_ai"}


def endpoint(entry: ModelEntry, namespace: str) -> dict[str, Any]:
    """The non-secret facts a client needs about one served model."""
    return {
        "name": entry.name,
        "servedName": entry.served_name,
        "baseUrl": base_url(entry.name, namespace),
        "model": entry.model_ref,
        "mode": entry.mode.value,
        "profile": entry.profile.value,
        "gpus": entry.node_count * entry.gpus_per_node,
        "nodePool": entry.node_pool,
        "replicas": entry.scaling.min_replicas if entry.scaling else entry.replicas,
        "maxContext": entry.max_model_len,
        "namespace": namespace,
    }


def gateway_model(entry: ModelEntry, namespace: str, api_key_env: str) -> dict[str, Any]:
    """One LiteLLM-proxy `model_list` entry, usable as is.

    Guards against LiteLLM's silent traps: `api_base` is always set (without it requests would go
    to OpenAI with the key), `api_key` is always an explicit `os.environ/<VAR>` reference (an unset
    key would otherwise fall back to OPENAI_API_KEY), names are unique (duplicates would be
    load-balanced silently) and prices are validated non-negative by the catalog.
    """
    return {
        "model_name": entry.served_name,
        "litellm_params": {
            "model": f"{LITELLM_PROVIDER[entry.mode]}/{entry.served_name}",
            "api_base": base_url(entry.name, namespace),
            "api_key": f"os.environ/{api_key_env}",
        },
        "model_info": {
            "id": entry.name,
            "mode": entry.mode.value,
            "input_cost_per_token": entry.cost.input_per_token,
            "output_cost_per_token": entry.cost.output_per_token,
            "max_input_tokens": entry.max_model_len,
            "supports_function_calling": entry.enable_auto_tool_choice,
        },
    }


def gateway_adapter_models(entry: ModelEntry, namespace: str, api_key_env: str) -> list[dict[str, Any]]:
    """One `model_list` entry per LoRA adapter of `entry`: the base's entry (same base URL, key and limits)
    under the adapter's served name — vLLM routes a request to the adapter by that name — at the
    adapter's price, or the base's when it sets none."""
    out = []
    for a in entry.lora.adapters if entry.lora else ():
        base = gateway_model(entry, namespace, api_key_env)
        cost = a.cost or entry.cost
        base["model_name"] = a.served_name
        base["litellm_params"]["model"] = f"{LITELLM_PROVIDER[entry.mode]}/{a.served_name}"
        base["model_info"].update(id=f"{entry.name}/{a.name}", input_cost_per_token=cost.input_per_token,
                                  output_cost_per_token=cost.output_per_token)
        out.append(base)
    return out


def adapters_output(entry: ModelEntry) -> dict[str, Any]:
    """`adapters` of an endpoint with LoRA adapters: each adapter under its base (no key without `lora`)."""
    if entry.lora is None:
        return {}
    return {"adapters": [{"name": a.name, "servedName": a.served_name, "model": a.ref} for a in entry.lora.adapters]}


def gateway_model_list(catalog: Catalog, deployed: set[str] | None = None,
                       cold_starts: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """The LiteLLM model list of the deployed entries (all valid entries when `deployed` is None), each
    followed by its LoRA adapters. `cold_starts`: each scale-to-zero model's `coldStartSeconds`; its
    entries get the `num_retries` that hold the request that wakes it (`gateway_metrics.retries_spanning`)."""
    from tkf_infra.gateway_metrics import retries_spanning

    ns = catalog.settings.namespaces.serving
    env = catalog.settings.serving.api_key_env
    models = []
    for m in catalog.models:
        if deployed is not None and m.name not in deployed:
            continue
        entries = [gateway_model(m, ns, env), *gateway_adapter_models(m, ns, env)]
        if (cold := (cold_starts or {}).get(m.name)) is not None:
            for e in entries:
                e["litellm_params"]["num_retries"] = retries_spanning(cold)
        models += entries
    names = [m["model_name"] for m in models]
    if len(names) != len(set(names)):  # the catalog already refuses this; never publish it
        raise ValueError(f"duplicate model_name in gateway model list: {sorted(names)}")
    return models


def deployed_entry(entry: ModelEntry) -> dict[str, Any]:
    """A catalog entry as deployed (`deployed` output). `gpuShare: whole`, the default, is left out, so a
    stack that shares no GPU publishes what it did before shares existed."""
    exclude = {"gpu_share"} if entry.gpu_share == "whole" else set()
    if entry.scaling is not None:  # exclusive with `scaling`: the entry must validate again (last good settings)
        exclude.add("replicas")
    return entry.model_dump(by_alias=True, mode="json", exclude_none=True, exclude=exclude or None)


def share_output(plan: FleetPlan, m: ModelPlan) -> dict[str, Any]:
    """`share` of an endpoint on part of a GPU: the share, its budget and where each replica lands.

    Whole-GPU models have no `share` key (their endpoints are as before)."""
    if m.share is None or m.pool is None:
        return {}
    layout = plan.layouts.get(m.pool.name)
    where: dict[str, Any] = {"nodePool": m.pool.name}
    if layout is not None and layout.kind == "mig":
        where["placement"] = layout.placements(m.entry.name)
    elif layout is not None:
        where["proof"] = layout.proof
    return {"share": {**m.share.published(), **where}}


def footprint_output(plan: FleetPlan, m: ModelPlan) -> dict[str, Any]:
    """`footprint`: what the model asks of nodes and storage, as the admission checks counted it (docs/admission.md)."""
    from tkf_infra.plan.cache_modes import ACCESS_KEY  # the plan is loaded: `plan` is one

    fp = plan.footprints.get(m.entry.name)
    if not fp:
        return {}
    keys = ("pod", "podsPerReplica", "nodes", "pin", "nodesFrom", "weightCache", "weightCacheGiB", ACCESS_KEY)
    return {"footprint": {k: fp[k] for k in keys if k in fp}}


def scaling_output(plan: FleetPlan, m: ModelPlan, cold: Mapping[str, int]) -> dict[str, Any]:
    """`scaling` of an autoscaled model: its range, the replicas the plan holds room for (the maximum, or
    the minimum under `overcommit: allow`), signal and target, and the bound on a new replica's start
    (`coldStartSeconds`: a model at zero keeps its place in the gateway's model_list, and the gateway's
    timeout or retries for it must cover this; `cold`: `cold_starts`). Fixed-count models have none
    (docs/scaling.md)."""
    s = m.entry.scaling
    if s is None:
        return {}
    held = s.min_replicas if m.entry.name in plan.floors else s.max_replicas
    return {"scaling": {"minReplicas": s.min_replicas, "maxReplicas": s.max_replicas, "reservedReplicas": held,
                        "metric": s.metric.value, "target": s.target_value, "cooldownSeconds": s.cooldown_seconds,
                        "coldStartSeconds": cold[m.entry.name]}}


def cold_starts(plan: FleetPlan) -> dict[str, int]:
    """`coldStartSeconds` of each deployed model that autoscales: published in its endpoint, and for a model
    that scales to zero (`minReplicas: 0`) the gateway's retries for it are derived from it too."""
    from components.autoscaling import cold_start_seconds

    serving = plan.catalog.settings.serving
    return {m.entry.name: cold_start_seconds(m.entry, m.weight_bytes, serving) for m in plan.models
            if m.entry.scaling is not None}


def api_key_rotation(keys: ApiKeys) -> dict[str, Any]:
    """Where the stack is in a key rotation, without any key: the step, how many keys the pods accept,
    and digests to check against (``tkf.io/api-keys-scrypt`` on every pod once it has rolled; the
    gateway's pods can carry ``gatewayKeyDigest`` so they roll when ``runtimeApiKey`` changes)."""
    return {"step": keys.rotation.value, "acceptedKeys": len(keys.accepted),
            "acceptedKeysDigest": keys.accepted_digest, "gatewayKeyDigest": keys.current_digest}


def endpoints_output(plan: FleetPlan, cold: Mapping[str, int] | None = None) -> dict[str, Any]:
    """`endpoints`: one per deployed model, by served name (the `report` command draws the same figures)."""
    ns = plan.catalog.settings.namespaces.serving
    cold = cold_starts(plan) if cold is None else cold
    return {m.entry.served_name: {**endpoint(m.entry, ns), "fit": m.fit.published(), **share_output(plan, m),
                                  **footprint_output(plan, m), **scaling_output(plan, m, cold),
                                  **adapters_output(m.entry)}
            for m in plan.models}


def export_outputs(plan: FleetPlan, api_keys: ApiKeys | None = None) -> None:
    """Export the contract from the plan: the deployed models' routes, every left-out model and why.

    Only models the plan deploys are published (endpoints, gatewayModelList); a model left out
    for any reason is listed in `rejected` with its stage and reasons instead, never as a route to
    nothing. The fit figures are plain values, so a preview already shows them.
    """
    import pulumi

    from tkf_infra.plan.headroom import pool_headroom  # lazily: importing the plan package is the program's cost

    catalog = plan.catalog
    cold = cold_starts(plan)
    endpoints = endpoints_output(plan, cold)
    pulumi.export(CONTRACT_VERSION_OUTPUT, CONTRACT_VERSION)
    pulumi.export(ENDPOINTS_OUTPUT, endpoints)
    at_zero = {m.entry.name: cold[m.entry.name] for m in plan.models
               if m.entry.scaling is not None and m.entry.scaling.min_replicas == 0}
    pulumi.export(GATEWAY_MODEL_LIST_OUTPUT, gateway_model_list(catalog, plan.deployed, at_zero))
    pulumi.export(REJECTED_OUTPUT, [x.as_output() for x in plan.excluded])
    pulumi.export(PROBLEMS_OUTPUT, list(plan.errors))
    pulumi.export(GPU_LAYOUT_OUTPUT, {name: layout.published() for name, layout in sorted(plan.layouts.items())})
    pulumi.export(POOL_HEADROOM_OUTPUT, pool_headroom(plan))
    pulumi.export(DEPLOYED_OUTPUT, {m.entry.name: deployed_entry(m.entry) for m in plan.models})
    pulumi.export(API_KEY_ENV_OUTPUT, catalog.settings.serving.api_key_env)
    if api_keys is not None:
        # The key the gateway sends: `apiKey`, which every pod accepts at every step of a rotation.
        pulumi.export(RUNTIME_API_KEY_OUTPUT, pulumi.Output.secret(api_keys.current))
        pulumi.export(API_KEY_ROTATION_OUTPUT, api_key_rotation(api_keys))
