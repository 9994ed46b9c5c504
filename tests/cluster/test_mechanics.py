"""The cluster tier's own mechanics, each shown on the real scheduler and controllers with kwok's nodes:
GPU pods bound and Ready, Job pods completing, taints and GPU counts refused in the scheduler's own
words, claims bound under both binding modes on the right node, a node lost and its pod moved, a pod
that never turns Ready or crash-loops when a test says so, and MIG slices advertised for the layout a
node is labelled with. Every test makes its own nodes (``make_nodes``) and selects only them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cluster.conftest import MakeNodes, node_group
from tests.cluster.harness import (
    condition,
    pod_ready,
    running_cluster,
    set_pod_fault,
    unscheduled,
    wait_pods,
)
from tests.cluster.nodes import create_nodes, mark_not_ready, mark_ready, mig_resources, node_ready, pool_nodes
from tests.cluster.storage import LOCAL_CLASS, SELECTED_NODE, SHARED_CLASS
from tests.kube.client import KubeClient, Obj
from tkf_infra import names

pytestmark = [pytest.mark.apiserver, pytest.mark.cluster]

IMAGE = "registry.invalid/tkf-test:1"  # kwok starts no container: never pulled
#: The prod stack's pool (Pulumi.prod.yaml), one node by default.
H100_POOL: dict[str, Any] = {
    "name": "h100", "gpuProduct": "NVIDIA-H100-80GB-HBM3", "gpusPerNode": 8, "nodeCount": 1,
    "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    "nodeResources": {"cpu": "191450m", "memory": "2095697Mi"}}
GPU_TOLERATION = {"key": names.GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}


def pod(name: str, namespace: str, selector: dict[str, str], *, gpus: int = 0, tolerate: bool = True,
        resources: dict[str, str] | None = None, claim: str | None = None) -> Obj:
    limits = {**({names.GPU_RESOURCE: str(gpus)} if gpus else {}), **(resources or {})}
    spec: dict[str, Any] = {
        "nodeSelector": selector, "tolerations": [GPU_TOLERATION] if tolerate else [],
        "containers": [{"name": "main", "image": IMAGE,
                        "resources": {"requests": {"cpu": "1", "memory": "1Gi", **limits}, "limits": limits}}]}
    if claim:
        spec["volumes"] = [{"name": "cache", "persistentVolumeClaim": {"claimName": claim}}]
        spec["containers"][0]["volumeMounts"] = [{"name": "cache", "mountPath": "/cache"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace,
                                                            "labels": {"app": name}}, "spec": spec}


def deployment(name: str, namespace: str, selector: dict[str, str], gpus: int) -> Obj:
    template = pod(name, namespace, selector, gpus=gpus)
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": template["spec"]}}}


def claim(name: str, namespace: str, storage_class: str) -> Obj:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": namespace},
            "spec": {"storageClassName": storage_class, "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "10Gi"}}}}


def test_a_gpu_pod_is_bound_and_ready_and_a_job_pod_completes(kube: KubeClient, cluster_namespace: str,
                                                              make_nodes: MakeNodes) -> None:
    [node] = make_nodes(H100_POOL)
    sel = node_group(kube, node)
    kube.create(pod("server", cluster_namespace, sel, gpus=8))
    [ready] = wait_pods(kube, cluster_namespace, "app=server")
    assert ready["spec"]["nodeName"] == node and ready["status"]["phase"] == "Running"
    assert ready["status"]["podIP"].startswith("10.244.")

    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "fetch", "namespace": cluster_namespace},
           "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": {"app": "fetch"}}, "spec": {
               **pod("fetch", cluster_namespace, sel)["spec"], "restartPolicy": "Never"}}}}
    kube.create(job)
    kube.wait_condition("batch/v1", "Job", "fetch", "Complete", cluster_namespace, timeout=60)


def test_the_scheduler_refuses_an_untolerated_taint_and_missing_gpus_in_its_own_words(
        kube: KubeClient, cluster_namespace: str, make_nodes: MakeNodes) -> None:
    [node] = make_nodes(H100_POOL)
    sel = node_group(kube, node)
    kube.create(pod("untolerated", cluster_namespace, sel, gpus=1, tolerate=False))
    kube.create(pod("too-big", cluster_namespace, sel, gpus=9))
    messages: dict[str, str] = {}

    def refused() -> bool:
        messages.update(unscheduled(kube, cluster_namespace))
        return len(messages) == 2

    kube.wait_for(refused, "both pods refused by the scheduler", 60, 0.5)
    # Nodes of other tests fail the nodeSelector; this test's node the taint, or the GPU count.
    assert "1 node(s) had untolerated taint(s)" in messages[f"{cluster_namespace}/untolerated"], messages
    assert "1 Insufficient nvidia.com/gpu" in messages[f"{cluster_namespace}/too-big"], messages


def test_claims_bind_at_once_or_on_the_node_of_their_first_consumer(
        kube: KubeClient, cluster_namespace: str, make_nodes: MakeNodes) -> None:
    nodes = make_nodes({**H100_POOL, "nodeCount": 2})
    sel = node_group(kube, nodes[0])
    kube.create(claim("shared", cluster_namespace, SHARED_CLASS))
    kube.create(claim("local", cluster_namespace, LOCAL_CLASS))

    def phase(name: str) -> str:
        return str(((kube.get("v1", "PersistentVolumeClaim", name, cluster_namespace) or {}).get("status") or {})
                   .get("phase"))

    kube.wait_for(lambda: phase("shared") == "Bound", "the Immediate claim bound without a consumer", 60, 0.5)
    assert phase("local") == "Pending"  # waits for its first consumer

    kube.create(pod("consumer", cluster_namespace, sel, gpus=1, claim="local"))
    [consumer] = wait_pods(kube, cluster_namespace, "app=consumer")
    local = kube.get("v1", "PersistentVolumeClaim", "local", cluster_namespace) or {}
    assert local["status"]["phase"] == "Bound"
    assert local["metadata"]["annotations"][SELECTED_NODE] == consumer["spec"]["nodeName"]
    pv = kube.get("v1", "PersistentVolume", local["spec"]["volumeName"]) or {}
    [term] = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert term["matchExpressions"][0]["values"] == [consumer["spec"]["nodeName"]]

    # A second consumer of the local claim can only go where the volume is, whatever else has room.
    kube.create(pod("second", cluster_namespace, sel, gpus=1, claim="local"))
    [second] = wait_pods(kube, cluster_namespace, "app=second")
    assert second["spec"]["nodeName"] == consumer["spec"]["nodeName"]


def test_a_node_gone_not_ready_is_tainted_and_its_pod_moves(kube: KubeClient, cluster_namespace: str,
                                                            make_nodes: MakeNodes) -> None:
    nodes = make_nodes({**H100_POOL, "nodeCount": 2})
    kube.create(deployment("server", cluster_namespace, node_group(kube, nodes[0]), gpus=8))
    [first] = wait_pods(kube, cluster_namespace, "app=server")
    lost = first["spec"]["nodeName"]

    mark_not_ready(kube, lost)
    node = kube.get("v1", "Node", lost) or {}
    assert node_ready(node) == "False"
    assert {t["key"] for t in node["spec"]["taints"]} >= {"node.kubernetes.io/not-ready"}

    def moved() -> bool:
        pods = kube.list_objects("v1", "Pod", cluster_namespace, "app=server")
        return any(p["spec"].get("nodeName") not in (None, lost) and pod_ready(p) for p in pods)

    kube.wait_for(moved, "the Deployment's pod evicted and Ready on the other node", 90, 0.5)
    mark_ready(kube, lost)


@pytest.mark.parametrize("fault", ["never-ready", "crash-loop"])
def test_a_pod_fails_to_turn_ready_when_a_test_says_so(kube: KubeClient, cluster_namespace: str,
                                                       make_nodes: MakeNodes, fault: str) -> None:
    [node] = make_nodes(H100_POOL)
    kube.create(pod("server", cluster_namespace, node_group(kube, node), gpus=1))
    wait_pods(kube, cluster_namespace, "app=server")
    set_pod_fault(kube, cluster_namespace, "server", fault)

    def unready() -> bool:
        p = kube.get("v1", "Pod", "server", cluster_namespace) or {}
        return condition(p, "Ready") is not None and not pod_ready(p)

    kube.wait_for(unready, f"the pod {fault}", 60, 0.5)
    p = kube.get("v1", "Pod", "server", cluster_namespace) or {}
    [status] = p["status"]["containerStatuses"]
    assert p["status"]["phase"] == "Running"
    if fault == "crash-loop":
        assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff" and status["restartCount"] > 0
    else:
        assert "running" in status["state"] and status["ready"] is False


def test_mig_slices_are_advertised_for_the_layout_a_node_is_labelled_with(
        kube: KubeClient, cluster_namespace: str, make_nodes: MakeNodes) -> None:
    [node] = make_nodes({**H100_POOL, "mig": True}, mig_strategy="mixed")
    config = {"tkf-test": [{"devices": [0, 1], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
                           {"devices": [2, 3, 4, 5, 6, 7], "mig-enabled": False}]}
    kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": names.MIG_CONFIG_NAME, "namespace": cluster_namespace},
                 "data": {names.MIG_CONFIG_KEY: yaml.safe_dump({"version": "v1", "mig-configs": config})}})
    kube.request("PATCH", f"/api/v1/nodes/{node}", json={"metadata": {"labels": {names.MIG_CONFIG_LABEL: "tkf-test"}}},
                 headers={"Content-Type": "application/merge-patch+json"})
    assert mig_resources(config["tkf-test"], 8) == {"nvidia.com/mig-1g.10gb": 14, names.GPU_RESOURCE: 6}

    def advertised() -> bool:
        room = ((kube.get("v1", "Node", node) or {}).get("status") or {}).get("allocatable") or {}
        return room.get("nvidia.com/mig-1g.10gb") == "14" and room.get(names.GPU_RESOURCE) == "6"

    kube.wait_for(advertised, "the node's MIG slices advertised", 30, 0.5)
    kube.create(pod("slice", cluster_namespace, node_group(kube, node), resources={"nvidia.com/mig-1g.10gb": "1"}))
    [placed] = wait_pods(kube, cluster_namespace, "app=slice")
    assert placed["spec"]["nodeName"] == node


def test_another_scheduler_profile_runs_when_given(tmp_path: Path) -> None:
    """``running_cluster(scheduler_config=…)``: kube-scheduler runs that KubeSchedulerConfiguration (here
    bin-packing, MostAllocated), on a cluster of its own: two pods share a node the default profile
    (LeastAllocated) puts them on two (checked by hand with ``scheduler_config=None``: the second pod went
    to the emptier node)."""
    config = tmp_path / "scheduler.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "profiles": [{"schedulerName": "default-scheduler", "pluginConfig": [{"name": "NodeResourcesFit", "args": {
            "scoringStrategy": {"type": "MostAllocated", "resources": [
                {"name": names.GPU_RESOURCE, "weight": 1}, {"name": "cpu", "weight": 1}]}}}]}]}))
    with running_cluster(tmp_path / "cluster", scheduler_config=config) as cluster, cluster.client() as kube:
        made = create_nodes(kube, pool_nodes({**H100_POOL, "nodeCount": 2}))
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "packed"}})
        for i in range(2):
            kube.create(pod(f"p{i}", "packed", {}, gpus=1, resources={"cpu": "60"}))
            wait_pods(kube, "packed", f"app=p{i}")  # one after the other: the second sees the first's GPUs used
        placed = {p["spec"]["nodeName"] for p in kube.list_objects("v1", "Pod", "packed")}
        assert len(placed) == 1 and placed <= set(made), placed
        cluster.check_alive()
