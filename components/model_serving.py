"""ModelServing: everything one catalog entry puts on the cluster.

What it creates, and why:

- the workload. Backend ``kserve``: a KServe ``LLMInferenceService`` (v1alpha2), which renders the
  Deployment or, with a ``worker`` pod spec, a LeaderWorkerSet, from KServe's presets; our
  ``template`` is strategically merged over the preset by container name ``main``. Backend
  ``vllm``: the same pods without KServe, a Deployment (one node) or a LeaderWorkerSet (several
  nodes, vLLM's multiprocessing multi-node mode). Both backends take every flag, GPU count and
  probe from ``components.vllm_args``, so switching backend does not change what runs;
- a stable alias Service ``<name>-openai`` on port 8000: the gateway's address for the model,
  whatever the backend names its own Services;
- a NetworkPolicy: only the gateway namespace may call the API and only the monitoring namespace
  may scrape it (vLLM serves both on 8000); pods of one multi-node model may talk to each other;
- for gated repos on KServe, a ServiceAccount listing the ``HF_TOKEN`` Secret (KServe's
  credential builder reads it when the model is fetched with ``hf://``).

GPU requests are ours to set (KServe never derives ``nvidia.com/gpu`` from ``parallelism``). The
runtime API key reaches vLLM only as ``VLLM_API_KEY`` from a Secret reference. The component waits
for its FitCheck and the platform (``depends_on``), so a model that does not fit never reaches the
cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import vllm_args as va
from tkf_infra import names
from tkf_infra.config import Backend, ModelEntry, Namespaces, Serving
from tkf_infra.plan import ModelPlan

#: Name of the pipeline-parallel preset ServingPrerequisites installs (KServe references, but does
#: not ship, ``config-llm-worker-pipeline-parallel``; its well-known prefix is ``kserve-``).
PIPELINE_PARALLEL_PRESET = "kserve-config-llm-worker-pipeline-parallel"
LLMISVC_API_VERSION = "serving.kserve.io/v1alpha2"
LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
#: LeaderWorkerSet labels every pod with its index in the group; 0 is the leader, the API server.
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"


@dataclass(frozen=True)
class Placement:
    """Where the pods go: the node pool's selector and tolerations (empty for the CPU profile)."""

    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class CacheRef:
    """The WeightCache PVC serving this entry's ``repo@revision``."""

    pvc_name: str
    subpath: str


@dataclass(frozen=True)
class ModelServingArgs:
    plan: ModelPlan
    """The model as planned: entry, checkpoint size, pool, fit verdict."""
    serving: Serving
    namespaces: Namespaces
    cache: CacheRef | None = None
    """None: fetch from the Hub (``hf://repo:revision`` / ``--revision``) instead of the cache."""
    api_key_secret: str | None = None
    """Secret holding the runtime API key (key ``api_key_secret_key``); None = no auth (dev)."""
    api_key_secret_key: str = "api-key"
    skip_await: bool = False

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
        return Placement(dict(pool.node_selector), tuple(pool.tolerations)) if pool else Placement()


