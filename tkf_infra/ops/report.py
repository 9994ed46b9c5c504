"""`python -m tkf_infra report --stack S -o fleet.html`: a picture of a stack's plan, offline.

Why offline and in-process: a reviewer of a catalog change wants to *see* the plan before anything is
applied, and render stacks have no cluster to read. The plan is made the way the program makes it
(`tkf_infra.program`: the stack file through `layer_edge.prepare`, the lock, the components' own pod and cache
sizes, `plan_fleet`), without the program's live reads — no cluster, no DCGM, no last deployment (a MIG pool is
laid out as a first run would lay it out) — which the page says. The figures are the stack outputs' own
(`tkf_infra.outputs`: `endpoints[].fit`, `gpuLayout`, `poolHeadroom`, `rejected`), plus each model's memory terms
from the same sizing call (`tkf_infra.sizing.estimate`) for its bar.

`report_data` returns plain data; `tkf_infra/ops/report_html.py` draws it (one static HTML file and an SVG).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tkf_infra.plan import FleetPlan, ModelPlan

#: A MIG board's memory slices (A100, H100, H200, B200: tkf_infra/sizing/mig.py's module docstring).
MIG_SLOTS = 8


def offline_plan(stack: str) -> tuple[FleetPlan, list[str]]:
    """The stack's plan from `Pulumi.<env>.yaml` and the lock, as the program plans it but reading nothing live;
    and the warnings that run would log. Raises SettingsError for a stack file the program would refuse."""
    from tkf_infra import program
    from tkf_infra.config import validate_catalog
    from tkf_infra.config.reader import read_stack_file
    from tkf_infra.hub.lock import load_lock
    from tkf_infra.layer_edge import prepare, read_env_file, refused
    from tkf_infra.layers import environment
    from tkf_infra.live.ec2 import ec2_facts
    from tkf_infra.names import PROJECT_ROOT
    from tkf_infra.plan import plan_fleet

    path = PROJECT_ROOT / f"Pulumi.{environment(stack)}.yaml"
    if not path.exists():
        files = ", ".join(sorted(p.name.split(".")[1] for p in PROJECT_ROOT.glob("Pulumi.*.yaml")))
        raise FileNotFoundError(f"unknown stack {stack!r}: there is no {path.name} (stack files: {files})")
    run = prepare(stack, read_stack_file(path), dry_run=True, read_outputs=lambda _: None, env_file=read_env_file)
    catalog = validate_catalog(run.settings)
    found, errors = ec2_facts(catalog)  # no EKS pool: no call
    plan = plan_fleet(catalog, lock=load_lock(), ec2=found, ec2_errors=errors, footprints=program.footprints(catalog),
                      refused_by_platform=refused(run, catalog))
    return plan, [*run.warnings, *plan.warnings]


def _bar(m: ModelPlan) -> dict[str, Any] | None:
    """One GPU rank's memory as the fit check sized it (GiB): each term, the budget and the bound."""
    from tkf_infra.sizing.estimate import estimate

    i = m.fit_inputs
    if i.gpu is None:
        return None
    est = estimate(i.facts, i.gpu, i.params, model=i.model, prefix_caching=i.params.enable_prefix_caching)
    terms = {"weights": est.weights_gib, "activation": est.activation_gib, "cudaGraphs": est.cuda_graph_gib,
             "nonTorch": est.non_torch_gib, "lora": est.lora_gib, "kvCache": est.available_kv_gib}
    return {"totalGiB": round(est.total_gib, 2), "budgetGiB": round(est.requested_gib, 2),
            "terms": {k: round(max(v, 0.0), 2) for k, v in terms.items()},
            "kvBoundGiB": round(est.available_kv_gib_bound, 2),
            "headroomGiB": round(max(est.total_gib - est.requested_gib, 0.0), 2)}


def verdict(fit: Mapping[str, Any]) -> str:
    """The fit verdict as published: `verdict` when the outputs carry one (fits / tight / refuses), else from
    `fits`."""
    given = fit.get("verdict")
    return str(given) if given else ("fits" if fit.get("fits") else "refuses")


def _models(plan: FleetPlan) -> list[dict[str, Any]]:
    from tkf_infra.outputs import endpoints_output

    endpoints = endpoints_output(plan)
    out = []
    for m in plan.models:
        ep = endpoints[m.entry.served_name]
        s = m.entry.scaling
        out.append({"name": m.entry.name, "servedName": m.entry.served_name, "pool": m.pool.name if m.pool else None,
                    "profile": m.entry.profile.value, "gpusPerReplica": ep["gpus"],
                    "share": (ep.get("share") or {}).get("share"),
                    "replicas": {"min": s.min_replicas if s else m.entry.replicas,
                                 "max": s.max_replicas if s else m.entry.replicas},
                    "fit": ep["fit"], "verdict": verdict(ep["fit"]), "bar": _bar(m),
                    "nodes": (ep.get("footprint") or {}).get("nodes") or []})
    return out


