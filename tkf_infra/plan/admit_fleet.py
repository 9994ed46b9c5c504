"""Admission of the planned fleet: topology, then the layouts with each node's room, node capacity, storage.

Why one step for layouts and node capacity: a MIG pod runs on the node whose GPU carries its
instance, so the node-capacity check can only hold a MIG pod's CPU and memory against the node the
layout chose, and the layout must know each node's room to choose one that has it (issue 26: 56
`1g.10gb` replicas fit one node's GPUs, not its CPU). And the mig-parted config must carve only what
is deployed: after storage refuses a model of a MIG pool, that pool is laid out again without it.

Order (docs/admission.md): topology (no layout needed; with the namespaces of pieces already installed,
`piece_namespaces`, which may leave the MIG pools out of the layouts); per pool, where its node figures come from
(`pool_nodes`); the MIG layouts with those rooms and the time-slicing proofs (`plan_layouts`); node
capacity for what the layouts do not place, with the layouts' pods already on their nodes; storage;
the re-layout. Models arrive in admission order (deployed first, then priority, then catalog order);
the layouts order by priority, size and name, so they stay stable when the catalog is reordered.
Stages are returned by name (`Stage` values) so this module does not import the fleet plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tkf_infra.config import Catalog
from tkf_infra.config.catalog import Backend
from tkf_infra.config.platform import installed_pieces
from tkf_infra.config.quantity import cpu_text, gib_text
from tkf_infra.plan import admission as adm
from tkf_infra.plan.cache_modes import homes, one_node
from tkf_infra.plan.layout import plan_mig
from tkf_infra.plan.model_plan import ModelPlan
from tkf_infra.plan.piece_namespaces import namespace_refusals
from tkf_infra.plan.pins import Pin, Storage, not_binding, pack_pool
from tkf_infra.plan.pool_layout import Demand, PoolLayout
from tkf_infra.plan.pools import PoolFacts
from tkf_infra.plan.share import context_gib
from tkf_infra.plan.storage_room import (
    Cache,
    admit_storage,
    classes_kept,
    multi_node_mounts,
    new_claims_class,
    storage_limits,
)
from tkf_infra.plan.time_slicing import SliceDemand, prove_time_slicing
from tkf_infra.sizing.ec2 import InstanceGpus
from tkf_infra.sizing.node_room import EKS_AMI_TAG, eks_node_room

Refusals = dict[str, tuple[str, str]]
"""Model → (stage name, reason)."""


@dataclass(frozen=True)
class Admitted:
    """What admission decided: refusals by stage, warnings, footprints, and the layouts as they are applied."""

    refused: Refusals = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    prints: dict[str, dict[str, Any]] = field(default_factory=dict)
    layouts: dict[str, PoolLayout] = field(default_factory=dict)
    laid_out_refused: frozenset[str] = frozenset()
    """Models the first layouts refused (placement, or capacity on a MIG pool's nodes)."""
    pins: dict[str, Pin] = field(default_factory=dict)
    """Model → the nodes its pods are pinned to (only where the node names are real: `tkf_infra.plan.pins`)."""
    downloads: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Weight cache (PVC name) → (pool, node) its download Job is pinned to (same condition)."""


def pool_nodes(pf: PoolFacts, cluster: adm.ClusterState | None, ec2: Mapping[str, InstanceGpus],
                render: bool, operator_installed_here: bool) -> tuple[adm.PoolNodes, list[str]]:
    """Where a pool's node figures come from: the cluster's Nodes, else EC2 (eks), else the pool's settings."""
    gpus = pf.mig is None
    warnings: list[str] = []
    why = "render mode reads no cluster" if render else ""
    if cluster is not None and cluster.nodes is not None:
        live, notes = adm.live_pool_nodes(pf.name, pf.pool.nodes, pf.node_selector, pf.tolerations, cluster.nodes,
                                          cluster.source, gpus, pf.gpus_per_node * max(1, pf.time_slices),
                                          operator_installed_here)
        if live is not None:
            return live, notes
        why = "; ".join(notes)
    elif cluster is not None:
        why = f"the Nodes could not be read ({cluster.nodes_error})"
    info = ec2.get(str(pf.pool.instance_type)) if pf.pool.kind == "eks" else None
    if info is not None and info.vcpus and info.host_memory_mib:
        room = eks_node_room("", info.vcpus, info.host_memory_mib, pf.gpus_per_node * max(1, pf.time_slices)
                             if gpus else 0, info.default_max_enis, info.ipv4_per_eni)
        nodes = tuple(replace(room, name=f"{pf.name}-{i + 1}") for i in range(pf.node_count))
        source = (f"EC2 {info.instance_type} ({info.vcpus} vCPUs, {info.host_memory_mib / 1024:g} GiB) less the EKS "
                  f"AMI's kube-reserved and eviction threshold (amazon-eks-ami {EKS_AMI_TAG}: "
                  f"{cpu_text(room.cpu_millis)}, {gib_text(room.memory_mib)} per node)")
        if cluster is not None:
            warnings.append(adm.named(adm.W_NODES_NOT_LIVE, f"nodePool {pf.name}: node capacity was not read live "
                                      f"({why}); planned from {source}"))
        return adm.PoolNodes(pf.name, nodes, source, gpus=gpus), warnings
    if pf.pool.kind == "eks":
        itype = str(pf.pool.instance_type)
        why = "; ".join(w for w in (why, f"EC2 gave no vCPU and memory figures for {itype}") if w)
    res = pf.pool.node_resources
    nodes_ = adm.settings_pool_nodes(pf.name, pf.node_count, pf.gpus_per_node * max(1, pf.time_slices),
                                     res.cpu if res else None, res.memory if res else None,
                                     res.ephemeral_storage if res else None, res.pods if res else None, gpus,
                                     names=pf.pool.nodes)
    code = adm.W_NODES_UNREAD if cluster is not None and cluster.nodes is None else adm.W_NODES_NOT_LIVE
    if res is not None:
        warnings.append(adm.named(code, f"nodePool {pf.name}: node capacity was not read live ({why}); planned "
                                  f"from {nodes_.source}"))
    else:
        warnings.append(adm.named(code if cluster is not None else adm.W_NODES_UNCHECKED,
                                  f"nodePool {pf.name}: node capacity was not read live ({why}) and the pool sets no "
                                  f"nodeResources, so {'only its GPUs were packed and ' if gpus else ''}the pods' CPU "
                                  f"and memory were not checked; set nodePools[{pf.name}].nodeResources: "
                                  "{cpu, memory} (one node's allocatable)"))
    return nodes_, warnings



def topology(models: Sequence[ModelPlan], catalog: Catalog, cluster: adm.ClusterState | None) -> tuple[Refusals,
                                                                                                        list[str]]:
    """Models the configured platform cannot render on this cluster: an API it needs is not served."""
    s = catalog.settings
    installed = installed_pieces(s.platform, s.serving.backend)
    refused: Refusals = {}
    if cluster is not None and cluster.api_versions is None:
        return refused, [adm.named(adm.W_APIS_UNREAD, f"topology: the APIs {cluster.source} serves could not be read "
                                   f"({cluster.api_error}); LeaderWorkerSet and KServe were not checked")]
    if cluster is None or cluster.api_versions is None:
        return refused, []
    for m in models:
        e = m.entry
        if e.is_multi_node and "lws" not in installed and adm.LWS_API not in cluster.api_versions:
            refused[e.name] = ("topology", (
                f"model {e.name}: multi-node (nodeCount {e.node_count}) runs as a LeaderWorkerSet, but "
                f"{cluster.source} does not serve {adm.LWS_API} and platform.lws.alreadyInstalled is true; install "
                "LeaderWorkerSet there, let tkf-infra install it (remove alreadyInstalled), or set nodeCount 1"))
        elif (s.serving.backend == Backend.KSERVE and "kserve" not in installed
              and adm.KSERVE_API not in cluster.api_versions):
            refused[e.name] = ("topology", (
                f"model {e.name}: the kserve backend renders an LLMInferenceService, but {cluster.source} does not "
                f"serve {adm.KSERVE_API} and platform.kserve.alreadyInstalled is true; install KServe there, let "
                "tkf-infra install it (remove alreadyInstalled), or set serving.backend: vllm"))
    return refused, []


def _rooms(pf: PoolFacts, nodes: adm.PoolNodes | None) -> tuple[list[tuple[int, int]] | None, str]:
    """A MIG pool's listed nodes' (CPU, memory) for the layout; a listed node not usable now has none."""
    if nodes is None or not nodes.cpu_memory:
        return None, ""
    by_name = {n.name: n for n in nodes.nodes}
    rooms = [(by_name[n].cpu_millis, by_name[n].memory_mib) if n in by_name else (0, 0) for n in pf.pool.nodes]
    return rooms, nodes.source


def reserved(m: ModelPlan, floors: frozenset[str] = frozenset()) -> int:
    """Replicas the plan holds room for: an autoscaled model's maximum, its minimum when it is in `floors`
    (admitted under `serving.overcommit: allow` after its maximum did not fit), else the fixed count."""
    scaling = m.entry.scaling
    return scaling.min_replicas if scaling is not None and m.entry.name in floors else m.entry.reserved_replicas


def plan_layouts(models: Sequence[ModelPlan], pools: Mapping[str, PoolFacts], version: str,
                 asks: Mapping[str, tuple[int, int]] | None = None, rooms: Mapping[str, adm.PoolNodes] | None = None,
                 held: frozenset[str] = frozenset(), floors: frozenset[str] = frozenset(),
                 previous: Any = None) -> dict[str, PoolLayout]:
    """Lay out every MIG pool, and prove every time-sliced pool that hosts shares (`tkf_infra.plan.layout`).

    `asks`: model → (CPU millicores, memory MiB) of one pod; `rooms`: pool → its nodes' figures. With both,
    a MIG instance goes only to a node with room for its pod. `held`: the models the last run deployed.
    `floors`: the autoscaled models held at their minimum (`reserved`). `previous`: the last run's `gpuLayout`
    output (pool → published layout; None: every pool from scratch), so placed models stay where they are."""
    layouts: dict[str, PoolLayout] = {}
    for name, pool in sorted(pools.items()):
        on = [m for m in models if m.pool is not None and m.pool.name == name and not m.entry.is_cpu]
        if pool.mig is not None and pool.gpu is not None:
            node_rooms, source = _rooms(pool, (rooms or {}).get(name)) if asks is not None else (None, "")
            # A multi-node model's replica is one pod per node, each with gpusPerNode GPUs of its node.
            demands = [Demand(m.entry.name, reserved(m, floors) * m.entry.node_count,
                              m.share.profile if m.share else None, m.entry.gpus_per_node,
                              *((asks or {}).get(m.entry.name, (0, 0))), priority=m.entry.priority or 0,
                              held=m.entry.name in held)
                       for m in on if reserved(m, floors) > 0]
            last = previous.get(name) if isinstance(previous, Mapping) else previous  # not a mapping: warned
            layouts[name] = plan_mig(name, pool.mig, pool.pool.nodes, pool.gpus_per_node, demands, node_rooms, source,
                                     last)
        elif pool.time_slices > 1 and pool.gpu is not None and any(m.share for m in on):
            total, context = pool.gpu.memory_gib, context_gib(version)
            demands_ts = [SliceDemand(m.entry.name, reserved(m, floors) * (1 if m.share else m.entry.gpus),
                                      m.share.memory_gib if m.share else
                                      m.entry.gpu_memory_utilization * total + context) for m in on]
            layouts[name] = prove_time_slicing(name, pool.gpu.name, pool.time_slices,
                                               pool.gpus_per_node * pool.node_count, total, demands_ts)
    return layouts


def _layout_refusals(layouts: Mapping[str, PoolLayout]) -> Refusals:
    return {model: ("capacity" if model in lay.short_of_room else "placement", reason)
            for lay in layouts.values() for model, reason in lay.refused.items()}


def _pinned(layout: PoolLayout | None, models: Sequence[ModelPlan]) -> dict[str, list[list[str]]]:
    """Model → the nodes of each replica, as a MIG layout placed its pods (they run where their GPUs are)."""
    if layout is None or layout.kind != "mig":
        return {}
    out: dict[str, list[list[str]]] = {}
    for m in models:
        pods = layout.pod_nodes(m.entry.name, m.entry.gpus_per_node)
        if pods and m.entry.name not in layout.refused:
            k = max(1, m.entry.node_count)
            out[m.entry.name] = [pods[i:i + k] for i in range(0, len(pods), k)]
    return out


def admit(models: Sequence[ModelPlan], pools: Mapping[str, PoolFacts], catalog: Catalog,
          cluster: adm.ClusterState | None, fp: adm.Footprints, ec2: Mapping[str, InstanceGpus],
          held: frozenset[str] = frozenset(), floors: frozenset[str] = frozenset(),
          previous_layout: Any = None, previous_pins: Mapping[str, Pin] | None = None,
          claims: Mapping[str, str] | None = None) -> Admitted:
    """Topology, layouts, node capacity and storage for the planned models, in the given order (module docstring).

    `floors`: autoscaled models held at minReplicas rather than maxReplicas (`reserved`). `previous_layout`:
    the last run's `gpuLayout` output, which the MIG layouts keep what they can of (`plan_layouts`).
    `previous_pins`: the last run's pins (`tkf_infra.plan.pins.read_pins`), kept where they still hold.
    `claims`: cache → the access mode its existing claim keeps (`cache_modes.existing_modes`): a ReadWriteOnce
    one's readers are packed on its node."""
    s = catalog.settings
    render = s.cluster.mode == "render"
    refused, warnings = topology(models, catalog, cluster)
    # MIG pools whose layout cannot be written (the GPU Operator's namespace is absent) are not laid out.
    absent, blocked, notes = namespace_refusals(models, pools, catalog, cluster)
    refused.update({k: v for k, v in absent.items() if k not in refused})
    warnings += notes
    laid = {name: pf for name, pf in pools.items() if name not in blocked}
    installed = installed_pieces(s.platform, s.serving.backend)
    prints: dict[str, dict[str, Any]] = {}
    asks: dict[str, tuple[int, int]] = {m.entry.name: fp.pod(m.entry, m.weight_bytes, m.fit.lora_host_gib)
                                        for m in models}
    # Where each pool's node figures come from (only pools that host a model).
    rooms: dict[str, adm.PoolNodes] = {}
    for name, pf in sorted(pools.items()):
        if any(m.pool is not None and m.pool.name == name and m.entry.name not in refused for m in models):
            rooms[name], notes = pool_nodes(pf, cluster, ec2, render, "gpuOperator" in installed)
            warnings += notes
    if rooms and cluster is not None and cluster.nodes is not None and cluster.daemons_error:
        warnings.append(adm.named(adm.W_DAEMONS_UNREAD, f"node capacity: the DaemonSet pods on the nodes could not "
                                  f"be read ({cluster.daemons_error}); nodes count at their whole allocatable, so a "
                                  "pod packed to a node's last cores may stay Pending; let the credentials list pods"))
    alive = [m for m in models if m.entry.name not in refused]
    layouts = plan_layouts(alive, laid, s.serving.version, asks, rooms, held, floors, previous_layout)
    laid_out = _layout_refusals(layouts)
    refused.update(laid_out)
    before = set(refused)  # what the layouts already left out (topology, their own refusals)
    multi = multi_node_mounts(cluster, s.serving.storage_class, s.serving.storage_multi_node)
    rwo = one_node(claims or {})
    storage = Storage({m.entry.name: fp.cache_name(m.entry.repo, m.entry.revision) for m in models},
                      adm.PodAsk(*fp.download_job, 0) if fp.download_job else None, multi,
                      new_claims_class(cluster, s.serving.storage_class) or "",
                      one_node=rwo,
                      homes=homes(models, rwo, {m: p.nodes for m, p in (previous_pins or {}).items()},
                                  {n.name for nodes in rooms.values() for n in nodes.nodes}))
    pins: dict[str, Pin] = {}
    downloads: dict[str, tuple[str, str]] = {}
    # Node capacity, per pool: a MIG layout's pods where it put them, the others spread as the scheduler may.
    for name, nodes in rooms.items():
        pf = pools[name]
        on = [m for m in models if m.pool is not None and m.pool.name == name and m.entry.name not in refused]
        demands = []
        for m in on:
            cpu, mem = asks[m.entry.name]
            gpus = 0 if m.entry.is_cpu or pf.mig is not None else (1 if m.share else m.entry.gpus_per_pod)
            # Room for the autoscaler's maximum, or for its minimum when overcommit allowed that.
            key = ("replicas" if not m.entry.scaling else
                   "scaling.minReplicas" if m.entry.name in floors else "scaling.maxReplicas")
            demands.append(adm.Demand(m.entry.name, reserved(m, floors), m.entry.node_count,
                                      adm.PodAsk(cpu, mem, gpus), key))
            prints[m.entry.name] = {"pool": name, "pod": {"cpuMillis": cpu, "memoryMiB": mem, "gpus": gpus},
                                    "podsPerReplica": m.entry.node_count, "replicas": reserved(m, floors),
                                    "nodesFrom": nodes.source}
        fixed = _pinned(layouts.get(name), on)
        packed = pack_pool(nodes, demands, fixed, previous_pins, storage)
        refused.update(packed.refused)
        for model, where in packed.placed.items():
            prints[model]["nodes"] = where
        if nodes.named:
            pins.update(packed.pins)
            downloads.update({cache: (name, node) for cache, node in packed.jobs.items()})
            for model, pin in packed.pins.items():
                prints[model]["pin"] = pin.published()
        elif packed.pins and len(nodes.nodes) > 1:  # one node: nowhere else to go, the plan is the placement
            warnings.append(not_binding(name, nodes.source))
    refused.update(_storage(models, refused, catalog, cluster, fp, prints, warnings))
    # The mig-parted config carves only what is deployed: lay out again the MIG pools that lost a model since.
    again = {name for name, lay in layouts.items() if lay.kind == "mig" and any(
        m.pool is not None and m.pool.name == name and m.entry.name in refused and m.entry.name not in before
        for m in models)}
    if again:
        kept = [m for m in models if m.entry.name not in refused]
        fresh = plan_layouts(kept, {n: pools[n] for n in again}, s.serving.version, asks, rooms, held, floors,
                             previous_layout)
        for name, lay in fresh.items():
            layouts[name] = lay
            refused.update({k: v for k, v in _layout_refusals({name: lay}).items() if k not in refused})
            for model, where in _pinned(lay, kept).items():
                prints[model]["nodes"] = where
    warnings += [w for lay in layouts.values() for w in lay.warnings]  # of the layouts applied, once each
    return Admitted(refused, warnings, prints, layouts, frozenset(laid_out),
                    {m: p for m, p in pins.items() if m not in refused}, downloads)


def _storage(models: Sequence[ModelPlan], refused: Mapping[str, tuple[str, str]], catalog: Catalog,
             cluster: adm.ClusterState | None, fp: adm.Footprints, prints: dict[str, dict[str, Any]],
             warnings: list[str]) -> Refusals:
    """One cache per repo@revision, in the order of its first model, against what the storage class has left."""
    s = catalog.settings
    if not models:  # nothing to cache (a platform stack): nothing to warn about the storage's figures either
        return {}
    limits, notes, shown = storage_limits(cluster, s.serving.storage_class, s.serving.weight_cache_budget_gib)
    warnings += notes
    caches: dict[str, Cache] = {}
    for m in models:
        e = m.entry
        if e.name in refused:
            continue
        pvc = fp.cache_name(e.repo, e.revision)
        old = caches.get(e.model_ref)
        caches[e.model_ref] = (Cache(pvc, e.model_ref, fp.cache_gib(m.weight_bytes), (*old.models, e.name))
                               if old else Cache(pvc, e.model_ref, fp.cache_gib(m.weight_bytes), (e.name,)))
        prints.setdefault(e.name, {}).update(weightCache=pvc, weightCacheGiB=fp.cache_gib(m.weight_bytes))
    existing = dict(cluster.pvcs) if cluster is not None and cluster.storage_error is None else {}
    warnings += classes_kept(list(caches.values()), existing, cluster, s.serving.storage_class, s.namespaces.serving)
    return {model: ("storage", reason)
            for model, reason in admit_storage(list(caches.values()), limits, existing, shown).items()}
