"""What the kube-scheduler may do with the pods a render describes: a bound over every placement, and runs.

Why a checker of our own in the mock tier: the real scheduler runs in tests/cluster (another tier); these
tests must say, from the rendered objects alone, whether ANY placement the pods' constraints allow can
overflow a node or leave a pod Pending. Two checks, both over the rendered manifests:

- `overflows`: for each node, the sum over workloads allowed there (node selector, taints, required node
  affinity) of (the most pods of it the constraints allow on that node × one pod's requests) against the node's
  allocatable. The most pods: all of them without a spread constraint; with `maxSkew` s over k hostname
  domains (nodeAffinityPolicy Honor: the nodes its affinity and selector allow), floor((P + s(k-1)) / k) —
  a pod goes only where its count is at most the minimum + s - 1, so no node can get further ahead.
- `schedule`: a scheduler's run — each pod, in a random order, onto a random node among those passing the
  filters the default profile applies to these fields (NodeResourcesFit, NodeAffinity incl. nodeSelector,
  TaintToleration, PodTopologySpread); or, smallest pods first, onto the least allocated one (the default
  scoring's spreading, in the order that lost in the issue's trial). Returns the pods left Pending.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tkf_infra import names
from tkf_infra.config.quantity import mebibytes, millicores
from tkf_infra.plan.admission import tolerated

RESOURCES = ("cpu", "memory", names.GPU_RESOURCE)


@dataclass(frozen=True)
class Node:
    name: str
    labels: Mapping[str, str]
    taints: tuple[Mapping[str, str], ...]
    allocatable: Mapping[str, int]
    """cpu in millicores, memory in MiB, GPUs."""


def node(name: str, labels: Mapping[str, str], taints: Sequence[Mapping[str, str]] = (), cpu: str = "191450m",
         memory: str = "2095697Mi", gpus: int = 8) -> Node:
    return Node(name, {**labels, names.HOSTNAME_LABEL: name}, tuple(taints),
                {"cpu": millicores(cpu), "memory": mebibytes(memory), names.GPU_RESOURCE: gpus})


@dataclass
class Workload:
    """Pods of one workload object sharing one template (an LWS's leaders and its workers are two)."""

    name: str
    pods: int
    spec: Mapping[str, Any]
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def ask(self) -> dict[str, int]:
        def requests(c: Mapping[str, Any]) -> dict[str, int]:
            r = (c.get("resources") or {}).get("requests") or {}
            return {"cpu": millicores(r.get("cpu", 0)), "memory": mebibytes(r.get("memory", 0)),
                    names.GPU_RESOURCE: int(r.get(names.GPU_RESOURCE, 0))}

        main = [requests(c) for c in self.spec.get("containers") or []]
        init = [requests(c) for c in self.spec.get("initContainers") or []]
        return {k: max(sum(m[k] for m in main), max((i[k] for i in init), default=0)) for k in RESOURCES}

    def allowed(self, n: Node) -> bool:
        """NodeAffinity (nodeSelector and required terms: matchFields metadata.name, matchExpressions In) and
        TaintToleration."""
        if any(n.labels.get(k) != v for k, v in (self.spec.get("nodeSelector") or {}).items()):
            return False
        if not all(tolerated(t, self.spec.get("tolerations") or []) for t in n.taints):
            return False
        required = (((self.spec.get("affinity") or {}).get("nodeAffinity") or {})
                    .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
        terms = required.get("nodeSelectorTerms") or []
        return not terms or any(_term(t, n) for t in terms)

    def spreads(self) -> list[Mapping[str, Any]]:
        return [c for c in self.spec.get("topologySpreadConstraints") or []
                if c.get("whenUnsatisfiable") == "DoNotSchedule"]


def _term(term: Mapping[str, Any], n: Node) -> bool:
    for r in term.get("matchFields") or []:
        # The API server's rule (ValidateNodeFieldSelectorRequirement): a node field selector has one value.
        assert len(r.get("values", [])) == 1, f"a metadata.name field selector with {r.get('values')}: refused"
        if r.get("key") != "metadata.name" or r.get("operator") != "In" or n.name not in r.get("values", []):
            return False
    for r in term.get("matchExpressions") or []:
        if r.get("operator") != "In" or n.labels.get(r.get("key", "")) not in r.get("values", []):
            return False
    return True


def workloads(manifests: Iterable[Mapping[str, Any]]) -> list[Workload]:
    """The pods of every Deployment, LeaderWorkerSet, LLMInferenceService and Job (autoscaled: the maximum)."""
    out: list[Workload] = []
    for m in manifests:
        kind, meta, spec = m.get("kind"), m.get("metadata") or {}, m.get("spec") or {}
        name = f"{kind}/{meta.get('name')}"
        ann = meta.get("annotations") or {}
        if kind == "Deployment":
            tmpl = spec["template"]
            count = int(spec.get("replicas") or ann.get(names.MAX_REPLICAS_ANNOTATION, 1))
            out.append(Workload(name, count, tmpl["spec"], (tmpl.get("metadata") or {}).get("labels") or {}))
        elif kind == "LeaderWorkerSet":
            lwt, groups = spec["leaderWorkerTemplate"], int(spec.get("replicas", 1))
            for part, count in (("leaderTemplate", groups), ("workerTemplate", groups * (int(lwt["size"]) - 1))):
                tmpl = lwt[part]
                out.append(Workload(f"{name}/{part}", count, tmpl["spec"],
                                    (tmpl.get("metadata") or {}).get("labels") or {}))
        elif kind == "LLMInferenceService":
            groups = int(spec.get("replicas") or (spec.get("scaling") or {}).get("maxReplicas") or 1)
            size = int((spec.get("parallelism") or {}).get("pipeline", 1)) if "worker" in spec else 1
            out.append(Workload(f"{name}/template", groups, spec["template"], spec.get("labels") or {}))
            if "worker" in spec:
                out.append(Workload(f"{name}/worker", groups * (size - 1), spec["worker"], spec.get("labels") or {}))
        elif kind == "Job":
            tmpl = spec["template"]
            out.append(Workload(name, 1, tmpl["spec"], (tmpl.get("metadata") or {}).get("labels") or {}))
    return out


def _selected(c: Mapping[str, Any], w: Workload) -> bool:
    match = (c.get("labelSelector") or {}).get("matchLabels") or {}
    return all(w.labels.get(k) == v for k, v in match.items())


def overflows(ws: Sequence[Workload], nodes: Sequence[Node]) -> list[str]:
    """Nodes some allowed placement overflows, with the workloads that could take them there.

    The workloads one spread constraint counts together (an LWS's leaders and workers) share its bound, at the
    larger of their asks."""
    problems = []
    for n in nodes:
        total = dict.fromkeys(RESOURCES, 0)
        who = []
        seen: set[str] = set()
        for w in ws:
            if not w.pods or not w.allowed(n) or w.name in seen:
                continue
            group, most = [w], w.pods
            for c in w.spreads():
                counted = [v for v in ws if _selected(c, v) and v.pods]  # the pods this constraint counts
                pods = sum(v.pods for v in counted)
                k = sum(1 for m in nodes if w.allowed(m))
                bound = (pods + int(c["maxSkew"]) * (k - 1)) // k
                if bound < most or len(counted) > len(group):
                    group, most = counted, min(bound, pods)
            seen |= {v.name for v in group}
            ask = {r: max(v.ask[r] for v in group) for r in RESOURCES}
            for r in RESOURCES:
                total[r] += most * ask[r]
            who.append(f"{'+'.join(v.name for v in group)} x{most}")
        over = [r for r in RESOURCES if total[r] > n.allocatable[r]]
        if over:
            problems.append(f"{n.name}: {', '.join(f'{r} {total[r]} > {n.allocatable[r]}' for r in over)} "
                            f"({', '.join(who)})")
    return problems


def schedule(ws: Sequence[Workload], nodes: Sequence[Node], seed: int | None) -> list[str]:
    """One scheduler run; the pods left Pending. `seed` None: the issue's losing order (the smallest pods first,
    as their downloads finish first), each onto the least allocated node (the default scoring)."""
    rng = random.Random(seed)
    free = {n.name: dict(n.allocatable) for n in nodes}
    placed: dict[str, dict[str, int]] = {n.name: {} for n in nodes}  # node → workload → pods
    asks = {w.name: w.ask for w in ws}
    allowed = {w.name: [n for n in nodes if w.allowed(n)] for w in ws}
    # Per constraint: the workloads it counts, its domains (nodeAffinityPolicy Honor; nodeTaintsPolicy Ignore:
    # taints aside) and maxSkew.
    spreads = {w.name: [([v.name for v in ws if _selected(c, v)], allowed[w.name], int(c["maxSkew"]))
                        for c in w.spreads()] for w in ws}
    pods = sorted((w for w in ws for _ in range(w.pods)), key=lambda w: (asks[w.name][names.GPU_RESOURCE], w.name))
    if seed is not None:
        rng.shuffle(pods)
    pending = []
    for w in pods:
        ask = asks[w.name]
        ok = [n for n in allowed[w.name] if all(ask[r] <= free[n.name][r] for r in RESOURCES)
              and all(_skew_ok(group, domains, skew, n, placed) for group, domains, skew in spreads[w.name])]
        if not ok:
            pending.append(w.name)
            continue
        pick = (rng.choice(ok) if seed is not None else
                max(ok, key=lambda n: (free[n.name][names.GPU_RESOURCE], free[n.name]["cpu"], n.name)))
        for r in RESOURCES:
            free[pick.name][r] -= ask[r]
        placed[pick.name][w.name] = placed[pick.name].get(w.name, 0) + 1
    return pending


def _skew_ok(group: Sequence[str], domains: Sequence[Node], skew: int, n: Node,
             placed: Mapping[str, Mapping[str, int]]) -> bool:
    counts = {m.name: sum(placed[m.name].get(g, 0) for g in group) for m in domains}
    return counts[n.name] + 1 - min(counts.values(), default=0) <= skew


def binding(ws: Sequence[Workload], nodes: Sequence[Node], runs: int = 60) -> list[str]:
    """Every problem: overflows, then the Pending pods of `runs` random orders and the least-allocated run."""
    problems = overflows(ws, nodes)
    for seed in [None, *range(runs)]:
        if left := schedule(ws, nodes, seed):
            problems.append(f"run {seed}: {len(left)} pod(s) Pending: {sorted(set(left))}")
    return problems