def _whole_gpus(pool: str, node_count: int, gpus_per_node: int, node_names: list[str],
                models: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per node, its GPUs and what holds each: every replica's pods on the nodes the plan packed them onto,
    each pod's GPUs taken in order. Which physical GPU a pod gets is the device plugin's choice; the count per
    node is the plan's."""
    nodes: dict[str, list[dict[str, Any]]] = {n: [{"index": i, "holders": []} for i in range(gpus_per_node)]
                                              for n in node_names}
    for m in models:
        if m["pool"] != pool or m["share"]:
            continue
        per_pod = m["gpusPerReplica"] // max(1, len(m["nodes"][0]) if m["nodes"] else 1)
        for replica, pod_nodes in enumerate(m["nodes"]):
            for node in pod_nodes:
                free = [g for g in nodes.setdefault(node, []) if not g["holders"]][:per_pod]
                for g in free:
                    g["holders"].append({"model": m["name"], "replica": replica, "kind": "whole"})
    return nodes


def _shared_gpus(pool: str, gpus_per_node: int, time_slices: int, nodes: dict[str, list[dict[str, Any]]],
                 models: list[dict[str, Any]]) -> None:
    """Time-sliced replicas: k of the GPU's N shares each, on the nodes the plan packed them onto."""
    for m in models:
        if m["pool"] != pool or not (m["share"] or "").startswith("slice:"):
            continue
        k = int(str(m["share"]).split(":")[1].split("/")[0])
        for replica, pod_nodes in enumerate(m["nodes"]):
            for node in pod_nodes:
                gpus = nodes.setdefault(node, [{"index": i, "holders": []} for i in range(gpus_per_node)])
                used = {g["index"]: sum(h.get("slices", 0) for h in g["holders"] if h["kind"] == "slice")
                        for g in gpus if all(h["kind"] == "slice" for h in g["holders"])}
                gpu = next((g for g in gpus if g["index"] in used and used[g["index"]] + k <= time_slices), None)
                if gpu is not None:
                    gpu["holders"].append({"model": m["name"], "replica": replica, "kind": "slice", "slices": k,
                                           "of": time_slices})


def _mig_gpus(layout: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """A MIG pool's GPUs from its `gpuLayout`: each instance at its planned start and size."""
    out: dict[str, list[dict[str, Any]]] = {}
    for node, spec in (layout.get("nodes") or {}).items():
        out[node] = []
        for g in spec.get("gpus") or []:
            holders = [{"model": g["whole"], "replica": None, "kind": "whole"}] if g.get("whole") else []
            holders += [{"model": i["model"], "replica": i["replica"], "kind": "mig", "profile": i["profile"],
                         "start": i["start"], "size": i["size"]} for i in g.get("instances") or []]
            out[node].append({"index": g["index"], "holders": holders, "migConfig": spec.get("migConfig")})
    return out


def report_data(plan: FleetPlan, stack: str, warnings: list[str] | None = None) -> dict[str, Any]:
    """Everything the page draws, as plain data (the outputs' figures under the outputs' keys)."""
    from tkf_infra import outputs as out
    from tkf_infra.plan.headroom import pool_headroom

    layouts = {name: layout.published() for name, layout in sorted(plan.layouts.items())}
    headroom = pool_headroom(plan)
    models = _models(plan)
    pools = []
    for name, p in sorted(plan.pools.items()):
        layout = layouts.get(name) or {}
        names = list(p.pool.nodes) or [f"{name}-{i + 1}" for i in range(p.pool.node_count)]
        if layout.get("kind") == "mig":
            nodes = {n: [{"index": i, "holders": []} for i in range(p.gpus_per_node)] for n in names}
            nodes.update(_mig_gpus(layout))
        else:
            nodes = _whole_gpus(name, p.pool.node_count, p.gpus_per_node, names, models)
            _shared_gpus(name, p.gpus_per_node, p.time_slices, nodes, models)
        pools.append({"name": name, "gpu": p.gpu.name if p.gpu else None,
                      "gpuMemoryGiB": p.gpu.memory_gib if p.gpu else None, "gpusPerNode": p.gpus_per_node,
                      "nodeCount": p.pool.node_count, "kind": layout.get("kind", "whole"),
                      "migSlots": MIG_SLOTS if layout.get("kind") == "mig" else None,
                      "timeSlices": p.time_slices, "headroom": headroom.get(name),
                      "nodes": [{"name": n, "gpus": g} for n, g in nodes.items()]})
    return {"stack": stack, "pools": pools, "models": models, "warnings": list(warnings or []),
            out.REJECTED_OUTPUT: [x.as_output() for x in plan.excluded], out.PROBLEMS_OUTPUT: list(plan.errors),
            out.GPU_LAYOUT_OUTPUT: layouts, out.POOL_HEADROOM_OUTPUT: headroom}
