"""Namespaces of pieces already installed that this program writes into: they must exist on the cluster.

Why: with ``platform.gpuOperator.alreadyInstalled: true`` the program creates no GPU Operator namespace,
yet it still writes the MIG layout's mig-parted ConfigMap there (`components.gpu_sharing`: mig-manager
reads it from its own namespace). When that namespace does not exist, a preview used to say
everything fits and `up` failed on the ConfigMap; in kubeconfig mode the edge now reads whether it
exists (`tkf_infra.live.cluster`, the same reader as the Nodes) and the plan refuses here, before any
resource.

Why per model and not the stack: the ConfigMap (and the ``nvidia.com/mig.config`` node labels beside
it) serve only the models on MIG pools, so only those are refused ("one bad model must not block nine
good ones"). For the others to deploy, nothing may be written into the missing namespace: every
model's workload waits on the sharing objects, and one failed ConfigMap ends the whole `up`. So the
MIG pools are also left out of the layouts (`admit_fleet.admit` lays out only the pools not
`blocked`), which registers no sharing objects at all; a MIG pool that hosts no model gets a warning
saying so. Time-sliced models need nothing here: with the operator already installed, tkf-infra
writes no time-slicing config (that is the chart's values, `components.gpu_operator`, and its owner's).

Render mode reads no cluster and checks nothing; a namespace that could not be read is a named
warning, never a silent pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tkf_infra.config import Catalog
from tkf_infra.names import MIG_CONFIG_NAME
from tkf_infra.plan import admission as adm
from tkf_infra.plan.model_plan import ModelPlan
from tkf_infra.plan.pools import PoolFacts


@dataclass(frozen=True)
class Written:
    """A namespace of a piece already installed that the program writes into, and what it writes there."""

    piece: str
    """The piece's key under `platform` (its `alreadyInstalled` is true)."""
    title: str
    """The piece by name, for the message."""
    setting: str
    """The stack-file key that names the namespace."""
    namespace: str
    objects: str
    """What the program writes there, for the message."""


def written_namespaces(catalog: Catalog) -> tuple[Written, ...]:
    """The namespaces the edge must read (`tkf_infra.live.cluster.read_cluster`): the GPU Operator's when it is
    already installed and a pool is MIG (the layout's ConfigMap goes there)."""
    s = catalog.settings
    if s.platform.gpu_operator.already_installed and any(p.mig for p in catalog.pools):
        return (Written("gpuOperator", "the GPU Operator", "namespaces.gpuOperator", s.namespaces.gpu_operator,
                        f"the MIG layout's mig-parted ConfigMap {MIG_CONFIG_NAME!r}, which the GPU Operator's "
                        "mig-manager reads"),)
    return ()


def absent_reason(w: Written, source: str) -> str:
    """Why a model needing `w` cannot deploy, naming the namespace, the settings and the ways out."""
    return (f"{source} has no namespace {w.namespace!r}, and platform.{w.piece}.alreadyInstalled is true, so tkf-infra "
            f"creates none: it would write {w.objects} into {w.namespace!r} ({w.setting}: {w.namespace}) and `up` "
            f"would fail there; install {w.title} in namespace {w.namespace!r}, set {w.setting} to the "
            f"namespace where it is installed, or remove platform.{w.piece}.alreadyInstalled so tkf-infra installs "
            "it")


def namespace_refusals(models: Sequence[ModelPlan], pools: Mapping[str, PoolFacts], catalog: Catalog,
                       cluster: adm.ClusterState | None) -> tuple[dict[str, tuple[str, str]], frozenset[str],
                                                                  list[str]]:
    """(model → ("topology", reason), MIG pools not to lay out, warnings) for the namespaces that are absent.

    A namespace the edge was not asked about (a ClusterState made by hand) is not checked."""
    if cluster is None:
        return {}, frozenset(), []
    refused: dict[str, tuple[str, str]] = {}
    warnings: list[str] = []
    blocked: set[str] = set()
    for w in written_namespaces(catalog):
        if cluster.namespaces_error is not None:
            warnings.append(adm.named(adm.W_APIS_UNREAD, f"topology: whether namespace {w.namespace!r} "
                                      f"({w.setting}) exists on {cluster.source} could not be read "
                                      f"({cluster.namespaces_error}); the models on MIG pools were not checked "
                                      "against it (let the credentials get namespaces)"))
            continue
        if cluster.namespaces.get(w.namespace, True):
            continue
        mig_pools = {name for name, pf in pools.items() if pf.mig is not None}
        blocked |= mig_pools
        why = absent_reason(w, cluster.source)
        on = {m.entry.name: m.pool.name for m in models if m.pool is not None and m.pool.name in mig_pools}
        for model, pool in on.items():
            refused[model] = ("topology", f"model {model}: on MIG pool {pool}, whose layout cannot be written: {why}")
        # A platform stack plans no models and writes no layout: nothing to say there.
        if (idle := sorted(mig_pools - set(on.values()))) and models:
            warnings.append(adm.named(adm.W_NAMESPACE_ABSENT, f"nodePool {', '.join(idle)}: no MIG layout is "
                                      f"written (no mig-parted ConfigMap, no node labels): {why}"))
    return refused, frozenset(blocked), warnings
