"""build_fleet: from a validated catalog to every resource of the stack, in dependency order.

provider → namespaces → node pools → GPU operator → serving prerequisites → one WeightCache per
distinct ``repo@revision`` → one FitCheck per entry → ModelServing per entry (waiting on its
FitCheck and the prerequisites).

Entries that cannot be sized (no facts in ``models.lock.json``, gated without ``hfTokenSecret``)
are *reported, not built*: ``pulumi.log.error`` names the entry and the fix (the run then fails
at the end, after the healthy entries were registered), and ``Fleet.skipped`` carries the reason
for the stack outputs. A FitCheck cannot carry a lock miss usefully: it would fail with the
engine's "config lacks …" message instead of the command that fixes it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

from components import vllm_args as va
from components.gpu_operator import GpuOperator, GpuOperatorArgs
from components.model_serving import CacheRef, ModelServing, ModelServingArgs, Placement
from components.node_pool import GpuNodePool, GpuNodePoolArgs
from components.prerequisites import ServingPrerequisites, ServingPrerequisitesArgs
from components.weight_cache import WeightCache, WeightCacheArgs
from providers.fit import FitCheck, ModelDemand, PoolCapacity, evaluate, fit_inputs, fleet_capacity_errors
from tkf_infra import names
from tkf_infra.inventory import read_gpu_inventory
from tkf_infra.live import check_against_inventory
from tkf_infra.lock import Lock
from tkf_infra.settings import Backend, Catalog, ClusterTarget, ModelEntry, StackSettings
from tkf_infra.sizing.engine import ServingParams, SizingError
from tkf_infra.sizing.facts import ModelFacts

#: Secret (in the serving namespace) holding the runtime API key, and its key.
API_KEY_SECRET = "vllm-api-key"
API_KEY_SECRET_KEY = "api-key"


@dataclass
class Fleet:
    provider: k8s.Provider
    namespace: k8s.core.v1.Namespace
    node_pools: dict[str, GpuNodePool]
    gpu_operator: GpuOperator
    prerequisites: ServingPrerequisites
    weight_caches: dict[str, WeightCache]
    """Keyed by ``repo@revision``."""
    fit_checks: dict[str, FitCheck]
    models: dict[str, ModelServing]
    """Keyed by catalog name; only entries that were built (see ``skipped``)."""
    api_key_secret: k8s.core.v1.Secret | None = None
    skipped: dict[str, str] = field(default_factory=dict)
    """Catalog name → why the entry was not built."""
    fit_failures: dict[str, str] = field(default_factory=dict)
    """Catalog name → why its fit check refuses it (the same evaluation the provider's check runs)."""
    errors: list[str] = field(default_factory=list)
    """Stack-level problems (pool capacity, pool facts contradicted by DCGM): the run must fail."""


def make_provider(cluster: ClusterTarget, stack: str) -> k8s.Provider:
    """One explicit provider per stack. Render mode rejects any explicit kubeconfig/context, so it
    gets the directory and nothing else (its YAML holds Secrets in plaintext: export stacks only)."""
    if cluster.mode == "render":
        return k8s.Provider(f"k8s-{stack}", render_yaml_to_directory=cluster.render_dir)
    kubeconfig = Path(str(cluster.kubeconfig)).expanduser()
    try:
        text = kubeconfig.read_text()
    except OSError as exc:
        raise pulumi.RunError(f"cluster.kubeconfig {str(kubeconfig)!r} cannot be read ({exc}); fix the path "
                              "in the stack file (tkf-infra:cluster.kubeconfig)") from None
    return k8s.Provider(
        f"k8s-{stack}",
        kubeconfig=pulumi.Output.secret(text),
        context=cluster.context,
        # Rotating credentials then never replaces every workload.
        cluster_identifier=cluster.cluster_identifier,
    )


def serving_params(entry: ModelEntry, settings: StackSettings) -> ServingParams:
    return ServingParams(
        tensor_parallel_size=entry.tensor_parallel_size,
        pipeline_parallel_size=entry.pipeline_parallel_size,
        max_model_len=entry.max_model_len,
        gpu_memory_utilization=entry.gpu_memory_utilization,
        max_num_seqs=entry.max_num_seqs,
        max_num_batched_tokens=entry.max_num_batched_tokens,
        dtype=entry.dtype,
        quantization=entry.quantization,
        kv_cache_dtype=entry.kv_cache_dtype,
        enforce_eager=entry.enforce_eager,
        vllm_version=settings.serving.vllm_version,
        cpu_kv_cache_gib=entry.cpu_kv_cache_gib if entry.is_cpu else None,
    )


def _facts_for(entry: ModelEntry, lock: Lock) -> tuple[ModelFacts | None, int, str | None]:
    """(facts, weight bytes, problem): a problem means the entry is reported and not built."""
    facts = lock.get(entry.repo, entry.revision)
    if facts is None:
        return (
            None,
            0,
            (
                f"model {entry.name}: {entry.model_ref} is not in models.lock.json, so it cannot be sized; run "
                f"`python -m tkf_infra lock {entry.model_ref}` on a machine with Hub access and commit the lock"
            ),
        )
    try:
        weight_bytes = va.checkpoint_bytes(facts)
    except (SizingError, KeyError, ValueError) as exc:
        return (
            facts,
            0,
            (
                f"model {entry.name}: the lock entry of {entry.model_ref} gives no weight size ({exc}); "
                f"refresh it with `python -m tkf_infra lock {entry.model_ref}`"
            ),
        )
    if facts.gated and not entry.hf_token_secret:
        return (
            facts,
            weight_bytes,
            (
                f"model {entry.name}: {entry.repo} is gated on the Hugging Face Hub but hfTokenSecret is not set; "
                "create a Secret with key HF_TOKEN in the serving namespace and name it in hfTokenSecret"
            ),
        )
    return facts, weight_bytes, None


def build_fleet(catalog: Catalog, *, lock: Lock, api_key: pulumi.Output[str] | None, stack: str) -> Fleet:
    """Register the whole stack; returns handles for the outputs (see module docstring)."""
    s = catalog.settings
    provider = make_provider(s.cluster, stack)
    k8s_opts = pulumi.ResourceOptions(providers=[provider])

    namespace = k8s.core.v1.Namespace(
        "namespace-serving",
        metadata={"name": s.namespaces.serving, "labels": {"app.kubernetes.io/part-of": va.PART_OF}},
        # Retained on delete: deleting a namespace deletes every PVC in it, and the weight caches
        # must survive even `destroy` unless pruning is configured.
        opts=pulumi.ResourceOptions(provider=provider, protect=s.serving.protect,
                                    retain_on_delete=not s.serving.prune_weight_cache),
    )

    suffix = "-SHARED" if s.platform.gpu_operator.time_slicing_replicas > 1 else ""
    pools = {p.name: GpuNodePool(p.name, GpuNodePoolArgs(pool=p, product_label_suffix=suffix), opts=k8s_opts)
             for p in s.node_pools}  # fmt: skip
    gpu_operator = GpuOperator(
        "gpu-operator",
        GpuOperatorArgs(settings=s.platform.gpu_operator, namespace=s.namespaces.gpu_operator),
        opts=pulumi.ResourceOptions(providers=[provider], depends_on=list(pools.values())),
    )
    kserve = s.serving.backend == Backend.KSERVE
    prerequisites = ServingPrerequisites(
        "serving-prerequisites",
        ServingPrerequisitesArgs(
            platform=s.platform, namespaces=s.namespaces, backend=s.serving.backend,
            pipeline_parallel_preset=kserve and any(va.is_multi_node(m) for m in catalog.models),
            vllm_image=s.serving.vllm_image,
        ),
        opts=k8s_opts,
    )  # fmt: skip

    api_key_secret: k8s.core.v1.Secret | None = None
    if api_key is not None:
        api_key_secret = k8s.core.v1.Secret(
            "api-key",
            metadata={"name": API_KEY_SECRET, "namespace": s.namespaces.serving,
                      "labels": {"app.kubernetes.io/part-of": va.PART_OF}},
            type="Opaque",
            string_data={API_KEY_SECRET_KEY: pulumi.Output.secret(api_key)},  # type: ignore[arg-type]
            opts=pulumi.ResourceOptions(provider=provider, depends_on=[namespace],
                                        additional_secret_outputs=["data", "stringData"]),
        )  # fmt: skip
    else:
        pulumi.log.warn("no `apiKey` secret is set: vLLM will serve without authentication "
                        "(set it with `pulumi config set --secret apiKey …`)")  # fmt: skip

    # What the GPUs really report (when the stack names a Prometheus): pools confirmed, shared GPUs'
    # free memory checked. Problems skip the models they would break, never the whole fleet.
    errors: list[str] = []
    live_problems: dict[str, str] = {}
    if s.prometheus_url:
        live = check_against_inventory(s, catalog.models, read_gpu_inventory(s.prometheus_url))
        for warning in live.warnings:
            pulumi.log.warn(warning)
        for pool_errors in live.pool_errors.values():
            for message in pool_errors:
                pulumi.log.error(message)
                errors.append(message)
        live_problems = live.model_problems

    # Size every entry from the lock; report the ones that cannot be sized.
    skipped: dict[str, str] = {}
    sized: list[tuple[ModelEntry, ModelFacts, int]] = []
    for entry in catalog.models:
        if entry.name in live_problems:
            skipped[entry.name] = live_problems[entry.name]
            pulumi.log.error(skipped[entry.name])
            continue
        facts, weight_bytes, problem = _facts_for(entry, lock)
        if problem or facts is None:
            skipped[entry.name] = problem or "no facts"
            pulumi.log.error(skipped[entry.name])
            continue
        sized.append((entry, facts, weight_bytes))

    demands = [ModelDemand(e.name, e.node_pool or "", e.tensor_parallel_size, e.pipeline_parallel_size,
                           e.replicas, e.gpus_per_node) for e, _, _ in sized]  # fmt: skip
    capacity = [PoolCapacity(name, p.gpus_per_node, p.node_count) for name, p in pools.items()]
    for message in fleet_capacity_errors(demands, capacity):
        pulumi.log.error(message)
        errors.append(message)

    # One cache per repo@revision, shared by every entry serving those weights.
    by_ref: dict[str, list[tuple[ModelEntry, int]]] = defaultdict(list)
    for entry, _, weight_bytes in sized:
        by_ref[entry.model_ref].append((entry, weight_bytes))
    caches: dict[str, WeightCache] = {}
    for ref, users in by_ref.items():
        first = users[0][0]
        any_gpu = next((e for e, _ in users if not e.is_cpu), None)
        caches[ref] = WeightCache(
            names.weight_cache(first.repo, first.revision),
            WeightCacheArgs(
                repo=first.repo, revision=first.revision, weight_bytes=users[0][1], namespace=s.namespaces.serving,
                image=va.image(any_gpu or first, s.serving), headroom=s.serving.weight_cache_headroom,
                storage_class=s.serving.storage_class,
                hf_token_secret=next((e.hf_token_secret for e, _ in users if e.hf_token_secret), None),
                read_write_many=len(users) > 1 or any(e.replicas > 1 or va.is_multi_node(e) for e, _ in users),
                consumers=tuple(e.name for e, _ in users), prune=s.serving.prune_weight_cache,
                protect=s.serving.protect, skip_await=s.cluster.skip_await,
            ),
            opts=pulumi.ResourceOptions(providers=[provider], depends_on=[namespace]),
        )  # fmt: skip

    fits: dict[str, FitCheck] = {}
    fit_failures: dict[str, str] = {}
    models: dict[str, ModelServing] = {}
    for entry, facts, weight_bytes in sized:
        pool = pools.get(entry.node_pool or "")
        gpu = pool.gpu if pool and not entry.is_cpu else None
        max_tp = (pool.gpus_per_node if pool else 0) or 8
        inputs = fit_inputs(entry.name, entry.repo, entry.revision, facts.to_dict(), gpu,
                            serving_params(entry, s).to_dict(), max_tensor_parallel=max_tp)
        # The provider's check enforces the fit in the engine; evaluating it here too tells the
        # outputs which models will really be served (an `up` that excludes a refused model must
        # not publish a route to it).
        _, failure = evaluate(inputs)
        if failure:
            fit_failures[entry.name] = failure
        fits[entry.name] = FitCheck(names.fit_check(entry.name), inputs)
        cache = caches[entry.model_ref]
        placement = Placement(pool.node_selector, tuple(pool.tolerations)) if pool else Placement()
        models[entry.name] = ModelServing(
            entry.name,
            ModelServingArgs(
                entry=entry, serving=s.serving, namespaces=s.namespaces, weight_bytes=weight_bytes,
                placement=placement, cache=CacheRef(cache.pvc_name, cache.subpath),
                api_key_secret=API_KEY_SECRET if api_key_secret is not None else None,
                api_key_secret_key=API_KEY_SECRET_KEY, gated=bool(facts.gated), fit=fits[entry.name],
                skip_await=s.cluster.skip_await,
            ),
            opts=pulumi.ResourceOptions(
                providers=[provider],
                depends_on=[fits[entry.name], namespace, cache, gpu_operator, *prerequisites.dependencies,
                            *([api_key_secret] if api_key_secret is not None else [])],
            ),
        )  # fmt: skip

    return Fleet(provider=provider, namespace=namespace, node_pools=pools, gpu_operator=gpu_operator,
                 prerequisites=prerequisites, weight_caches=caches, fit_checks=fits, models=models,
                 api_key_secret=api_key_secret, skipped=skipped, fit_failures=fit_failures, errors=errors)  # fmt: skip
