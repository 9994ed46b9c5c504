"""Admission beside the fit check: node capacity, storage room and topology support, from plain data.

Why here, before any resource: a replica whose CPU or memory request no node can give, or a weight
cache the storage class has no room for, previews clean and then hangs after `up` as a Pending pod
or a Pending PVC — the outage the fit check exists to prevent, one resource over. The program's
edge (`tkf_infra.program`, `tkf_infra.live.cluster`) reads what the cluster says (Nodes,
CSIStorageCapacity, ResourceQuota, PVCs, the APIs served), EC2's instance facts, or the stack's
settings, and hands it here as data; every refusal becomes one `Exclusion` of its model with its
stage, and a source that could not be read is a named warning, never a silent pass.

Rules (docs/admission.md):
- Nodes: each pool's nodes and their room come from here (live Nodes less their DaemonSet pods, or
  the settings); the packing itself, spread the way the kube-scheduler may place pods and pinned so
  it must, is `tkf_infra.plan.pins`: in admission order (deployed models, then `priority`, then
  catalog order), on every resource at once (GPUs, CPU, memory; pods ask for no ephemeral storage);
  a MIG layout's pods take the room of the nodes it placed them on first. A model one of whose
  replicas does not fit is refused whole, with the pod's asks, the largest free node and what ran
  out; the models after it are still packed.
- Storage (`tkf_infra.plan.storage_room`): one cache per repo@revision (shared caches count once),
  in admission order of their first model; an existing PVC of that name costs only its growth
  against a quota (it is already counted) and nothing against CSIStorageCapacity once bound. Caches
  that overflow refuse every model they serve; existing caches are never deleted or shrunk.
- Topology: a multi-node model needs LeaderWorkerSet's API, a kserve-backend model KServe's, when
  that piece is `alreadyInstalled` and the cluster does not serve it; a model on a MIG pool needs the
  GPU Operator's namespace when that piece is `alreadyInstalled` (`tkf_infra.plan.piece_namespaces`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from tkf_infra.config.quantity import cpu_text, gib_text, mebibytes, millicores
from tkf_infra.names import GPU_RESOURCE
from tkf_infra.sizing.node_room import NodeRoom

LWS_API = "leaderworkerset.x-k8s.io/v1"
KSERVE_API = "serving.kserve.io/v1alpha1"

#: Stable names at the head of each warning (docs/admission.md lists them), so a reader can grep them.
W_NODES_NOT_LIVE = "node-capacity-not-live"
W_NODES_UNREAD = "node-capacity-unreadable"
W_NODES_UNCHECKED = "node-capacity-unchecked"
W_NODES_ABSENT = "node-capacity-nodes-absent"
W_NODES_NO_GPUS = "node-capacity-no-gpus-advertised"
W_STORAGE_NOT_LIVE = "storage-not-live"
W_STORAGE_UNREAD = "storage-unreadable"
W_STORAGE_UNCHECKED = "storage-unchecked"
W_APIS_UNREAD = "topology-unreadable"
W_DAEMONS_UNREAD = "node-daemonsets-unreadable"
W_NAMESPACE_ABSENT = "namespace-absent"
W_CACHE_CLASS_KEPT = "weight-cache-class-kept"


def named(code: str, text: str) -> str:
    return f"[{code}] {text}"


# ------------------------------------------------------------------------------------------------
# What the edge hands over
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LiveNode:
    """A Node object as read: labels, taints, allocatable (None: no kubelet has registered it), state."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, str], ...] = ()
    allocatable: Mapping[str, str] | None = None
    ready: bool = False
    unschedulable: bool = False
    daemons: tuple[int, int, int] = (0, 0, 0)
    """(CPU millicores, memory MiB, pods) of the DaemonSet pods running there: room serving pods never get."""


@dataclass(frozen=True)
class LivePvc:
    name: str
    request_gib: float
    bound: bool
    storage_class: str | None = None
    access_modes: tuple[str, ...] = ()
    """Its `spec.accessModes`: what a weight cache's claim keeps (`tkf_infra.plan.cache_modes`)."""


@dataclass(frozen=True)
class StorageCapacity:
    """One CSIStorageCapacity object: what one topology segment can still provision for a class."""

    storage_class: str
    capacity_gib: float | None
    maximum_volume_gib: float | None = None


