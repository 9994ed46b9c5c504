"""Placement the kube-scheduler cannot undo: the rendered pins, the download Jobs, single-node caches, churn.

Issue 39's three failures, from the rendered objects (`tests.placement_check`: a bound over every placement the
pods' constraints allow, and scheduler runs in random orders and the default scoring's spreading order):
1. prod's fleet on 4 x 8 H100: the small pods spread one per node left no node 8 GPUs for the 405B;
2. a fleet that exactly fills the pool (8 single-GPU replicas, 3 eight-GPU models) placed none of the large ones;
3. download Jobs without their pool's toleration stayed Pending on a tainted GPU-only pool.
Then a storage class one node mounts at a time (refused by name when a reader is on another node), and churn:
edits over many plans keep the pins of the models they do not touch.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.fleets import churn_step
from tests.mocks import MULTI_NODE, QWEN_72B, SINGLE_GPU, program, stack_doc
from tests.placement_check import Node, binding, node, overflows, workloads
from tests.policy_helpers import stack_settings
from tests.test_admission import H100_NODE, SERVED, kube, live, planned, refused
from tkf_infra import names
from tkf_infra.config import validate_catalog
from tkf_infra.hub.lock import load_lock
from tkf_infra.outputs import endpoints_output
from tkf_infra.plan.admission import ClusterState, PodAsk, tolerated
from tkf_infra.plan.pins import W_NOT_BINDING, read_pins

LOCK = load_lock()
NODES = ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]
TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def prod(backend: str, nodes: list[str] | None = NODES, **serving: Any) -> dict[str, Any]:
    """Pulumi.prod.yaml (4 x 8 H100, tainted), rendered, with its nodes listed by name."""
    doc = stack_settings("prod", backend)
    if nodes is not None:
        doc["nodePools"] = [dict(doc["nodePools"][0], nodes=nodes)]
    doc["serving"] = {**doc["serving"], **serving}
    return doc


def cluster_nodes(doc: dict[str, Any]) -> list[Node]:
    """The pool's nodes as the scheduler sees them: the labels its selector picks, its taints, a p5's room."""
    plan = planned(doc)
    pool = plan.pools["h100"]
    return [node(n, {**pool.node_labels, **pool.node_selector}, pool.taints, H100_NODE["cpu"], H100_NODE["memory"])
            for n in pool.pool.nodes]


def rendered(doc: dict[str, Any]) -> list[dict[str, Any]]:
    h = program(doc, lock=LOCK)
    return [r.manifest() for r in h.resources if r.custom and r.type.startswith("kubernetes:")]


@pytest.mark.parametrize("backend", ["vllm", "kserve"])
def test_prods_small_pods_cannot_take_the_405bs_nodes(backend: str) -> None:
    """Failure 1: every placement the pins allow fits, and every order schedules every pod (Jobs included)."""
    doc = prod(backend)
    objs = rendered(doc)
    assert binding(workloads(objs), cluster_nodes(doc)) == []
    pins = {o["metadata"]["name"]: _pin(o) for o in objs if o.get("kind") in ("Deployment", "LeaderWorkerSet",
                                                                            "LLMInferenceService")}
    assert all(pins.values()), pins
    big = next(v for k, v in pins.items() if "405b" in k)
    assert big is not None and len(big[0]) == 2, "the 405B's two pods on two nodes of their own"


def _pin(obj: dict[str, Any]) -> tuple[list[str], dict[str, Any]] | None:
    spec = obj["spec"]
    pod = (spec.get("template", {}).get("spec") if obj["kind"] == "Deployment" else
           spec["leaderWorkerTemplate"]["leaderTemplate"]["spec"] if obj["kind"] == "LeaderWorkerSet" else
           spec["template"])
    aff = (pod.get("affinity") or {}).get("nodeAffinity")
    if not aff:
        return None
    terms = aff["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    (spread,) = pod["topologySpreadConstraints"]
    return [v for term in terms for (v,) in [term["matchFields"][0]["values"]]], spread


def test_the_pin_and_spread_are_what_the_plan_reserved() -> None:
    objs = rendered(prod("vllm"))
    dep = next(o for o in objs if o.get("kind") == "Deployment" and o["metadata"]["name"].startswith("llama-3-1-8b"))
    got = _pin(dep)
    assert got is not None
    nodes, spread = got
    assert nodes == ["gpu-a"], "two 1-GPU replicas packed on one node, as few nodes as hold them"
    assert spread == {"maxSkew": 1, "topologyKey": names.HOSTNAME_LABEL, "whenUnsatisfiable": "DoNotSchedule",
                      "labelSelector": {"matchLabels": {names.MODEL_LABEL: "llama-3-1-8b"}},
                      "nodeAffinityPolicy": "Honor", "nodeTaintsPolicy": "Ignore"}


def big(i: int) -> dict[str, Any]:
    return {"name": f"big-{i}", **QWEN_72B, "servedName": f"big-{i}", "nodePool": "h100", "gpusPerNode": 8,
            "tensorParallelSize": 8, "maxModelLen": 16384}


def full_pool(small: list[dict[str, Any]], backend: str) -> dict[str, Any]:
    pool = {"name": "h100", "gpuProduct": "H100-80GB", "gpusPerNode": 8, "nodeCount": 4, "nodes": NODES,
            "nodeResources": H100_NODE, "taints": [TAINT]}
    return stack_doc(*small, big(1), big(2), big(3), backend=backend, nodePools=[pool])


@pytest.mark.parametrize("backend", ["vllm", "kserve"])
@pytest.mark.parametrize("split", [1, 4, 8])
def test_a_fleet_that_exactly_fills_the_pool_places_every_pod(backend: str, split: int) -> None:
    """Failure 2: 8 single-GPU replicas (one model, 4 x 2 or 8 x 1) and three 8-GPU models fill 4 x 8 GPUs."""
    small = [dict(SINGLE_GPU, name=f"small-{i}", servedName=f"small-{i}", replicas=8 // split) for i in range(split)]
    doc = full_pool(small, backend)
    plan = planned(doc)
    assert not plan.excluded, [x.reasons for x in plan.excluded]
    objs = rendered(doc)
    nodes = [node(n, {}, [TAINT]) for n in NODES]
    for n in nodes:  # the selector the pool's pods carry
        n.labels.update(plan.pools["h100"].node_selector)  # type: ignore[attr-defined]
    assert binding(workloads(objs), nodes) == []


def test_without_pins_the_checker_finds_the_issues_failures() -> None:
    """The checker is not blind: the same objects without their pins overflow and leave pods Pending."""
    doc = full_pool([dict(SINGLE_GPU, replicas=8)], "vllm")
    objs = rendered(doc)
    for o in objs:
        pod = o["spec"]["template"]["spec"] if o.get("kind") in ("Deployment", "Job") else None
        if pod:
            pod.pop("affinity", None)
            pod.pop("topologySpreadConstraints", None)
    nodes = [node(n, planned(doc).pools["h100"].node_selector, [TAINT]) for n in NODES]
    assert overflows(workloads(objs), nodes)
    problems = binding(workloads(objs), nodes)
    assert any("run None" in p and "big-" in p for p in problems), problems


@pytest.mark.parametrize("backend", ["vllm", "kserve"])
def test_download_jobs_tolerate_their_pools_taint_and_run_beside_their_first_reader(backend: str) -> None:
    """Failure 3: on a tainted GPU-only pool the Job carries the pool's tolerations and selector, and a pin to the
    node the plan reserved its room on (where a node-local volume then binds)."""
    doc = prod(backend)
    objs = rendered(doc)
    plan = planned(doc)
    jobs = [o for o in objs if o.get("kind") == "Job"]
    assert len(jobs) == 4
    for job in jobs:
        pod = job["spec"]["template"]["spec"]
        assert tolerated(TAINT, pod["tolerations"]) and len(pod["tolerations"]) == len(plan.pools["h100"].tolerations)
        assert pod["nodeSelector"] == plan.pools["h100"].node_selector
        (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        (node_name,) = term["matchFields"][0]["values"]
        cache = job["metadata"]["annotations"][names.CACHE_MODELS_ANNOTATION].split(",")[0]
        assert node_name == plan.pins[cache].nodes[0], "beside its first reader"
    # Without node names (nodeCount only): still the tolerations, no pin, and a named warning.
    plain = prod(backend, nodes=None)
    unnamed = planned(plain)
    assert not unnamed.pins and any(w.startswith(f"[{W_NOT_BINDING}] nodePool h100") for w in unnamed.warnings)
    for job in (o for o in rendered(plain) if o.get("kind") == "Job"):
        pod = job["spec"]["template"]["spec"]
        assert pod["tolerations"] and "affinity" not in pod


def test_a_single_node_class_refuses_a_reader_on_another_node_by_name() -> None:
    """serving.storageMultiNode: false (fast-nvme is node-local): the 405B's second pod would read a cache on
    another node, so it is refused naming the model, the class and the way out; the others share one node each,
    and their caches ask ReadWriteOnce."""
    doc = prod("vllm", storageMultiNode=False)
    plan = planned(doc)
    stage, reason = refused(plan)["llama-3-1-405b"]
    assert stage == "storage"
    assert "model llama-3-1-405b: its weight cache" in reason and "storageClass fast-nvme" in reason
    assert "its pods run on different nodes" in reason and "serving.storageMultiNode: true" in reason
    assert plan.deployed == {"llama-3-1-8b", "qwen-2-5-72b", "gpt-oss-120b"}
    assert all(len(plan.pins[m].nodes) == 1 for m in plan.deployed)
    objs = rendered(doc)
    pvcs = [o for o in objs if o.get("kind") == "PersistentVolumeClaim"]
    assert pvcs and all(p["spec"]["accessModes"] == ["ReadWriteOnce"] for p in pvcs)


def test_a_node_local_provisioner_read_live_refuses_the_same() -> None:
    nodes = tuple(live(n, taints=(TAINT,)) for n in NODES)
    cluster = ClusterState("the test cluster", nodes, api_versions=SERVED, default_storage_class="local",
                           provisioners={"local": "rancher.io/local-path"})
    doc = stack_doc(dict(SINGLE_GPU, replicas=2), MULTI_NODE, cluster=kube(),
                    nodePools=[{"name": "h100", "gpuProduct": "H100-80GB", "gpusPerNode": 8, "nodeCount": 4,
                                "taints": [TAINT]}])
    plan = planned(doc, cluster)
    assert refused(plan)["llama-405b"][0] == "storage"
    assert "storageClass local" in refused(plan)["llama-405b"][1]
    assert plan.pins["qwen3-8b"].nodes == ("gpu-a",) and plan.downloads[_cache(plan, "qwen3-8b")] == ("h100", "gpu-a")
    shared = dict(cluster.__dict__, provisioners={"local": "efs.csi.aws.com"})
    assert not planned(doc, ClusterState(**shared)).excluded


def _cache(plan: Any, model: str) -> str:
    return str(plan.footprints[model]["weightCache"])


# ------------------------------------------------------------------------------------------------
# Churn
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_churn_keeps_the_pins_of_untouched_models_and_never_overcommits_a_node(seed: int) -> None:
    rng = random.Random(seed)
    pool = {"name": "h100", "gpuProduct": "H100-80GB", "gpusPerNode": 8, "nodeCount": 6,
            "nodes": [f"n{i}" for i in range(6)], "nodeResources": H100_NODE, "taints": [TAINT]}
    models: dict[str, dict[str, Any]] = {}
    counter = [0]
    plan: Any = None
    for _ in range(14):
        touched = churn_step(models, rng, counter)
        doc = stack_doc(*models.values(), nodePools=[pool])
        previous = ({n: m.model_dump(by_alias=True) for n, m in ((x.entry.name, x.entry) for x in plan.models)}
                    if plan is not None else None)
        before = dict(plan.pins) if plan is not None else {}
        plan = _plan(doc, previous, read_pins(endpoints_output(plan)) if plan is not None else None)
        for name, pin in plan.pins.items():
            if name in before and name not in touched:
                assert pin == before[name], f"step moved untouched {name}: {before[name]} → {pin}"
        # The plan's own invariant: on each node, the pods its pins allow fit.
        used: dict[str, list[int]] = {}
        for name, pin in plan.pins.items():
            pod = plan.footprints[name]["pod"]
            for n in pin.nodes:
                u = used.setdefault(n, [0, 0, 0])
                u[0] += pin.per_node * pod["gpus"]
                u[1] += pin.per_node * pod["cpuMillis"]
                u[2] += pin.per_node * pod["memoryMiB"]
        for n, (g, c, m) in used.items():
            assert g <= 8 and c <= 191450 and m <= 2095697, (n, g, c, m)


def _plan(doc: dict[str, Any], previous: dict[str, Any] | None, pins: Any) -> Any:
    from tkf_infra.plan import plan_fleet
    from tkf_infra.program import footprints

    catalog = validate_catalog(doc)
    return plan_fleet(catalog, lock=LOCK, previous=previous, footprints=footprints(catalog), previous_pins=pins)


def test_a_resized_model_keeps_its_nodes_while_they_hold_it_and_the_others_never_move() -> None:
    pool = {"name": "h100", "gpuProduct": "H100-80GB", "gpusPerNode": 8, "nodeCount": 4, "nodes": NODES,
            "nodeResources": H100_NODE}
    a = dict(SINGLE_GPU, name="a", servedName="a", replicas=3)
    b = dict(SINGLE_GPU, name="b", servedName="b", replicas=4)
    first = _plan(stack_doc(a, b, nodePools=[pool]), None, None)
    assert first.pins["a"].nodes == first.pins["b"].nodes == ("gpu-a",)
    prev = {m.entry.name: m.entry.model_dump(by_alias=True) for m in first.models}
    grown = _plan(stack_doc(dict(a, replicas=6), b, nodePools=[pool]), prev, read_pins(endpoints_output(first)))
    assert grown.pins["b"] == first.pins["b"], "b untouched: kept first, before a is re-placed"
    assert grown.pins["a"].nodes == ("gpu-b",), "a no longer fits beside b: moved whole, b stays"
    shrunk = _plan(stack_doc(dict(a, replicas=2), b, nodePools=[pool]), prev, read_pins(endpoints_output(first)))
    assert shrunk.pins["a"].nodes == first.pins["a"].nodes and shrunk.pins["b"] == first.pins["b"], \
        "a smaller a keeps its node (the rendered pin names nodes only: its pods do not roll)"


# ------------------------------------------------------------------------------------------------
# DaemonSets
# ------------------------------------------------------------------------------------------------


def test_daemonset_pods_room_is_subtracted_from_the_nodes_they_run_on() -> None:
    """The edge reads every running DaemonSet pod (init containers and overhead as the scheduler counts them) and
    the plan packs against what is left: 8 pods of 22 GiB fit a 200 GiB node, not once its DaemonSets hold 40 GiB."""
    import httpx

    from tkf_infra.live.cluster import read_cluster

    def ds_pod(node_name: str, cpu: str, memory: str, owner: str = "DaemonSet") -> dict[str, Any]:
        return {"metadata": {"ownerReferences": [{"kind": owner, "name": "x"}]},
                "spec": {"nodeName": node_name, "overhead": {"cpu": "10m"},
                         "initContainers": [{"resources": {"requests": {"memory": "40Gi"}}}],
                         "containers": [{"resources": {"requests": {"cpu": cpu, "memory": memory}}}]}}

    answers = {
        "/api/v1/nodes": {"items": [{"metadata": {"name": "gpu-a", "labels": live("gpu-a").labels},
                                     "status": {"allocatable": {"cpu": "64", "memory": "200Gi", "nvidia.com/gpu": "8",
                                                                "pods": "110"},
                                                "conditions": [{"type": "Ready", "status": "True"}]}}]},
        "/api/v1/pods": {"items": [ds_pod("gpu-a", "990m", "10Gi"), ds_pod("gpu-a", "1", "20Gi", "ReplicaSet")]},
        "/apis/storage.k8s.io/v1/storageclasses": {"items": [{"metadata": {"name": "efs"},
                                                              "provisioner": "efs.csi.aws.com"}]},
    }

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=answers.get(request.url.path, {"items": []}))

    with httpx.Client(transport=httpx.MockTransport(answer), base_url="https://k") as client:
        state = read_cluster(client, "the test cluster", "default")
    (n,) = state.nodes or ()
    assert n.daemons == (1000, 40 * 1024, 1), "the init container's 40 GiB beats the main 10 GiB; overhead counted"
    assert state.provisioners == {"efs": "efs.csi.aws.com"}
    state = ClusterState(**dict(state.__dict__, api_versions=SERVED))
    pool = {"name": "h100", "gpuProduct": "H100-80GB", "gpusPerNode": 8, "nodeCount": 1}
    doc = stack_doc(dict(SINGLE_GPU, replicas=8), cluster=kube(), nodePools=[pool])
    reason = refused(planned(doc, state))["qwen3-8b"][1]
    assert "replica 8 of 8" in reason and "memory" in reason
    assert "qwen3-8b" in planned(stack_doc(dict(SINGLE_GPU, replicas=7), cluster=kube(), nodePools=[pool]),
                                 state).deployed


def test_a_spread_that_does_not_fit_is_refused_naming_what_each_node_holds() -> None:
    """3 one-GPU replicas on nodes with 2 and 1 free GPUs: first fit would pack them, but pinned to 2 nodes the
    scheduler may put 2 on either, so the plan holds 2 (on one node) and refuses the third by name."""
    from tkf_infra.plan.admission import Demand, PodAsk, PoolNodes
    from tkf_infra.plan.pins import pack_pool
    from tkf_infra.sizing.node_room import NodeRoom

    nodes = PoolNodes("p", (NodeRoom("a", 100000, 10**6, 2), NodeRoom("b", 100000, 10**6, 1)), "test", named=True)
    (stage, reason), = pack_pool(nodes, [Demand("m", 3, 1, PodAsk(1000, 1024, 1))]).refused.values()
    assert stage == "capacity" and "model m: replica 3 of 3 fits on no node of pool p" in reason
    assert "room for its 3 pods spread evenly" in reason and "the nodes hold 2 on a, 1 on b of its pods" in reason
    assert "lower replicas to 2" in reason
    two = pack_pool(nodes, [Demand("m", 2, 1, PodAsk(1000, 1024, 1))])
    assert not two.refused and two.pins["m"].nodes == ("a",) and two.pins["m"].per_node == 2


def test_pins_read_back_from_outputs_the_engine_returns_as_floats() -> None:
    """`readStackOutputs` answers with protobuf Struct values, whose numbers are all floats."""
    plan = planned(prod("vllm"))

    def floats(v: Any) -> Any:
        return ({k: floats(x) for k, x in v.items()} if isinstance(v, dict) else [floats(x) for x in v]
                if isinstance(v, list) else float(v) if isinstance(v, int) and not isinstance(v, bool) else v)

    back = read_pins(floats(endpoints_output(plan)))
    assert back == dict(plan.pins) and len(back) == 4
    assert all(back[m].ask == PodAsk(fp["pod"]["cpuMillis"], fp["pod"]["memoryMiB"], fp["pod"]["gpus"])
               for m, fp in plan.footprints.items())
    assert read_pins({"x": {"name": "x", "footprint": {"pin": {"nodes": ["a"], "podsPerNode": 1.5}}}}) == {}
    assert read_pins(None) == {} and read_pins({"x": "garbage"}) == {}


def test_the_program_keeps_an_untouched_models_pod_template_when_another_model_is_added() -> None:
    """End to end through the program: the last run's outputs (what `readStackOutputs` answers) carry the pins,
    so adding a model ahead of the others in the catalog leaves their rendered pod templates as they were."""
    from tkf_infra.outputs import DEPLOYED_OUTPUT, ENDPOINTS_OUTPUT, deployed_entry

    pool = {"name": "h100", "gpuProduct": "H100-80GB", "gpusPerNode": 8, "nodeCount": 4, "nodes": NODES,
            "nodeResources": H100_NODE, "taints": [TAINT]}
    a = dict(SINGLE_GPU, name="a", servedName="a", replicas=3)
    b = dict(SINGLE_GPU, name="b", servedName="b", replicas=2)
    first = stack_doc(a, b, backend="vllm", nodePools=[pool])
    plan = planned(first)
    last = {ENDPOINTS_OUTPUT: endpoints_output(plan),
            DEPLOYED_OUTPUT: {m.entry.name: deployed_entry(m.entry) for m in plan.models}}

    def templates(doc: dict[str, Any], previous: dict[str, Any] | None) -> dict[str, Any]:
        h = program(doc, lock=LOCK, previous=previous)
        return {r.metadata["name"]: r.spec["template"]["spec"] for r in h.resources
                if r.type == "kubernetes:apps/v1:Deployment"}

    before = templates(first, None)
    newcomer = dict(SINGLE_GPU, name="c", servedName="c", replicas=8, priority=100)
    after = templates(stack_doc(newcomer, a, b, backend="vllm", nodePools=[pool]), last)
    assert after["a"] == before["a"] and after["b"] == before["b"]
    assert after["c"]["affinity"] != before["a"]["affinity"], "the newcomer goes around them"
    fresh = templates(stack_doc(newcomer, a, b, backend="vllm", nodePools=[pool]), None)
    assert fresh["a"]["affinity"] != before["a"]["affinity"], "without the last outputs a higher priority moves a"
