"""Node capacity packed the way the kube-scheduler will place it, and the pins that make it binding.

Why (issue 39): the first fit the plan used to pack replicas was a promise nothing enforced. The
default kube-scheduler (which managed control planes such as EKS do not let us reconfigure) scores
nodes by least allocation and spreads one workload's pods, so it put four small pods one per node
where the plan had packed them on one, no node kept 8 free GPUs, and a 405B the plan admitted
stayed Pending. The plan is therefore made binding, with two fields every scheduler honours:

- a REQUIRED node affinity of each model's pods to the nodes the plan chose for it (one term per node,
  ORed, each `matchFields` `metadata.name In [node]`: the node's name itself, whatever its hostname label
  says; the API server allows a name selector one value);
- a topologySpreadConstraint over `kubernetes.io/hostname`, `maxSkew: 1`, `whenUnsatisfiable:
  DoNotSchedule`, selecting this model's pods (`tkf.io/model`), `nodeAffinityPolicy: Honor` (only
  the pinned nodes are domains), `nodeTaintsPolicy: Ignore` (a pinned node that is tainted or
  cordoned still counts, so the others do not absorb its share).

With k pinned nodes and P pods, a pod goes only where its model has the fewest pods + 1, so no
node ever holds more than ceil(P/k) of them (by induction: placing on a node at the minimum m gives
m+1 <= floor((T-1)/k)+1 <= ceil(T/k) for T pods placed; terminating pods are not counted but keep
their room, so a rollout waits, never overflows). The plan reserves exactly that: each of a model's
k nodes must hold ceil(P/k) of its pods, P being the replicas it reserves (an autoscaled model's
maxReplicas) times its pods per replica. Then any placement the constraints allow fits every node
(the sum over its models of ceil(P/k) x ask <= its room), and a Pending pod always finds a node at
its model's minimum with room: no admitted pod stays Pending. k is the smallest that fits (the
model's pods packed onto as few nodes as possible, keeping whole nodes free for large models),
so the waste is at most k-1 pods' asks. A multi-node (LeaderWorkerSet) model puts every pod on its
own node (k = P, one each): the scheduler does not know LWS groups, and one pod per node is what
keeps a group's leader and workers apart.

Pins are stable: a model keeps the nodes of its previous pin (the last run's
`endpoints[...].footprint.pin`, read back by the program) when they are still usable and still
hold its pods, so an `up` that does not touch a model does not roll its pods. The previous plan is
the source, not the live pods: it exists in render mode too, and an unchanged pin is what leaves
the pod template, hence the running pods, unchanged.

A pin names nodes, so it is only emitted where the names are real: live Nodes (cluster mode) or a
pool's `nodes` list. For invented names (`<pool>-<n>` from nodeCount, EC2 figures) the pool is
still packed this way (a preview refuses what the cluster run would) but nothing is pinned, and
warning `placement-not-binding` says so.

Each weight cache's download Job runs on a node of its first reader (pinned there, so a node-local
volume that binds where its first consumer runs binds where the server runs) and its CPU and
memory are reserved on that node. A storage class whose volumes one node mounts at a time
(`storage_room.multi_node_mounts` false), or a claim that exists ReadWriteOnce on any class
(`tkf_infra.plan.cache_modes`: a claim keeps its mode), keeps every reader of a cache on the cache's node —
the node its readers were pinned to last, else its first reader's — or refuses the reader naming the model,
the cache, the field and the fix.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tkf_infra.config.quantity import cpu_text, gib_text
from tkf_infra.plan.admission import Demand, PodAsk, PoolNodes, named
from tkf_infra.plan.cache_modes import RWO, RWX

W_NOT_BINDING = "placement-not-binding"


@dataclass(frozen=True)
class Pin:
    """The nodes a model's pods may run on, and how many of its pods the plan reserved on each."""

    nodes: tuple[str, ...]
    per_node: int
    ask: PodAsk | None = field(default=None, compare=False)
    """What one of the pods asked when the pin was made (the footprint's `pod`): an unchanged model is kept first."""

    def published(self) -> dict[str, Any]:
        return {"nodes": list(self.nodes), "podsPerNode": self.per_node}


