"""Node capacity, storage and topology admission (tkf_infra/plan/admission.py) under Pulumi mocks.

Every rule is checked through the whole program (`tests.mocks.program`) where the program's own
edge gives the data (render mode, the stack's settings, EC2 on moto, a kubeconfig that does not
answer); where the data is what a cluster would say, through `Edge(cluster=ClusterState(...))`,
the same plain data `tkf_infra.live.cluster` reads (tests/kube/platform/test_admission_live.py reads
it from a real API server).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.mocks import CPU, MULTI_NODE, SINGLE_GPU, stack_doc
from tkf_infra.config import validate_catalog
from tkf_infra.config.quantity import mebibytes, millicores
from tkf_infra.hub.lock import load_lock
from tkf_infra.plan.admission import (
    KSERVE_API,
    LWS_API,
    W_NODES_ABSENT,
    W_NODES_NO_GPUS,
    W_NODES_NOT_LIVE,
    W_NODES_UNCHECKED,
    W_NODES_UNREAD,
    W_STORAGE_NOT_LIVE,
    W_STORAGE_UNCHECKED,
    W_STORAGE_UNREAD,
    ClusterState,
    LiveNode,
    LivePvc,
    QuotaLimit,
    StorageCapacity,
)
from tkf_infra.program import footprints
from tkf_infra.sizing.node_room import eks_max_pods, eks_node_room, eks_reserved_cpu_millis

LOCK = load_lock()
SERVED = frozenset({"v1", LWS_API, KSERVE_API})
"""The APIs a cluster with the whole platform installed serves (the stacks here mark it alreadyInstalled)."""
QWEN3_32B = {"repo": "Qwen/Qwen3-32B", "revision": "9216db5781bf21249d130ec9da846c4624c16137"}
H100_NODE = {"cpu": "191450m", "memory": "2095697Mi"}


def planned(doc: dict[str, Any], cluster: ClusterState | None = None, previous: dict[str, Any] | None = None,
            ec2: Any = None) -> Any:
    """The plan the program makes of `doc` (plain data; the program tests below check what it logs)."""
    from tkf_infra.live.ec2 import ec2_facts
    from tkf_infra.plan import plan_fleet

    catalog = validate_catalog(doc)
    found, errors = ec2_facts(catalog, ec2, "us-east-1") if ec2 is not None else ({}, {})
    return plan_fleet(catalog, lock=LOCK, ec2=found, ec2_errors=errors, cluster=cluster, previous=previous,
                      footprints=footprints(catalog))


def refused(plan: Any) -> dict[str, tuple[str, str]]:
    return {x.name: (x.stage.value, " ".join(x.reasons)) for x in plan.excluded}


def codes(plan: Any) -> set[str]:
    return {w.split("]", 1)[0].lstrip("[") for w in plan.warnings if w.startswith("[")}


def h100_pool(count: int = 1, **kw: Any) -> dict[str, Any]:
    return {"name": "h100", "gpuProduct": "H100-80GB", "gpusPerNode": 8, "nodeCount": count, **kw}


def tp1_32b(replicas: int, name: str = "qwen3-32b") -> dict[str, Any]:
    return {"name": name, **QWEN3_32B, "servedName": name, "nodePool": "h100", "maxModelLen": 8192,
            "replicas": replicas}


def kube(**kw: Any) -> dict[str, Any]:
    return {"mode": "kubeconfig", "kubeconfig": "/nowhere", **kw}


def live(name: str, *, ready: bool = True, cordoned: bool = False, taints: tuple[dict[str, str], ...] = (),
         labels: dict[str, str] | None = None, cpu: str = "191450m", memory: str = "2095697Mi",
         gpus: str = "8") -> LiveNode:
    return LiveNode(name, labels or {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, taints,
                    {"cpu": cpu, "memory": memory, "nvidia.com/gpu": gpus, "pods": "110"}, ready, cordoned)


# ------------------------------------------------------------------------------------------------
# Figures
# ------------------------------------------------------------------------------------------------


def test_quantities_read_as_kubernetes_writes_them() -> None:
    assert millicores("191450m") == 191450 and millicores(192) == 192000 and millicores("1.5") == 1500
    assert mebibytes("2048Gi") == 2048 * 1024 and mebibytes("1e9") == 953 and mebibytes("1Ti") == 1024 * 1024
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        millicores("lots")


def test_eks_reservation_follows_the_ami_formula() -> None:
    """amazon-eks-ami v20260724 nodeadm: 11 MiB x max pods + 255 MiB, 6/1/0.5/0.5/0.25 % of the cores, 100Mi."""
    assert eks_max_pods(2, 50) == 100  # p5.48xlarge in nodeadm's instance-info.jsonl
    assert eks_max_pods(0, 0) == 110  # unknown: the kubelet's default
    assert eks_reserved_cpu_millis(1) == 60 and eks_reserved_cpu_millis(2) == 70
    assert eks_reserved_cpu_millis(4) == 80 and eks_reserved_cpu_millis(192) == 550
    p5 = eks_node_room("p5", 192, 2048 * 1024, 8, 2, 50)
    assert (p5.cpu_millis, p5.memory_mib, p5.pods) == (191450, 2048 * 1024 - 1355 - 100, 100)
    assert millicores(H100_NODE["cpu"]) == p5.cpu_millis and mebibytes(H100_NODE["memory"]) == p5.memory_mib


# ------------------------------------------------------------------------------------------------
# Node capacity
# ------------------------------------------------------------------------------------------------


def test_eight_tp1_replicas_of_a_32b_model_overflow_a_256_gib_node_on_memory() -> None:
    """The issue's case: each pod asks 34 GiB; eight of them do not fit in 256 GiB although 8 GPUs do."""
    pool = h100_pool(1, nodeResources={"cpu": 96, "memory": "256Gi"})
    doc = stack_doc(tp1_32b(8), CPU, nodePools=[pool])
    plan = planned(doc)
    stage, reason = refused(plan)["qwen3-32b"]
    assert stage == "capacity"
    assert "replica 8 of 8 fits on no node of pool h100" in reason
    assert "each pod asks 4.01 CPU, 34.0 GiB memory, 1 GPU" in reason
    assert "ran out of: memory (asked 34.0 GiB, at most 17.8 GiB free on a node)" in reason
    assert "lower replicas to 7" in reason and "Way out" in reason
    assert plan.deployed == {"tiny"}, "its healthy sibling deploys"
    assert W_NODES_NOT_LIVE in codes(plan), "a figure from the stack file says it was not read live"
    # Seven fit, with the same figures.
    assert "qwen3-32b" in planned(stack_doc(tp1_32b(7), nodePools=[pool])).deployed