@dataclass(frozen=True)
class QuotaLimit:
    """One storage line of a ResourceQuota in the serving namespace: hard and used, in GiB."""

    quota: str
    resource: str
    hard_gib: float
    used_gib: float


@dataclass(frozen=True)
class ClusterState:
    """What the cluster said (cluster mode); a part that could not be read carries its error instead."""

    source: str
    """Where it was read from, e.g. `the cluster of ~/.kube/prod-llm.yaml (context prod-llm)`."""
    nodes: tuple[LiveNode, ...] | None = None
    nodes_error: str | None = None
    storage_error: str | None = None
    default_storage_class: str | None = None
    provisioners: Mapping[str, str] = field(default_factory=dict)
    """StorageClass → its provisioner (whether its volumes can be mounted on several nodes)."""
    capacities: tuple[StorageCapacity, ...] = ()
    quotas: tuple[QuotaLimit, ...] = ()
    pvcs: Mapping[str, LivePvc] = field(default_factory=dict)
    api_versions: frozenset[str] | None = None
    api_error: str | None = None
    daemons_error: str | None = None
    """Why the DaemonSet pods could not be read (then nodes count at their whole allocatable, named)."""
    namespaces: Mapping[str, bool] = field(default_factory=dict)
    """Namespace → whether it exists, for those the edge was asked about (`tkf_infra.plan.piece_namespaces`)."""
    namespaces_error: str | None = None


@dataclass(frozen=True)
class PodAsk:
    """What one pod of a replica requests (init containers ask less than the main one)."""

    cpu_millis: int
    memory_mib: int
    gpus: int
    ephemeral_mib: int = 0

    def text(self) -> str:
        gpus = f", {self.gpus} GPU{'s' if self.gpus != 1 else ''}" if self.gpus else ""
        return f"{cpu_text(self.cpu_millis)}, {gib_text(self.memory_mib)} memory{gpus}"


@dataclass(frozen=True)
class Footprints:
    """How the program sizes pods and caches (components/vllm_args.py, components/weight_cache.py),
    handed in so the plan stays free of the components package."""

    pod: Callable[[object, int, float], tuple[int, int]]
    """(entry, weight bytes, one worker's LoRA host cache GiB) → (CPU millicores, memory MiB) one serving pod
    requests."""
    cache_gib: Callable[[int], int]
    """weight bytes → the weight cache PVC's GiB."""
    cache_name: Callable[[str, str], str]
    """(repo, revision) → the PVC's name."""
    download_job: tuple[int, int] | None = None
    """(CPU millicores, memory MiB) the download Job's pod requests, reserved on the node it is pinned to."""


# ------------------------------------------------------------------------------------------------
# Nodes of a pool
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolNodes:
    pool: str
    nodes: tuple[NodeRoom, ...]
    source: str
    cpu_memory: bool = True
    """False when only GPUs are known (no Node, EC2 or nodeResources figure): CPU and memory unchecked."""
    gpus: bool = True
    """False on MIG pools (the layout planner places their GPUs)."""
    named: bool = False
    """True when the node names are real (live Nodes, or the pool's `nodes` list): pins may name them."""


def tolerated(taint: Mapping[str, str], tolerations: Sequence[Mapping[str, object]]) -> bool:
    effect = taint.get("effect", "")
    if effect not in ("NoSchedule", "NoExecute"):
        return True
    for t in tolerations:
        if t.get("effect") not in (None, "", effect) or t.get("key") not in (None, "", taint.get("key")):
            continue
        if t.get("operator") == "Exists" or t.get("value", "") == taint.get("value", ""):
            return True
    return False