def read_pins(endpoints: Any) -> dict[str, Pin]:
    """Model → its pin, from the last run's `endpoints` output (anything unreadable: no pin, planned afresh)."""
    out: dict[str, Pin] = {}
    for ep in endpoints.values() if isinstance(endpoints, Mapping) else ():
        footprint = ep.get("footprint") if isinstance(ep, Mapping) else None
        if not isinstance(footprint, Mapping) or not isinstance(ep.get("name"), str):
            continue
        pin = footprint.get("pin")
        if not isinstance(pin, Mapping):
            continue
        nodes, per, pod = pin.get("nodes"), pin.get("podsPerNode"), footprint.get("pod")
        ask = (PodAsk(int(pod.get("cpuMillis", 0)), int(pod.get("memoryMiB", 0)), int(pod.get("gpus", 0)))
               if isinstance(pod, Mapping) else None)
        # The engine hands outputs back as protobuf Struct values: every number a float.
        if isinstance(nodes, list) and nodes and all(isinstance(n, str) for n in nodes) \
                and isinstance(per, int | float) and per == int(per) and per > 0:
            out[ep["name"]] = Pin(tuple(nodes), int(per), ask)
    return out


@dataclass(eq=False)
class Free:
    """A node's room left while packing; compared by identity (two nodes may have equal figures)."""

    name: str
    cpu: int
    mem: int
    gpus: int
    pods: int | None

    def holds(self, ask: PodAsk, pools: PoolNodes, n: int = 1, extra: PodAsk | None = None) -> bool:
        cpu = n * ask.cpu_millis + (extra.cpu_millis if extra else 0)
        mem = n * ask.memory_mib + (extra.memory_mib if extra else 0)
        pods = n + (1 if extra else 0)
        return ((not pools.cpu_memory or (cpu <= self.cpu and mem <= self.mem))
                and (not pools.gpus or n * ask.gpus <= self.gpus) and (self.pods is None or self.pods >= pods))

    def take(self, ask: PodAsk, n: int = 1) -> None:
        self.cpu -= n * ask.cpu_millis
        self.mem -= n * ask.memory_mib
        self.gpus -= n * ask.gpus
        if self.pods is not None:
            self.pods -= n


@dataclass
class Packed:
    refused: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Model → (stage, reason): `capacity`, or `storage` for a reader a single-node cache cannot serve."""
    placed: dict[str, list[list[str]]] = field(default_factory=dict)
    """Model → the nodes of each replica (pods dealt round-robin over its pin, as the footprint shows them)."""
    pins: dict[str, Pin] = field(default_factory=dict)
    jobs: dict[str, str] = field(default_factory=dict)
    """Cache (PVC name) → the node its download Job was given (room reserved there)."""


@dataclass(frozen=True)
class Storage:
    """What packing needs of the weight caches: each model's cache, the Job's ask, whether volumes span nodes."""

    cache_of: Mapping[str, str] = field(default_factory=dict)
    job: PodAsk | None = None
    multi_node: bool | None = None
    """False: one node mounts a volume at a time (block, node-local); None: not known (not checked)."""
    storage_class: str = ""
    cache_nodes: dict[str, str] = field(default_factory=dict)
    """Cache → its node, filled while packing (shared by every pool of the plan)."""
    one_node: frozenset[str] = frozenset()
    """Caches whose claims exist ReadWriteOnce, whatever the class (`tkf_infra.plan.cache_modes`): one node's too."""
    homes: Mapping[str, str] = field(default_factory=dict)
    """One-node cache → the node that holds it (its readers' last pin), before any reader is packed."""

    def single(self, cache: str | None) -> bool:
        """Whether one node mounts this cache at a time: the class says so, or its claim is ReadWriteOnce."""
        return bool(cache) and (self.multi_node is False or cache in self.one_node)

    def node_of(self, cache: str | None) -> str | None:
        """The node every reader of a one-node cache must run on (None: any, or not chosen yet)."""
        if not cache or not self.single(cache):
            return None
        return self.cache_nodes.get(cache) or self.homes.get(cache)


