"""The serving pod, as typed Kubernetes objects: containers, env, probes, volumes, security.

Why typed (`pulumi_kubernetes` *Args) rather than dicts: a misspelt field is a type error mypy
reports, not a key the API server silently prunes. The same pod runs under both backends: as the
Deployment / LeaderWorkerSet template (vllm backend) or as the LLMInferenceService `template` that
KServe strategically merges over its preset by container name ``main`` (kserve backend) — the
KServe custom resource carries these typed objects inside its spec, serialized the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi_kubernetes as k8s

from components import pod_meta, pod_sizes
from components import vllm_args as va
from components.argv_layers import ArgvPath, encode
from tkf_infra import names
from tkf_infra.config import ModelEntry, Serving
from tkf_infra.config.flags import rows
from tkf_infra.names import GPU_RESOURCE, METRICS_PORT, SERVING_PORT
from tkf_infra.plan.pins import Pin

core = k8s.core.v1
#: Name of the metrics sidecar container (KServe merges our containers over its preset's by name).
METRICS_CONTAINER = "metrics"


@dataclass(frozen=True)
class Placement:
    """Where the pods go: the node pool's selector and tolerations (empty for no pool), and the plan's pin."""

    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[dict[str, Any], ...] = ()
    pin: Pin | None = None
    """The nodes the plan reserved the model's pods on (`tkf_infra.plan.pins` says why it binds)."""
    model: str = ""
    """The model whose pods the pin's spread counts (`tkf.io/model`)."""


def pinned_to(nodes: tuple[str, ...]) -> core.AffinityArgs:
    """A REQUIRED node affinity to these nodes, by name (`metadata.name`, whatever their hostname label says).

    One term per node, the terms ORed: the API server allows a `metadata.name` field selector only one value
    (`must be only one value when operator is 'In'`, apis/core/validation ValidateNodeFieldSelectorRequirement),
    so a single term listing two nodes is refused when the workload controller writes the pods' owner."""
    terms = [core.NodeSelectorTermArgs(match_fields=[core.NodeSelectorRequirementArgs(
        key="metadata.name", operator="In", values=[node])]) for node in nodes]
    return core.AffinityArgs(node_affinity=core.NodeAffinityArgs(
        required_during_scheduling_ignored_during_execution=core.NodeSelectorArgs(node_selector_terms=terms)))


def spread(model: str) -> core.TopologySpreadConstraintArgs:
    """At most ceil(pods / pinned nodes) of the model's pods on any one of its nodes (`tkf_infra.plan.pins`)."""
    return core.TopologySpreadConstraintArgs(
        max_skew=1, topology_key=names.HOSTNAME_LABEL, when_unsatisfiable="DoNotSchedule",
        label_selector=k8s.meta.v1.LabelSelectorArgs(match_labels={names.MODEL_LABEL: model}),
        node_affinity_policy="Honor", node_taints_policy="Ignore")


@dataclass(frozen=True)
class CacheRef:
    """The WeightCache PVC serving this entry's ``repo@revision``."""

    pvc_name: str
    subpath: str


@dataclass(frozen=True)
class ApiKeyRef:
    """Where a pod finds its runtime keys: one Secret, the gateway's key under ``key`` and, during a
    rotation, the second accepted key under ``extra_key``; ``digest`` is the accepted set's
    (``ApiKeys.accepted_digest``), put on the pod template so pods roll when the set changes."""

    secret: str
    key: str
    extra_key: str | None
    digest: str


@dataclass(frozen=True)
class PodInputs:
    """Everything one pod spec depends on."""

    entry: ModelEntry
    serving: Serving
    weight_bytes: int
    placement: Placement = field(default_factory=Placement)
    cache: CacheRef | None = None
    api_key: ApiKeyRef | None = None
    service_account: str | None = None
    gpu_resource: str = GPU_RESOURCE
    """What each GPU of the pod is requested as (`nvidia.com/mig-<profile>` for a MIG slice)."""
    lora_host_gib: float = 0.0
    """One worker's CPU cache of LoRA adapters (`FitResult.lora_host_gib`), for the memory request."""

    @property
    def two_keys(self) -> bool:
        return self.api_key is not None and self.api_key.extra_key is not None


