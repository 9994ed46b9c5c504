"""build_fleet: from a fleet plan to every resource of the stack, in dependency order.

provider → namespace → node pools → GPU operator → serving prerequisites → one WeightCache per
distinct ``repo@revision`` → one FitCheck holding every deployed model's verdict → ModelServing per
deployed model (waiting on the FitCheck, its cache and the platform).

In a split environment (`tkf_infra.layers`, docs/stacks.md) the platform stack registers the provider,
node pools, GPU operator and prerequisites only (`build_platform`), and the fleet stack the rest: the
same resources under the same names, so moving them between stacks (`pulumi state move`) changes
nothing in the cluster.

Nothing here reads the network or decides what is deployed: `tkf_infra.plan` did, from data the
program gathered at its edge (`tkf_infra.program`). Models the plan left out register nothing.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components import pod_meta
from components import vllm_args as va
from components.fleet_facts import fleet_facts_configmap
from components.gpu_operator import GpuOperator, GpuOperatorArgs
from components.gpu_sharing import GpuSharing, GpuSharingArgs, has_mig
from components.model_serving import ModelServing, ModelServingArgs
from components.node_pool import GpuNodePool, GpuNodePoolArgs
from components.pod import ApiKeyRef, CacheRef, Placement
from components.prerequisites import ServingPrerequisites, ServingPrerequisitesArgs
from components.weight_cache import WeightCache, WeightCacheArgs
from providers.fit import FitCheck
from tkf_infra import names
from tkf_infra.config import Backend, ClusterTarget
from tkf_infra.config.api_keys import ApiKeys
from tkf_infra.layers import Layer
from tkf_infra.names import MIG_CONFIG_NAME
from tkf_infra.plan import FleetPlan, ModelPlan
from tkf_infra.plan.cache_modes import RWO
from tkf_infra.sizing.contract import fit_record

#: Secret (in the serving namespace) holding the runtime API keys: the gateway's key, and during a
#: rotation the second accepted key (apiKeyNext, then apiKeyPrevious: one slot, so the pod spec
#: does not change between the rotation's first two steps).
API_KEY_SECRET = "vllm-api-key"
API_KEY_SECRET_KEY = "api-key"
API_KEY_EXTRA_SECRET_KEY = "api-key-extra"


@dataclass
class Fleet:
    plan: FleetPlan
    provider: k8s.Provider
    namespace: k8s.core.v1.Namespace
    node_pools: dict[str, GpuNodePool]
    gpu_operator: GpuOperator | None
    """None in a fleet stack (its platform stack has it), as is `prerequisites`."""
    prerequisites: ServingPrerequisites | None
    weight_caches: dict[str, WeightCache]
    """Keyed by ``repo@revision``."""
    fit_check: FitCheck | None
    """Every deployed model's verdict (None when the plan deploys no model)."""
    models: dict[str, ModelServing]
    """Keyed by catalog name: the models the plan deploys."""
    api_key_secret: k8s.core.v1.Secret | None = None
    gpu_sharing: GpuSharing | None = None
    """MIG pools' mig-parted ConfigMap and node labels (None without MIG pools)."""


def _metrics_proxy_source(namespace_name: str, provider: k8s.Provider,
                          namespace: pulumi.Resource) -> k8s.core.v1.ConfigMap:
    """The metrics sidecar's source, once per stack: every API-serving pod mounts it (components/pod.py).
    Immutable and named by its content, so an edited source is a new ConfigMap (created before the old one
    is deleted) and the pods that run it roll."""
    source = va.metrics_proxy_source()
    return k8s.core.v1.ConfigMap(
        names.METRICS_PROXY_RESOURCE,
        metadata=k8s.meta.v1.ObjectMetaArgs(name=pod_meta.metrics_proxy_configmap(source), namespace=namespace_name,
                                            labels={names.PART_OF_LABEL: names.PART_OF}),
        immutable=True,
        data={pod_meta.METRICS_PROXY_FILE: source},
        opts=pulumi.ResourceOptions(provider=provider, depends_on=[namespace]),
    )