def _options(d: Demand, free: Sequence[Free], pods: int) -> list[tuple[int, int]]:
    """(nodes k, pods per node q) to try, fewest nodes first; one per distinct q (the smallest k with it)."""
    if d.pods_per_replica > 1:
        return [(pods, 1)]
    out: dict[int, int] = {}
    for k in range(1, min(pods, len(free)) + 1):
        out.setdefault(math.ceil(pods / k), k)
    return sorted(((k, q) for q, k in out.items()))


def _keep(d: Demand, pods: int, free: Sequence[Free], pools: PoolNodes, prev: Pin | None, job: PodAsk | None,
          only: str | None, single: bool) -> tuple[list[Free], int, Free | None] | None:
    """The previous pin's nodes, when they are all still usable and each still holds its share of `pods`."""
    by_name = {f.name: f for f in free}
    if prev is None or not all(n in by_name for n in prev.nodes) or len(prev.nodes) > pods or (
            d.pods_per_replica > 1 and len(prev.nodes) != pods) or (single and len(prev.nodes) > 1) or (
            only is not None and prev.nodes != (only,)):
        return None
    nodes, q = [by_name[n] for n in prev.nodes], math.ceil(pods / len(prev.nodes))
    jn = next((f for f in nodes if f.holds(d.ask, pools, q, job)), None) if job else None
    if all(f.holds(d.ask, pools, q) for f in nodes) and (jn is not None or job is None):
        return nodes, q, jn
    return None


def _choose(d: Demand, pods: int, free: Sequence[Free], pools: PoolNodes, prev: Pin | None, job: PodAsk | None,
            only: str | None, single: bool) -> tuple[list[Free], int, Free | None] | str | None:
    """The nodes for `pods` pods of `d`, the pods per node and the node for its cache's Job; None: no room.
    A string: why a single-node cache cannot serve it."""
    if single and d.pods_per_replica > 1:
        return "its pods run on different nodes"
    if only is not None:
        f = next((f for f in free if f.name == only), None)
        if f is None or not f.holds(d.ask, pools, pods, job):
            return None
        return [f], pods, f if job else None
    if kept := _keep(d, pods, free, pools, prev, job, only, single):
        return kept
    before = set(prev.nodes) if prev else set()
    order = sorted(free, key=lambda f: f.name not in before)  # the previous nodes first, then name order (stable)
    for k, q in _options(d, free, pods):
        if single and k > 1:
            break
        cand = [f for f in order if f.holds(d.ask, pools, q)]
        if len(cand) < k:
            continue
        jn = next((f for f in cand if f.holds(d.ask, pools, q, job)), None) if job else None
        if job is not None and jn is None:
            continue
        chosen = ([jn] if jn else []) + [f for f in cand if f is not jn][:k - (1 if jn else 0)]
        return sorted(chosen, key=lambda f: f.name), q, jn
    return None


def pack_pool(pools: PoolNodes, demands: Sequence[Demand], fixed: Mapping[str, list[list[str]]] | None = None,
              previous: Mapping[str, Pin] | None = None, storage: Storage | None = None) -> Packed:
    """Each demand onto ceil(P/k) pods on each of k nodes (module docstring).

    First the models whose previous pin still holds them unchanged (same pods per node, same ask), then
    the edited ones whose pin still holds them, so an edit to one model never moves another's pods; then
    the others, in the given order. `fixed`: model → the nodes of each replica already chosen
    (a MIG layout's, which checked their room): those pods take their nodes' room first and get no pin."""
    free = [Free(n.name, n.cpu_millis, n.memory_mib, n.gpus, n.pods) for n in pools.nodes]
    by_name = {f.name: f for f in free}
    st = storage or Storage()
    out = Packed()
    fixed = fixed or {}
    for d in demands:
        if d.model in fixed:
            for name in (n for nodes in fixed[d.model] for n in nodes):
                if name in by_name:
                    by_name[name].take(d.ask)
            out.placed[d.model] = fixed[d.model]
    for keeping in ("unchanged", "kept", ""):
        for d in demands:
            if d.model in fixed or d.model in out.placed or d.model in out.refused:
                continue
            pods = d.replicas * d.pods_per_replica
            if pods <= 0:
                out.placed[d.model] = []
                continue
            cache = st.cache_of.get(d.model)
            single, only = st.single(cache), st.node_of(cache)
            job = st.job if cache and cache not in st.cache_nodes else None
            prev = (previous or {}).get(d.model)
            if keeping == "unchanged" and (prev is None or prev.ask != d.ask
                                           or prev.per_node != math.ceil(pods / len(prev.nodes))):
                continue
            got = (_keep(d, pods, free, pools, prev, job, only, single) if keeping else
                   _choose(d, pods, free, pools, prev, job, only, single))
            if keeping and got is None:
                continue
            if isinstance(got, str) or (got is None and only is not None):
                where = "has no room" if any(f.name == only for f in free) else "is not a usable node"
                out.refused[d.model] = ("storage", _single_node_refusal(d, st, got if isinstance(got, str) else (
                    f"its cache is on node {only}, which {where} for its {pods} pod(s)"), pools))
            elif got is None:
                out.refused[d.model] = ("capacity", _refusal(pools, d, free, previous, st, single))
            else:
                _commit(d, pods, got, st, out)
    return out