def test_a_refusal_is_logged_and_published_with_its_siblings_deployed() -> None:
    from tests.mocks import program as mock_program

    pool = h100_pool(1, nodeResources={"cpu": 96, "memory": "256Gi"})
    h = mock_program(stack_doc(tp1_32b(8), SINGLE_GPU, nodePools=[pool]), lock=LOCK)
    errors = " ".join(h.errors())
    assert "qwen3-32b was left out of this deployment (capacity)" in errors
    assert "1 catalog entry was refused (qwen3-32b); the other 1 were deployed" in str(h.error)
    assert {r.name for r in h.resources if r.type == "tkf:serving:ModelServing"} == {"qwen3-8b"}


def test_gpus_cpu_and_memory_are_packed_at_once_and_multi_node_pods_take_different_nodes() -> None:
    # 2 nodes x 8 GPUs: the 405B takes one whole node per pod; nothing else fits beside it.
    pool = h100_pool(2, nodeResources=H100_NODE)
    plan = planned(stack_doc(MULTI_NODE, SINGLE_GPU, nodePools=[pool]))
    assert refused(plan)["qwen3-8b"][0] == "capacity"
    assert "ran out of: GPUs (asked 1, at most 0 free on a node)" in refused(plan)["qwen3-8b"][1]
    assert plan.footprints["llama-405b"]["nodes"] == [["h100-1", "h100-2"]]
    # Two nodes, one cordoned: the 405B's two pods need two nodes, and only one is usable.
    cluster = ClusterState("the test cluster", (live("n1"), live("n2", cordoned=True)), api_versions=SERVED)
    doc = stack_doc(MULTI_NODE, cluster=kube(), nodePools=[h100_pool(2)])
    reason = refused(planned(doc, cluster))["llama-405b"][1]
    assert "replica 1 of 1 (2 pods on different nodes) fits on no node" in reason
    assert "ran out of: nodes (the pool has no usable node)" in reason