def make_provider(cluster: ClusterTarget, stack: str, kubeconfig: str | None = None) -> k8s.Provider:
    """One explicit provider per stack. Render mode rejects any explicit kubeconfig/context, so it
    gets the directory and nothing else (its YAML holds Secrets in plaintext: export stacks only).

    `kubeconfig` is the file's text, read at the program's edge (`tkf_infra.program.kubeconfig_text`):
    components read no files of the operator's."""
    if cluster.mode == "render":
        return k8s.Provider(f"k8s-{stack}", render_yaml_to_directory=cluster.render_dir)
    if kubeconfig is None:
        raise pulumi.RunError(f"cluster.mode is kubeconfig but no kubeconfig text reached the provider of {stack}; "
                              "build the fleet through tkf_infra.program, which reads cluster.kubeconfig")
    return k8s.Provider(
        f"k8s-{stack}",
        kubeconfig=pulumi.Output.secret(kubeconfig),
        context=cluster.context,
        # Rotating credentials then never replaces every workload.
        cluster_identifier=cluster.cluster_identifier,
    )


def _weight_caches(plan: FleetPlan, provider: k8s.Provider, namespace: pulumi.Resource,
                   kept: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())) -> dict[str, WeightCache]:
    """One cache per repo@revision, shared by every deployed entry serving those weights; a targeted run leaves
    out the caches it keeps that no model it registers reads (tkf_infra/targeted.py)."""
    s = plan.catalog.settings
    by_ref: dict[str, list[ModelPlan]] = defaultdict(list)
    for m in plan.models:
        by_ref[m.entry.model_ref].append(m)
    caches: dict[str, WeightCache] = {}
    for ref, users in by_ref.items():
        first = users[0].entry
        any_gpu = next((m.entry for m in users if not m.entry.is_cpu), None)
        pvc = names.weight_cache(first.repo, first.revision)
        if pvc in kept[1] and all(m.entry.name in kept[0] for m in users):
            continue
        # The Job runs where its readers do: on the node the plan reserved its room on, else in its first reader's pool.
        pool_name, node = plan.downloads.get(pvc, (None, None))
        pool = plan.pools.get(pool_name) if pool_name else next((m.pool for m in users if m.pool is not None), None)
        caches[ref] = WeightCache(
            pvc,
            WeightCacheArgs(
                repo=first.repo, revision=first.revision, weight_bytes=users[0].weight_bytes,
                namespace=s.namespaces.serving, image=pod_meta.image(any_gpu or first, s.serving),
                headroom=s.serving.weight_cache_headroom, storage_class=s.serving.storage_class,
                hf_token_secret=next((m.entry.hf_token_secret for m in users if m.entry.hf_token_secret), None),
                # Never flipped on an existing claim; ReadWriteOnce: the plan put every reader on the cache's node.
                access_mode=plan.cache_modes.get(pvc, RWO),
                placement=Placement(dict(pool.node_selector), tuple(pool.tolerations)) if pool else Placement(),
                node=node,
                consumers=tuple(m.entry.name for m in users), prune=s.serving.prune_weight_cache,
                protect=s.serving.protect, skip_await=s.cluster.skip_await,
                await_download=s.awaits_weight_download,
                adapters=tuple(sorted({(a.repo, a.revision) for m in users if m.entry.lora
                                       for a in m.entry.lora.adapters})),
            ),
            opts=pulumi.ResourceOptions(providers=[provider], depends_on=[namespace]),
        )
    return caches


@dataclass
class PlatformLayer:
    """What a platform stack registers (`build_platform`)."""

    plan: FleetPlan
    provider: k8s.Provider
    node_pools: dict[str, GpuNodePool]
    gpu_operator: GpuOperator
    prerequisites: ServingPrerequisites