def container_security() -> core.SecurityContextArgs:
    return core.SecurityContextArgs(
        allow_privilege_escalation=False, run_as_non_root=True, run_as_user=pod_meta.RUN_AS_USER,
        capabilities=core.CapabilitiesArgs(drop=["ALL"]),
        seccomp_profile=core.SeccompProfileArgs(type="RuntimeDefault"),
    )


def pod_security() -> core.PodSecurityContextArgs:
    """fsGroup lets the non-root download Job write to a fresh PVC and serving pods read it."""
    user = pod_meta.RUN_AS_USER
    return core.PodSecurityContextArgs(run_as_non_root=True, run_as_user=user, run_as_group=user, fs_group=user)


def secret_env(name: str, secret: str, key: str) -> core.EnvVarArgs:
    return core.EnvVarArgs(name=name, value_from=core.EnvVarSourceArgs(
        secret_key_ref=core.SecretKeySelectorArgs(name=secret, key=key)))


def env(p: PodInputs, *, offline: bool = True) -> list[core.EnvVarArgs]:
    """Serving env. The API keys arrive by ``secretKeyRef`` so no value is in the spec, state or outputs;
    vLLM guards only ``/v1``, ``/v2``, ``/inference`` and ``/cohere`` with them, so ``/health``
    stays open for probes (and the NetworkPolicy, not the key, keeps everyone but the gateway
    away from the other routes)."""
    e = p.entry
    out = [core.EnvVarArgs(name="HOME", value="/home")]
    if offline:
        # Weights come from the cache (or KServe's storage-initializer); never reach for the Hub.
        out.append(core.EnvVarArgs(name="HF_HUB_OFFLINE", value="1"))
    elif e.hf_token_secret:
        # Without the cache vLLM downloads itself: it needs the Hub and, if gated, the token.
        out.append(secret_env("HF_TOKEN", e.hf_token_secret, "HF_TOKEN"))
    if p.api_key:
        out.append(secret_env(va.API_KEY_ENV, p.api_key.secret, p.api_key.key))
        if p.api_key.extra_key:
            out.append(secret_env(va.API_KEY_EXTRA_ENV, p.api_key.secret, p.api_key.extra_key))
    for r in rows():
        if r.flag.env and r.applies_to(e.is_cpu):
            out.append(core.EnvVarArgs(name=r.flag.env, value=r.text(getattr(e, r.field))))
    return out


def resources(e: ModelEntry, weight_bytes: int, gpu_resource: str = GPU_RESOURCE,
              lora_host_gib: float = 0.0) -> core.ResourceRequirementsArgs:
    """Requests/limits; GPUs equal in both (extended resources cannot be overcommitted, and KServe
    never sets ``nvidia.com/gpu`` itself). A MIG share asks for its slice (`nvidia.com/mig-<profile>`)."""
    mem = f"{pod_sizes.memory_gib(e, weight_bytes, lora_host_gib)}Gi"
    requests: dict[str, str] = {"cpu": str(pod_sizes.cpu_cores(e)), "memory": mem}
    limits: dict[str, str] = {"memory": mem}
    if e.gpus_per_pod:
        requests[gpu_resource] = limits[gpu_resource] = str(e.gpus_per_pod)
    return core.ResourceRequirementsArgs(requests=requests, limits=limits)


def _health(period: int, timeout: int, failures: int) -> core.ProbeArgs:
    return core.ProbeArgs(http_get=core.HTTPGetActionArgs(path="/health", port=SERVING_PORT, scheme="HTTP"),
                          period_seconds=period, timeout_seconds=timeout, failure_threshold=failures)


