"""Why a MIG pool's model was refused for node room: its GPUs would hold it, its pods' nodes would not.

Why a module of its own: the layout planner (`tkf_infra.plan.layout`) places each MIG instance on a
node that still has its pod's CPU and memory, because the pod runs where its instance is; when no
node with a free placement has that room, the refusal must say so with the numbers (the pod's asks,
the most any such node has left, which resource ran out) and a way out, as the node-capacity check
does for whole-GPU pools (`tkf_infra.plan.admission`). Kept apart so the planner stays about GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence

from tkf_infra.config.quantity import cpu_text, gib_text
from tkf_infra.plan.pool_layout import Demand


def room_refusal(pool: str, nodes: Sequence[str], d: Demand, placed: int,
                 left: Sequence[tuple[int, int, bool]], rooms_from: str) -> str:
    """The refusal of `d` after `placed` of its replicas found a node; `left`: per node (CPU m, MiB, GPU spot)."""
    what = f"MIG {d.profile.name}" if d.profile is not None else f"{d.gpus} whole GPU(s) with MIG off"
    ask = f"{cpu_text(d.cpu_millis)}, {gib_text(d.memory_mib)} memory"
    spots = [(nodes[i], cpu, mem) for i, (cpu, mem, ok) in enumerate(left) if ok]
    if spots:
        best_cpu, best_mem = max(c for _, c, _ in spots), max(m for _, _, m in spots)
        short = []
        if d.cpu_millis > best_cpu:
            short.append(f"CPU (at most {cpu_text(max(best_cpu, 0))} left on such a node)")
        if d.memory_mib > best_mem:
            short.append(f"memory (at most {gib_text(max(best_mem, 0))} left on such a node)")
        name, cpu, mem = max(spots, key=lambda s: (s[1] >= d.cpu_millis) + (s[2] >= d.memory_mib) + s[1] / 1e9)
        where = (f"the nodes whose GPUs still have room for it ({', '.join(n for n, _, _ in spots)}) lack room for "
                 f"its pod: {name} has {cpu_text(max(cpu, 0))}, {gib_text(max(mem, 0))} memory left; ran out of: "
                 f"{'; '.join(short) or 'no single node has both left at once'}")
    else:
        where = "no node has room for its pod on GPUs it could use"
    ways = [f"lower replicas to {placed}" if placed else "",
            f"add nodes to pool {pool} (nodeCount and nodes) or use nodes with more CPU and memory",
            "move it to another nodePool", "give it a higher priority than the models that took the room",
            "or give those models fewer replicas"]
    return (f"model {d.model}: replica {placed + 1} of {d.replicas} ({what}, each pod asks {ask}) fits on no node of "
            f"pool {pool} (nodes from {rooms_from or 'its settings'}): a MIG pod runs on the node of its instance, "
            f"and {where}, after its first {placed} replica(s) and the models admitted before it. "
            f"Way out: {', '.join(w for w in ways if w)}")
