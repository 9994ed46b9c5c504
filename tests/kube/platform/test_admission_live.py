"""Node capacity, storage and topology admission read from a real kube-apiserver (issue 26).

Real Node, StorageClass, CSIStorageCapacity, ResourceQuota and PersistentVolumeClaim objects are
created on a server of this module's own (`start_apiserver`, so the package's server is left alone);
their status is written through the status subresource as the kubelet, the quota controller and the
PV controller would, and the node lifecycle controller's not-ready taint is removed (none of them runs
here). Then the program's edge reader (`tkf_infra.live.cluster`) reads them through the stack's
kubeconfig, and the plan refuses, by name and with the numbers:
a replica no node can hold (memory), a weight cache the storage class cannot provision, a
multi-node model without LeaderWorkerSet — while the siblings deploy; the whole program under
Pulumi mocks (the real edge, no engine) registers exactly the siblings. A credential the server
refuses makes every source a named warning.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.engine_fixtures import EngineStack
from tests.kube.apiserver import KubeAPIServer, own_apiserver
from tests.kube.client import KubeClient
from tests.mocks import QWEN3_8B, QWEN_05B, QWEN_72B, stack_doc
from tests.mocks import program as mock_program
from tkf_infra.config import validate_catalog
from tkf_infra.hub.lock import load_lock
from tkf_infra.live.cluster import cluster_state
from tkf_infra.names import weight_cache
from tkf_infra.ops.stacks import DEV_PASSPHRASE
from tkf_infra.plan import plan_fleet
from tkf_infra.program import footprints

pytestmark = pytest.mark.apiserver

LOCK = load_lock()
NS = "llm-admission"
CLASS = "fast"
PRODUCT = "NVIDIA-H100-80GB-HBM3"
POOL_LABELS = {"tkf.io/pool": "h100"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
QWEN3_32B = {"repo": "Qwen/Qwen3-32B", "revision": "9216db5781bf21249d130ec9da846c4624c16137"}
LLAMA_405B = {"repo": "meta-llama/Llama-3.1-405B-Instruct", "revision": "be673f326cab4cd22ccfef76109faf68e41aa5f1"}


def entry(name: str, ref: dict[str, str], **kw: Any) -> dict[str, Any]:
    return {"name": name, **ref, "servedName": name, "nodePool": "h100", "maxModelLen": 8192, **kw}


CATALOG = [
    entry("qwen3-8b", QWEN3_8B),  # its cache exists and is bound: costs nothing new
    entry("qwen3-32b", QWEN3_32B, replicas=8),  # 34 GiB each on a 256 GiB node beside the 8B: the 7th does not fit
    entry("qwen-72b", QWEN_72B, gpusPerNode=4, tensorParallelSize=4),  # a 182 GiB cache, volumes up to 80 GiB
    entry("llama-405b", LLAMA_405B, nodeCount=2, gpusPerNode=8, tensorParallelSize=8, pipelineParallelSize=2,
          hfTokenSecret="hf-token"),  # multi-node, LWS already installed but not served
    entry("qwen-05b", QWEN_05B),  # small: deploys
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPIServer]:
    with own_apiserver(tmp_path_factory.mktemp("admission-apiserver")) as srv:
        yield srv


def patch_status(kube: KubeClient, path: str, status: dict[str, Any]) -> None:
    kube.request("PATCH", f"{path}/status", content=json.dumps({"status": status}),
                 headers={"Content-Type": "application/merge-patch+json"})


def node(kube: KubeClient, name: str, *, ready: bool = True, cordoned: bool = False,
         taints: list[dict[str, str]] | None = None, allocatable: dict[str, str] | None = None) -> None:
    kube.create({"apiVersion": "v1", "kind": "Node",
                 "metadata": {"name": name, "labels": {**POOL_LABELS, "nvidia.com/gpu.product": PRODUCT}},
                 "spec": {"unschedulable": cordoned, "taints": taints or [GPU_TAINT]}})
    alloc = allocatable or {"cpu": "96", "memory": "256Gi", "nvidia.com/gpu": "8", "pods": "110",
                            "ephemeral-storage": "3500Gi"}
    patch_status(kube, f"/api/v1/nodes/{name}", {
        "capacity": alloc, "allocatable": alloc,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady",
                        "message": "set by the test", "lastHeartbeatTime": "2026-12-01T00:00:00Z",
                        "lastTransitionTime": "2026-12-01T00:00:00Z"}]})
    # The TaintNodesByCondition admission plugin adds node.kubernetes.io/not-ready:NoSchedule to every new
    # Node; the node lifecycle controller (not run here) removes it once the node reports Ready.
    if ready:
        kube.request("PATCH", f"/api/v1/nodes/{name}", content=json.dumps({"spec": {"taints": taints or [GPU_TAINT]}}),
                     headers={"Content-Type": "application/merge-patch+json"})


@pytest.fixture(scope="module")
def cluster(server: KubeAPIServer) -> Iterator[KubeClient]:
    """One usable 8 x H100 node (96 CPU, 256 GiB) and three absent ones; a storage class with 100 GiB left
    (volumes up to 80 GiB); a 200 GiB storage quota; the 8B model's cache already bound (20 GiB)."""
    with server.client() as kube:
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        node(kube, "gpu-a")
        node(kube, "gpu-b", cordoned=True)
        node(kube, "gpu-c", ready=False)
        node(kube, "gpu-d", taints=[GPU_TAINT, {"key": "team", "value": "other", "effect": "NoSchedule"}])
        kube.create({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                     "metadata": {"name": CLASS}, "provisioner": "csi.example.com"})
        kube.create({"apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
                     "metadata": {"name": "fast-zone-a", "namespace": "kube-system"},
                     "storageClassName": CLASS, "capacity": "100Gi", "maximumVolumeSize": "80Gi"})
        kube.create({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "storage", "namespace": NS},
                     "spec": {"hard": {"requests.storage": "200Gi"}}})
        # What the quota controller would write before any claim (the admission plugin needs it).
        patch_status(kube, f"/api/v1/namespaces/{NS}/resourcequotas/storage",
                     {"hard": {"requests.storage": "200Gi"}, "used": {"requests.storage": "0"}})
        pvc = weight_cache(QWEN3_8B["repo"], QWEN3_8B["revision"])
        kube.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": pvc, "namespace": NS},
                     "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": CLASS,
                              "resources": {"requests": {"storage": "20Gi"}}}})
        patch_status(kube, f"/api/v1/namespaces/{NS}/persistentvolumeclaims/{pvc}",
                     {"phase": "Bound", "capacity": {"storage": "20Gi"}, "accessModes": ["ReadWriteOnce"]})
        yield kube


