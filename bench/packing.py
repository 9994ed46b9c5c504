"""Packing measured against the optimum (issue 28): the GPUs and nodes the fleet plan uses, per pool,
against an exact MILP (`bench/packing_milp.py`: HiGHS, `highspy`, a dev-only pin) or, where the solver hits
its time limit, its proven lower bound.

Generated catalogs (seeded) of mixed models: MIG shares (`gpuShare: auto` and pinned profiles),
whole-GPU models at TP 1/2/4/8 (on the MIG pool with MIG off, and on a plain H100 pool), and
time-sliced `slice:1` shares, with 1-4 `replicas` each. Time-slicing is platform-wide, so the
sliced models are a second stack of the same catalog. Every figure of the plan comes from the
product's own planner (`tkf_infra.plan.plan_fleet` with `tkf_infra.program.footprints`, as
tests/test_admission.py calls it): the MIG layout (`FleetPlan.layouts`), the node packing
(`FleetPlan.footprints`) and what it refused.

The MILP places the same demand (every model the plan sized, refused at placement or capacity
or not) on the same nodes, with the same pod asks (CPU, memory, GPUs), node allocatable, and MIG
rules (each GPU carries one set of instances that `tkf_infra.plan.layout.placement` accepts), each
replica's CPU/memory on the node that holds its GPU. It is solved twice per pool: fewest GPUs,
then fewest nodes. A figure alone is the proven optimum; `>=b (x)` the proven bound and the best
solution found when the time limit hit. On MIG pools two more columns: replicas whose instance the
layout put on another node than node admission put their CPU/memory, and nodes where the pods of
the instances the layout put there ask more CPU or memory than the node has (docs/performance.md).

    .venv/bin/python bench/packing.py                         # 20, 50, 100, 300 models
    .venv/bin/python bench/packing.py --sizes 300 --time-limit 60 --seed 7
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.packing_milp import Item, PoolFigures, Solved, solve  # noqa: E402
from tkf_infra.config import validate_catalog  # noqa: E402
from tkf_infra.config.quantity import mebibytes, millicores  # noqa: E402
from tkf_infra.hub.lock import load_lock  # noqa: E402
from tkf_infra.plan import FleetPlan, Stage, plan_fleet  # noqa: E402
from tkf_infra.program import footprints  # noqa: E402

QWEN05 = {"repo": "Qwen/Qwen2.5-0.5B-Instruct", "revision": "7ae557604adf67be50417f59c2c2f167def9a775"}
CODER05 = {"repo": "Qwen/Qwen2.5-Coder-0.5B-Instruct", "revision": "ea3f2471cf1b1f0db85067f1ef93848e38e88c25"}
QWEN7 = {"repo": "Qwen/Qwen2.5-7B-Instruct", "revision": "a09a35458c702b33eeacc393d103063234e8bc28"}
QWEN3_8B = {"repo": "Qwen/Qwen3-8B", "revision": "b968826d9c46dd6066d109eabc6255188de91218"}
LLAMA8 = {"repo": "meta-llama/Llama-3.1-8B-Instruct", "revision": "0e9e39f249a16976918f6564b8830bc894c89659"}
MISTRAL7 = {"repo": "mistralai/Mistral-7B-Instruct-v0.3", "revision": "e0bc86c23ce5aae1db576c8cca6f06f1f73af2db"}
QWEN3_32B = {"repo": "Qwen/Qwen3-32B", "revision": "9216db5781bf21249d130ec9da846c4624c16137"}
QWEN72 = {"repo": "Qwen/Qwen2.5-72B-Instruct", "revision": "495f39366efef23836d0cfae4fbe635880d2be31"}

#: One p5.48xlarge's allocatable (docs/admission.md), for every pool here.
P5 = {"cpu": "191450m", "memory": "2095697Mi"}
MIG_POOL, WHOLE_POOL, SLICED_POOL = "h100-mig", "h100", "h100-ts"
SLICES = 4
PLATFORM = {k: {"alreadyInstalled": True} for k in ("certManager", "gatewayApi", "kserve", "lws")}


def _doc(pools: list[dict[str, Any]], models: list[dict[str, Any]], time_slices: int = 0) -> dict[str, Any]:
    operator: dict[str, Any] = {"alreadyInstalled": True, "version": "v26.7.0", "migStrategy": "mixed"}
    if time_slices:
        operator = {"alreadyInstalled": True, "version": "v26.7.0", "timeSlicingReplicas": time_slices}
    return {"cluster": {"mode": "render", "renderDir": "rendered/bench"}, "nodePools": pools,
            "platform": {**PLATFORM, "gpuOperator": operator}, "serving": {"backend": "vllm"},
            "modelDefaults": {"maxNumSeqs": 32, "dtype": "bfloat16"}, "models": models}


def mig_pool(nodes: int) -> dict[str, Any]:
    names = [f"{MIG_POOL}-{i + 1}" for i in range(nodes)]
    return {"name": MIG_POOL, "kind": "existing", "gpuProduct": "H100-80GB", "gpusPerNode": 8, "nodeCount": nodes,
            "mig": True, "nodes": names, "labels": {"bench/pool": MIG_POOL}, "nodeResources": P5}


def plain_pool(name: str, nodes: int) -> dict[str, Any]:
    return {"name": name, "gpuProduct": "H100-80GB", "gpusPerNode": 8, "nodeCount": nodes, "nodeResources": P5}


def generate(n: int, seed: int) -> list[dict[str, Any]]:
    """The two stack documents of one generated catalog of `n` models: MIG + whole pools, and time-sliced."""
    rng = random.Random(f"{seed}:{n}")
    mig, sliced = [], []
    mig_slices = whole_mig = whole_plain = sliced_pods = 0
    for i in range(n):
        replicas = rng.choices([1, 2, 3, 4], [60, 25, 10, 5])[0]
        kind = rng.choices(["mig", "whole", "slice"], [50, 30, 20])[0]
        name = f"m{i:03d}-{kind}"
        base = {"name": name, "servedName": name, "replicas": replicas}
        if kind == "mig":
            ref = rng.choice([QWEN05, CODER05, QWEN7, QWEN3_8B, LLAMA8, MISTRAL7])
            share = rng.choices(["auto", "mig:2g.20gb", "mig:3g.40gb", "mig:4g.40gb", "mig:7g.80gb"],
                                [70, 8, 10, 7, 5])[0]
            big = share in ("mig:3g.40gb", "mig:4g.40gb", "mig:7g.80gb")
            gated = {"hfTokenSecret": "hf-token"} if ref in (LLAMA8, MISTRAL7) else {}
            mig.append({**base, **ref, **gated, "nodePool": MIG_POOL, "gpuShare": share,
                        "maxModelLen": rng.choice([4096, 8192, 16384] + ([32768] if big else [])),
                        "maxNumSeqs": rng.choice([8, 16, 32])})
            mig_slices += replicas * 8
        elif kind == "whole":
            ref, tp = rng.choice([(QWEN7, 1), (QWEN3_32B, 1), (QWEN3_32B, 2), (QWEN72, 4), (QWEN72, 8)])
            on_mig = tp <= 2 and rng.random() < 0.3
            mig.append({**base, **ref, "nodePool": MIG_POOL if on_mig else WHOLE_POOL, "gpuShare": "whole",
                        "tensorParallelSize": tp, "gpusPerNode": tp, "maxModelLen": rng.choice([4096, 8192])})
            if on_mig:
                whole_mig += replicas * tp
            else:
                whole_plain += replicas * tp
        else:
            ref = rng.choice([QWEN05, CODER05])
            sliced.append({**base, **ref, "nodePool": SLICED_POOL, "gpuShare": "slice:1",
                           "maxModelLen": rng.choice([2048, 4096]), "maxNumSeqs": 8})
            sliced_pods += replicas
    # Room for everything (a MIG replica takes at most one GPU), plus a spare node per pool.
    mig_nodes = math.ceil((mig_slices / 8 + whole_mig) / 8) + 1
    docs = [_doc([mig_pool(mig_nodes), plain_pool(WHOLE_POOL, math.ceil(whole_plain / 8) + 1)], mig)]
    if sliced:
        docs.append(_doc([plain_pool(SLICED_POOL, math.ceil(sliced_pods / 8 / SLICES) + 1)], sliced, SLICES))
    return docs


def exact_node_doc() -> dict[str, Any]:
    """A catalog that fills one MIG node exactly (8 GPUs of 4g.40gb + 3g.40gb) and one whole-GPU node (2 x TP 4)."""
    def m(name: str, share: str, replicas: int, **kw: Any) -> dict[str, Any]:
        return {"name": name, "servedName": name, **QWEN05, "replicas": replicas, "gpuShare": share,
                "maxModelLen": 4096, **kw}

    return _doc([mig_pool(2), plain_pool(WHOLE_POOL, 2)], [
        m("four-g", "mig:4g.40gb", 8, nodePool=MIG_POOL), m("three-g", "mig:3g.40gb", 8, nodePool=MIG_POOL),
        {"name": "tp4", "servedName": "tp4", **QWEN72, "replicas": 2, "gpuShare": "whole", "tensorParallelSize": 4,
         "gpusPerNode": 4, "maxModelLen": 4096, "nodePool": WHOLE_POOL}])


def cpu_bound_doc() -> dict[str, Any]:
    """56 replicas of 1g.10gb: one node's GPUs hold them all (7 per GPU), its CPU 47 (4.01 cores each)."""
    return _doc([mig_pool(2)], [{"name": "small", "servedName": "small", **QWEN05, "replicas": 56,
                                 "gpuShare": "mig:1g.10gb", "maxModelLen": 4096, "nodePool": MIG_POOL}])