class ModelServing(pulumi.ComponentResource):
    """One catalog entry's workload, alias Service and NetworkPolicy (see module docstring)."""

    base_url: pulumi.Output[str]
    served_name: str
    fit: dict[str, Any]
    resources: list[pulumi.CustomResource]
    workload: pulumi.CustomResource

    def __init__(self, name: str, args: ModelServingArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tkf:serving:ModelServing", name, None, opts)
        e, ns = args.entry, args.namespaces.serving
        self.served_name = e.served_name
        self.resources = []
        # depends_on on a component is not inherited by its children: forward it to the workload.
        deps: list[pulumi.Resource] = _as_list(opts.depends_on if opts else None)
        self._deps = deps
        child = pulumi.ResourceOptions(parent=self, depends_on=deps)

        sa_name: str | None = None
        if args.plan.facts.gated and e.hf_token_secret and args.serving.backend == Backend.KSERVE:
            sa_name = names.service_account(e.name)
            self.resources.append(k8s.core.v1.ServiceAccount(
                f"{name}-sa",
                metadata={"name": sa_name, "namespace": ns, "labels": va.labels(e)},
                secrets=[{"name": e.hf_token_secret}],
                automount_service_account_token=False,
                opts=child,
            ))  # fmt: skip

        if args.serving.backend == Backend.KSERVE:
            self.workload = self._llmisvc(name, args, sa_name, deps)
        elif e.is_multi_node:
            self.workload = self._leader_worker_set(name, args, deps)
        else:
            self.workload = self._deployment(name, args, deps)
        self.resources.append(self.workload)

        alias = names.alias_service(e.name)
        selector = {"tkf.io/model": e.name}
        if e.is_multi_node:
            selector[LWS_WORKER_INDEX_LABEL] = "0"
        self.resources.append(k8s.core.v1.Service(
            f"{name}-openai",
            metadata={"name": alias, "namespace": ns, "labels": va.labels(e, "endpoint"),
                      "annotations": self._await_annotations(args)},
            spec={"type": "ClusterIP", "selector": selector,
                  "ports": [{"name": "http", "port": names.SERVING_PORT, "targetPort": names.SERVING_PORT,
                             "protocol": "TCP"}]},
            opts=child,
        ))  # fmt: skip
        self.resources.append(self._network_policy(name, args))

        url = names.base_url(e.name, ns)
        # Tied to the workload so the URL appears only once the model has been created (and awaited).
        self.base_url = self.workload.id.apply(lambda _id: url)
        self.fit = args.plan.fit.published()
        self.register_outputs({"baseUrl": self.base_url, "servedName": self.served_name, "fit": self.fit})

    # ----------------------------------------------------------------------------------------
    # Pod spec pieces shared by both backends
    # ----------------------------------------------------------------------------------------

    @staticmethod
    def _await_annotations(args: ModelServingArgs) -> dict[str, str]:
        # Test API servers (cluster.skipAwait) run no controllers: nothing would become ready.
        return {"pulumi.com/skipAwait": "true"} if args.skip_await else {}

    def _annotations(self, args: ModelServingArgs, *, ready_condition: str | None) -> dict[str, Any]:
        ann: dict[str, Any] = {"tkf.io/repo": args.entry.repo, "tkf.io/revision": args.entry.revision}
        ann.update(args.plan.fit.annotations())
        if args.skip_await:
            ann.update(self._await_annotations(args))
        elif ready_condition:
            ann["pulumi.com/waitFor"] = ready_condition
            ann["pulumi.com/timeoutSeconds"] = str(va.ready_timeout_seconds(args.entry, args.weight_bytes))
        return ann

    @staticmethod
    def _container(args: ModelServingArgs, *, kserve: bool, leader: bool = True) -> dict[str, Any]:
        e = args.entry
        c: dict[str, Any] = {
            "name": "main",
            "image": va.image(e, args.serving),
            "env": va.env(e, args.api_key_secret, args.api_key_secret_key),
            "resources": va.resources(e, args.weight_bytes),
            "securityContext": va.container_security(),
            "volumeMounts": [
                {"name": "dshm", "mountPath": "/dev/shm"},
                {"name": "home", "mountPath": "/home"},
                {"name": "tmp-dir", "mountPath": "/tmp"},
            ],
        }
        if leader:
            c["ports"] = [{"name": "http", "containerPort": names.SERVING_PORT, "protocol": "TCP"}]
            c.update(va.probes(e, args.weight_bytes))
        if kserve:
            c["args"] = va.kserve_args(e)
            return c
        if args.cache:
            c["volumeMounts"].append({"name": "weight-cache", "mountPath": va.MODEL_MOUNT,
                                      "subPath": args.cache.subpath, "readOnly": True})  # fmt: skip
            path, rev = va.MODEL_MOUNT, None
        else:
            path, rev = e.repo, e.revision
            # Without the cache vLLM downloads itself: it needs the Hub and, if gated, the token.
            c["env"] = [x for x in c["env"] if x["name"] != "HF_HUB_OFFLINE"]
            if e.hf_token_secret:
                c["env"].append(
                    {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": e.hf_token_secret, "key": "HF_TOKEN"}}}
                )
        if e.is_multi_node:
            c["command"] = va.lws_command(e, path, leader=leader, revision=rev)
        else:
            c["command"] = va.serve_command(e, path, rev)
        return c

    @classmethod
    def _pod_spec(cls, args: ModelServingArgs, *, kserve: bool, leader: bool = True,
                  sa_name: str | None = None) -> dict[str, Any]:  # fmt: skip
        e = args.entry
        spec: dict[str, Any] = {
            "containers": [cls._container(args, kserve=kserve, leader=leader)],
            "volumes": va.volumes(e, args.cache.pvc_name if args.cache else None),
            "securityContext": va.pod_security(),
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 60,
        }
        if args.cache:
            spec["initContainers"] = [va.wait_for_weights(args.cache.pvc_name, args.cache.subpath,
                                                          va.image(e, args.serving))]  # fmt: skip
        if args.placement.node_selector:
            spec["nodeSelector"] = dict(args.placement.node_selector)
        if args.placement.tolerations:
            spec["tolerations"] = va.tolerations_for(list(args.placement.tolerations))
        if sa_name:
            spec["serviceAccountName"] = sa_name
        return spec

    # ----------------------------------------------------------------------------------------
    # Backends
    # ----------------------------------------------------------------------------------------

    def _llmisvc(self, name: str, args: ModelServingArgs, sa_name: str | None,
                 deps: list[pulumi.Resource]) -> pulumi.CustomResource:  # fmt: skip
        e = args.entry
        # No cache: KServe's storage-initializer fetches the pinned revision itself.
        uri = f"pvc://{args.cache.pvc_name}/{args.cache.subpath}" if args.cache else f"hf://{e.repo}:{e.revision}"
        spec: dict[str, Any] = {
            "model": {"uri": uri, "name": e.served_name},
            "replicas": e.replicas,
            "labels": va.labels(e),
            "template": self._pod_spec(args, kserve=True, sa_name=sa_name),
        }
        if not e.is_cpu:
            spec["parallelism"] = {"tensor": e.tensor_parallel_size}
            if e.pipeline_parallel_size > 1:
                spec["parallelism"]["pipeline"] = e.pipeline_parallel_size
        if e.is_multi_node:
            # `worker` switches KServe to a LeaderWorkerSet; the preset holds the PP command line.
            spec["worker"] = self._pod_spec(args, kserve=True, leader=False, sa_name=sa_name)
            spec["baseRefs"] = [{"name": PIPELINE_PARALLEL_PRESET}]
        return k8s.apiextensions.CustomResource(
            f"{name}-llmisvc",
            api_version=LLMISVC_API_VERSION,
            kind="LLMInferenceService",
            metadata={"name": names.workload(e.name), "namespace": args.namespaces.serving,
                      "labels": va.labels(e),
                      # kserve#6043: multi-node services can stay Ready=False although serving; the
                      # timeout bounds the wait instead of hanging `pulumi up`.
                      "annotations": self._annotations(args, ready_condition="condition=Ready")},
            spec=spec,
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=deps,
                # KServe refuses to change the total parallelism of an existing service.
                replace_on_changes=["spec.parallelism", "spec.worker"], delete_before_replace=True,
            ),
        )  # fmt: skip

    def _deployment(self, name: str, args: ModelServingArgs, deps: list[pulumi.Resource]) -> pulumi.CustomResource:
        e = args.entry
        lbl = va.labels(e)
        return k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata={"name": names.workload(e.name), "namespace": args.namespaces.serving, "labels": lbl,
                      "annotations": self._annotations(args, ready_condition=None)},
            spec={
                "replicas": e.replicas,
                # GPUs are scarce: a rolling update would need a second set of them.
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": {"tkf.io/model": e.name, "app.kubernetes.io/component": "model-server"}},
                "template": {"metadata": {"labels": lbl}, "spec": self._pod_spec(args, kserve=False)},
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=deps),
        )  # fmt: skip

    def _leader_worker_set(self, name: str, args: ModelServingArgs,
                           deps: list[pulumi.Resource]) -> pulumi.CustomResource:  # fmt: skip
        e = args.entry
        lbl = va.labels(e)
        return k8s.apiextensions.CustomResource(
            f"{name}-lws",
            api_version=LWS_API_VERSION,
            kind="LeaderWorkerSet",
            metadata={"name": names.workload(e.name), "namespace": args.namespaces.serving, "labels": lbl,
                      "annotations": self._annotations(args, ready_condition="condition=Available")},
            spec={
                "replicas": e.replicas,
                "startupPolicy": "LeaderCreated",
                "leaderWorkerTemplate": {
                    "size": e.node_count,
                    # One lost rank stalls the whole pipeline: restart the group together.
                    "restartPolicy": "RecreateGroupOnPodRestart",
                    "leaderTemplate": {"metadata": {"labels": lbl}, "spec": self._pod_spec(args, kserve=False)},
                    "workerTemplate": {"metadata": {"labels": lbl},
                                       "spec": self._pod_spec(args, kserve=False, leader=False)},
                },
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=deps,
                                        replace_on_changes=["spec.leaderWorkerTemplate.size"],
                                        delete_before_replace=True),
        )  # fmt: skip

    def _network_policy(self, name: str, args: ModelServingArgs) -> pulumi.CustomResource:
        e, ns = args.entry, args.namespaces
        port = [{"protocol": "TCP", "port": names.SERVING_PORT}]

        def from_ns(namespace: str) -> dict[str, Any]:
            return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}

        ingress: list[dict[str, Any]] = [
            {"from": [from_ns(ns.gateway)], "ports": port},
            {"from": [from_ns(ns.monitoring)], "ports": port},
        ]
        if e.is_multi_node:
            # Leader and workers exchange tensors (NCCL / torch.distributed) on dynamic ports.
            ingress.append({"from": [{"podSelector": {"matchLabels": {"tkf.io/model": e.name}}}]})
        return k8s.networking.v1.NetworkPolicy(
            f"{name}-netpol",
            metadata={"name": names.network_policy(e.name), "namespace": ns.serving, "labels": va.labels(e)},
            spec={"podSelector": {"matchLabels": {"tkf.io/model": e.name}}, "policyTypes": ["Ingress"],
                  "ingress": ingress},
            opts=pulumi.ResourceOptions(parent=self, depends_on=self._deps),
        )  # fmt: skip


def _as_list(value: Any) -> list[pulumi.Resource]:
    if value is None:
        return []
    if isinstance(value, pulumi.Resource):
        return [value]
    return list(value)