def doc(kubeconfig: Path) -> dict[str, Any]:
    d = stack_doc(*CATALOG, cluster={"mode": "kubeconfig", "kubeconfig": str(kubeconfig), "skipAwait": True},
                  nodePools=[{"name": "h100", "gpuProduct": "H100-80GB", "gpusPerNode": 8, "nodeCount": 4,
                              "labels": POOL_LABELS, "taints": [GPU_TAINT]}],
                  namespaces={"serving": NS}, serving={"storageClass": CLASS}, backend="vllm")
    return d


def test_the_edge_reads_nodes_storage_and_apis_as_the_server_stores_them(cluster: KubeClient,
                                                                        server: KubeAPIServer) -> None:
    state = cluster_state(str(server.kubeconfig), None, NS)
    assert state.nodes_error is None and state.storage_error is None and state.api_error is None
    assert state.nodes is not None
    nodes = {n.name: n for n in state.nodes}
    assert set(nodes) == {"gpu-a", "gpu-b", "gpu-c", "gpu-d"}
    assert nodes["gpu-a"].ready and not nodes["gpu-a"].unschedulable
    assert nodes["gpu-a"].allocatable is not None and nodes["gpu-a"].allocatable["nvidia.com/gpu"] == "8"
    assert nodes["gpu-b"].unschedulable and not nodes["gpu-c"].ready
    assert [(c.storage_class, c.capacity_gib, c.maximum_volume_gib) for c in state.capacities] == [(CLASS, 100, 80)]
    assert [(q.quota, q.resource, q.hard_gib, q.used_gib) for q in state.quotas] == [
        ("storage", "requests.storage", 200, 20)], "the quota admission plugin counted the existing claim"
    pvc = state.pvcs[weight_cache(QWEN3_8B["repo"], QWEN3_8B["revision"])]
    assert pvc.bound and pvc.request_gib == 20
    assert state.api_versions is not None and "storage.k8s.io/v1" in state.api_versions
    assert "leaderworkerset.x-k8s.io/v1" not in state.api_versions