def test_cpu_runs_out_on_a_small_node_before_gpus_do() -> None:
    pool = h100_pool(1, nodeResources={"cpu": "12", "memory": "1Ti"})
    plan = planned(stack_doc(dict(SINGLE_GPU, replicas=3), nodePools=[pool]))
    assert "ran out of: CPU (asked 4.01 CPU, at most 3.98 CPU free on a node)" in refused(plan)["qwen3-8b"][1]


def test_without_node_figures_only_gpus_are_packed_and_that_is_a_named_warning() -> None:
    plan = planned(stack_doc(SINGLE_GPU, nodePools=[h100_pool(1)]))
    assert not plan.excluded
    (warning,) = [w for w in plan.warnings if W_NODES_UNCHECKED in w]
    assert "set nodePools[h100].nodeResources" in warning


def test_live_nodes_win_and_cordoned_not_ready_or_untolerated_ones_count_as_absent() -> None:
    nodes = (live("n1"), live("n2", cordoned=True), live("n3", ready=False),
             live("n4", taints=({"key": "team", "value": "x", "effect": "NoSchedule"},)),
             live("cpu-1", labels={"kubernetes.io/os": "linux"}))
    cluster = ClusterState("the test cluster", nodes, api_versions=frozenset({"v1", LWS_API, KSERVE_API}))
    doc = stack_doc(dict(SINGLE_GPU, replicas=9), cluster={"mode": "kubeconfig", "kubeconfig": "/nowhere"},
                    nodePools=[h100_pool(4, nodeResources={"cpu": 1, "memory": "1Gi"})])
    plan = planned(doc, cluster)
    reason = refused(plan)["qwen3-8b"][1]
    assert "nodes from 1 Node(s) of the test cluster" in reason and "replica 9 of 9" in reason
    (absent,) = [w for w in plan.warnings if W_NODES_ABSENT in w]
    assert "n2 (cordoned)" in absent and "n3 (not Ready)" in absent and "n4 (taint team=x:NoSchedule" in absent
    assert "qwen3-8b" in planned(stack_doc(dict(SINGLE_GPU, replicas=8), cluster=doc["cluster"],
                                           nodePools=doc["nodePools"]), cluster).deployed


def test_no_registered_node_falls_back_to_the_settings_with_a_named_warning() -> None:
    cluster = ClusterState("the test cluster", (LiveNode("gpu-1"),), api_versions=SERVED)
    doc = stack_doc(SINGLE_GPU, cluster={"mode": "kubeconfig", "kubeconfig": "/nowhere"},
                    nodePools=[h100_pool(1, nodes=["gpu-1"], nodeResources=H100_NODE)])
    plan = planned(doc, cluster)
    assert plan.deployed == {"qwen3-8b"}
    (warning,) = [w for w in plan.warnings if W_NODES_NOT_LIVE in w]
    assert "no Node registered by a kubelet matches the nodes it lists (gpu-1)" in warning
    assert "planned from nodePools[h100].nodeResources" in warning


def test_models_deployed_before_hold_their_room() -> None:
    """A new entry earlier in the catalog does not push a running model out (it is refused instead)."""
    pool = h100_pool(1, nodeResources={"cpu": 96, "memory": "256Gi"})
    running = tp1_32b(6, "running")
    doc = stack_doc(tp1_32b(2, "newcomer"), running, nodePools=[pool])
    validated = validate_catalog(doc).models
    previous = {"running": next(m for m in validated if m.name == "running").model_dump(by_alias=True)}
    plan = planned(doc, previous=previous)
    assert "running" in plan.deployed and refused(plan)["newcomer"][0] == "capacity"
    assert refused(planned(doc))["running"][0] == "capacity", "without a previous run: catalog order"