def _commit(d: Demand, pods: int, got: tuple[list[Free], int, Free | None], st: Storage, out: Packed) -> None:
    """Take the room of the model's pods (and of its cache's Job) and record its pin."""
    nodes, q, jn = got
    cache = st.cache_of.get(d.model)
    for f in nodes:
        f.take(d.ask, q)
    if jn is not None and st.job is not None and cache:
        jn.take(st.job)
        st.cache_nodes[cache] = jn.name
        out.jobs[cache] = jn.name
    elif cache and st.single(cache) and cache not in st.cache_nodes:
        st.cache_nodes[cache] = nodes[0].name
    out.pins[d.model] = Pin(tuple(f.name for f in nodes), q)
    deal = [nodes[i % len(nodes)].name for i in range(pods)]
    out.placed[d.model] = [deal[i:i + d.pods_per_replica] for i in range(0, pods, d.pods_per_replica)]


def _fits(d: Demand, replicas: int, free: Sequence[Free], pools: PoolNodes, prev: Pin | None, st: Storage,
          single: bool) -> tuple[list[Free], int, Free | None] | None:
    cache = st.cache_of.get(d.model)
    job = st.job if cache and cache not in st.cache_nodes else None
    got = _choose(d, replicas * d.pods_per_replica, free, pools, prev, job, st.node_of(cache), single)
    return None if isinstance(got, str) else got


def _refusal(pools: PoolNodes, d: Demand, free: Sequence[Free], previous: Mapping[str, Pin] | None, st: Storage,
             single: bool) -> str:
    """The replica that does not fit, each pod's asks, what is left where, what ran out, and the way out."""
    prev = (previous or {}).get(d.model)
    lo, hi = 0, d.replicas  # the most replicas that fit (fitting is monotonic in the count)
    while lo + 1 < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _fits(d, mid, free, pools, prev, st, single) else (lo, mid)
    fit = lo
    trial = [Free(f.name, f.cpu, f.mem, f.gpus, f.pods) for f in free]
    got = _fits(d, fit, trial, pools, prev, st, single) if fit else None
    if got is not None:
        for f in got[0]:
            f.take(d.ask, got[1])
    pods = fit * d.pods_per_replica + d.pods_per_replica
    one_more = [f for f in trial if f.holds(d.ask, pools)]
    spread = d.pods_per_replica == 1 and len(one_more) > 0 and fit > 0
    if spread:
        holds = sorted(((max((n for n in range(1, pods + 1) if f.holds(d.ask, pools, n)), default=0), f.name)
                        for f in free), reverse=True)
        shown = ", ".join(f"{n} on {name}" for n, name in holds[:6] if n) + (", …" if len(holds) > 6 else "")
        short = [f"room for its {pods} pods spread evenly: pinned to k nodes, the scheduler may put ceil({pods}/k) "
                 f"of them on each, so each of k nodes must hold that many, and no k nodes do (the nodes hold {shown} "
                 "of its pods)"]
    elif d.pods_per_replica > 1:  # every pod of the model on its own node: the next replica's, one by one
        used = list(got[0]) if got is not None else []
        for _ in range(d.pods_per_replica):
            node = next((f for f in trial if f not in used and f.holds(d.ask, pools)), None)
            if node is None:
                break
            used.append(node)
        short = _ran_out(d.ask, [f for f in trial if f not in used], pools)
    else:
        short = _ran_out(d.ask, trial, pools)
    best = max(trial, key=lambda f: (f.gpus, f.mem, f.cpu), default=None)
    mult = f" ({d.pods_per_replica} pods on different nodes)" if d.pods_per_replica > 1 else ""
    left = (f"the largest free node, {best.name}, has {cpu_text(max(best.cpu, 0))}, {gib_text(max(best.mem, 0))} "
            f"memory{f', {max(best.gpus, 0)} GPU(s)' if pools.gpus else ''} left after the models before it in "
            "admission order (deployed, priority, catalog)" if best is not None else "the pool has no usable node")
    ways = [f"lower {d.count_key} to {fit}" if fit else "",
            f"add nodes to pool {pools.pool} (nodeCount, or more Ready nodes matching its selector) or use nodes "
            "with more of what ran out", "move it to another nodePool",
            "or give models before it in the catalog fewer replicas"]
    return (f"model {d.model}: replica {fit + 1} of {d.replicas}{mult} fits on no node of pool {pools.pool} "
            f"(nodes from {pools.source}): each pod asks {d.ask.text()}; {left}; ran out of: {'; '.join(short)}. "
            f"Way out: {', '.join(w for w in ways if w)}")


