"""ModelServing: everything one catalog entry puts on the cluster.

What it creates, and why:

- the workload. Backend ``kserve``: a KServe ``LLMInferenceService`` (v1alpha2), which renders the
  Deployment or, with a ``worker`` pod spec, a LeaderWorkerSet, from KServe's presets; our
  ``template`` is strategically merged over the preset by container name ``main``. Backend
  ``vllm``: the same pods without KServe, a Deployment (one node) or a LeaderWorkerSet (several
  nodes, vLLM's multiprocessing multi-node mode). Both backends take every flag, GPU count and
  probe from ``components.pod`` (``vllm_args``, ``pod_sizes``, ``pod_meta``), so switching backend does not change
  what runs;
- a stable alias Service ``<name>-openai`` on port 8000: the gateway's address for the model,
  whatever the backend names its own Services;
- a NetworkPolicy: only the gateway namespace may reach the API port (8000), and the monitoring
  namespace only the metrics sidecar's port: vLLM's key leaves routes such as ``/invocations``
  open on 8000 (components/metrics_proxy.py); pods of one multi-node model may talk to each other;
- for gated repos on KServe, a ServiceAccount listing the ``HF_TOKEN`` Secret (KServe's
  credential builder reads it when the model is fetched with ``hf://``).

GPU requests are ours to set (KServe never derives ``nvidia.com/gpu`` from ``parallelism``). The
runtime API keys reach vLLM only from Secret references (``components.pod.env``), and the pod
template carries a digest of the accepted key set, so a changed set rolls the pods (on KServe via
``spec.annotations``, which KServe v0.20.0 copies onto its pod templates:
``pkg/controller/v1alpha2/llmisvc/workload_single_node.go:180``, ``workload_multi_node.go:265-268``).
The workload waits for the stack's FitCheck, the weight cache and the platform
(``ModelServingArgs.workload_deps``) and for the model's NetworkPolicy, so no pod runs before the
check has passed or unguarded; the Service and policy wait only for their namespace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import autoscaling, pod_meta, pod_sizes
from components.pod import ApiKeyRef, CacheRef, Placement, PodInputs, pod_spec
from tkf_infra import names
from tkf_infra.config import Backend, ModelEntry, Namespaces, Serving
from tkf_infra.names import GPU_RESOURCE
from tkf_infra.plan import ModelPlan
from tkf_infra.plan.pins import Pin

meta = k8s.meta.v1
core = k8s.core.v1

LLMISVC_API_VERSION = "serving.kserve.io/v1alpha2"
LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
#: LeaderWorkerSet labels every pod with its index in the group; 0 is the leader, the API server.
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
#: Labels KServe v0.20.0 sets on the Deployment / LeaderWorkerSet, pods and Services it writes, and
#: finds them by: its manager caches child objects by ``part-of`` (``ChildResourcesLabelSelector``,
#: pkg/controller/v1alpha2/llmisvc/controller.go:75; the cache in cmd/llmisvc/main.go:188), its
#: workload Service selects ``part-of``, ``name`` and ``kserve.io/component`` (workload.go:166), and
#: ``spec.labels`` are copied over them into the same map the Deployment's labels and selector use
#: (workload_single_node.go:95-179). One of ours there hides KServe's Deployment from KServe itself:
#: every reconcile then fails with "already exists" and the service never becomes Ready.
KSERVE_OWNED_LABELS = frozenset({names.NAME_LABEL, names.COMPONENT_LABEL, names.PART_OF_LABEL,
                                 "kserve.io/component", "llm-d.ai/role"})


@dataclass(frozen=True)
class ModelServingArgs:
    plan: ModelPlan
    """The model as planned: entry, checkpoint size, pool, fit verdict."""
    serving: Serving
    namespaces: Namespaces
    cache: CacheRef | None = None
    """None: fetch from the Hub (``hf://repo:revision`` / ``--revision``) instead of the cache."""
    api_key: ApiKeyRef | None = None
    """Where the runtime keys are; None = no auth (dev)."""
    skip_await: bool = False
    ready_timeout_seconds: int | None = None
    """`up`'s wait for this model's readiness (cluster.readyTimeoutSeconds); None: from its size."""
    namespace: pulumi.Resource | None = None
    """The serving Namespace object: every child waits for it."""
    workload_deps: tuple[pulumi.Resource, ...] = ()
    """What the workload waits for besides the namespace and this model's own objects: the FitCheck,
    the weight cache's PVC, the platform. Given here, not as the component's ``depends_on``, which
    Pulumi does not pass on to children and would resolve once more for the component itself."""
    prometheus_url: str | None = None
    """The stack's Prometheus: an autoscaled model's KEDA trigger reads vLLM's metrics there (vllm backend)."""
    pin: Pin | None = None
    """The nodes the plan reserved this model's pods on (`tkf_infra.plan.pins`); None: not pinned."""

    @property
    def entry(self) -> ModelEntry:
        return self.plan.entry

    @property
    def weight_bytes(self) -> int:
        """Checkpoint tensor bytes: memory requests and start-up patience derive from it."""
        return self.plan.weight_bytes

    @property
    def placement(self) -> Placement:
        pool = self.plan.pool
        return (Placement(dict(pool.node_selector), tuple(pool.tolerations), self.pin, self.entry.name) if pool
                else Placement())

    def pod(self, service_account: str | None = None) -> PodInputs:
        return PodInputs(entry=self.entry, serving=self.serving, weight_bytes=self.weight_bytes,
                         placement=self.placement, cache=self.cache, api_key=self.api_key,
                         service_account=service_account,
                         gpu_resource=self.plan.share.resource if self.plan.share else GPU_RESOURCE,
                         lora_host_gib=self.plan.fit.lora_host_gib)

    @property
    def pod_annotations(self) -> dict[str, str]:
        """Pod-template annotations: the accepted key set's digest (pods roll when it changes)."""
        return {names.API_KEYS_ANNOTATION: self.api_key.digest} if self.api_key else {}


def kserve_pod_labels(entry: ModelEntry) -> dict[str, str]:
    """Our labels for the pods KServe writes, less the keys KServe owns (``KSERVE_OWNED_LABELS``):
    ``tkf.io/model`` stays, which the alias Service and the NetworkPolicy select on."""
    return {k: v for k, v in pod_meta.labels(entry).items() if k not in KSERVE_OWNED_LABELS}


def rollout(entry: ModelEntry) -> k8s.apps.v1.DeploymentStrategyArgs:
    """How the vllm backend replaces a model's pods (a key rotation's steps 1 and 3 replace them all).

    A CPU pod surges: the new pod starts beside the old one and joins the Service once ready, so the
    model never stops answering. A GPU pod does not: a second set of GPUs is rarely free, and a surge
    pod would stay Pending and stall the roll. Its pods go one at a time, so a model with two or more
    replicas keeps answering and a single replica is down while its successor starts (docs/operations.md).
    """
    surge, unavailable = (1, 0) if entry.is_cpu else (0, 1)
    apps = k8s.apps.v1
    rolling = apps.RollingUpdateDeploymentArgs(max_surge=surge, max_unavailable=unavailable)
    return apps.DeploymentStrategyArgs(type="RollingUpdate", rolling_update=rolling)


class ModelServing(pulumi.ComponentResource):
    """One catalog entry's workload, alias Service and NetworkPolicy (see module docstring)."""

    base_url: pulumi.Output[str]
    served_name: str
    resources: list[pulumi.CustomResource]
    workload: pulumi.CustomResource

    def __init__(self, name: str, args: ModelServingArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(names.MODEL_SERVING_TYPE, name, None, opts)
        e, ns = args.entry, args.namespaces.serving
        self.served_name = e.served_name
        self.resources = []
        # The Service, NetworkPolicy and ServiceAccount need only their namespace; the workload waits
        # for those, its FitCheck, cache and the platform. Each dependency costs every registration
        # that lists it (the SDK resolves and expands it, the engine records it): issue 18.
        in_ns: list[pulumi.Resource] = [args.namespace] if args.namespace is not None else []
        child = pulumi.ResourceOptions(parent=self, depends_on=in_ns)
        # A component's own depends_on is not passed on to its children: forward it to the workload.
        deps: list[pulumi.Resource] = [*dict.fromkeys([*in_ns, *args.workload_deps,
                                                       *_as_list(opts.depends_on if opts else None)])]

        sa_name: str | None = None
        if args.plan.facts.gated and e.hf_token_secret and args.serving.backend == Backend.KSERVE:
            sa_name = names.service_account(e.name)
            self.resources.append(core.ServiceAccount(
                f"{name}-sa",
                metadata=meta.ObjectMetaArgs(name=sa_name, namespace=ns, labels=pod_meta.labels(e)),
                secrets=[core.ObjectReferenceArgs(name=e.hf_token_secret)],
                automount_service_account_token=False,
                opts=child,
            ))
        # The policy exists before any pod it guards: no window in which port 8000 is open to all.
        policy = self._network_policy(name, args, child)
        deps += [*self.resources, policy]

        if args.serving.backend == Backend.KSERVE:
            self.workload = self._llmisvc(name, args, sa_name, deps)
        elif e.is_multi_node:
            self.workload = self._leader_worker_set(name, args, deps)
        else:
            self.workload = self._deployment(name, args, deps)
        self.resources.append(self.workload)
        if e.scaling is not None and args.serving.backend == Backend.VLLM:
            self.resources.append(self._scaled_object(name, args))

        selector = {names.MODEL_LABEL: e.name}
        if e.is_multi_node:
            selector[LWS_WORKER_INDEX_LABEL] = "0"
        self.resources.append(core.Service(
            f"{name}-openai",
            metadata=meta.ObjectMetaArgs(name=names.alias_service(e.name), namespace=ns,
                                         labels=pod_meta.labels(e, "endpoint"), annotations=SERVICE_NO_AWAIT),
            spec=core.ServiceSpecArgs(type="ClusterIP", selector=selector, ports=[core.ServicePortArgs(
                name="http", port=names.SERVING_PORT, target_port=names.SERVING_PORT, protocol="TCP")]),
            opts=child,
        ))
        self.resources.append(policy)

        url = names.base_url(e.name, ns)
        # Tied to the workload so the URL appears only once the model has been created (and awaited).
        self.base_url = self.workload.id.apply(lambda _id: url)
        # The fit figures are in the stack's `endpoints` output and on the workload's annotations.
        self.register_outputs({"baseUrl": self.base_url, "servedName": self.served_name})

    # ----------------------------------------------------------------------------------------
    # Backends
    # ----------------------------------------------------------------------------------------

    def _llmisvc(self, name: str, args: ModelServingArgs, sa_name: str | None,
                 deps: list[pulumi.Resource]) -> pulumi.CustomResource:
        e = args.entry
        # No cache: KServe's storage-initializer fetches the pinned revision itself.
        uri = f"pvc://{args.cache.pvc_name}/{args.cache.subpath}" if args.cache else f"hf://{e.repo}:{e.revision}"
        spec: dict[str, Any] = {
            "model": {"uri": uri, "name": e.served_name},
            "replicas": e.replicas,
            "labels": kserve_pod_labels(e),
            "template": pod_spec(args.pod(sa_name), kserve=True),
        }
        if args.pod_annotations:
            spec["annotations"] = args.pod_annotations
        if e.scaling is not None:  # exclusive with `replicas` (the CRD's CEL rule): KServe's autoscaler owns it
            del spec["replicas"]
            spec["scaling"] = autoscaling.llmisvc_scaling(e, args.weight_bytes)
        if not e.is_cpu:
            spec["parallelism"] = {"tensor": e.tensor_parallel_size}
            if e.pipeline_parallel_size > 1:
                spec["parallelism"]["pipeline"] = e.pipeline_parallel_size
        if e.is_multi_node:
            # `worker` switches KServe to a LeaderWorkerSet; the preset holds the PP command line.
            spec["worker"] = pod_spec(args.pod(sa_name), kserve=True, leader=False)
            spec["baseRefs"] = [{"name": names.PIPELINE_PARALLEL_PRESET}]
        return k8s.apiextensions.CustomResource(
            f"{name}-llmisvc",
            api_version=LLMISVC_API_VERSION,
            kind="LLMInferenceService",
            # kserve#6043: multi-node services can stay Ready=False although serving; the timeout
            # bounds the wait instead of hanging `pulumi up`.
            metadata=meta.ObjectMetaArgs(name=names.workload(e.name), namespace=args.namespaces.serving,
                                         labels=pod_meta.labels(e),
                                         annotations=_annotations(args, ready_condition="condition=Ready")),
            spec=spec,
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=deps,
                # KServe refuses to change the total parallelism of an existing service.
                replace_on_changes=["spec.parallelism", "spec.worker"], delete_before_replace=True,
            ),
        )

    def _deployment(self, name: str, args: ModelServingArgs, deps: list[pulumi.Resource]) -> pulumi.CustomResource:
        e = args.entry
        lbl = pod_meta.labels(e)
        return k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata=meta.ObjectMetaArgs(name=names.workload(e.name), namespace=args.namespaces.serving, labels=lbl,
                                         annotations=_annotations(args, ready_condition=None)),
            spec=k8s.apps.v1.DeploymentSpecArgs(
                replicas=None if e.scaling else e.replicas,  # autoscaled: the HPA KEDA writes owns the count
                strategy=rollout(e),
                selector=meta.LabelSelectorArgs(match_labels={names.MODEL_LABEL: e.name,
                                                              names.COMPONENT_LABEL: names.MODEL_SERVER}),
                template=core.PodTemplateSpecArgs(
                    metadata=meta.ObjectMetaArgs(labels=lbl, annotations=args.pod_annotations or None),
                    spec=pod_spec(args.pod(), kserve=False)),
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=deps),
        )

    def _leader_worker_set(self, name: str, args: ModelServingArgs,
                           deps: list[pulumi.Resource]) -> pulumi.CustomResource:
        e = args.entry
        lbl = pod_meta.labels(e)
        tmpl_meta = meta.ObjectMetaArgs(labels=lbl, annotations=args.pod_annotations or None)
        return k8s.apiextensions.CustomResource(
            f"{name}-lws",
            api_version=LWS_API_VERSION,
            kind="LeaderWorkerSet",
            metadata=meta.ObjectMetaArgs(name=names.workload(e.name), namespace=args.namespaces.serving, labels=lbl,
                                         annotations=_annotations(args, ready_condition="condition=Available")),
            spec={
                "replicas": e.replicas,
                "startupPolicy": "LeaderCreated",
                "leaderWorkerTemplate": {
                    "size": e.node_count,
                    # One lost rank stalls the whole pipeline: restart the group together.
                    "restartPolicy": "RecreateGroupOnPodRestart",
                    "leaderTemplate": core.PodTemplateSpecArgs(metadata=tmpl_meta,
                                                               spec=pod_spec(args.pod(), kserve=False)),
                    "workerTemplate": core.PodTemplateSpecArgs(metadata=tmpl_meta,
                                                               spec=pod_spec(args.pod(), kserve=False, leader=False)),
                },
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=deps,
                                        replace_on_changes=["spec.leaderWorkerTemplate.size"],
                                        delete_before_replace=True),
        )

    def _scaled_object(self, name: str, args: ModelServingArgs) -> pulumi.CustomResource:
        """KEDA's ScaledObject on the Deployment (components/autoscaling.py says why KEDA)."""
        e = args.entry
        if args.prometheus_url is None:  # the plan refuses such a model (tkf_infra/plan/scaling.py)
            raise ValueError(f"model {e.name}: scaling on the vllm backend needs the stack's prometheusUrl")
        return k8s.apiextensions.CustomResource(
            f"{name}-scaledobject",
            api_version=autoscaling.KEDA_API_VERSION,
            kind=autoscaling.SCALED_OBJECT_KIND,
            metadata=meta.ObjectMetaArgs(name=names.workload(e.name), namespace=args.namespaces.serving,
                                         labels=pod_meta.labels(e), annotations=_await_annotations(args) or None),
            spec=autoscaling.scaled_object(e, args.namespaces, args.serving, args.prometheus_url,
                                           args.weight_bytes),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.workload]),
        )

    def _network_policy(self, name: str, args: ModelServingArgs, opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
        e, ns = args.entry, args.namespaces
        net = k8s.networking.v1

        def port(number: int) -> list[net.NetworkPolicyPortArgs]:
            return [net.NetworkPolicyPortArgs(protocol="TCP", port=number)]

        def from_ns(namespace: str) -> net.NetworkPolicyPeerArgs:
            return net.NetworkPolicyPeerArgs(namespace_selector=meta.LabelSelectorArgs(
                match_labels={"kubernetes.io/metadata.name": namespace}))

        ingress = [
            net.NetworkPolicyIngressRuleArgs(from_=[from_ns(ns.gateway)], ports=port(names.SERVING_PORT)),
            net.NetworkPolicyIngressRuleArgs(from_=[from_ns(ns.monitoring)], ports=port(names.METRICS_PORT)),
        ]
        if e.is_multi_node:
            # Leader and workers exchange tensors (NCCL / torch.distributed) on dynamic ports.
            ingress.append(net.NetworkPolicyIngressRuleArgs(from_=[net.NetworkPolicyPeerArgs(
                pod_selector=meta.LabelSelectorArgs(match_labels={names.MODEL_LABEL: e.name}))]))
        return net.NetworkPolicy(
            f"{name}-netpol",
            metadata=meta.ObjectMetaArgs(name=names.network_policy(e.name), namespace=ns.serving,
                                         labels=pod_meta.labels(e)),
            spec=net.NetworkPolicySpecArgs(
                pod_selector=meta.LabelSelectorArgs(match_labels={names.MODEL_LABEL: e.name}),
                policy_types=["Ingress"], ingress=ingress),
            opts=opts,
        )


#: The alias Service is not awaited: the provider's Service wait (ready endpoints, its default 10 min) is the
#: workload's readiness once more with a shorter bound of its own, so a model still loading at 10 min failed
#: `up`, and `cluster.readyTimeoutSeconds` could not shorten it (measured on the cluster tier: a never-Ready
#: model held `up` 10 min with a 60 s bound). The workload's own wait covers it.
SERVICE_NO_AWAIT = {"pulumi.com/skipAwait": "true"}


def _await_annotations(args: ModelServingArgs) -> dict[str, str]:
    # Test API servers (cluster.skipAwait) run no controllers: nothing would become ready.
    return {"pulumi.com/skipAwait": "true"} if args.skip_await else {}


def _annotations(args: ModelServingArgs, *, ready_condition: str | None) -> dict[str, str]:
    ann: dict[str, str] = {names.REPO_ANNOTATION: args.entry.repo, names.REVISION_KEY: args.entry.revision}
    ann.update(args.plan.fit.annotations())
    if args.plan.share is not None:
        ann[names.GPU_SHARE_ANNOTATION] = args.plan.share.label
    if args.entry.scaling is not None:  # the policy pack counts GPUs at the autoscaler's maximum
        ann[names.MAX_REPLICAS_ANNOTATION] = str(args.entry.scaling.max_replicas)
    if args.skip_await:
        ann.update(_await_annotations(args))
        return ann
    if ready_condition:  # a Deployment has the provider's own readiness await; the others name theirs
        ann["pulumi.com/waitFor"] = ready_condition
    # Every workload's wait is as long as its model's download and start-up (the provider's default is 10 min,
    # which a large model's Deployment outlasts), or the stack's own bound.
    ann[names.TIMEOUT_ANNOTATION] = str(args.ready_timeout_seconds
                                           or pod_sizes.ready_timeout_seconds(args.entry, args.weight_bytes))
    return ann


def _as_list(value: Any) -> list[pulumi.Resource]:
    if value is None:
        return []
    if isinstance(value, pulumi.Resource):
        return [value]
    return list(value)