def test_each_refusal_has_its_stage_and_numbers_and_the_siblings_deploy(cluster: KubeClient,
                                                                       server: KubeAPIServer) -> None:
    catalog = validate_catalog(doc(server.kubeconfig))
    state = cluster_state(str(server.kubeconfig), None, NS)
    plan = plan_fleet(catalog, lock=LOCK, cluster=state, footprints=footprints(catalog))
    refused = {x.name: (x.stage.value, " ".join(x.reasons)) for x in plan.excluded}
    assert set(refused) == {"qwen3-32b", "qwen-72b", "llama-405b"}, refused
    assert plan.deployed == {"qwen3-8b", "qwen-05b"}

    stage, why = refused["qwen3-32b"]
    assert stage == "capacity" and "replica 7 of 8 fits on no node of pool h100" in why
    assert "nodes from 1 Node(s) of the cluster of" in why
    assert "ran out of: memory (asked 34.0 GiB" in why and "lower replicas to 6" in why
    stage, why = refused["qwen-72b"]
    assert stage == "storage" and "the largest volume it can provision is 80 GiB" in why
    assert f"CSIStorageCapacity of {CLASS}" in why
    stage, why = refused["llama-405b"]
    assert stage == "topology" and "does not serve leaderworkerset.x-k8s.io/v1" in why
    absent = next(w for w in plan.warnings if "node-capacity-nodes-absent" in w)
    assert "gpu-b (cordoned)" in absent and "gpu-c (not Ready)" in absent
    assert "gpu-d (taint team=other:NoSchedule not tolerated)" in absent
    # The bound cache costs nothing; the new 10 GiB one is within both the quota and the capacity.
    assert plan.footprints["qwen-05b"]["weightCacheGiB"] == 10
    assert plan.footprints["qwen3-8b"]["nodes"] == [["gpu-a"]]


def test_the_program_reads_the_cluster_itself_and_registers_only_the_siblings(cluster: KubeClient,
                                                                             server: KubeAPIServer) -> None:
    h = mock_program(doc(server.kubeconfig), lock=LOCK)
    errors = " ".join(h.errors())
    for name, stage in (("qwen3-32b", "capacity"), ("qwen-72b", "storage"), ("llama-405b", "topology")):
        assert f"{name} was left out of this deployment ({stage})" in errors
    assert "3 catalog entries were refused (qwen3-32b, qwen-72b, llama-405b); the other 2 were deployed" in str(
        h.error)
    assert {r.name for r in h.resources if r.type == "tkf:serving:ModelServing"} == {"qwen3-8b", "qwen-05b"}


def test_a_refused_credential_makes_every_source_a_named_warning(cluster: KubeClient, server: KubeAPIServer,
                                                                 tmp_path: Path) -> None:
    config = yaml.safe_load(server.kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"token": "not-the-token"}
    bad = tmp_path / "kubeconfig"
    bad.write_text(yaml.safe_dump(config))
    catalog = validate_catalog(doc(bad))
    state = cluster_state(str(bad), None, NS)
    assert state.nodes is None and "HTTP 401" in (state.nodes_error or "")
    plan = plan_fleet(catalog, lock=LOCK, cluster=state, footprints=footprints(catalog))
    text = " ".join(plan.warnings)
    for code in ("node-capacity-unreadable", "storage-unreadable", "topology-unreadable"):
        assert f"[{code}]" in text, code
    assert "HTTP 401" in text
    assert not [x for x in plan.excluded if x.stage.value in ("capacity", "storage", "topology")], \
        "an unreadable source warns; it never refuses by itself"


