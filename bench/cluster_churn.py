"""Fleet-scale placement on the real kube-scheduler (issue 39): for generated fleets and a churn of edits over
several `up`s, the serving pods the admitted models' workloads ask, how many the scheduler bound, how many
turned Ready, how many stayed Pending, and how long `up` took to all-Ready (it waits for every model).

Each size runs on a cluster of its own (tests/cluster: `tkf-kube-apiserver --cluster` with the real
kube-scheduler v1.36.3 and controllers, kwok's nodes for the two tainted pools of `tests.fleets.pools` and a
system node), the platform from its vendored charts (LWS's manager runs the multi-node models), the vllm
backend, the CLI's own `up` with its waiting on. The fleet is `tests.fleets.fleet(size, seed)` (1, 2, 4, 8
GPUs, multi-node, autoscaled); each churn round is ``--edits`` edits of `tests.fleets.churn_step` (add,
remove, resize, a parallelism change), then `up`. The target, at every row: pods asked == bound == Ready,
Pending 0, no model failed, and every model the plan did not admit refused by name at preview (`refused`
column; `up` then exits 1, as it does for any refusal).

    .venv/bin/python bench/cluster_churn.py                      # 20 and 60 models, 3 rounds of 4 edits
    .venv/bin/python bench/cluster_churn.py --sizes 150 --rounds 2 --seed 4

Needs `scripts/setup.sh --dev` (engine, API server, kwok, the LWS manager). Minutes per `up` at 60 models
on 2 cores: the engine registers about seven objects a model and waits for each workload.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.cluster.fleet import Fleet, Kubelets, UpRun, own_cluster  # noqa: E402
from tests.cluster.harness import pod_ready  # noqa: E402
from tests.engine_fixtures import lean_env, new_stack  # noqa: E402
from tests.fleets import churn_step, fleet, pools  # noqa: E402

#: Downloads at 50 GiB/s: placement is what is measured here, not download time (the tier paces them by size).
GIB_PER_S = 50.0


def asked_pods(f: Fleet) -> int:
    """Serving pods the workloads ask: each Deployment's replicas (1 when its autoscaler owns the count and
    none runs here) and each LeaderWorkerSet's replicas × group size."""
    total = 0
    for d in f.kube.list_objects("apps/v1", "Deployment", f.namespace):
        total += int(d["spec"].get("replicas", 1))
    try:
        for lws in f.kube.list_objects("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", f.namespace):
            spec = lws["spec"]
            total += int(spec.get("replicas", 1)) * int(spec["leaderWorkerTemplate"].get("size", 1))
    except LookupError:  # no LWS served
        pass
    return total


def row(label: str, run: UpRun, f: Fleet) -> dict[str, Any]:
    serving = [p for p in run.pods if not p["metadata"].get("deletionTimestamp")
               and all(o["kind"] != "Job" for o in p["metadata"].get("ownerReferences") or [])]
    summary = run.summary.get("models") or {}
    return {"run": label, "models": len(summary),
            "refused": sum(1 for m in summary.values() if m.get("status") == "rejected"),
            "failed": sum(1 for m in summary.values() if m.get("status") == "failed"),
            "asked": asked_pods(f), "bound": sum(1 for p in serving if p["spec"].get("nodeName")),
            "ready": sum(1 for p in serving if pod_ready(p)),
            "pending": sum(1 for p in serving if not p["spec"].get("nodeName")),
            "exit": run.returncode, "stopped": run.stopped, "seconds": round(run.seconds),
            "failures": {n: " | ".join(m.get("reasons") or ["(no reason given)"])
                         for n, m in sorted(summary.items()) if m.get("status") == "failed"},
            "errors": run.summary.get("errors") or ([] if run.summary else [f"no --json summary; stderr tail: "
                                                                           f"{run.stderr[-600:]}"]),
            "unready": [f"{p['metadata']['name']} ({(p['metadata'].get('ownerReferences') or [{}])[0].get('kind')}, "
                        f"{p['status'].get('phase')})" for p in serving if not pod_ready(p)]}


def print_row(size: int, r: dict[str, Any]) -> None:
    # `up` exits 1 when the plan refused a model (named at preview): that is the plan working, not a miss.
    ok = (r["asked"] == r["bound"] == r["ready"] and r["pending"] == 0 and r["failed"] == 0 and not r["stopped"]
          and r["exit"] == (1 if r["refused"] else 0))
    print(f"{size:>5} {r['run']:<8} {r['models']:>6} {r['refused']:>7} {r['failed']:>6} {r['asked']:>5} "
          f"{r['bound']:>5} {r['ready']:>5} {r['pending']:>7} {r['exit']:>4} {r['seconds']:>7}  "
          f"{'ok' if ok else 'MISS'}", flush=True)
    if r["unready"]:
        print(f"      not Ready when `up` ended: {', '.join(r['unready'])}", flush=True)
    # A miss must carry its evidence: each failed model's reasons and the run's own errors, as `up` gave them.
    for name, why in r["failures"].items():
        print(f"      failed {name}: {why[:400]}", flush=True)
    for err in r["errors"][:5] if r["failures"] or not ok else ():
        print(f"      error: {err[:400]}", flush=True)


def bench_size(size: int, seed: int, rounds: int, edits: int, workdir: Path,
               timeout: float) -> list[dict[str, Any]]:
    models = {m["name"]: m for m in fleet(size, seed)}
    rng, counter, out = random.Random(seed), [size], []
    with own_cluster(workdir, partial(new_stack, workdir), lean_env()) as f:
        f.aim(list(models.values()), pools=pools(size), backend="vllm")
        run = f.again(Kubelets(GIB_PER_S), timeout=timeout)
        out.append(row("initial", run, f))
        print_row(size, out[-1])
        for i in range(rounds):
            for _ in range(edits):
                churn_step(models, rng, counter)
            f.es.set_models(list(models.values()))
            run = f.again(Kubelets(GIB_PER_S), timeout=timeout)
            out.append(row(f"churn{i + 1}", run, f))
            print_row(size, out[-1])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="20,60", help="fleet sizes, comma-separated")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3, help="churn rounds after the first `up`")
    ap.add_argument("--edits", type=int, default=4, help="edits per churn round")
    ap.add_argument("--timeout", type=float, default=1800.0,
                    help="seconds an `up` may take before it is interrupted (150 models' first: over 600)")
    args = ap.parse_args()
    print(f"{'size':>5} {'run':<8} {'models':>6} {'refused':>7} {'failed':>6} {'asked':>5} {'bound':>5} "
          f"{'ready':>5} {'pending':>7} {'exit':>4} {'seconds':>7}", flush=True)
    t0 = time.monotonic()
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix=f"churn-{size}-") as tmp:
            bench_size(size, args.seed, args.rounds, args.edits, Path(tmp), args.timeout)
    print(f"total {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