def _ran_out(ask: PodAsk, free: Sequence[Free], pools: PoolNodes) -> list[str]:
    if not free:
        return ["nodes (the pool has no usable node)"]
    short = []
    best_cpu, best_mem, best_gpu = max(f.cpu for f in free), max(f.mem for f in free), max(f.gpus for f in free)
    if pools.gpus and ask.gpus > best_gpu:
        short.append(f"GPUs (asked {ask.gpus}, at most {max(best_gpu, 0)} free on a node)")
    if pools.cpu_memory and ask.cpu_millis > best_cpu:
        short.append(f"CPU (asked {cpu_text(ask.cpu_millis)}, at most {cpu_text(max(best_cpu, 0))} free on a node)")
    if pools.cpu_memory and ask.memory_mib > best_mem:
        short.append(f"memory (asked {gib_text(ask.memory_mib)}, at most {gib_text(max(best_mem, 0))} free on a "
                     "node)")
    if any(f.pods is not None and f.pods < 1 for f in free) and not short:
        short.append("pods (the kubelet's maxPods)")
    return short or ["no single node has all of them free at once"]


def _single_node_refusal(d: Demand, st: Storage, why: str, pools: PoolNodes) -> str:
    cache = st.cache_of.get(d.model)
    fit = f"{d.count_key} and nodeCount such that every reader of these weights fits on one node of pool {pools.pool}"
    if st.multi_node is False:
        return (f"model {d.model}: its weight cache {cache} is on storageClass "
                f"{st.storage_class or '(the cluster default)'}, whose volumes one node mounts at a time, but {why}. "
                f"Way out: a storageClass several nodes can mount (ReadWriteMany: EFS, FSx for Lustre, NFS, CephFS) "
                f"and serving.storageMultiNode: true, or {fit}")
    return (f"model {d.model}: its weight cache {cache} exists with spec.accessModes [{RWO}], which one node mounts "
            f"at a time and which an existing claim keeps (changing it replaces the claim and its weights), but "
            f"{why}. Allowed: every reader of {cache} on that one node. Way out: {fit}; or, on a storageClass several "
            f"nodes can mount (serving.storageMultiNode: true), delete claim {cache} in the serving namespace and run "
            f"`pulumi refresh` then `up`, which creates it {RWX} (the weights download once more)")


def not_binding(pool: str, source: str) -> str:
    return named(W_NOT_BINDING, f"nodePool {pool}: its node names are not known ({source}), so its models' pods are "
                 "not pinned to the nodes the plan packed them on and the kube-scheduler may spread them so that a "
                 "model the plan admitted stays Pending; list the pool's nodes (nodePools[" + pool + "].nodes) or "
                 "plan against the cluster (cluster.mode: kubeconfig)")
