"""Simulated nodes for the cluster tier: Nodes shaped like a stack's node pool, kwok's to run, and what
the GPU Operator would make each advertise.

A pool's nodes carry what the plan selects them by and what it expects them to carry
(``tkf_infra.plan.pools.resolve_pool``: the pool's labels and taints, GPU feature discovery's product
label, ``-SHARED`` on a time-sliced pool, the NVIDIA taint on a GPU pool), kubelet's own labels, and an
allocatable of the pool's ``nodeResources`` (CPU, memory, pods) and its GPUs: ``nvidia.com/gpu`` = GPUs
per node x time-slicing replicas, as the device plugin advertises it. The MIG slices of a node depend on
the layout the plan labels it with (``nvidia.com/mig.config``), so :class:`DevicePlugin` follows that
label as mig-manager and the device plugin (mixed strategy) do.

Node health is kwok's: :func:`mark_not_ready` makes kwok's stage report the node NotReady (the
node-lifecycle controller then taints it, and taint eviction moves its pods after
``harness.NOT_READY_TOLERATION_S``); :func:`mark_ready` ends that.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.cluster.sync_loop import SyncLoop
from tests.kube.client import KubeAPIError, KubeClient, Obj
from tkf_infra import names
from tkf_infra.config.node_pool import NodePool
from tkf_infra.plan.pools import resolve_pool

#: The label kwok manages Nodes by (``--manage-nodes-with-label-selector``).
KWOK_LABEL = ("kwok.x-k8s.io/node", "fake")
#: kwok's own mark for its node-not-ready stage (tests/cluster/stages/node-not-ready.yaml).
NOT_READY_LABEL = "node-not-ready.stage.kwok.x-k8s.io"
#: GPU feature discovery's labels the device plugin stand-in reads and writes.
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
GPU_REPLICAS_LABEL = "nvidia.com/gpu.replicas"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
#: What a node of a pool without ``nodeResources`` gives pods.
DEFAULT_ALLOCATABLE = {"cpu": "64", "memory": "512Gi", "pods": "110", "ephemeral-storage": "1Ti"}


def pool_nodes(pool: Mapping[str, Any] | NodePool, *, time_slices: int = 0, mig_strategy: str = "none",
               names_: Iterable[str] | None = None, extra_labels: Mapping[str, str] | None = None) -> list[Obj]:
    """The Node objects of a stack's node pool (a ``tkf-infra:nodePools`` entry, as in the stack file):
    ``nodeCount`` of them, named after ``nodes`` when the pool lists them (else ``<pool>-<i>``).
    ``time_slices``/``mig_strategy``: the stack's ``platform.gpuOperator`` settings of those names."""
    p = pool if isinstance(pool, NodePool) else NodePool.model_validate(dict(pool))
    facts = resolve_pool(p, {}, time_slices > 1, mig_strategy=mig_strategy, time_slices=time_slices)
    node_names = list(names_ or p.nodes or [f"{p.name}-{i}" for i in range(p.node_count)])
    room = dict(DEFAULT_ALLOCATABLE)
    if r := p.node_resources:
        room.update(cpu=str(r.cpu), memory=str(r.memory))
        room.update({k: str(v) for k, v in (("pods", r.pods), ("ephemeral-storage", r.ephemeral_storage)) if v})
    gpu_labels: dict[str, str] = {}
    if facts.gpus_per_node:
        room[names.GPU_RESOURCE] = str(facts.gpus_per_node * max(1, facts.time_slices))
        gpu_labels = {GPU_COUNT_LABEL: str(facts.gpus_per_node), "nvidia.com/gpu.present": "true"}
        if facts.time_slices:
            gpu_labels[GPU_REPLICAS_LABEL] = str(facts.time_slices)
    return [{
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            **facts.node_labels, **facts.node_selector, **gpu_labels, **(extra_labels or {}),
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            KWOK_LABEL[0]: KWOK_LABEL[1]}},
        "spec": {"taints": [dict(t) for t in facts.taints]} if facts.taints else {},
        "status": {"allocatable": dict(room), "capacity": dict(room)},
    } for name in node_names]


def create_nodes(kube: KubeClient, nodes: Iterable[Obj], *, timeout: float = 90.0) -> list[str]:
    """Create the Nodes and wait until each is Ready and no longer carries the not-ready taint the API
    gives a new node (the node-lifecycle controller removes it once kwok reports the node Ready)."""
    created = [kube.create(n)["metadata"]["name"] for n in nodes]
    kube.wait_for(lambda: all(schedulable(kube, name) for name in created), f"nodes {created} Ready and untainted",
                  timeout, 0.5)
    return created


def node_ready(node: Obj) -> str:
    """The Ready condition's status: True, False or Unknown (no condition yet: Unknown)."""
    conds = (node.get("status") or {}).get("conditions") or []
    return next((str(c["status"]) for c in conds if c.get("type") == "Ready"), "Unknown")


