"""A weight cache's access mode never flips on an existing claim (tkf_infra/plan/cache_modes.py).

Why: the Kubernetes provider replaces a claim whose `spec.accessModes` change, and a replaced cache fails `up`
under `serving.protect`, collides with its retained self, or is downloaded again. The catalog edits that used to
flip it — a second model on the same weights, a second replica, removing one — keep the claim's mode here, read
from the last run's published outputs (render mode), from the live claim (kubeconfig mode), or for a stack last
run before the key existed, from its `deployed` output by the rule that chose it then. A new claim on a class
several nodes mount is ReadWriteMany from its first reader. A ReadWriteOnce claim's readers are packed on its
node, and a reader that cannot be is refused by name.
"""

from __future__ import annotations

from typing import Any

import httpx

from tests.mocks import QWEN3_8B, SINGLE_GPU, program, stack_doc
from tests.test_admission import H100_NODE, SERVED, kube, live, planned, refused
from tkf_infra.config import validate_catalog
from tkf_infra.hub.lock import load_lock
from tkf_infra.live.cluster import read_cluster
from tkf_infra.names import weight_cache
from tkf_infra.outputs import DEPLOYED_OUTPUT, ENDPOINTS_OUTPUT, deployed_entry, endpoints_output
from tkf_infra.plan.admission import W_CACHE_CLASS_KEPT, ClusterState, LivePvc
from tkf_infra.plan.cache_modes import ACCESS_KEY, RWO, RWX, legacy_modes, published_modes
from tkf_infra.plan.pins import read_pins
from tkf_infra.program import footprints

LOCK = load_lock()
NODES = ["gpu-a", "gpu-b", "gpu-c"]
POOL = {"name": "h100", "gpuProduct": "H100-80GB", "gpusPerNode": 8, "nodeCount": 3, "nodes": NODES,
        "nodeResources": H100_NODE}
CACHE = weight_cache(QWEN3_8B["repo"], QWEN3_8B["revision"])
PVC_TYPE = "kubernetes:core/v1:PersistentVolumeClaim"


def reader(name: str, replicas: int = 1, **kw: Any) -> dict[str, Any]:
    return dict(SINGLE_GPU, name=name, servedName=name, replicas=replicas, **kw)


def last_outputs(plan: Any) -> dict[str, Any]:
    """What `readStackOutputs` answers after a run of `plan`."""
    return {ENDPOINTS_OUTPUT: endpoints_output(plan),
            DEPLOYED_OUTPUT: {m.entry.name: deployed_entry(m.entry) for m in plan.models}}


def claim(doc: dict[str, Any], previous: dict[str, Any] | None = None) -> Any:
    """The weight cache's claim the program registers (the whole program under mocks)."""
    h = program(doc, lock=LOCK, previous=previous)
    (pvc,) = [r for r in h.resources if r.type == PVC_TYPE]
    return pvc


def plan_after(doc: dict[str, Any], previous: dict[str, Any], cluster: ClusterState | None = None) -> Any:
    """The plan of `doc` after a run whose outputs are `previous`, as the program hands them over."""
    from tkf_infra.plan import plan_fleet

    catalog = validate_catalog(doc)
    return plan_fleet(catalog, lock=LOCK, cluster=cluster, previous=previous[DEPLOYED_OUTPUT],
                      footprints=footprints(catalog), previous_pins=read_pins(previous[ENDPOINTS_OUTPUT]),
                      previous_claims=published_modes(previous[ENDPOINTS_OUTPUT]))


