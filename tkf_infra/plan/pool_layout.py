"""A pool's layout as data: each model's demand, the planned GPUs and their instances, the refusals, and the
mig-parted configs and `gpuLayout` output rendered from them.

Apart from the planner (`tkf_infra.plan.layout`) because more modules read a layout than make one: the
time-slicing proof, the node-room refusals, the fleet plan, the GPU-sharing component and the outputs need
these types and renderings, not the packer.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tkf_infra.sizing.mig import MigProfile

#: The mig-parted config every custom ConfigMap must keep: the operator's default `migManager.config.default`.
ALL_DISABLED = "all-disabled"


@dataclass(frozen=True)
class Demand:
    """One model's ask on a MIG pool: `replicas` x (one instance of `profile`, or `gpus` whole GPUs)."""

    model: str
    replicas: int
    profile: MigProfile | None = None
    gpus: int = 1
    cpu_millis: int = 0
    """CPU and memory one replica's pod requests, held against its node's room when rooms are given."""
    memory_mib: int = 0
    priority: int = 0
    """The catalog's `priority`: higher is admitted first, so an overfull pool refuses the lowest."""
    held: bool = False
    """Deployed by the last run: admitted before any new model, so a new entry cannot push it out."""


@dataclass(frozen=True)
class Instance:
    model: str
    replica: int
    profile: str
    start: int
    slices: int
    compute: int


@dataclass(frozen=True)
class Card:
    """One physical GPU of a node as planned: whole for one model, MIG instances, or unused (MIG off)."""

    node: str
    index: int
    whole: str | None = None
    instances: tuple[Instance, ...] = ()

    def geometry(self) -> dict[str, int]:
        return dict(sorted(Counter(i.profile for i in self.instances).items()))


@dataclass(frozen=True)
class PoolLayout:
    """A pool's plan: MIG cards, or the time-slicing proof; and every model refused with why."""

    pool: str
    kind: str
    """"mig" or "time-slicing"."""
    gpu: str
    cards: tuple[Card, ...] = ()
    refused: dict[str, str] = field(default_factory=dict)
    proof: str = ""
    short_of_room: frozenset[str] = frozenset()
    """Refused models whose GPUs would fit but no node with them has CPU or memory left (stage `capacity`)."""
    warnings: tuple[str, ...] = ()
    """What the fleet plan should warn about this layout: a last layout unreadable or not kept (`mig_sticky`)."""

    def node_configs(self) -> dict[str, str]:
        """Node name → mig-parted config name (equal geometries share one config; the name is its digest)."""
        out = {}
        for node in dict.fromkeys(c.node for c in self.cards):
            spec = _node_spec([c for c in self.cards if c.node == node])
            digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:8]
            out[node] = f"tkf-{self.pool}-{digest}"
        return out

    def mig_parted_configs(self) -> dict[str, list[dict[str, Any]]]:
        """The mig-parted configs of this pool's nodes (config name → per-GPU specs)."""
        names = self.node_configs()
        return {names[node]: _node_spec([c for c in self.cards if c.node == node]) for node in names}

    def placements(self, model: str) -> list[dict[str, Any]]:
        """Where each replica of `model` lands (MIG pools)."""
        out: list[dict[str, Any]] = []
        for c in self.cards:
            if c.whole == model:
                out.append({"node": c.node, "gpu": c.index, "whole": True})
            out += [{"node": c.node, "gpu": c.index, "profile": i.profile, "start": i.start, "size": i.slices}
                    for i in c.instances if i.model == model]
        return out

    def pod_nodes(self, model: str, gpus_per_pod: int) -> list[str]:
        """The node of each of `model`'s pods, replica by replica (a MIG instance, or `gpus_per_pod` whole GPUs)."""
        instances = sorted((i.replica, c.node) for c in self.cards for i in c.instances if i.model == model)
        wholes = Counter(c.node for c in self.cards if c.whole == model)
        per_pod = max(1, gpus_per_pod)
        return [node for _, node in instances] + [node for node, k in wholes.items() for _ in range(k // per_pod)]

    def published(self) -> dict[str, Any]:
        """The layout as the `gpuLayout` output shows it."""
        if self.kind != "mig":
            return {"kind": self.kind, "gpu": self.gpu, "proof": self.proof, "refused": sorted(self.refused)}
        names = self.node_configs()
        nodes = {node: {"migConfig": names[node], "gpus": [
            {"index": c.index, **({"whole": c.whole} if c.whole else {}),
             **({"mig": c.geometry(), "instances": [{"model": i.model, "replica": i.replica, "profile": i.profile,
                                                     "start": i.start, "size": i.slices} for i in c.instances]}
                if c.instances else {})}
            for c in self.cards if c.node == node]} for node in names}
        return {"kind": "mig", "gpu": self.gpu, "nodes": nodes, "refused": sorted(self.refused)}


def _node_spec(cards: list[Card]) -> list[dict[str, Any]]:
    """mig-parted `MigConfigSpec`s of one node: GPUs with equal geometries grouped by `devices`."""
    groups: dict[str, list[int]] = {}
    for c in sorted(cards, key=lambda c: c.index):
        groups.setdefault(json.dumps(c.geometry(), sort_keys=True), []).append(c.index)
    specs: list[dict[str, Any]] = []
    for key, devices in groups.items():
        geometry = json.loads(key)
        spec: dict[str, Any] = {"devices": devices, "mig-enabled": bool(geometry)}
        if geometry:
            spec["mig-devices"] = geometry
        specs.append(spec)
    return specs