@pytest.mark.engine
def test_a_preview_through_the_engine_names_every_refusal(cluster: KubeClient, server: KubeAPIServer,
                                                          make_stack: Callable[..., EngineStack],
                                                          lean_engine_env: dict[str, str]) -> None:
    """`python -m tkf_infra preview --json` of a project stack aimed at this server: exit 1, the three refusals
    with their stages, the two siblings planned for creation."""
    es = make_stack(extra_env=lean_engine_env)
    path = es.project / f"Pulumi.{es.stack.name}.yaml"
    stack_file = yaml.safe_load(path.read_text())
    cfg = stack_file["config"]
    d = doc(server.kubeconfig)
    cfg["tkf-infra:cluster"] = d["cluster"]
    cfg["tkf-infra:namespaces"]["serving"] = NS
    cfg["tkf-infra:serving"].update(backend="vllm", storageClass=CLASS, allowCpu=False)
    cfg["tkf-infra:nodePools"] = d["nodePools"]
    cfg["tkf-infra:modelDefaults"] = {}
    cfg["tkf-infra:models"] = CATALOG
    path.write_text(yaml.safe_dump(stack_file, sort_keys=False))
    env = {**os.environ, **es.env, "PULUMI_CONFIG_PASSPHRASE": DEV_PASSPHRASE}
    proc = subprocess.run([str(es.project / ".venv" / "bin" / "python"), "-m", "tkf_infra", "preview", "--stack",
                           es.stack.name, "--json"], cwd=es.project, env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 1, (proc.stdout[-3000:], proc.stderr[-3000:])
    summary = json.loads(proc.stdout)
    assert summary["failedModels"] == ["llama-405b", "qwen-72b", "qwen3-32b"]
    stages = {name: summary["models"][name]["stage"] for name in summary["failedModels"]}
    assert stages == {"qwen3-32b": "capacity", "qwen-72b": "storage", "llama-405b": "topology"}
    assert "ran out of: memory" in " ".join(summary["models"]["qwen3-32b"]["reasons"])
    assert {summary["models"][n]["status"] for n in ("qwen3-8b", "qwen-05b")} == {"created"}


def test_an_autoscaled_maximum_is_held_against_the_live_nodes_and_overcommit_is_the_stacks_choice(
        cluster: KubeClient, server: KubeAPIServer) -> None:
    """Issue 28 on live Nodes: an autoscaled model is admitted at its maximum, so maxReplicas 9 beside the
    small model on the one usable 8-GPU node is refused by name with the figure, while the small model deploys;
    with `serving.overcommit: allow` the same model is admitted with room for its minimum, and says so."""
    from tests.test_scaling_render import KEDA_CRD

    crd = yaml.load(KEDA_CRD.read_text(), Loader=yaml.CSafeLoader)  # KEDA's API served: the vllm backend's scaler
    cluster.apply(crd)
    cluster.wait_crd_served(crd, timeout=120)
    auto = entry("qwen3-8b-auto", QWEN3_8B, scaling={"minReplicas": 2, "maxReplicas": 9})

    def planned(**serving: Any) -> Any:
        d = doc(server.kubeconfig)
        d["models"] = [entry("qwen-05b", QWEN_05B), auto]
        d["serving"].update(serving)
        d["prometheusUrl"] = "http://prometheus.monitoring.svc:9090"
        catalog = validate_catalog(d)
        return plan_fleet(catalog, lock=LOCK, cluster=cluster_state(str(server.kubeconfig), None, NS),
                          footprints=footprints(catalog))

    refused_plan = planned()
    refused = {x.name: (x.stage.value, " ".join(x.reasons)) for x in refused_plan.excluded}
    assert refused_plan.deployed == {"qwen-05b"}
    stage, why = refused["qwen3-8b-auto"]
    assert stage == "capacity" and "replica 8 of 9 fits on no node of pool h100" in why, why
    assert "nodes from 1 Node(s) of the cluster of" in why and "lower scaling.maxReplicas to 7" in why
    assert "planned at scaling.maxReplicas 9, the most its autoscaler may run" in why

    allowed = planned(overcommit="allow")
    assert allowed.deployed == {"qwen-05b", "qwen3-8b-auto"} and allowed.floors == {"qwen3-8b-auto"}
    assert allowed.footprints["qwen3-8b-auto"]["nodes"] == [["gpu-a"], ["gpu-a"]]
    (warning,) = [w for w in allowed.warnings if "serving.overcommit is allow" in w]
    assert "room is held for scaling.minReplicas 2, not maxReplicas 9" in warning
    assert "up to 7 replicas the plan holds no room for" in warning