def _platform(plan: FleetPlan, provider: k8s.Provider, *, mig_config: str | None,
              pp_preset: bool) -> tuple[dict[str, GpuNodePool], GpuOperator, ServingPrerequisites]:
    """Node pools → GPU operator → serving prerequisites (one stack's, or a platform stack's)."""
    s = plan.catalog.settings
    k8s_opts = pulumi.ResourceOptions(providers=[provider])
    pools = {name: GpuNodePool(name, GpuNodePoolArgs(facts), opts=k8s_opts) for name, facts in plan.pools.items()}
    gpu_operator = GpuOperator(
        "gpu-operator",
        GpuOperatorArgs(settings=s.platform.gpu_operator, namespace=s.namespaces.gpu_operator,
                        mig_config=mig_config, source=s.chart_source, skip_await=s.cluster.skip_await),
        opts=pulumi.ResourceOptions(providers=[provider], depends_on=list(pools.values())),
    )
    prerequisites = ServingPrerequisites(
        "serving-prerequisites",
        ServingPrerequisitesArgs(
            platform=s.platform, namespaces=s.namespaces, backend=s.serving.backend,
            pipeline_parallel_preset=pp_preset,
            vllm_image=s.serving.vllm_image, source=s.chart_source, render=s.cluster.mode == "render",
            skip_await=s.cluster.skip_await, wva_prometheus_url=s.prometheus_url,
            wva_prometheus_auth=s.serving.prometheus_auth,
        ),
        opts=k8s_opts,
    )
    if s.platform.dashboards is not None:  # the monitoring stack's dashboards and rules (docs/observability.md)
        from components.observability import Observability, ObservabilityArgs

        d = s.platform.dashboards
        Observability("observability", ObservabilityArgs(d, d.namespace or s.namespaces.monitoring,
                                                         s.namespaces.serving), opts=k8s_opts)
    return pools, gpu_operator, prerequisites


def build_platform(plan: FleetPlan, *, environment: str, kubeconfig: str | None = None) -> PlatformLayer:
    """A platform stack: the provider (named for the environment, as its one-stack form names it), the node
    pools, the GPU operator (reading the MIG config when a pool is MIG) and every prerequisite, the
    pipeline-parallel preset included whenever it installs KServe (the fleet's multi-node models need it)."""
    from tkf_infra.config.platform import installed_pieces
    from tkf_infra.platform_contract import mig_config_name

    s = plan.catalog.settings
    provider = make_provider(s.cluster, environment, kubeconfig)
    preset = s.serving.backend == Backend.KSERVE and "kserve" in installed_pieces(s.platform, s.serving.backend)
    pools, gpu_operator, prerequisites = _platform(plan, provider, mig_config=mig_config_name(plan.catalog),
                                                   pp_preset=preset)
    return PlatformLayer(plan, provider, pools, gpu_operator, prerequisites)


