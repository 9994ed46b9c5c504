"""A weight cache's access mode: chosen once, when its claim is created, and never flipped by an edit.

Why: `spec.accessModes` of a PersistentVolumeClaim cannot change (the API server refuses it: the spec is
immutable after creation), so the Kubernetes provider plans a REPLACE of the claim under the same name
(pulumi-kubernetes `provider/pkg/provider/diff.go`, the claim's force-new fields `.spec.accessModes`,
`.spec.storageClassName`, `.spec.selector`, `.spec.volumeName`). A replaced weight cache fails `up` under
`serving.protect`, collides with the retained claim of the same name by default, or, under
`serving.pruneWeightCache`, deletes the weights and downloads them again. A cache used to turn ReadWriteMany
the day a second model or replica read it: a routine catalog edit did that.

The rule, per cache (`cache_modes`):

1. A claim that exists keeps the mode it has: read live from the cluster in kubeconfig mode (`LivePvc`, the
   cluster's word, so a claim deleted by hand is a new one), else from the last run's published
   `endpoints[…].footprint.weightCacheAccess` (render mode, or storage not readable), else, for a stack last
   run before that key existed, recomputed from the last `deployed` output by the rule that chose it then
   (`legacy_modes`).
2. A new claim takes its mode from facts a catalog edit does not change: a class several nodes mount
   (`serving.storageMultiNode: true`, or a shared file system's provisioner read live) is ReadWriteMany from
   the start, whatever its readers; a class one node mounts is ReadWriteOnce.
3. Only where the class is not known do the readers decide a new claim (ReadWriteMany when several pods read
   it, else ReadWriteOnce: a block class would leave a ReadWriteMany claim Pending), and rule 1 keeps it.

A ReadWriteOnce claim is one node's: its readers are packed on the node that holds it (`one_node`, the node
from its readers' last pins: `homes`), as `tkf_infra.plan.pins` does for a class one node mounts, and a reader
that cannot be — a multi-node model, or no room left there — is refused at stage `storage` by name, saying
the field and the way out. Packing rather than refusing: adding a replica or a model that fits beside the
cache is the routine edit this is about, and it must go through; a refusal is only for what cannot run.
The component also tells the engine to ignore `spec.accessModes` on an existing claim
(`components.weight_cache`), so that even a mode this plan could not know (no live read, no published key)
never plans a replace.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from tkf_infra.names import weight_cache
from tkf_infra.plan.admission import ClusterState
from tkf_infra.plan.model_plan import ModelPlan

RWO, RWX = "ReadWriteOnce", "ReadWriteMany"
#: The footprint key each endpoint publishes its cache's mode under (rule 1's memory in render mode).
ACCESS_KEY = "weightCacheAccess"


def claim_mode(access_modes: Iterable[str]) -> str:
    """A claim's `spec.accessModes` as the plan uses it: ReadWriteMany when several nodes may mount it."""
    return RWX if RWX in access_modes else RWO


def published_modes(endpoints: Any) -> dict[str, str]:
    """Cache (PVC name) → its mode, from the last run's `endpoints` output (anything unreadable: not known)."""
    out: dict[str, str] = {}
    for ep in endpoints.values() if isinstance(endpoints, Mapping) else ():
        fp = ep.get("footprint") if isinstance(ep, Mapping) else None
        if isinstance(fp, Mapping) and isinstance(fp.get("weightCache"), str) and fp.get(ACCESS_KEY) in (RWO, RWX):
            out[fp["weightCache"]] = fp[ACCESS_KEY]
    return out


def legacy_modes(deployed: Any, multi_node: bool | None) -> dict[str, str]:
    """Cache → the mode the rule before `weightCacheAccess` chose, from the last `deployed` entries: ReadWriteMany
    when the class was not one node's and its readers were several models, replicas or nodes."""
    readers: dict[str, list[Mapping[str, Any]]] = {}
    for entry in deployed.values() if isinstance(deployed, Mapping) else ():
        if isinstance(entry, Mapping) and isinstance(entry.get("repo"), str) and isinstance(entry.get("revision"), str):
            readers.setdefault(weight_cache(entry["repo"], entry["revision"]), []).append(entry)

    def pods(e: Mapping[str, Any]) -> float:
        scaling = e.get("scaling")
        reps = scaling.get("maxReplicas", 1) if isinstance(scaling, Mapping) else e.get("replicas", 1)
        count = e.get("nodeCount", 1)
        return (reps if isinstance(reps, int | float) else 1) * (count if isinstance(count, int | float) else 1)

    return {cache: RWX if multi_node is not False and (len(es) > 1 or any(pods(e) > 1 for e in es)) else RWO
            for cache, es in readers.items()}


def existing_modes(cluster: ClusterState | None, published: Mapping[str, str],
                   legacy: Mapping[str, str]) -> dict[str, str]:
    """Cache → the mode its claim has (rule 1): the live claims when the cluster's storage was read, else what
    the last run published, else the legacy rule's."""
    if cluster is not None and cluster.storage_error is None:
        return {name: claim_mode(pvc.access_modes) for name, pvc in cluster.pvcs.items()}
    return {**legacy, **published}


def needs_many(readers: Iterable[ModelPlan]) -> bool:
    """Whether pods on several nodes may read one cache: several models, replicas or nodes per replica."""
    rs = list(readers)
    return len(rs) > 1 or any(m.entry.reserved_replicas > 1 or m.entry.is_multi_node for m in rs)


def cache_modes(models: Iterable[ModelPlan], multi_node: bool | None, existing: Mapping[str, str]) -> dict[str, str]:
    """Cache (PVC name) → the access mode its claim is written with (the module docstring's three rules)."""
    by_cache: dict[str, list[ModelPlan]] = {}
    for m in models:
        by_cache.setdefault(weight_cache(m.entry.repo, m.entry.revision), []).append(m)

    def mode(cache: str, users: list[ModelPlan]) -> str:
        if cache in existing:
            return existing[cache]
        if multi_node is not None:
            return RWX if multi_node else RWO
        return RWX if needs_many(users) else RWO

    return {cache: mode(cache, users) for cache, users in by_cache.items()}


def one_node(existing: Mapping[str, str]) -> frozenset[str]:
    """The caches whose claims exist ReadWriteOnce: their readers are packed on one node."""
    return frozenset(c for c, mode in existing.items() if mode == RWO)


def homes(models: Iterable[ModelPlan], caches: frozenset[str], pinned: Mapping[str, tuple[str, ...]],
          usable: Collection[str]) -> dict[str, str]:
    """ReadWriteOnce cache → the node that holds it: the one node a reader of it was pinned to by the last run
    (`pinned`: model → its last pin's nodes; the first such reader in admission order). A cache with no such
    reader has none, nor one whose node is no longer `usable` (lost, not Ready, cordoned): its first reader's
    node becomes its node while packing, so the readers move together (a network volume attaches there once
    the old node lets go of it; a node-local one cannot follow, and never could)."""
    out: dict[str, str] = {}
    for m in models:
        cache = weight_cache(m.entry.repo, m.entry.revision)
        nodes = pinned.get(m.entry.name, ())
        if cache in caches and cache not in out and len(nodes) == 1 and nodes[0] in usable:
            out[cache] = nodes[0]
    return out