def eks_pool(itype: str, gpus: int, nodes: int = 1) -> dict[str, Any]:
    return {"name": "h100", "kind": "eks", "instanceType": itype, "gpusPerNode": gpus, "nodeCount": nodes,
            "clusterName": "c", "nodeRoleArn": "arn:aws:iam::123456789012:role/n", "subnetIds": ["subnet-1"]}


def test_eks_nodes_come_from_ec2_less_the_kubelet_reservation(ec2: object) -> None:
    """g6e.xlarge: 4 vCPUs less 80m leave 3.92 CPU, under the 4.01 a single-GPU pod asks."""
    small = dict(SINGLE_GPU, maxModelLen=4096)
    plan = planned(stack_doc(small, nodePools=[eks_pool("g6e.xlarge", 1)]), ec2=ec2)
    stage, reason = refused(plan)["qwen3-8b"]
    assert stage == "capacity" and "EC2 g6e.xlarge (4 vCPUs, 32 GiB) less the EKS AMI's kube-reserved" in reason
    assert "ran out of: CPU (asked 4.01 CPU, at most 3.92 CPU free on a node)" in reason
    plan = planned(stack_doc(MULTI_NODE, SINGLE_GPU, nodePools=[eks_pool("p5.48xlarge", 8, 3)]), ec2=ec2)
    assert plan.deployed == {"llama-405b", "qwen3-8b"} and not plan.excluded
    assert "191.45 CPU, 2046.6 GiB per node" in plan.footprints["qwen3-8b"]["nodesFrom"]


def test_eks_program_run_on_moto_refuses_by_name(ec2: object) -> None:
    from tests.mocks import program as mock_program

    h = mock_program(stack_doc(dict(SINGLE_GPU, maxModelLen=4096), CPU, nodePools=[eks_pool("g6e.xlarge", 1)]),
                     lock=LOCK, ec2_client=ec2)
    assert "qwen3-8b was left out of this deployment (capacity)" in " ".join(h.errors())
    assert {r.name for r in h.resources if r.type == "tkf:serving:ModelServing"} == {"tiny"}


# ------------------------------------------------------------------------------------------------
# Storage
# ------------------------------------------------------------------------------------------------


def test_a_budget_refuses_the_caches_that_overflow_in_catalog_order_and_a_shared_cache_counts_once() -> None:
    twin = dict(SINGLE_GPU, name="qwen3-8b-twin", servedName="qwen3-8b-twin")  # same weights: one cache
    doc = stack_doc(SINGLE_GPU, twin, tp1_32b(1), nodePools=[h100_pool(1, nodeResources=H100_NODE)],
                    serving={"weightCacheBudgetGiB": 60})
    plan = planned(doc)
    assert plan.footprints["qwen3-8b"]["weightCacheGiB"] == 20 and plan.footprints["qwen3-32b"]["weightCacheGiB"] > 60
    assert plan.deployed == {"qwen3-8b", "qwen3-8b-twin"}
    stage, reason = refused(plan)["qwen3-32b"]
    assert stage == "storage" and "after the 20 GiB the caches admitted before it claim" in reason
    assert "serving.weightCacheBudgetGiB (60 GiB): 40 GiB left, overflows by" in reason
    assert "never deleted or shrunk" in reason
    assert W_STORAGE_NOT_LIVE in codes(plan)


def test_without_any_storage_figure_the_caches_are_unchecked_by_name() -> None:
    plan = planned(stack_doc(SINGLE_GPU, nodePools=[h100_pool(1, nodeResources=H100_NODE)]))
    assert not plan.excluded and W_STORAGE_UNCHECKED in codes(plan)


