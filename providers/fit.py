"""VRAM-fit dynamic provider: ``pulumi preview`` fails, naming the numbers and the way out, when a
catalog entry cannot start on its node pool's GPUs.

The provider is pickled into state by dill and re-imported in Pulumi's plugin process, so this
module has no import-time side effects, keeps module-level imports to Pulumi itself, and imports
the sizing engine inside methods. Inputs are plain JSON (built by ``fit_inputs``); values still
unknown at preview are skipped ("can't judge yet") and judged again at ``up``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi.dynamic as dyn

#: Bump when the estimation logic changes so existing FitCheck resources are re-evaluated.
PROVIDER_VERSION = "1"
_UNKNOWN_SENTINEL = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
_INPUT_KEYS = ("model", "repo", "revision", "facts", "gpu", "serving", "maxTensorParallel", "providerVersion")
_OUTPUT_KEYS = ("weightsGiB", "activationGiB", "kvCacheGiB", "kvCacheTokens", "maxConcurrency", "fits",
                "maxFittingModelLen", "problems")  # fmt: skip


def fit_inputs(
    model: str,
    repo: str,
    revision: str,
    facts: dict[str, Any],
    gpu: dict[str, Any] | None,
    serving: dict[str, Any],
    max_tensor_parallel: int = 8,
) -> dict[str, Any]:
    """Inputs of one FitCheck. ``facts`` is ``ModelFacts.to_dict()``, ``gpu`` ``GpuSpec.to_dict()``
    (None for the CPU profile), ``serving`` ``ServingParams.to_dict()``; ``max_tensor_parallel`` is
    the pool's GPUs per node, the ceiling for a suggested tensorParallelSize."""
    return {
        "model": model,
        "repo": repo,
        "revision": revision,
        "facts": facts,
        "gpu": gpu,
        "serving": serving,
        "maxTensorParallel": max_tensor_parallel,
        "providerVersion": PROVIDER_VERSION,
    }


def _has_unknown(value: Any) -> bool:
    from pulumi.output import Unknown

    if isinstance(value, Unknown) or value == _UNKNOWN_SENTINEL:
        return True
    if isinstance(value, dict):
        return any(_has_unknown(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_unknown(v) for v in value)
    return False


def evaluate(props: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Run the engine on FitCheck inputs; returns (outputs, failure message or None)."""
    from tkf_infra.sizing.engine import ServingParams, SizingError, estimate, fit_message, suggest
    from tkf_infra.sizing.facts import ModelFacts
    from tkf_infra.sizing.gpus import GpuSpec

    model = str(props.get("model") or props.get("repo") or "model")
    try:
        facts = ModelFacts.from_dict(dict(props["facts"]))
        gpu = GpuSpec.from_dict(dict(props["gpu"])) if props.get("gpu") else None
        params = ServingParams.from_dict(dict(props.get("serving") or {}))
        est = estimate(facts, gpu, params, model=model)
    except (SizingError, KeyError, ValueError, TypeError) as exc:
        return {"fits": False, "problems": [str(exc)]}, (
            f"model {model}: cannot size {props.get('repo')}@{props.get('revision')}: {exc}"
        )
    outs = {
        "weightsGiB": round(est.weights_gib, 2),
        "activationGiB": round(est.activation_gib, 2),
        "kvCacheGiB": round(est.available_kv_gib, 2),
        "kvCacheTokens": est.kv_cache_tokens,
        "maxConcurrency": round(est.max_concurrency, 2),
        "fits": est.fits,
        "maxFittingModelLen": est.max_fitting_model_len,
        "problems": list(est.problems),
    }
    if est.fits:
        return outs, None
    sugg = None
    if gpu is not None:
        sugg = suggest(facts, gpu, params, max_tp=int(props.get("maxTensorParallel") or 8), current=est)
    return outs, fit_message(est, sugg)


class FitProvider(dyn.ResourceProvider):
    """Check-only provider: the resource records the estimate; ``check`` is where fit is enforced."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.CheckResult:
        if _has_unknown({k: news.get(k) for k in _INPUT_KEYS}):
            return dyn.CheckResult(news, [])
        _, message = evaluate(news)
        failures = [dyn.CheckFailure("", message)] if message else []
        return dyn.CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        changed = [k for k in _INPUT_KEYS if olds.get(k) != news.get(k)]
        return dyn.DiffResult(changes=bool(changed), replaces=[], delete_before_replace=False)

    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        outs, _ = evaluate(props)
        inputs = {k: props.get(k) for k in _INPUT_KEYS}
        return dyn.CreateResult(id_=f"{props.get('model')}@{props.get('revision')}", outs={**inputs, **outs})

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        outs, _ = evaluate(news)
        return dyn.UpdateResult(outs={**{k: news.get(k) for k in _INPUT_KEYS}, **outs})

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        return None


class FitCheck(dyn.Resource, module="tkf", name="FitCheck"):
    """One per catalog entry; outputs the estimate vLLM should print at start-up."""

    # Output names are camelCase like the stack's YAML keys.
    weightsGiB: pulumi.Output[float]
    kvCacheGiB: pulumi.Output[float]
    kvCacheTokens: pulumi.Output[int]
    maxConcurrency: pulumi.Output[float]
    fits: pulumi.Output[bool]

    def __init__(self, name: str, inputs: dict[str, Any], opts: pulumi.ResourceOptions | None = None) -> None:
        props = {**inputs, **{k: None for k in _OUTPUT_KEYS}}
        super().__init__(FitProvider(), name, props, opts)


@dataclass(frozen=True)
class ModelDemand:
    """GPUs one catalog entry asks of its pool."""

    name: str
    node_pool: str
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    replicas: int = 1
    gpus_per_node: int | None = None  # the entry's own gpusPerNode (0 = CPU)


@dataclass(frozen=True)
class PoolCapacity:
    name: str
    gpus_per_node: int
    node_count: int


def fleet_capacity_errors(models: list[ModelDemand], pools: list[PoolCapacity]) -> list[str]:
    """Models that ask more GPUs of a pool than it has (per node for TP, in total for all replicas)."""
    by_name = {p.name: p for p in pools}
    errors: list[str] = []
    totals: dict[str, list[tuple[str, int]]] = {}
    for m in models:
        if m.gpus_per_node == 0:
            continue
        pool = by_name.get(m.node_pool)
        if pool is None:
            errors.append(
                f"model {m.name}: nodePool {m.node_pool!r} does not exist; use one of {sorted(by_name)}"
            )
            continue
        if m.tensor_parallel_size > pool.gpus_per_node:
            errors.append(
                f"model {m.name}: tensorParallelSize {m.tensor_parallel_size} needs "
                f"{m.tensor_parallel_size} GPUs on one node but nodePool {pool.name} has "
                f"{pool.gpus_per_node} per node; lower "
                "tensorParallelSize or use pipelineParallelSize across nodes"
            )
        need = m.replicas * m.tensor_parallel_size * m.pipeline_parallel_size
        totals.setdefault(pool.name, []).append((m.name, need))
    for pool_name, demands in totals.items():
        pool = by_name[pool_name]
        have = pool.gpus_per_node * pool.node_count
        need = sum(n for _, n in demands)
        if need > have:
            detail = ", ".join(f"{name} {n}" for name, n in demands)
            errors.append(
                f"nodePool {pool_name}: models need {need} GPUs ({detail}) but the pool has {have} "
                f"({pool.node_count} nodes x {pool.gpus_per_node}); raise nodeCount or lower replicas"
            )
    return errors
