"""A MIG pool's node room read from a real kube-apiserver: the layout spreads where the CPU is (issue 26).

Real Node objects on a server of this module's own (their status written through the status
subresource as a kubelet would; the not-ready taint removed as the node lifecycle controller would):
a 40-core node, a p5-sized one and a cordoned one, listed by a MIG pool. The program's edge reader
(`tkf_infra.live.cluster`) reads them through the stack's kubeconfig; the layout puts each
`1g.10gb` instance only on a node with room for its 4.01-core pod, nothing on the cordoned node,
refuses by name the model no node has room for, and the mig-parted ConfigMap the whole program
registers (Pulumi mocks, the real edge) carves only the sibling that deploys. With the operator
`alreadyInstalled` in a namespace the server does not have, the preview refuses the MIG model by
name (the ConfigMap would fail `up` there), and admits it once the namespace is created.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.kube.apiserver import KubeAPIServer, own_apiserver
from tests.kube.client import KubeClient
from tests.kube.platform.test_admission_live import GPU_TAINT, PRODUCT, node
from tests.mocks import program as mock_program
from tests.mocks import stack_doc
from tests.sharing_fixtures import CODER05, POOL, QWEN05, mig_settings
from tkf_infra.config import validate_catalog
from tkf_infra.hub.lock import load_lock
from tkf_infra.live.cluster import cluster_state
from tkf_infra.names import GPU_SHARING_TYPE, MIG_CONFIG_KEY, MIG_CONFIG_NAME
from tkf_infra.plan import plan_fleet
from tkf_infra.program import footprints

pytestmark = pytest.mark.apiserver

LOCK = load_lock()
NS = "llm-mig-room"
NODES = ["mig-small", "mig-p5", "mig-cordoned"]
ALLOC = {"memory": "2095697Mi", "pods": "110", "ephemeral-storage": "3500Gi"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPIServer]:
    with own_apiserver(tmp_path_factory.mktemp("admission-mig-apiserver")) as srv:
        yield srv


@pytest.fixture(scope="module")
def cluster(server: KubeAPIServer) -> Iterator[KubeClient]:
    """40 cores (9 pods of 4.01), a p5.48xlarge's 191450m (47 pods), and a cordoned p5: 56 pods in all."""
    with server.client() as kube:
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        # The GPU Operator is already installed (mig_settings): its namespace, where the layout goes, exists.
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}})
        node(kube, "mig-small", allocatable={"cpu": "40", **ALLOC})
        node(kube, "mig-p5", allocatable={"cpu": "191450m", **ALLOC})
        node(kube, "mig-cordoned", cordoned=True, allocatable={"cpu": "191450m", **ALLOC})
        yield kube


def small(name: str, replicas: int, ref: dict[str, str]) -> dict[str, Any]:
    return {"name": name, **ref, "servedName": name, "replicas": replicas, "gpuShare": "mig:1g.10gb",
            "maxModelLen": 4096}


def doc(server: KubeAPIServer, models: list[dict[str, Any]]) -> dict[str, Any]:
    d = stack_doc(cluster={"mode": "kubeconfig", "kubeconfig": str(server.kubeconfig), "skipAwait": True},
                  namespaces={"serving": NS}, backend="vllm")
    extra = mig_settings(models, nodes=NODES)
    d["platform"]["gpuOperator"]["migStrategy"] = "mixed"
    extra.pop("platform")
    extra["nodePools"][0].update(labels={"nvidia.com/gpu.product": PRODUCT}, taints=[GPU_TAINT])
    d.update(extra)
    return d


def where(plan: Any, model: str) -> Counter[str]:
    return Counter(spot["node"] for spot in plan.layouts[POOL].placements(model))


def test_the_layout_puts_pods_where_the_live_nodes_have_cpu(cluster: KubeClient, server: KubeAPIServer) -> None:
    catalog = validate_catalog(doc(server, [small("qwen05", 20, QWEN05)]))
    state = cluster_state(str(server.kubeconfig), None, NS)
    assert state.nodes is not None and {n.name for n in state.nodes} == set(NODES)
    plan = plan_fleet(catalog, lock=LOCK, cluster=state, footprints=footprints(catalog))
    assert not plan.excluded, [x.reasons for x in plan.excluded]
    # 9 pods' CPU on mig-small: one full GPU of 7 there, the 13 others on mig-p5's 2 GPUs.
    assert where(plan, "qwen05") == Counter({"mig-small": 7, "mig-p5": 13})
    assert Counter(n for r in plan.footprints["qwen05"]["nodes"] for n in r) == where(plan, "qwen05")
    assert "of the cluster of" in plan.footprints["qwen05"]["nodesFrom"]
    assert any("mig-cordoned (cordoned)" in w for w in plan.warnings if "node-capacity-nodes-absent" in w)


def test_a_model_no_live_node_has_room_for_is_refused_and_not_carved(cluster: KubeClient,
                                                                     server: KubeAPIServer) -> None:
    """5 + 60 pods where 56 fit: the 5 are admitted first (smaller), then 51 of the 60 find room."""
    d = doc(server, [small("qwen05", 60, QWEN05), small("coder05", 5, CODER05)])
    catalog = validate_catalog(d)
    plan = plan_fleet(catalog, lock=LOCK, cluster=cluster_state(str(server.kubeconfig), None, NS),
                      footprints=footprints(catalog))
    refused = {x.name: (x.stage.value, " ".join(x.reasons)) for x in plan.excluded}
    assert list(refused) == ["qwen05"] and refused["qwen05"][0] == "capacity"
    why = refused["qwen05"][1]
    assert "replica 52 of 60 (MIG 1g.10gb, each pod asks 4.01 CPU" in why and "lower replicas to 51" in why
    assert "ran out of: CPU" in why and "nodes from 2 Node(s) of the cluster of" in why
    assert plan.deployed == {"coder05"}
    # The whole program, reading the server itself, registers a config that carves the sibling's 5 only.
    h = mock_program(d, lock=LOCK)
    cm = next(r for r in h.resources if r.inputs.get("metadata", {}).get("name") == MIG_CONFIG_NAME)
    configs = yaml.safe_load(cm.inputs["data"][MIG_CONFIG_KEY])["mig-configs"]
    assert sum(k * len(spec["devices"]) for specs in configs.values() for spec in specs
               for k in spec.get("mig-devices", {}).values()) == 5
    assert "qwen05 was left out of this deployment (capacity)" in " ".join(h.errors())


def test_a_preview_refuses_by_name_until_the_operators_namespace_exists(cluster: KubeClient,
                                                                         server: KubeAPIServer) -> None:
    """The whole program's preview (Pulumi mocks, the real edge reading the server): refused while
    namespaces.gpuOperator names a namespace the server does not have, admitted once it is created."""
    late = "gpu-operator-elsewhere"
    d = doc(server, [small("coder05", 1, CODER05)])
    d["namespaces"]["gpuOperator"] = late
    h = mock_program(d, lock=LOCK, preview=True)
    errors = " ".join(h.errors())
    assert "coder05 was left out of this deployment (topology)" in errors
    assert f"has no namespace {late!r}" in errors and f"namespaces.gpuOperator: {late}" in errors
    assert not h.mocks.of_type(GPU_SHARING_TYPE), "nothing is registered in the missing namespace"
    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": late}})
    h = mock_program(d, lock=LOCK, preview=True)
    assert not h.errors(), h.errors()
    cm = next(r for r in h.resources if r.inputs.get("metadata", {}).get("name") == MIG_CONFIG_NAME)
    assert cm.inputs["metadata"]["namespace"] == late