def test_a_cluster_that_says_nothing_of_storage_uses_the_budget_and_says_so() -> None:
    doc = stack_doc(SINGLE_GPU, cluster=kube(), nodePools=[h100_pool(1)], serving={"weightCacheBudgetGiB": 10})
    plan = planned(doc, ClusterState("the test cluster", nodes=(live("gpu-a"),), api_versions=SERVED))
    assert refused(plan)["qwen3-8b"][0] == "storage", "20 GiB against the 10 GiB budget"
    note = next(w for w in plan.warnings if w.startswith(f"[{W_STORAGE_NOT_LIVE}]"))
    assert "the test cluster has no CSIStorageCapacity" in note and "(10 GiB)" in note


def test_quota_and_csi_capacity_limit_new_caches_and_an_existing_bound_cache_costs_nothing() -> None:
    nodes = (live("n1"),)
    big, small = tp1_32b(1), dict(SINGLE_GPU)
    doc = stack_doc(small, big, cluster=kube(), nodePools=[h100_pool(1)], serving={"storageClass": "fast"})
    pvc_small = footprints(validate_catalog(doc)).cache_name(str(small["repo"]), str(small["revision"]))
    quota = QuotaLimit("storage", "fast.storageclass.storage.k8s.io/requests.storage", 100, 70)
    cluster = ClusterState("the test cluster", nodes, quotas=(quota,), api_versions=SERVED)
    plan = planned(doc, cluster)
    reason = refused(plan)["qwen3-32b"][1]
    assert "ResourceQuota storage fast.storageclass.storage.k8s.io/requests.storage (70 of 100 GiB used): 10 GiB " \
           "left, overflows by" in reason
    assert "qwen3-8b" in plan.deployed, "its 20 GiB fit in the 30 GiB left"
    # A cache that already exists (bound) is already counted in the quota's `used` and costs nothing new.
    full = QuotaLimit("storage", "requests.storage", 100, 100)
    bound = {pvc_small: LivePvc(pvc_small, 20, True, "fast")}
    plan = planned(doc, ClusterState("the test cluster", nodes, quotas=(full,), pvcs=bound,
                                     api_versions=SERVED))
    assert "qwen3-8b" in plan.deployed and refused(plan)["qwen3-32b"][0] == "storage"
    # CSIStorageCapacity: the class's segments, and the largest volume one can provision.
    caps = (StorageCapacity("fast", 500, 50), StorageCapacity("other", 10_000))
    plan = planned(doc, ClusterState("the test cluster", nodes, capacities=caps, api_versions=SERVED))
    assert "the largest volume it can provision is 50 GiB" in refused(plan)["qwen3-32b"][1]
    assert "qwen3-8b" in plan.deployed


def test_an_unreadable_storage_api_is_a_named_warning_and_the_budget_still_holds() -> None:
    cluster = ClusterState("the test cluster", (live("n1"),), storage_error="GET ... answered HTTP 403",
                           api_versions=SERVED)
    doc = stack_doc(SINGLE_GPU, cluster=kube(), nodePools=[h100_pool(1)], serving={"weightCacheBudgetGiB": 10})
    plan = planned(doc, cluster)
    assert W_STORAGE_UNREAD in codes(plan) and refused(plan)["qwen3-8b"][0] == "storage"


# ------------------------------------------------------------------------------------------------
# Topology support
# ------------------------------------------------------------------------------------------------


def test_multi_node_without_lws_served_is_refused_by_name_when_lws_is_already_installed() -> None:
    doc = stack_doc(MULTI_NODE, SINGLE_GPU, cluster=kube(), backend="vllm",
                    nodePools=[h100_pool(3, nodeResources=H100_NODE)])
    cluster = ClusterState("the test cluster", (), api_versions=frozenset({"v1", "apps/v1"}))
    plan = planned(doc, cluster)
    stage, reason = refused(plan)["llama-405b"]
    assert stage == "topology" and f"does not serve {LWS_API}" in reason and "alreadyInstalled" in reason
    assert plan.deployed == {"qwen3-8b"}
    assert not planned(doc, ClusterState("c", (), api_versions=frozenset({"v1", LWS_API, KSERVE_API}))).excluded
    # tkf-infra installs LWS itself: nothing to check.
    doc["platform"]["lws"]["alreadyInstalled"] = False
    assert not planned(doc, cluster).excluded