def node_room(node: LiveNode, gpus: bool, gpus_if_unadvertised: int = 0) -> NodeRoom:
    alloc = node.allocatable or {}
    eph = alloc.get("ephemeral-storage")
    count = int(millicores(alloc[GPU_RESOURCE]) // 1000) if GPU_RESOURCE in alloc else gpus_if_unadvertised
    cpu, mem, pods = node.daemons  # the DaemonSets' pods hold their room on every node they run on
    return NodeRoom(node.name, millicores(alloc.get("cpu", 0)) - cpu, mebibytes(alloc.get("memory", 0)) - mem,
                    count if gpus else 0,
                    mebibytes(eph) if eph is not None else None,
                    int(alloc["pods"]) - pods if str(alloc.get("pods", "")).isdigit() else None)


def live_pool_nodes(pool: str, listed: Sequence[str], selector: Mapping[str, str],
                    tolerations: Sequence[Mapping[str, object]], nodes: Sequence[LiveNode], source: str,
                    gpus: bool, gpus_per_node: int = 0,
                    operator_installed_here: bool = False) -> tuple[PoolNodes | None, list[str]]:
    """The pool's usable nodes from the cluster (None: no registered node matches, use the settings).

    A GPU node that advertises no `nvidia.com/gpu` at all is counted at the pool's gpusPerNode when this
    stack installs the GPU Operator (its device plugin starts with this run), else at none, named.
    """
    if listed:
        matching = [n for n in nodes if n.name in set(listed)]
        how = f"the nodes it lists ({', '.join(listed)})"
    else:
        matching = [n for n in nodes if all(n.labels.get(k) == v for k, v in selector.items())]
        how = "its selector " + ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
    registered = [n for n in matching if n.allocatable is not None]
    if not registered:
        return None, [f"no Node registered by a kubelet matches {how} in {source}"]
    usable: list[LiveNode] = []
    absent: list[str] = []
    for n in sorted(registered, key=lambda n: n.name):
        why = ("cordoned" if n.unschedulable else "not Ready" if not n.ready else
               next((f"taint {t.get('key')}={t.get('value', '')}:{t.get('effect')} not tolerated"
                     for t in n.taints if not tolerated(t, tolerations)), None))
        (absent.append(f"{n.name} ({why})") if why else usable.append(n))
    warnings = [named(W_NODES_ABSENT, f"nodePool {pool}: {len(absent)} matching node(s) count as absent: "
                      f"{', '.join(absent)}")] if absent else []
    silent = [n.name for n in usable if gpus and gpus_per_node and GPU_RESOURCE not in (n.allocatable or {})]
    if silent:
        counted = (f"counted at gpusPerNode {gpus_per_node}: this stack installs the GPU Operator, whose device "
                   "plugin advertises them once it runs" if operator_installed_here else
                   "counted as none: the GPU Operator is alreadyInstalled, so its device plugin should be "
                   "advertising them; check its pods on these nodes")
        warnings.append(named(W_NODES_NO_GPUS, f"nodePool {pool}: node(s) {', '.join(silent)} advertise no "
                              f"{GPU_RESOURCE} yet; {counted}"))
    rooms = tuple(node_room(n, gpus, gpus_per_node if operator_installed_here else 0) for n in usable)
    return PoolNodes(pool, rooms, f"{len(rooms)} Node(s) of {source}", gpus=gpus, named=True), warnings


def settings_pool_nodes(pool: str, count: int, gpus_per_node: int, cpu: str | float | None,
                        memory: str | float | None, ephemeral: str | float | None, pods: int | None,
                        gpus: bool, names: Sequence[str] = ()) -> PoolNodes:
    """`count` nodes of the pool's figures, named as the pool lists them (`nodes`) or `<pool>-<n>`."""
    known = cpu is not None and memory is not None
    room = NodeRoom("", millicores(cpu) if known else 0, mebibytes(memory) if known else 0,
                    gpus_per_node if gpus else 0, mebibytes(ephemeral) if ephemeral is not None else None, pods)
    listed = list(dict.fromkeys(names)) if len(set(names)) == count else []
    nodes = tuple(NodeRoom(listed[i] if listed else f"{pool}-{i + 1}", room.cpu_millis, room.memory_mib, room.gpus,
                           room.ephemeral_mib, room.pods) for i in range(count))
    source = (f"nodePools[{pool}].nodeResources ({count} x {cpu_text(room.cpu_millis)}, {gib_text(room.memory_mib)})"
              if known else f"nodePools[{pool}] nodeCount x gpusPerNode")
    return PoolNodes(pool, nodes, source, cpu_memory=known, gpus=gpus, named=bool(listed))


# ------------------------------------------------------------------------------------------------
# Packing
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Demand:
    model: str
    replicas: int
    pods_per_replica: int
    ask: PodAsk
    count_key: str = "replicas"
    """The field the count comes from, for the way out: `scaling.maxReplicas` for an autoscaled model."""
