"""The packing bench's reference: the same demand placed by an exact MILP (HiGHS, `highspy`, a dev-only pin).

Why apart from `bench/packing.py`: that module turns the product's plan into figures (`PoolFigures`) and prints
the table; this one only knows those figures and finds the fewest GPUs or nodes that hold them, under the same
MIG rule the layout applies (`tkf_infra.plan.layout.placement`), so the optimum is never judged by rules the
product does not follow.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tkf_infra.plan.layout import placement
from tkf_infra.sizing.mig import MigProfile


@dataclass
class Item:
    """One model's demand on a pool, as the plan sized it."""

    model: str
    replicas: int
    cpu: int
    mem: int
    gpus: int = 0
    """Whole GPUs per pod (0 for a share)."""
    profile: MigProfile | None = None
    sliced: bool = False


@dataclass
class PoolFigures:
    pool: str
    kind: str
    nodes: int
    gpus_per_node: int
    cpu: int
    mem: int
    time_slices: int
    items: list[Item] = field(default_factory=list)
    placed_replicas: int = 0
    refused: list[str] = field(default_factory=list)
    plan_gpus: int = 0
    plan_nodes: int = 0
    split: int = 0
    """MIG-pool replicas whose GPUs the layout put on another node than admission put their CPU/memory."""
    overfull: int = 0
    """MIG-pool nodes whose pods, where the layout put their GPUs, ask more CPU or memory than the node has."""



@dataclass
class Solved:
    value: float | None
    """Best solution found (None: none within the time limit)."""
    bound: float
    optimal: bool
    seconds: float

    def text(self) -> str:
        if math.isinf(self.bound):
            return "infeasible"
        if self.optimal and self.value is not None:
            return f"{round(self.value)}"
        return f">={math.ceil(self.bound - 1e-6)}" + (f" ({round(self.value)})" if self.value is not None else "")


def mig_patterns(profiles: Sequence[MigProfile]) -> list[tuple[MigProfile, ...]]:
    """Every maximal set of instances of these profiles one GPU can carry (the layout's own placement rule)."""
    profiles = sorted(set(profiles), key=lambda p: p.name)
    valid = []
    for size in range(1, 8):
        for combo in itertools.combinations_with_replacement(profiles, size):
            if placement(combo) is not None:
                valid.append(combo)
    def grows(c: tuple[MigProfile, ...]) -> bool:
        return any(placement((*c, p)) is not None for p in profiles)
    return [c for c in valid if not grows(c)]


def solve(figs: PoolFigures, objective: str, time_limit: float) -> Solved:
    """Fewest GPUs ("gpus") or nodes ("nodes") that hold every item on this pool's nodes."""
    import highspy

    h = highspy.Highs()  # type: ignore[no-untyped-call]
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(time_limit))
    h.setOptionValue("threads", 1)
    h.setOptionValue("mip_rel_gap", 0.0)
    n_nodes, g = figs.nodes, figs.gpus_per_node
    profiles = sorted({i.profile for i in figs.items if i.profile is not None}, key=lambda p: p.name)
    patterns = mig_patterns(profiles) if profiles else []
    used = [h.addBinary() for _ in range(n_nodes)]
    gpu_terms: list[Any] = []
    assign: dict[tuple[int, str], Any] = {}
    for n in range(n_nodes):
        a = {i.model: h.addIntegral(lb=0, ub=i.replicas) for i in figs.items}
        for i in figs.items:
            assign[(n, i.model)] = a[i.model]
        node_gpus: list[Any] = [i.gpus * a[i.model] for i in figs.items if i.gpus]
        if patterns:
            c = [h.addIntegral(lb=0, ub=g) for _ in patterns]
            node_gpus += c
            for p in profiles:
                holds = [pat.count(p) * c[k] for k, pat in enumerate(patterns) if p in pat]
                h.addConstr(h.qsum(a[i.model] for i in figs.items if i.profile == p) <= h.qsum(holds))
        sliced = [a[i.model] for i in figs.items if i.sliced]
        if sliced:
            s = h.addIntegral(lb=0, ub=g)
            h.addConstr(h.qsum(sliced) <= figs.time_slices * s)
            node_gpus.append(s)
        total = h.qsum(node_gpus)
        h.addConstr(total <= g * used[n])
        h.addConstr(h.qsum(i.cpu * a[i.model] for i in figs.items) <= figs.cpu * used[n])
        h.addConstr(h.qsum(i.mem * a[i.model] for i in figs.items) <= figs.mem * used[n])
        gpu_terms.append(total)
        if n:
            h.addConstr(used[n] <= used[n - 1])  # symmetry: use nodes in order
    for i in figs.items:
        h.addConstr(h.qsum(assign[(n, i.model)] for n in range(n_nodes)) == i.replicas)
    h.minimize(h.qsum(gpu_terms) if objective == "gpus" else h.qsum(used))
    t0 = time.perf_counter()
    h.run()
    seconds = time.perf_counter() - t0
    info = h.getInfo()
    status = h.getModelStatus()
    optimal = status == highspy.HighsModelStatus.kOptimal
    has = info.primal_solution_status == 2  # kSolutionStatusFeasible
    value = info.objective_function_value if has else None
    bound = info.mip_dual_bound if not optimal else (value or 0.0)
    if value is not None and round(value) <= math.ceil(bound - 1e-6):
        optimal, bound = True, value  # an integral objective at its bound: proven, though the clock ran out
    if status == highspy.HighsModelStatus.kInfeasible:
        return Solved(None, math.inf, False, seconds)
    return Solved(value, bound, optimal, seconds)