def test_kserve_backend_needs_kserve_served_when_already_installed() -> None:
    doc = stack_doc(SINGLE_GPU, cluster=kube(), nodePools=[h100_pool(1, nodeResources=H100_NODE)])
    plan = planned(doc, ClusterState("the test cluster", (), api_versions=frozenset({"v1", LWS_API})))
    assert refused(plan)["qwen3-8b"][0] == "topology" and "serving.kserve.io/v1alpha1" in refused(plan)["qwen3-8b"][1]


# ------------------------------------------------------------------------------------------------
# Sources that cannot be read
# ------------------------------------------------------------------------------------------------


def test_a_kubeconfig_that_does_not_answer_is_named_for_every_source(tmp_path: Path) -> None:
    kc = tmp_path / "kubeconfig"
    kc.write_text("apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{name: k, cluster: {server: "
                  "'https://127.0.0.1:9', insecure-skip-tls-verify: true}}]\ncontexts: [{name: c, context: "
                  "{cluster: k, user: u}}]\nusers: [{name: u, user: {token: t}}]\n")
    doc = stack_doc(SINGLE_GPU, cluster={"mode": "kubeconfig", "kubeconfig": str(kc)},
                    nodePools=[h100_pool(1, nodeResources=H100_NODE)])
    from tests.mocks import program as mock_program

    h = mock_program(doc, lock=LOCK)
    warnings = " ".join(h.warnings())
    assert h.error is None, h.error
    for code in (W_NODES_UNREAD, W_STORAGE_UNREAD, "topology-unreadable"):
        assert f"[{code}]" in warnings, code
    assert "GET /api/v1/nodes did not answer (ConnectError" in warnings


def test_a_kubeconfig_without_the_context_is_named() -> None:
    from tkf_infra.live.cluster import cluster_state

    state = cluster_state("/no/such/kubeconfig", "prod", "llm-serving")
    assert state.nodes is None and "cannot be read" in (state.nodes_error or "")
    doc = stack_doc(SINGLE_GPU, cluster=kube(), nodePools=[h100_pool(1)])
    plan = planned(doc, state)
    assert {W_NODES_UNREAD, W_STORAGE_UNCHECKED} <= codes(plan) or {W_NODES_UNREAD, W_STORAGE_UNREAD} <= codes(plan)
    assert not plan.excluded, "an unreadable source warns; it never refuses a model by itself"


def test_a_node_without_advertised_gpus_counts_per_who_installs_the_gpu_operator() -> None:
    bare = LiveNode("n1", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, (),
                    {"cpu": "191450m", "memory": "2095697Mi", "pods": "110"}, True, False)
    cluster = ClusterState("the test cluster", (bare,), api_versions=SERVED)
    doc = stack_doc(SINGLE_GPU, cluster=kube(), nodePools=[h100_pool(1)])
    plan = planned(doc, cluster)  # stack_doc: every piece alreadyInstalled
    assert "ran out of: GPUs (asked 1, at most 0 free on a node)" in refused(plan)["qwen3-8b"][1]
    (warning,) = [w for w in plan.warnings if W_NODES_NO_GPUS in w]
    assert "n1 advertise no nvidia.com/gpu yet; counted as none" in warning
    doc["platform"]["gpuOperator"]["alreadyInstalled"] = False  # installed by this very run
    plan = planned(doc, cluster)
    assert plan.deployed == {"qwen3-8b"}
    assert any("counted at gpusPerNode 8" in w for w in plan.warnings if W_NODES_NO_GPUS in w)


# ------------------------------------------------------------------------------------------------
# Seeing it: size, the endpoints output, status
# ------------------------------------------------------------------------------------------------


def test_size_shows_the_node_and_storage_footprint() -> None:
    import json

    from tkf_infra.ops.size import size_command
    from tkf_infra.sizing.params import SizingParams

    ref = f"{QWEN3_32B['repo']}@{QWEN3_32B['revision']}"
    params = SizingParams(vllm_version="0.32.0", max_model_len=8192)
    text, _ = size_command(ref, "H100-80GB", params)
    assert "node footprint: each pod asks 4.01 CPU, 34.0 GiB memory and 1 GPU(s) on one node; its weight cache is" \
           in " ".join(text.split())
    data = json.loads(size_command(ref, "H100-80GB", params, as_json=True)[0])
    assert data["footprint"]["pod"] == {"cpuMillis": 4010, "memoryMiB": 34 * 1024 + 32, "gpus": 1}
    assert data["footprint"]["weightCacheGiB"] == plan_cache_gib(tp1_32b(1))


