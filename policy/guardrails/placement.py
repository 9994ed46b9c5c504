"""Where a model may run and how many GPUs it may take: the platform owner's capacity decisions.

A pod's node pool is read from what decides where it lands, its ``nodeSelector``: the owner defines
each pool by the node labels that select it (``pools.<name>.nodeSelector``), independently of the
stack file, so a catalog edit cannot move a model to nodes the owner did not grant.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import Guardrail, Violation, owner_fix, violation
from .objects import K8sObject, as_int, as_list, as_map, model_gpus, node_selector, pod_groups


def _pool_of(selector: Mapping[str, str], pools: Mapping[str, Any]) -> str | None:
    """The most specific owner-defined pool whose labels the pod's nodeSelector requires."""
    best: tuple[int, str] | None = None
    for name, pool in pools.items():
        wanted = {str(k): v for k, v in as_map(as_map(pool).get("nodeSelector")).items()}
        if all(selector.get(k) == v for k, v in wanted.items()) and (best is None or len(wanted) > best[0]):
            best = (len(wanted), str(name))
    return best[1] if best else None


def _fmt_selector(selector: Mapping[str, str]) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in sorted(selector.items())) + "}" if selector else "{} (any node)"


def check_node_pools(obj: K8sObject, config: Mapping[str, Any]) -> list[Violation]:
    if not obj.is_model_server:
        return []
    model = obj.model or "?"
    pools = as_map(config.get("pools"))
    namespaces = as_map(config.get("namespaces"))
    if obj.namespace not in namespaces:
        allowed_ns = ", ".join(sorted(namespaces)) or "none"
        return [
            violation(
                [model],
                obj.ref,
                f"namespace {obj.namespace!r} is not a serving namespace of this stack (allowed: {allowed_ns})",
                f"serve models in one of {allowed_ns} (tkf-infra:namespaces.serving), {owner_fix()}",
            )
        ]
    allowed = [str(p) for p in as_list(namespaces.get(obj.namespace))]
    out: list[Violation] = []
    for group in pod_groups(obj):
        selector = node_selector(group.spec)
        pool = _pool_of(selector, pools)
        pods = f"{obj.ref} ({group.role} pods)"
        if pool is None:
            known = ", ".join(f"{n} {_fmt_selector(as_map(as_map(p).get('nodeSelector')))}"
                              for n, p in sorted(pools.items())) or "none"
            out.append(
                violation(
                    [model],
                    pods,
                    f"nodeSelector {_fmt_selector(selector)} selects no node pool "
                    f"the platform owner defined (pools: {known})",
                    f"set the entry's nodePool to one of {', '.join(allowed) or 'none'}, {owner_fix()}",
                )
            )
        elif pool not in allowed:
            out.append(
                violation(
                    [model],
                    pods,
                    f"runs on node pool {pool!r}, which is not allowed in namespace "
                    f"{obj.namespace!r} (allowed: {', '.join(allowed) or 'none'})",
                    f"set the entry's nodePool to one of {', '.join(allowed) or 'none'}, {owner_fix()}",
                )
            )
        else:
            ceiling = as_int(as_map(pools.get(pool)).get("maxGpusPerModel"))
            gpus = model_gpus(obj)
            if ceiling is not None and gpus > ceiling:
                out.append(
                    violation(
                        [model],
                        obj.ref,
                        f"takes {gpus} GPUs on node pool {pool!r}; the pool allows at most {ceiling} per model",
                        f"lower replicas or the parallelism (tensorParallelSize x pipelineParallelSize), {owner_fix()}",
                    )
                )
                break
    return out


def check_model_gpus(obj: K8sObject, config: Mapping[str, Any]) -> list[Violation]:
    if not obj.is_model_server:
        return []
    model = obj.model or "?"
    per_model = as_map(config.get("maxGpus"))
    ceiling = as_int(per_model.get(model), as_int(config.get("defaultMaxGpus")))
    gpus = model_gpus(obj)
    if ceiling is None or gpus <= ceiling:
        return []
    source = "its own ceiling (maxGpus)" if model in per_model else "the default ceiling (defaultMaxGpus)"
    return [
        violation(
            [model],
            obj.ref,
            f"takes {gpus} GPUs (replicas x GPUs per replica); {source} is {ceiling}",
            f"lower replicas, gpusPerNode or the parallelism of the catalog entry, {owner_fix()}",
        )
    ]


_SELECTOR = {"type": "object", "additionalProperties": {"type": "string"}}

NODE_POOLS = Guardrail(
    name="serving-node-pools",
    description=(
        "Model servers run only on the node pools the platform owner allows for their namespace, "
        "and take no more GPUs than that pool allows one model."
    ),
    scope="resource",
    check=check_node_pools,
    config_schema={
        "pools": {
            "type": "object",
            "description": "Node pools by name: the nodeSelector labels that pick their "
            "nodes, and the most GPUs one model may take there.",
            "additionalProperties": {
                "type": "object",
                "required": ["nodeSelector"],
                "properties": {"nodeSelector": _SELECTOR, "maxGpusPerModel": {"type": "integer", "minimum": 0}},
            },
        },
        "namespaces": {
            "type": "object",
            "description": "Serving namespace -> names of the pools it may use.",
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
        },
    },
    required=("pools", "namespaces"),
)

MODEL_GPUS = Guardrail(
    name="model-gpu-ceiling",
    description="A model takes no more GPUs, over all its replicas and nodes, than the platform owner allows it.",
    scope="resource",
    check=check_model_gpus,
    config_schema={
        "defaultMaxGpus": {"type": "integer", "minimum": 0, "description": "Ceiling for a model not named below."},
        "maxGpus": {
            "type": "object",
            "description": "Model name -> its own ceiling.",
            "additionalProperties": {"type": "integer", "minimum": 0},
        },
    },
    required=("defaultMaxGpus",),
)