def test_a_second_reader_or_replica_keeps_a_read_write_once_claim() -> None:
    """Render mode: the first run publishes ReadWriteOnce for one reader of one replica; adding a second model on
    the same weights and a second replica keeps it (the engine is also told to ignore the field), and every reader
    is packed and pinned on the node the claim's reader ran on."""
    first_doc = stack_doc(reader("a"), backend="vllm", nodePools=[POOL])
    first = planned(first_doc)
    assert first.footprints["a"][ACCESS_KEY] == RWO and first.pins["a"].nodes == ("gpu-a",)
    pvc = claim(first_doc)
    assert pvc.spec["accessModes"] == [RWO]
    assert "spec.accessModes" in pvc.options["ignoreChanges"], "an existing claim's mode is never diffed"
    previous = last_outputs(first)
    for models in ([reader("a"), reader("b")], [reader("a", 2)], [reader("a", 2), reader("b", 3)]):
        doc = stack_doc(*models, backend="vllm", nodePools=[POOL])
        plan = plan_after(doc, previous)
        assert plan.cache_modes == {CACHE: RWO}, models
        assert {m: plan.pins[m].nodes for m in plan.deployed} == {m: ("gpu-a",) for m in plan.deployed}, models
        assert claim(doc, previous).spec["accessModes"] == [RWO], models
    # Without the last run's outputs (a new stack) the same catalog is a new claim several pods read.
    assert planned(stack_doc(reader("a", 2), backend="vllm", nodePools=[POOL])).cache_modes == {CACHE: RWX}


def test_removing_a_reader_keeps_a_read_write_many_claim() -> None:
    """The other direction: two readers made the claim ReadWriteMany; removing one used to flip it back."""
    first = planned(stack_doc(reader("a"), reader("b"), backend="vllm", nodePools=[POOL]))
    assert first.cache_modes == {CACHE: RWX}
    doc = stack_doc(reader("a"), backend="vllm", nodePools=[POOL])
    assert plan_after(doc, last_outputs(first)).cache_modes == {CACHE: RWX}
    assert claim(doc, last_outputs(first)).spec["accessModes"] == [RWX]


def test_a_storage_class_change_keeps_each_existing_claim_on_its_class_and_names_it() -> None:
    """`.spec.storageClassName` is force-new like the mode: the engine ignores it on an existing claim, new caches
    get the new class, and preview names each cache left on the old class with the way to move it."""
    pvc = claim(stack_doc(reader("a"), serving={"storageClass": "fast"}))
    assert pvc.spec["storageClassName"] == "fast"
    assert {"spec.accessModes", "spec.storageClassName"} <= set(pvc.options["ignoreChanges"]), \
        "an existing claim's class is never diffed, so a class change replaces no cache"
    doc = stack_doc(reader("a"), cluster=kube(), serving={"storageClass": "fast"})
    nodes = tuple(live(n) for n in NODES)
    old = ClusterState("the test cluster", nodes, api_versions=SERVED,
                       pvcs={CACHE: LivePvc(CACHE, 20, True, "slow", (RWO,))})
    plan = planned(doc, old)
    assert "a" in plan.deployed, "a cache on another class is kept and serves, it is not refused"
    (note,) = [w for w in plan.warnings if w.startswith(f"[{W_CACHE_CLASS_KEPT}]")]
    assert f"weight cache {CACHE}" in note and "read by a" in note and "stays on StorageClass 'slow'" in note
    assert "serving.storageClass is 'fast'" in note and f"kubectl delete pvc {CACHE} -n llm-serving" in note
    assert "pulumi up --refresh" in note
    same = ClusterState("the test cluster", nodes, api_versions=SERVED,
                        pvcs={CACHE: LivePvc(CACHE, 20, True, "fast", (RWO,))})
    assert not [w for w in planned(doc, same).warnings if W_CACHE_CLASS_KEPT in w], "same class: nothing to say"
    default = ClusterState("the test cluster", nodes, api_versions=SERVED, default_storage_class="fast",
                           pvcs={CACHE: LivePvc(CACHE, 20, True, "slow", (RWO,))})
    unset = planned(stack_doc(reader("a"), cluster=kube()), default)
    assert any("the cluster's default StorageClass (serving.storageClass is unset) is 'fast'" in w
               for w in unset.warnings if W_CACHE_CLASS_KEPT in w), "no class set: the cluster's default is the one"