def plan_cache_gib(model: dict[str, Any]) -> int:
    plan = planned(stack_doc(model, nodePools=[h100_pool(1, nodeResources=H100_NODE)]))
    return int(plan.footprints[model["name"]]["weightCacheGiB"])


def test_status_prints_the_published_footprint() -> None:
    from tkf_infra.live.model_status import ModelStatus, StatusResult
    from tkf_infra.live.status_view import render_table

    plan = planned(stack_doc(dict(SINGLE_GPU, replicas=2), nodePools=[h100_pool(1, nodeResources=H100_NODE)]))
    from tkf_infra.outputs import footprint_output

    published = footprint_output(plan, plan.model("qwen3-8b"))["footprint"]
    assert published["nodes"] == [["h100-1"], ["h100-1"]] and published["podsPerReplica"] == 1
    status = ModelStatus("qwen3-8b", "qwen3-8b", "llm-serving", True, footprint=published)
    text = render_table(StatusResult("http://prom", True, [status]))
    assert ("footprint: qwen3-8b: each pod asks 4.01 CPU, 22.0 GiB memory, 1 GPU(s); weight cache "
            f"{published['weightCache']} 20 GiB") in text
    assert status.to_json()["footprint"] == published
    assert "footprint" not in ModelStatus("x", "x", "ns", True).to_json(), "nothing published, nothing shown"


def test_identical_nodes_are_told_apart_while_packing_a_multi_node_replica() -> None:
    """Two pods of one replica on two nodes with the same figures (nodes are compared by identity)."""
    from tkf_infra.plan.admission import Demand, PodAsk, PoolNodes
    from tkf_infra.plan.pins import pack_pool
    from tkf_infra.sizing.node_room import NodeRoom

    nodes = PoolNodes("p", (NodeRoom("a", 1000, 1024, 0), NodeRoom("b", 1000, 1024, 0)), "test", gpus=False)
    packed = pack_pool(nodes, [Demand("m", 1, 2, PodAsk(0, 0, 0))])
    assert not packed.refused and packed.placed == {"m": [["a", "b"]]}


def test_an_eks_type_without_host_figures_falls_back_to_the_settings_by_name() -> None:
    """EC2 answered with GPUs but no VCpuInfo/MemoryInfo (a partial answer): named, then nodeResources."""
    from tkf_infra.sizing.ec2 import InstanceGpus
    from tkf_infra.sizing.gpus import lookup_gpu

    info = InstanceGpus("p5.48xlarge", "H100", "NVIDIA", 8, 81920, lookup_gpu("H100-80GB"))
    catalog = validate_catalog(stack_doc(SINGLE_GPU, nodePools=[{**eks_pool("p5.48xlarge", 8),
                                                                "nodeResources": H100_NODE}]))
    from tkf_infra.plan import plan_fleet

    plan = plan_fleet(catalog, lock=LOCK, ec2={"p5.48xlarge": info}, footprints=footprints(catalog))
    assert plan.deployed == {"qwen3-8b"}
    (warning,) = [w for w in plan.warnings if W_NODES_NOT_LIVE in w]
    assert "EC2 gave no vCPU and memory figures for p5.48xlarge" in warning and "nodeResources" in warning


def test_a_stack_with_no_models_says_nothing_of_storage() -> None:
    """A platform stack (no models) has no weight cache to check: no storage warning to act on."""
    plan = planned(stack_doc(nodePools=[h100_pool(1, nodeResources=H100_NODE)], serving={"weightCacheBudgetGiB": 60}))
    assert not plan.models and not {W_STORAGE_NOT_LIVE, W_STORAGE_UNCHECKED} & set(codes(plan))