def volumes(e: ModelEntry, cache_pvc: str | None, *, leader: bool = True) -> list[core.VolumeArgs]:
    """``dshm``, ``home`` and ``tmp-dir`` share KServe's preset volume names, so the strategic merge resizes them;
    the leader's ``metrics-proxy`` is ours alone, merged in by name."""
    vols = [
        core.VolumeArgs(name="dshm", empty_dir=core.EmptyDirVolumeSourceArgs(medium="Memory",
                                                                            size_limit=f"{pod_sizes.shm_gib(e)}Gi")),
        core.VolumeArgs(name="home", empty_dir=core.EmptyDirVolumeSourceArgs()),
        core.VolumeArgs(name="tmp-dir", empty_dir=core.EmptyDirVolumeSourceArgs()),
    ]
    if cache_pvc:
        claim = core.PersistentVolumeClaimVolumeSourceArgs(claim_name=cache_pvc, read_only=True)
        vols.append(core.VolumeArgs(name="weight-cache", persistent_volume_claim=claim))
    if leader:
        source = core.ConfigMapVolumeSourceArgs(name=pod_meta.metrics_proxy_configmap(va.metrics_proxy_source()),
                                                default_mode=0o444)
        vols.append(core.VolumeArgs(name=pod_meta.METRICS_PROXY_VOLUME, config_map=source))
        facts = core.ConfigMapVolumeSourceArgs(name=names.FLEET_FACTS_CONFIGMAP, default_mode=0o444, optional=True)
        vols.append(core.VolumeArgs(name=pod_meta.FLEET_FACTS_VOLUME, config_map=facts))
    return vols


def wait_for_weights(cache: CacheRef, image_ref: str, entry: ModelEntry | None = None) -> core.ContainerArgs:
    """Init container: block until the download Job has written the revision's marker (and each of the
    entry's LoRA adapters' markers: vLLM loads `--lora-modules` at start-up and fails on a missing one)."""
    marker = f"{pod_meta.CACHE_MOUNT}/{cache.subpath}/{pod_meta.MARKER_FILE}"
    waits = [f'until [ -f "{marker}" ]; do echo "waiting for {marker} (Job fills PVC {cache.pvc_name})"; sleep 10; '
             "done"]
    for a in entry.lora.adapters if entry is not None and entry.lora else ():
        am = f"{pod_meta.CACHE_MOUNT}/{cache.subpath}/{names.adapter_dir(a.repo, a.revision)}/{pod_meta.MARKER_FILE}"
        waits.append(f'until [ -f "{am}" ]; do echo "waiting for adapter {a.name}: {am}"; sleep 10; done')
    return core.ContainerArgs(
        name=pod_meta.WAIT_FOR_WEIGHTS, image=image_ref,
        command=["/bin/sh", "-c", "; ".join(waits)],
        volume_mounts=[core.VolumeMountArgs(name="weight-cache", mount_path=pod_meta.CACHE_MOUNT, read_only=True)],
        resources=core.ResourceRequirementsArgs(requests={"cpu": "10m", "memory": "16Mi"}, limits={"memory": "64Mi"}),
        security_context=container_security(),
    )