def test_a_class_several_nodes_mount_is_read_write_many_from_the_first_reader() -> None:
    """Decided by a fact no catalog edit changes: the setting, or a shared file system's provisioner read live."""
    one = stack_doc(reader("a"), backend="vllm", nodePools=[POOL], serving={"storageMultiNode": True})
    assert planned(one).cache_modes == {CACHE: RWX}
    assert claim(one).spec["accessModes"] == [RWX]
    nodes = tuple(live(n) for n in NODES)
    efs = ClusterState("the test cluster", nodes, api_versions=SERVED, default_storage_class="efs",
                       provisioners={"efs": "efs.csi.aws.com"})
    assert planned(stack_doc(reader("a"), cluster=kube()), efs).cache_modes == {CACHE: RWX}
    ebs = ClusterState(**dict(efs.__dict__, provisioners={"efs": "ebs.csi.aws.com"}))
    assert planned(stack_doc(reader("a"), reader("b"), cluster=kube()), ebs).cache_modes == {CACHE: RWO}


def test_kubeconfig_mode_keeps_the_live_claims_mode() -> None:
    """The cluster's word first: a live ReadWriteOnce claim keeps its mode when a reader is added (its readers on
    the node it was pinned to), a live ReadWriteMany one when the class is now known as one node's, and a claim
    that is not there any more (deleted by hand) is a new one."""
    nodes = tuple(live(n) for n in NODES)

    def state(*modes: str) -> ClusterState:
        pvcs = {CACHE: LivePvc(CACHE, 20, True, None, modes)} if modes else {}
        return ClusterState("the test cluster", nodes, api_versions=SERVED, pvcs=pvcs)

    first = planned(stack_doc(reader("a"), cluster=kube()), state(RWO))
    doc = stack_doc(reader("a", 2), reader("b"), cluster=kube())
    plan = plan_after(doc, last_outputs(first), state(RWO))
    assert plan.cache_modes == {CACHE: RWO}
    assert {plan.pins[m].nodes for m in ("a", "b")} == {first.pins["a"].nodes}
    published_rwo = {ENDPOINTS_OUTPUT: {"a": {"name": "a", "footprint": {"weightCache": CACHE, ACCESS_KEY: RWO}}},
                     DEPLOYED_OUTPUT: {}}
    assert plan_after(doc, published_rwo, state()).cache_modes == {CACHE: RWX}, "live: no claim, a new one"
    assert plan_after(stack_doc(reader("a"), cluster=kube()), published_rwo, state(RWX)).cache_modes == {CACHE: RWX}


def test_a_read_write_once_claim_whose_node_is_lost_moves_with_all_its_readers() -> None:
    """The node a ReadWriteOnce claim's readers ran on goes NotReady: the readers are re-planned together on one
    usable node (the claim follows them), not refused for a node that is gone."""
    nodes = tuple(live(n) for n in NODES)
    state = ClusterState("the test cluster", nodes, api_versions=SERVED,
                         pvcs={CACHE: LivePvc(CACHE, 20, True, None, (RWO,))})
    first = planned(stack_doc(reader("a"), cluster=kube()), state)
    assert first.pins["a"].nodes == ("gpu-a",)
    lost = ClusterState(**dict(state.__dict__, nodes=(live("gpu-a", ready=False), *nodes[1:])))
    plan = plan_after(stack_doc(reader("a"), reader("b"), cluster=kube()), last_outputs(first), lost)
    assert not plan.excluded and plan.cache_modes == {CACHE: RWO}
    assert plan.pins["a"].nodes == plan.pins["b"].nodes and plan.pins["a"].nodes != ("gpu-a",)


