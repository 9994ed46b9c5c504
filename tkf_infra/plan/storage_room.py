"""Storage admission: every weight cache against the room its storage class has left (issue 26).

Why here, before any resource: a weight cache the storage class cannot provision previews clean and
then hangs after `up` as a Pending PVC. The limits come from the cluster (CSIStorageCapacity of the
class, storage ResourceQuotas in the serving namespace) or, where no API says, the stack's
`serving.weightCacheBudgetGiB`; caches are admitted in the order they are handed (admission order
of their first model: deployed, priority, catalog), one cache per repo@revision; an existing PVC
costs only its growth against a quota and nothing against provisioned capacity once bound; a cache
that overflows refuses every model it serves, and existing caches are never deleted or shrunk.
The shapes the edge reads (`ClusterState`, `LivePvc`) and the warning codes live in
`tkf_infra.plan.admission` with the rest of the table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tkf_infra.plan.admission import (
    W_CACHE_CLASS_KEPT,
    W_STORAGE_NOT_LIVE,
    W_STORAGE_UNCHECKED,
    W_STORAGE_UNREAD,
    ClusterState,
    LivePvc,
    named,
)


@dataclass(frozen=True)
class StorageLimit:
    """One limit on what the caches may still claim: its name, GiB left, and how an existing PVC counts."""

    name: str
    free_gib: float
    counts_existing_request: bool
    """True for quotas (an existing PVC's request is already in `used`); False for provisioned capacity
    (only a bound PVC has taken it)."""
    max_volume_gib: float | None = None


@dataclass(frozen=True)
class Cache:
    name: str
    ref: str
    gib: int
    models: tuple[str, ...]


def new_claims_class(state: ClusterState | None, storage_class: str | None) -> str | None:
    """The StorageClass a new weight cache's claim gets: `serving.storageClass`, else the cluster's default
    (None when neither is known: the API server then picks, if it has a default at all)."""
    return storage_class or (state.default_storage_class if state else None)


def storage_limits(state: ClusterState | None, storage_class: str | None,
                   budget_gib: float | None) -> tuple[list[StorageLimit], list[str], str]:
    """Limits from the cluster (CSIStorageCapacity, quotas) or the budget setting, warnings, the class named."""
    warnings: list[str] = []
    klass = new_claims_class(state, storage_class)
    shown = klass or "the cluster's default StorageClass"
    limits: list[StorageLimit] = []
    if state is not None and state.storage_error is None:
        caps = [c for c in state.capacities if c.storage_class == klass]
        if caps:
            total = sum(c.capacity_gib or 0 for c in caps)
            biggest = max((c.maximum_volume_gib if c.maximum_volume_gib is not None else c.capacity_gib or 0)
                          for c in caps)
            limits.append(StorageLimit(f"CSIStorageCapacity of {shown} ({len(caps)} segment(s), {total:.0f} GiB)",
                                       total, False, biggest))
        for q in state.quotas:
            if q.resource == "requests.storage" or (klass and q.resource ==
                                                    f"{klass}.storageclass.storage.k8s.io/requests.storage"):
                limits.append(StorageLimit(f"ResourceQuota {q.quota} {q.resource} ({q.used_gib:.0f} of "
                                           f"{q.hard_gib:.0f} GiB used)", q.hard_gib - q.used_gib, True))
    elif state is not None:
        warnings.append(named(W_STORAGE_UNREAD, f"storage: {state.storage_error}; the weight caches are checked "
                              "against serving.weightCacheBudgetGiB only" if budget_gib else
                              f"storage: {state.storage_error}; the weight caches were not checked against "
                              f"{shown} (set serving.weightCacheBudgetGiB to check them offline)"))
    if not limits and budget_gib is not None:
        limits.append(StorageLimit(f"serving.weightCacheBudgetGiB ({budget_gib:g} GiB)", budget_gib, True))
        if state is None:
            warnings.append(named(W_STORAGE_NOT_LIVE, f"storage: the room on {shown} was not read live (render "
                                  f"mode); the weight caches are checked against serving.weightCacheBudgetGiB "
                                  f"({budget_gib:g} GiB)"))
        elif state.storage_error is None:
            warnings.append(named(W_STORAGE_NOT_LIVE, f"storage: {state.source} has no CSIStorageCapacity for "
                                  f"{shown} and no storage ResourceQuota in the serving namespace; the weight caches "
                                  f"are checked against serving.weightCacheBudgetGiB ({budget_gib:g} GiB)"))
    elif not limits and (state is None or state.storage_error is None):
        where = (f"no CSIStorageCapacity for {shown} and no storage ResourceQuota in the serving namespace "
                 f"({state.source})" if state else "render mode reads no cluster")
        warnings.append(named(W_STORAGE_UNCHECKED, f"storage: nothing says how much room {shown} has left ({where});"
                              " the weight caches were not checked: set serving.weightCacheBudgetGiB"))
    return limits, warnings, shown


def admit_storage(caches: Sequence[Cache], limits: Sequence[StorageLimit], existing: Mapping[str, LivePvc],
                  shown: str) -> dict[str, str]:
    """Model → refusal, caches admitted in the given order (admission order of their first model)."""
    free = {lim.name: lim.free_gib for lim in limits}
    claimed = 0.0
    refused: dict[str, str] = {}
    for c in caches:
        old = existing.get(c.name)
        costs = {}
        for lim in limits:
            if old is None:
                costs[lim.name] = float(c.gib)
            elif lim.counts_existing_request:
                costs[lim.name] = max(0.0, c.gib - old.request_gib)
            else:
                costs[lim.name] = max(0.0, c.gib - old.request_gib) if old.bound else float(c.gib)
        over = [f"{lim.name}: {max(free[lim.name], 0):.0f} GiB left, overflows by "
                f"{costs[lim.name] - max(free[lim.name], 0):.0f} GiB" for lim in limits
                if costs[lim.name] > free[lim.name] + 1e-9]
        over += [f"{lim.name}: the largest volume it can provision is {lim.max_volume_gib:.0f} GiB"
                 for lim in limits if old is None and lim.max_volume_gib is not None and c.gib > lim.max_volume_gib]
        if over:
            shared = f", shared by {', '.join(c.models)}" if len(c.models) > 1 else ""
            for m in c.models:
                refused[m] = (f"model {m}: its weight cache {c.name} ({c.gib} GiB for {c.ref}{shared}) does not fit "
                              f"on {shown} after the {claimed:.0f} GiB the caches admitted before it claim (deployed "
                              "models first, then priority, then catalog order): "
                              f"{'; '.join(over)}. Way out: free room on the storage class or raise the quota, set "
                              "serving.storageClass to a class with room, lower serving.weightCacheHeadroom, or drop "
                              "a model; existing caches are never deleted or shrunk to make room")
            continue
        for lim in limits:
            free[lim.name] -= costs[lim.name]
        claimed += max(costs.values(), default=float(c.gib))
    return refused


def classes_kept(caches: Sequence[Cache], existing: Mapping[str, LivePvc], state: ClusterState | None,
                 storage_class: str | None, namespace: str) -> list[str]:
    """A warning per existing cache whose claim is on another class than new claims get (`new_claims_class`).

    Why a warning and not a replace: `.spec.storageClassName` of a claim cannot change, and the Kubernetes provider
    would replace the claim — failing `up` under `serving.protect`, colliding with the retained claim of the same
    name, or downloading the weights again under `serving.pruneWeightCache`. The component has the engine ignore
    the field on an existing claim (`components.weight_cache`), so a class change applies to new caches only; this
    says which caches stay behind and how to move one, since nothing else in the plan would show it.
    """
    klass = new_claims_class(state, storage_class)
    where = ("serving.storageClass" if storage_class is not None else
             "the cluster's default StorageClass (serving.storageClass is unset)")
    out = []
    for c in caches:
        old = existing.get(c.name)
        if old is None or klass is None or old.storage_class == klass:
            continue
        on = f"StorageClass {old.storage_class!r}" if old.storage_class else "no StorageClass"
        out.append(named(W_CACHE_CLASS_KEPT, (
            f"storage: weight cache {c.name} (for {c.ref}, read by {', '.join(c.models)}) stays on {on}: "
            f"{where} is {klass!r} now, and a claim's class cannot change, so existing caches "
            f"keep theirs and only new ones are created on {klass!r}. To move this one: stop its readers, "
            f"`kubectl delete pvc {c.name} -n {namespace}`, then `pulumi up --refresh`, which creates it on "
            f"{klass!r} and downloads the weights once more")))
    return out


#: Provisioners whose volumes one node mounts at a time: block devices (attached to one node) and node-local
#: storage (which lives on one node). Their weight cache serves the pods of one node (tkf_infra/plan/pins.py).
SINGLE_NODE_PROVISIONERS = frozenset({
    "ebs.csi.aws.com", "kubernetes.io/aws-ebs", "pd.csi.storage.gke.io", "kubernetes.io/gce-pd",
    "disk.csi.azure.com", "kubernetes.io/azure-disk", "rancher.io/local-path", "kubernetes.io/no-provisioner",
    "topolvm.io", "openebs.io/local", "local.csi.openebs.io"})
#: Provisioners of shared file systems, which pods on any number of nodes mount (ReadWriteMany).
MULTI_NODE_PROVISIONERS = frozenset({
    "efs.csi.aws.com", "fsx.csi.aws.com", "file.csi.azure.com", "filestore.csi.storage.gke.io", "nfs.csi.k8s.io",
    "cephfs.csi.ceph.com", "rook-ceph.cephfs.csi.ceph.com", "k8s-sigs.io/nfs-subdir-external-provisioner"})


def multi_node_mounts(state: ClusterState | None, storage_class: str | None,
                      setting: bool | None) -> bool | None:
    """Whether pods on several nodes can mount one weight cache: `serving.storageMultiNode`, else what the
    cluster's StorageClass provisioner is known to do, else None (not checked: no pin keeps readers together)."""
    if setting is not None:
        return setting
    klass = new_claims_class(state, storage_class)
    provisioner = state.provisioners.get(klass or "") if state is not None else None
    if provisioner in SINGLE_NODE_PROVISIONERS:
        return False
    if provisioner in MULTI_NODE_PROVISIONERS:
        return True
    return None