def container(p: PodInputs, *, kserve: bool, leader: bool = True) -> core.ContainerArgs:
    """The ``main`` container. On KServe only ``args`` (the preset holds the command line)."""
    e = p.entry
    mounts = [core.VolumeMountArgs(name="dshm", mount_path="/dev/shm"),
              core.VolumeMountArgs(name="home", mount_path="/home"),
              core.VolumeMountArgs(name="tmp-dir", mount_path="/tmp")]
    command: list[str] | None = None
    args: list[str] | None = None
    two_keys = p.two_keys and leader  # only the leader serves the API
    # Every word is encoded for the programs that read it before vLLM does (components/argv_layers.py),
    # so a catalog string arrives as written and never runs; the key references are added after.
    if kserve:
        argv = va.kserve_path(e)
        args = encode(va.kserve_args(e), argv) + (va.two_key_args(argv) if two_keys else [])
    else:
        if p.cache:
            mounts.append(core.VolumeMountArgs(name="weight-cache", mount_path=pod_meta.MODEL_MOUNT,
                                               sub_path=p.cache.subpath, read_only=True))
            path, rev = pod_meta.MODEL_MOUNT, None
        else:
            path, rev = e.repo, e.revision
        command = (encode(va.lws_command(e, path, leader=leader, revision=rev, two_keys=two_keys), ArgvPath.EXEC)
                   if e.is_multi_node else encode(va.serve_command(e, path, rev), ArgvPath.EXEC)
                   + (va.two_key_args(ArgvPath.EXEC) if two_keys else []))
    return core.ContainerArgs(
        name="main", image=pod_meta.image(e, p.serving), command=command, args=args,
        env=env(p, offline=kserve or p.cache is not None),
        resources=resources(e, p.weight_bytes, p.gpu_resource, p.lora_host_gib),
        security_context=container_security(), volume_mounts=mounts,
        ports=[core.ContainerPortArgs(name="http", container_port=SERVING_PORT, protocol="TCP")] if leader else None,
        # /health needs no API key. Start-up patience grows with the weights a pod loads.
        startup_probe=_health(pod_sizes.PROBE_PERIOD_SECONDS, 5, pod_sizes.startup_failure_threshold(e, p.weight_bytes))
        if leader else None,
        liveness_probe=_health(10, 10, 3) if leader else None,
        readiness_probe=_health(5, 5, 3) if leader else None,
    )


def metrics_container(p: PodInputs, *, kserve: bool) -> core.ContainerArgs:
    """The metrics sidecar (components/metrics_proxy.py): GET /metrics on its own port, from the vLLM image."""
    return core.ContainerArgs(
        name=METRICS_CONTAINER, image=pod_meta.image(p.entry, p.serving),
        command=encode(va.metrics_proxy_command(p.entry.name), ArgvPath.KSERVE_ARGS if kserve else ArgvPath.EXEC),
        volume_mounts=[core.VolumeMountArgs(name=pod_meta.METRICS_PROXY_VOLUME, mount_path=pod_meta.METRICS_PROXY_DIR,
                                            read_only=True),
                       core.VolumeMountArgs(name=pod_meta.FLEET_FACTS_VOLUME, mount_path=pod_meta.FLEET_FACTS_DIR,
                                            read_only=True)],
        ports=[core.ContainerPortArgs(name="metrics", container_port=METRICS_PORT, protocol="TCP")],
        resources=core.ResourceRequirementsArgs(requests={"cpu": f"{pod_sizes.SIDECAR_CPU_MILLIS}m",
                                                          "memory": f"{pod_sizes.SIDECAR_MEMORY_MIB}Mi"},
                                                limits={"memory": "64Mi"}),
        security_context=container_security(),
    )


def pod_spec(p: PodInputs, *, kserve: bool, leader: bool = True) -> core.PodSpecArgs:
    """A serving pod; the leader (the pod serving the API) also runs the metrics sidecar."""
    e = p.entry
    return core.PodSpecArgs(
        containers=[container(p, kserve=kserve, leader=leader),
                    *([metrics_container(p, kserve=kserve)] if leader else [])],
        init_containers=[wait_for_weights(p.cache, pod_meta.image(e, p.serving), e)] if p.cache else None,
        volumes=volumes(e, p.cache.pvc_name if p.cache else None, leader=leader),
        security_context=pod_security(),
        automount_service_account_token=False,
        termination_grace_period_seconds=60,
        node_selector=dict(p.placement.node_selector) or None,
        tolerations=[core.TolerationArgs(**t) for t in p.placement.tolerations] or None,
        affinity=pinned_to(p.placement.pin.nodes) if p.placement.pin else None,
        topology_spread_constraints=[spread(p.placement.model)] if p.placement.pin else None,
        service_account_name=p.service_account,
    )