def test_a_read_write_once_claims_reader_that_cannot_share_its_node_is_refused_by_name() -> None:
    """A multi-node reader, or one the claim's node has no room for: refused at `storage`, naming the model, the
    cache, the field and value, what is allowed and the ways out; the claim's other readers deploy."""
    first = planned(stack_doc(reader("a"), backend="vllm", nodePools=[POOL]))
    previous = last_outputs(first)
    wide = reader("wide", nodeCount=2, gpusPerNode=1, pipelineParallelSize=2)
    plan = plan_after(stack_doc(reader("a"), wide, backend="vllm", nodePools=[POOL]), previous)
    stage, reason = refused(plan)["wide"]
    assert stage == "storage" and plan.deployed == {"a"} and plan.cache_modes == {CACHE: RWO}
    for words in (f"model wide: its weight cache {CACHE}", f"spec.accessModes [{RWO}]", "its pods run on different",
                  f"Allowed: every reader of {CACHE} on that one node", "serving.storageMultiNode: true",
                  "`pulumi refresh`"):
        assert words in reason, (words, reason)
    full = reader("full", 9)  # 9 one-GPU pods: more than gpu-a's 8 GPUs
    plan = plan_after(stack_doc(reader("a"), full, backend="vllm", nodePools=[POOL]), previous)
    assert refused(plan)["full"][0] == "storage"
    assert "its cache is on node gpu-a, which has no room for its 9 pod(s)" in refused(plan)["full"][1]


def test_a_stack_last_run_before_the_published_mode_recomputes_the_old_rule() -> None:
    """Outputs without `weightCacheAccess`: the mode the old rule chose, from the `deployed` entries."""
    a, twin = reader("a"), reader("b")
    entries = {m["name"]: m for m in (a, twin)}
    assert legacy_modes({"a": a}, None) == {CACHE: RWO}
    assert legacy_modes(entries, None) == legacy_modes({"a": reader("a", 2)}, True) == {CACHE: RWX}
    assert legacy_modes({"a": dict(a, scaling={"minReplicas": 1, "maxReplicas": 3})}, None) == {CACHE: RWX}
    assert legacy_modes(entries, False) == {CACHE: RWO}
    assert legacy_modes({"x": "garbage", "y": {"repo": 1}}, None) == {} == legacy_modes(None, None)
    first = planned(stack_doc(a, backend="vllm", nodePools=[POOL]))
    old = last_outputs(first)
    for ep in old[ENDPOINTS_OUTPUT].values():
        del ep["footprint"][ACCESS_KEY]
    doc = stack_doc(reader("a", 2), backend="vllm", nodePools=[POOL])
    assert plan_after(doc, old).cache_modes == {CACHE: RWO}


def test_published_modes_read_only_what_they_understand() -> None:
    endpoints = {"a": {"footprint": {"weightCache": "w1", ACCESS_KEY: RWO}},
                 "b": {"footprint": {"weightCache": "w2", ACCESS_KEY: "ReadOnlyMany"}},
                 "c": {"footprint": {"weightCache": 3, ACCESS_KEY: RWX}}, "d": "x", "e": {"footprint": None}}
    assert published_modes(endpoints) == {"w1": RWO}
    assert published_modes(None) == published_modes([]) == {}


def test_the_edge_reads_each_claims_access_modes() -> None:
    claims = {"items": [{"metadata": {"name": "w1"}, "spec": {"accessModes": [RWX], "storageClassName": "efs",
                                                              "resources": {"requests": {"storage": "20Gi"}}},
                         "status": {"phase": "Bound", "capacity": {"storage": "20Gi"}}},
                        {"metadata": {"name": "w2"}, "spec": {"resources": {"requests": {"storage": "10Gi"}}}}]}

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=claims if request.url.path.endswith("/persistentvolumeclaims")
                              else {"items": []})

    with httpx.Client(transport=httpx.MockTransport(answer), base_url="https://k") as client:
        state = read_cluster(client, "the test cluster", "llm")
    assert state.pvcs["w1"].access_modes == (RWX,) and state.pvcs["w2"].access_modes == ()