#: Fixed catalogs printed after the generated ones.
CASES = {"one node, exact": exact_node_doc, "56 x 1g.10gb": cpu_bound_doc}


# ------------------------------------------------------------------------------------------------
# The plan's figures
# ------------------------------------------------------------------------------------------------


def plan_doc(doc: dict[str, Any]) -> tuple[FleetPlan, float]:
    """The product's plan of a stack document, and the seconds it took (validation included)."""
    t0 = time.perf_counter()
    catalog = validate_catalog(doc)
    plan = plan_fleet(catalog, lock=LOCK, footprints=footprints(catalog))
    return plan, time.perf_counter() - t0


def pool_figures(plan: FleetPlan, doc: dict[str, Any]) -> list[PoolFigures]:
    """Per GPU pool: the demand the plan sized, what it placed and refused, the GPUs and nodes it uses."""
    fp = footprints(plan.catalog)
    sized = {m.entry.name: m for m in plan.models}
    # Models refused at placement or capacity were sized too: they are demand the optimum must place.
    refused_names = {x.name for x in plan.excluded if x.stage in (Stage.PLACEMENT, Stage.CAPACITY)}
    refused_plans = _refused_plans(doc, refused_names)
    out = []
    for name, pf in sorted(plan.pools.items()):
        res = pf.pool.node_resources
        assert res is not None and res.cpu is not None and res.memory is not None
        kind = "mig" if pf.mig is not None else "time-sliced" if pf.time_slices > 1 else "whole"
        figs = PoolFigures(name, kind, pf.node_count, pf.gpus_per_node, millicores(res.cpu), mebibytes(res.memory),
                           max(1, pf.time_slices))
        out.append(figs)
        for m in [*plan.models, *refused_plans]:
            if m.pool is None or m.pool.name != name:
                continue
            cpu, mem = fp.pod(m.entry, m.weight_bytes, m.fit.lora_host_gib)
            share = m.share
            figs.items.append(Item(m.entry.name, m.entry.replicas, cpu, mem,
                                   0 if share else m.entry.gpus_per_pod,
                                   share.profile if share is not None and share.kind == "mig" else None,
                                   share is not None and share.kind == "slice"))
        figs.refused = sorted(i.model for i in figs.items if i.model in refused_names)
        figs.placed_replicas = sum(i.replicas for i in figs.items if i.model in sized)
        used_nodes: set[str] = set()
        per_node: Counter[str] = Counter()
        for model in (i.model for i in figs.items if i.model in sized):
            where = plan.footprints.get(model, {}).get("nodes", [])
            for replica in where:
                used_nodes.update(replica)
                per_node.update(replica)
        if kind == "mig":
            layout = plan.layouts[name]
            # Only cards of models still deployed: a model refused at capacity keeps its cards in the layout.
            cards = [c for c in layout.cards if c.whole in sized or any(i.model in sized for i in c.instances)]
            figs.plan_gpus = len(cards)
            used_nodes |= {c.node for c in cards}
            cpu_on: Counter[str] = Counter()
            mem_on: Counter[str] = Counter()
            for i in figs.items:
                if i.model not in sized:
                    continue
                spots = layout.placements(i.model)  # one per instance, or one per whole GPU
                per_replica = 1 if i.profile is not None else max(1, i.gpus)
                mig_nodes = Counter({k: v // per_replica for k, v in Counter(p["node"] for p in spots).items()})
                adm_nodes = Counter(n for r in plan.footprints[i.model].get("nodes", []) for n in r)
                figs.split += sum((mig_nodes - adm_nodes).values())
                for node, k in mig_nodes.items():
                    cpu_on[node] += k * i.cpu
                    mem_on[node] += k * i.mem
            figs.overfull = sum(1 for node in cpu_on if cpu_on[node] > figs.cpu or mem_on[node] > figs.mem)
        elif kind == "time-sliced":
            figs.plan_gpus = sum(math.ceil(k / figs.time_slices) for k in per_node.values())
        else:
            figs.plan_gpus = sum(i.replicas * i.gpus for i in figs.items if i.model in sized)
        figs.plan_nodes = len(used_nodes)
    return [f for f in out if f.items]


def _refused_plans(doc: dict[str, Any], names: set[str]) -> list[Any]:
    """ModelPlans of the models refused after sizing (the plan keeps only the placed ones): the same
    stack with only those models, on pools twenty times as large and without node admission, so
    they are sized (sizing depends on neither) and not refused again."""
    if not names:
        return []
    pools = []
    for pool in doc["nodePools"]:
        count = pool["nodeCount"] * 20
        pools.append({**pool, "nodeCount": count,
                      **({"nodes": [f"{pool['name']}-{i + 1}" for i in range(count)]} if "nodes" in pool else {})})
    alone = plan_fleet(validate_catalog({**doc, "nodePools": pools,
                                         "models": [m for m in doc["models"] if m["name"] in names]}), lock=LOCK)
    return list(alone.models)


# ------------------------------------------------------------------------------------------------
# The exact solver
# ------------------------------------------------------------------------------------------------


# ------------------------------------------------------------------------------------------------
# The table
# ------------------------------------------------------------------------------------------------


@dataclass
class Row:
    models: str
    figs: PoolFigures
    gpus: Solved
    nodes: Solved
    plan_seconds: float

    @property
    def gpu_gap(self) -> float:
        best = self.gpus.value if self.gpus.optimal and self.gpus.value is not None else self.gpus.bound
        return (self.figs.plan_gpus - best) / best * 100 if best and not math.isinf(best) else 0.0


def measure(docs: Sequence[dict[str, Any]], models: str, time_limit: float) -> list[Row]:
    """One row per GPU pool of the stacks; `plan_seconds` is its stack's whole plan."""
    rows = []
    for doc in docs:
        plan, seconds = plan_doc(doc)
        for figs in pool_figures(plan, doc):
            rows.append(Row(models, figs, solve(figs, "gpus", time_limit), solve(figs, "nodes", time_limit), seconds))
    return rows


def table(rows: Sequence[Row]) -> str:
    head = ("| models | pool | kind | replicas placed | refused | plan GPUs | optimum GPUs | gap | plan nodes | "
            "optimum nodes | MIG replicas split | layout nodes over CPU/memory | plan s | solver s |")
    lines = [head, "|" + "---|" * 14]
    for r in rows:
        f = r.figs
        lines.append(f"| {r.models} | {f.pool} | {f.kind} | {f.placed_replicas} | {len(f.refused)} | {f.plan_gpus} | "
                     f"{r.gpus.text()} | {r.gpu_gap:.1f} % | {f.plan_nodes} | {r.nodes.text()} | "
                     f"{f.split if f.kind == 'mig' else '-'} | {f.overfull if f.kind == 'mig' else '-'} | "
                     f"{r.plan_seconds:.2f} | "
                     f"{r.gpus.seconds + r.nodes.seconds:.1f} |")
    return "\n".join(lines)


LOCK = load_lock()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--sizes", default="20,50,100,300", help="catalog sizes (models), comma-separated")
    ap.add_argument("--seed", type=int, default=28)
    ap.add_argument("--time-limit", type=float, default=30.0, help="seconds per solver run")
    args = ap.parse_args(argv)
    rows: list[Row] = []
    for n in (int(s) for s in args.sizes.split(",")):
        rows += measure(generate(n, args.seed), str(n), args.time_limit)
        print(f"# {n} models done", file=sys.stderr, flush=True)
    for label, make in CASES.items():
        rows += measure([make()], label, args.time_limit)
    print(table(rows))
    for label in dict.fromkeys(r.models for r in rows):
        mine = [r for r in rows if r.models == label]
        plan_s = sum({r.plan_seconds for r in mine})  # one figure per stack, repeated on its pools
        bound = sum(math.ceil(min(r.gpus.bound, 1e9) - 1e-6) for r in mine)
        print(f"{label}: plan {sum(r.figs.plan_gpus for r in mine)} GPUs on {sum(r.figs.plan_nodes for r in mine)} "
              f"nodes, optimum >= {bound} GPUs; plan time {plan_s:.2f} s (all stacks)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