def schedulable(kube: KubeClient, name: str) -> bool:
    node = kube.get("v1", "Node", name)
    taints = {t["key"] for t in (node or {}).get("spec", {}).get("taints") or []}
    return node is not None and node_ready(node) == "True" and not any(
        k.startswith("node.kubernetes.io/") for k in taints)


def _label(kube: KubeClient, name: str, labels: Mapping[str, str | None]) -> None:
    kube.request("PATCH", f"/api/v1/nodes/{name}", json={"metadata": {"labels": dict(labels)}},
                 headers={"Content-Type": "application/merge-patch+json"})


def mark_not_ready(kube: KubeClient, name: str, *, timeout: float = 60.0) -> None:
    """The node's kubelet reports NotReady (kwok's stage); returns once the node-lifecycle controller
    has tainted it ``node.kubernetes.io/not-ready``."""
    _label(kube, name, {NOT_READY_LABEL: "true"})

    def tainted() -> bool:
        node = kube.get("v1", "Node", name) or {}
        return "node.kubernetes.io/not-ready" in {t["key"] for t in node.get("spec", {}).get("taints") or []}

    kube.wait_for(tainted, f"node {name} NotReady and tainted by the node-lifecycle controller", timeout, 0.5)


def mark_ready(kube: KubeClient, name: str, *, timeout: float = 60.0) -> None:
    """Undo :func:`mark_not_ready`: the node is Ready again and its not-ready taints are gone."""
    _label(kube, name, {NOT_READY_LABEL: None})
    kube.wait_for(lambda: schedulable(kube, name), f"node {name} Ready again", timeout, 0.5)


# ------------------------------------------------------------------------------------------------
# MIG: mig-manager and the device plugin (mixed strategy), for the layout the plan labels
# ------------------------------------------------------------------------------------------------


def mig_resources(spec: Sequence[Mapping[str, Any]], gpus: int) -> dict[str, int]:
    """What the device plugin (mixed strategy) advertises for one node's mig-parted config: each MIG
    instance as ``nvidia.com/mig-<profile>``, each GPU with MIG off as ``nvidia.com/gpu``."""
    out: dict[str, int] = {}
    mig_gpus = 0
    for group in spec:
        devices = range(gpus) if group.get("devices") == "all" else list(group.get("devices") or [])
        if not group.get("mig-enabled"):
            continue
        mig_gpus += len(devices)
        for profile, count in (group.get("mig-devices") or {}).items():
            key = names.MIG_RESOURCE_PREFIX + profile
            out[key] = out.get(key, 0) + int(count) * len(devices)
    out[names.GPU_RESOURCE] = gpus - mig_gpus
    return out


class DevicePlugin(SyncLoop):
    """Every second: each kwok node with an ``nvidia.com/mig.config`` label gets the resources of that
    config (from the mig-parted ConfigMap ``names.MIG_CONFIG_NAME``, any namespace), its stale MIG
    resources removed and ``nvidia.com/mig.config.state=success``; a node whose label names no config
    it can find waits (``pending``), as mig-manager does. Errors stop the loop and are kept in ``error``."""

    def __init__(self, kubeconfig: Path, interval: float = 1.0) -> None:
        super().__init__(kubeconfig, interval, "device-plugin")

    def sync(self, kube: KubeClient) -> None:
        configs: dict[str, Any] = {}
        by_name = {"fieldSelector": f"metadata.name={names.MIG_CONFIG_NAME}"}
        for cm in kube.request("GET", "/api/v1/configmaps", params=by_name)["items"]:
            doc = yaml.safe_load((cm.get("data") or {}).get(names.MIG_CONFIG_KEY) or "{}") or {}
            configs.update(doc.get("mig-configs") or {})
        for node in kube.list_objects("v1", "Node", label_selector=f"{KWOK_LABEL[0]}={KWOK_LABEL[1]}"):
            labels = node["metadata"].get("labels") or {}
            config = labels.get(names.MIG_CONFIG_LABEL)
            if config is None or GPU_COUNT_LABEL not in labels:
                continue
            spec = [] if config == "all-disabled" else configs.get(config)
            if spec is None:
                self._set_state(kube, node, "pending")
                continue
            want = mig_resources(spec, int(labels[GPU_COUNT_LABEL]))
            have = node["status"].get("allocatable") or {}
            patch: dict[str, Any] = {k: None for k in have if k.startswith(names.MIG_RESOURCE_PREFIX) and k not in want}
            patch.update({k: str(v) for k, v in want.items() if have.get(k) != str(v)})
            if patch:
                kube.request("PATCH", f"/api/v1/nodes/{node['metadata']['name']}/status",
                             json={"status": {"allocatable": patch, "capacity": patch}},
                             headers={"Content-Type": "application/merge-patch+json"})
            self._set_state(kube, node, "success")

    @staticmethod
    def _set_state(kube: KubeClient, node: Obj, state: str) -> None:
        if (node["metadata"].get("labels") or {}).get(MIG_STATE_LABEL) != state:
            with contextlib.suppress(KubeAPIError):  # deleted meanwhile
                _label(kube, node["metadata"]["name"], {MIG_STATE_LABEL: state})
