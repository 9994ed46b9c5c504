"""Generated fleets (issue 39, "at fleet scale"): whatever mix the plan admits, the rendered pins hold.

Fleets of 20 to 150 models — 1, 2, 4 and 8 GPUs, multi-node, fixed and autoscaled replicas — on two tainted
pools, rendered through the whole program under mocks; `tests.placement_check` then bounds every placement
the rendered constraints allow and runs the scheduler in random orders. Every replica the plan admits is
placed in every run, and every model it does not is refused by name at preview (`capacity`).
(The real kube-scheduler runs the same fleets in the cluster tier, tests/cluster.)
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.mocks import MULTI_NODE, QWEN3_8B, QWEN_72B, program, stack_doc
from tests.placement_check import binding, node, workloads
from tests.test_admission import H100_NODE, QWEN3_32B, planned, refused
from tkf_infra.hub.lock import load_lock

LOCK = load_lock()
def pools(size: int) -> list[dict[str, Any]]:
    """Two tainted pools grown with the fleet, so that most of it is admitted and the rest is refused."""
    h100, a100 = max(4, size // 3), max(3, size // 5)
    return [{"name": "h100", "gpuProduct": "H100-80GB", "gpusPerNode": 8, "nodeCount": h100,
             "nodes": [f"h100-node-{i}" for i in range(h100)], "nodeResources": H100_NODE,
             "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
            {"name": "a100", "gpuProduct": "NVIDIA-A100-SXM4-80GB", "gpusPerNode": 4, "nodeCount": a100,
             "nodes": [f"a100-node-{i}" for i in range(a100)], "nodeResources": {"cpu": "95", "memory": "900Gi"},
             "taints": [{"key": "team", "value": "llm", "effect": "NoSchedule"}]}]


def fleet(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        pool = rng.choice(["h100", "h100", "a100"])
        base = {"name": f"m{i}", "servedName": f"m{i}", "nodePool": pool, "maxModelLen": 8192}
        kind = rng.choice(["1", "1", "1", "2", "4", "8", "multi", "scaled"] if pool == "h100" else
                          ["1", "1", "2", "4", "scaled"])
        if kind == "multi":
            out.append({**MULTI_NODE, **base})
        elif kind == "scaled":
            low = rng.randint(1, 2)
            out.append({**base, **QWEN3_8B, "scaling": {"minReplicas": low, "maxReplicas": low + rng.randint(1, 3)}})
        elif kind == "1":
            out.append({**base, **QWEN3_8B, "replicas": rng.randint(1, 3)})
        else:
            g = int(kind)
            out.append({**base, **(QWEN3_32B if g == 2 else QWEN_72B), "gpusPerNode": g, "tensorParallelSize": g})
    return out


@pytest.mark.parametrize(("size", "seed"), [(20, 1), (20, 2), (60, 3), (150, 4)])
def test_every_admitted_pod_of_a_generated_fleet_is_placed_in_every_order(size: int, seed: int) -> None:
    doc = stack_doc(*fleet(size, seed), nodePools=pools(size))
    plan = planned(doc)
    assert len(plan.deployed) >= size // 2, "most of it is admitted"
    for name, (stage, reason) in refused(plan).items():
        assert stage == "capacity" and reason.startswith(f"model {name}: replica "), reason
    h = program(doc, lock=LOCK)
    objs = [r.manifest() for r in h.resources if r.custom and r.type.startswith("kubernetes:")]
    nodes = [node(n, {**plan.pools[p["name"]].node_labels, **plan.pools[p["name"]].node_selector},
                  plan.pools[p["name"]].taints, str(p["nodeResources"]["cpu"]), str(p["nodeResources"]["memory"]),
                  p["gpusPerNode"]) for p in doc["nodePools"] for n in p["nodes"]]
    assert binding(workloads(objs), nodes, runs=8) == []