def build_fleet(plan: FleetPlan, *, api_keys: ApiKeys | None, stack: str, layer: Layer = Layer.ALL,
                kubeconfig: str | None = None,
                kept: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())) -> Fleet:
    """Register the whole stack from the plan (a fleet stack: all but the platform); returns handles for the outputs.

    `stack` names the provider: the environment's name in a split environment; `kubeconfig` is the text
    of `cluster.kubeconfig` in cluster mode (read by the program's edge). `kept`: the models and caches a
    targeted run keeps as they are in state, which are not registered (tkf_infra/targeted.py says why).
    """
    s = plan.catalog.settings
    provider = make_provider(s.cluster, stack, kubeconfig)

    namespace = k8s.core.v1.Namespace(
        "namespace-serving",
        metadata=k8s.meta.v1.ObjectMetaArgs(name=s.namespaces.serving,
                                            labels={names.PART_OF_LABEL: names.PART_OF}),
        # Retained on delete: deleting a namespace deletes every PVC in it, and the weight caches
        # must survive even `destroy` unless pruning is configured.
        opts=pulumi.ResourceOptions(provider=provider, protect=s.serving.protect,
                                    retain_on_delete=not s.serving.prune_weight_cache),
    )

    mig = has_mig(plan.layouts)
    kserve = s.serving.backend == Backend.KSERVE
    pools: dict[str, GpuNodePool] = {}
    gpu_operator: GpuOperator | None = None
    prerequisites: ServingPrerequisites | None = None
    if layer == Layer.ALL:
        pools, gpu_operator, prerequisites = _platform(
            plan, provider, mig_config=MIG_CONFIG_NAME if mig else None,
            pp_preset=kserve and any(m.entry.is_multi_node for m in plan.models))
    platform: list[pulumi.Resource] = [*([gpu_operator] if gpu_operator else []), *pools.values()]
    # MIG pools only: the geometries and node labels mig-manager applies (nothing otherwise).
    sharing = GpuSharing(
        names.GPU_SHARING_RESOURCE, GpuSharingArgs(plan.layouts, s.namespaces.gpu_operator),
        opts=pulumi.ResourceOptions(providers=[provider], depends_on=platform),
    ) if mig else None

    api_key_secret: k8s.core.v1.Secret | None = None
    key_ref: ApiKeyRef | None = None
    if api_keys is not None:
        data = {API_KEY_SECRET_KEY: pulumi.Output.secret(api_keys.current)}
        if api_keys.extra:
            data[API_KEY_EXTRA_SECRET_KEY] = pulumi.Output.secret(api_keys.extra)
        api_key_secret = k8s.core.v1.Secret(
            "api-key",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=API_KEY_SECRET, namespace=s.namespaces.serving,
                                                labels={names.PART_OF_LABEL: names.PART_OF}),
            type="Opaque",
            string_data=data,
            opts=pulumi.ResourceOptions(provider=provider, depends_on=[namespace],
                                        additional_secret_outputs=["data", "stringData"]),
        )
        key_ref = ApiKeyRef(API_KEY_SECRET, API_KEY_SECRET_KEY, API_KEY_EXTRA_SECRET_KEY if api_keys.extra else None,
                            api_keys.accepted_digest)
    else:
        pulumi.log.warn("no `apiKey` secret is set: vLLM will serve without authentication "
                        "(set it with `pulumi config set --secret apiKey …`)")

    caches = _weight_caches(plan, provider, namespace, kept)
    sidecar = _metrics_proxy_source(s.namespaces.serving, provider, namespace) if plan.models else None
    if plan.models:  # what the sidecars serve beside vLLM's metrics (components/fleet_facts.py)
        fleet_facts_configmap(plan, s.namespaces.serving, provider, namespace)
    # One check for the stack (providers/fit.py says why); only deployed models are in it.
    fit = FitCheck(names.FIT_CHECK, {m.entry.name: fit_record(m.fit_inputs, m.fit) for m in plan.models}
                   ) if plan.models else None
    models: dict[str, ModelServing] = {}
    before_cache: list[pulumi.Resource] = [fit] if fit else []
    after_cache: list[pulumi.Resource] = [*([gpu_operator] if gpu_operator else []), *([sharing] if sharing else []),
                                          *(prerequisites.dependencies if prerequisites else []),
                                          *([api_key_secret] if api_key_secret is not None else []),
                                          *([sidecar] if sidecar is not None else [])]
    for m in plan.models:
        e = m.entry
        if e.name in kept[0]:
            continue
        cache = caches[e.model_ref]
        models[e.name] = ModelServing(
            e.name,
            ModelServingArgs(
                plan=m, serving=s.serving, namespaces=s.namespaces, cache=CacheRef(cache.pvc_name, cache.subpath),
                api_key=key_ref, skip_await=s.cluster.skip_await, ready_timeout_seconds=s.cluster.ready_timeout_seconds,
                namespace=namespace, prometheus_url=s.prometheus_url,
                pin=plan.pins.get(e.name),
                # On the cache's PVC, not its download Job: the pods' init container waits for the download.
                # A dependency on a Job that fails would end the program in the Python SDK (3.260:
                # ResourceRegistrationFailed raised from depends_on) and abandon other models' pending
                # registrations; the failed download is reported per model instead (docs/operations.md).
                workload_deps=(*before_cache, cache.pvc, *after_cache),
            ),
            opts=pulumi.ResourceOptions(providers=[provider]),
        )

    return Fleet(plan=plan, provider=provider, namespace=namespace, node_pools=pools, gpu_operator=gpu_operator,
                 prerequisites=prerequisites, weight_caches=caches, fit_check=fit, models=models,
                 api_key_secret=api_key_secret, gpu_sharing=sharing)
