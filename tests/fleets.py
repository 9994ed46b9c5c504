"""Generated fleets and churn (issue 39, "at fleet scale"), one definition for the mock tier
(tests/test_placement_fleets.py, tests/test_placement.py) and the real scheduler's bench
(bench/cluster_churn.py)."""

from __future__ import annotations

import random
from typing import Any

from tests.mocks import MULTI_NODE, QWEN3_8B, QWEN_72B, SINGLE_GPU
from tests.test_admission import H100_NODE, QWEN3_32B

#: The NVIDIA GPU Operator's node taint, as the h100 pools carry it.
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def pools(size: int) -> list[dict[str, Any]]:
    """Two tainted pools grown with the fleet, so that most of it is admitted and the rest is refused."""
    h100, a100 = max(4, size // 3), max(3, size // 5)
    return [{"name": "h100", "gpuProduct": "H100-80GB", "gpusPerNode": 8, "nodeCount": h100,
             "nodes": [f"h100-node-{i}" for i in range(h100)], "nodeResources": H100_NODE,
             "taints": [GPU_TAINT]},
            {"name": "a100", "gpuProduct": "NVIDIA-A100-SXM4-80GB", "gpusPerNode": 4, "nodeCount": a100,
             "nodes": [f"a100-node-{i}" for i in range(a100)], "nodeResources": {"cpu": "95", "memory": "900Gi"},
             "taints": [{"key": "team", "value": "llm", "effect": "NoSchedule"}]}]


def fleet(n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` models over `pools`' two pools: 1, 2, 4, 8 GPUs, multi-node, fixed and autoscaled replicas."""
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


def churn_model(i: int, rng: random.Random) -> dict[str, Any]:
    """Model ``m<i>`` on pool h100: 1 GPU (1–3 replicas), TP 2, 4 or 8, or multi-node."""
    kind = rng.choice(["one", "one", "tp2", "tp4", "tp8", "multi"])
    base = {"name": f"m{i}", "servedName": f"m{i}", "nodePool": "h100", "maxModelLen": 8192}
    if kind == "one":
        return {**base, **{k: SINGLE_GPU[k] for k in ("repo", "revision")}, "replicas": rng.randint(1, 3)}
    if kind == "multi":
        return {**MULTI_NODE, **base}
    g = int(kind[2:])
    return {**base, **QWEN_72B, "gpusPerNode": g, "tensorParallelSize": g, "replicas": 1}


def churn_step(models: dict[str, dict[str, Any]], rng: random.Random, counter: list[int]) -> set[str]:
    """One edit (add, remove, resize a replica count, or a parallelism); the models it touched."""
    op = rng.choice(["add", "add", "remove", "resize", "regpu"]) if models else "add"
    if op == "add":
        counter[0] += 1
        m = churn_model(counter[0], rng)
        models[m["name"]] = m
        return {m["name"]}
    name = rng.choice(sorted(models))
    if op == "remove":
        del models[name]
    elif op == "resize" and "nodeCount" not in models[name]:
        models[name] = dict(models[name], replicas=max(1, models[name].get("replicas", 1) + rng.choice([-1, 1])))
    elif op == "regpu" and models[name]["repo"] == QWEN_72B["repo"]:
        g = rng.choice([4, 8])
        models[name] = dict(models[name], gpusPerNode=g, tensorParallelSize=g)
    return {name}
