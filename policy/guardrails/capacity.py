"""GPU accounting that the scheduler can honour, weights that survive mistakes, and fleet totals.

- GPUs are an extended resource: Kubernetes refuses a pod whose GPU request differs from its limit,
  and KServe never sets ``nvidia.com/gpu`` itself (it does not derive it from ``parallelism``), so a
  serving pod without an explicit request would schedule anywhere and vLLM would find no device.
- The weight cache holds hundreds of GiB downloaded once; where the stack says so (prod), its PVCs are
  ``protect``-ed so ``pulumi destroy`` or a removed catalog entry cannot delete them. (The engine does
  not show ``retainOnDelete`` to policies — only ``protect`` — so retention itself is the component's
  job: components/weight_cache.py.)
- Fleet totals are the owner's budget for the whole stack: GPUs, models and cache storage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tkf_infra.names import CACHE_MODELS_ANNOTATION, COMPONENT_LABEL, GPU_RESOURCE, WEIGHT_CACHE_COMPONENT

from .base import Guardrail, Violation, owner_fix, violation
from .objects import (
    K8sObject,
    as_int,
    as_map,
    as_str,
    containers,
    gpu_quantity,
    mig_resources,
    model_gpus,
    pod_groups,
)

GIB = 2**30
_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
          "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}


def quantity_bytes(value: str) -> float | None:
    """A Kubernetes quantity (``500Gi``, ``1T``, ``1073741824``) in bytes; None if unparsable."""
    for suffix in sorted(_UNITS, key=len, reverse=True):
        if value.endswith(suffix):
            number = value[: -len(suffix)]
            return float(number) * _UNITS[suffix] if number.replace(".", "", 1).isdigit() else None
    return float(value) if value.replace(".", "", 1).isdigit() else None


def check_gpu_requests(obj: K8sObject, config: Mapping[str, Any]) -> list[Violation]:
    if not obj.is_model_server:
        return []
    model = obj.model or "?"
    resource = as_str(config.get("resource")) or GPU_RESOURCE
    out: list[Violation] = []
    # A KServe service with `parallelism` shards the model over GPUs: its pods must ask for them.
    needs_gpus = obj.kind == "LLMInferenceService" and bool(as_map(obj.spec.get("parallelism")))
    for group in pod_groups(obj):
        asked = False
        for c in containers(group.spec):
            # A MIG slice (`nvidia.com/mig-<profile>`, gpuShare mig:…) is the pod's GPU on a MIG pool.
            for name in [resource, *mig_resources(c)]:
                req, lim = gpu_quantity(c, "requests", name), gpu_quantity(c, "limits", name)
                asked = asked or bool(req or lim)
                if req != lim:
                    out.append(
                        violation(
                            [model],
                            f"{obj.ref} container {c.get('name')!r} ({group.role} pods)",
                            f"requests {req} {name} but limits {lim}",
                            f"set requests and limits of {name} to the same count "
                            "(components/pod.py resources does)",
                        )
                    )
        if needs_gpus and not asked:
            out.append(
                violation(
                    [model],
                    f"{obj.ref} ({group.role} pods)",
                    f"sets parallelism but its pods request no {resource} (KServe never adds it)",
                    f"request {resource} (= limit) on container 'main'",
                )
            )
    return out


def check_cache_protected(obj: K8sObject, config: Mapping[str, Any]) -> list[Violation]:
    if obj.kind != "PersistentVolumeClaim" or obj.labels.get(COMPONENT_LABEL) != WEIGHT_CACHE_COMPONENT:
        return []
    if not config.get("requireProtect", False) or obj.protect:
        return []
    models = (as_str(obj.annotations.get(CACHE_MODELS_ANNOTATION)) or "").split(",")
    return [
        violation(
            models,
            obj.ref,
            "the weight-cache PVC is not protected, so `pulumi destroy` or removing "
            "the model would delete its downloaded weights",
            "set serving.protect: true in the stack file",
        )
    ]


def _storage_gib(obj: K8sObject) -> float:
    requested = as_str(as_map(as_map(obj.spec.get("resources")).get("requests")).get("storage"))
    size = quantity_bytes(requested) if requested else None
    return (size or 0) / GIB


def check_fleet(objects: Sequence[K8sObject], config: Mapping[str, Any]) -> list[Violation]:
    servers = [o for o in objects if o.is_model_server]
    gpus = {o.model or "?": model_gpus(o) for o in servers}
    caches = [o for o in objects if o.kind == "PersistentVolumeClaim"
              and o.labels.get(COMPONENT_LABEL) == WEIGHT_CACHE_COMPONENT]
    out: list[Violation] = []
    limit = as_int(config.get("maxGpus"))
    total = sum(gpus.values())
    if limit is not None and total > limit:
        breakdown = ", ".join(f"{m} {g}" for m, g in sorted(gpus.items()) if g)
        out.append(
            violation(
                list(gpus),
                "fleet",
                f"the models take {total} GPUs in total ({breakdown}); the stack's budget is {limit}",
                f"remove or shrink models, {owner_fix()}",
            )
        )
    limit = as_int(config.get("maxModels"))
    if limit is not None and len(gpus) > limit:
        out.append(
            violation(
                list(gpus),
                "fleet",
                f"{len(gpus)} models are served; the stack's budget is {limit}",
                f"remove models, {owner_fix()}",
            )
        )
    limit_gib = config.get("maxWeightCacheGiB")
    stored = sum(_storage_gib(c) for c in caches)
    if isinstance(limit_gib, int | float) and stored > limit_gib:
        models = [m for c in caches for m in (as_str(c.annotations.get(CACHE_MODELS_ANNOTATION)) or "").split(",")]
        out.append(
            violation(
                models,
                "fleet",
                f"the weight caches request {stored:.0f} GiB in total; the stack's budget is {limit_gib} GiB",
                f"remove models or lower serving.weightCacheHeadroom, {owner_fix()}",
            )
        )
    return out


GPU_REQUESTS_EQUAL_LIMITS = Guardrail(
    name="gpu-requests-equal-limits",
    description=(
        "Every serving pod asks for its GPUs explicitly, with requests equal to limits (KServe never "
        "sets nvidia.com/gpu itself)."
    ),
    scope="resource",
    check=check_gpu_requests,
    config_schema={"resource": {"type": "string", "description": "The GPU extended resource name."}},
)

WEIGHT_CACHE_PROTECTED = Guardrail(
    name="weight-cache-protected",
    description="Where the stack requires it, weight-cache volumes are protected from deletion.",
    scope="resource",
    check=check_cache_protected,
    config_schema={
        "requireProtect": {"type": "boolean", "description": "Weight-cache PVCs must carry Pulumi's protect option."}
    },
    required=("requireProtect",),
)

FLEET_BUDGET = Guardrail(
    name="fleet-budget",
    description="The whole fleet stays within the owner's budget: total GPUs, number of models, cache storage.",
    scope="stack",
    check=check_fleet,
    config_schema={
        "maxGpus": {"type": "integer", "minimum": 0},
        "maxModels": {"type": "integer", "minimum": 0},
        "maxWeightCacheGiB": {"type": "number", "minimum": 0},
    },
)
