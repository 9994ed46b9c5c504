"""A packed fleet (ten small models and a whole-GPU one on one 8 x H100 MIG node) stored by a real API server.

What the cluster ends up holding, as the server stored it: every workload asking for its MIG slice,
the mig-parted ConfigMap in the GPU Operator's namespace with the geometry the layout planned, and
the node carrying both the pool's labels and taint (one server-side-apply patch) and its
`nvidia.com/mig.config` label (another patch, another field manager) — so mig-manager would carve it.
A second `up` changes nothing. The server runs no controllers (`cluster.skipAwait`, see
tests/kube/platform/test_up_against_apiserver.py). The platform is `alreadyInstalled`; KServe's CRDs come
from its vendored chart.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from pulumi import automation as auto

from tests.engine_fixtures import EngineStack
from tests.kube.apiserver import KubeAPIServer
from tests.kube.client import KubeClient
from tests.kube.platform.readback import (
    GATEWAY_NS,
    LLMISVC,
    MONITORING_NS,
    container,
    install_chart_crds,
    release_pvcs,
    remove_crds,
)
from tests.kube.platform.test_up_against_apiserver import changes
from tests.mig_format import check
from tests.sharing_fixtures import POOL, TEN_SMALL, WHOLE_TP2, mig_settings
from tkf_infra.names import MIG_CONFIG_KEY, MIG_CONFIG_LABEL, MIG_CONFIG_NAME

pytestmark = [pytest.mark.apiserver, pytest.mark.engine]

ALL = [*TEN_SMALL, WHOLE_TP2]
TAINT = {"key": "tkf.io/dedicated", "value": "llm", "effect": "NoSchedule"}
KSERVE_CRDS = {"llminferenceservices.serving.kserve.io", "llminferenceserviceconfigs.serving.kserve.io"}


@pytest.fixture(scope="module")
def crds(kube: KubeClient) -> Iterator[None]:
    """KServe's CRDs from its vendored chart, as an operator who installed KServe would have them; removed
    afterwards — also when installing them failed half-way — as this package's platform test needs a
    server without CRDs."""
    try:
        install_chart_crds(kube, KSERVE_CRDS)
        yield
    finally:
        remove_crds(kube, KSERVE_CRDS)


def up(es: EngineStack) -> auto.UpResult:
    return es.stack.up(color="never")


@pytest.fixture
def packed_stack(crds: None, kube: KubeClient, kube_apiserver: KubeAPIServer,
                 make_stack: Callable[..., EngineStack]) -> Iterator[tuple[EngineStack, dict[str, str], str]]:
    suffix = uuid.uuid4().hex[:6]
    node = f"gpu-node-{suffix}"
    ns = {"serving": f"llm-mig-{suffix}", "gateway": GATEWAY_NS, "monitoring": MONITORING_NS,
          "gpuOperator": f"gpu-operator-{suffix}"}
    es = make_stack()
    path = es.project / f"Pulumi.{es.stack.name}.yaml"
    doc = yaml.safe_load(path.read_text())
    cfg = doc["config"]
    settings = mig_settings(ALL, nodes=[node])
    cfg["tkf-infra:cluster"] = {"mode": "kubeconfig", "kubeconfig": str(kube_apiserver.kubeconfig), "skipAwait": True}
    cfg["tkf-infra:namespaces"] = ns
    assert all(p["alreadyInstalled"] for p in cfg["tkf-infra:platform"].values() if isinstance(p, dict))
    cfg["tkf-infra:platform"]["gpuOperator"]["migStrategy"] = "mixed"
    cfg["tkf-infra:nodePools"] = [{**settings["nodePools"][0], "taints": [TAINT]}]
    cfg["tkf-infra:serving"].update({"backend": "kserve", "allowCpu": False})
    cfg["tkf-infra:modelDefaults"] = settings["modelDefaults"]
    cfg["tkf-infra:models"] = settings["models"]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    # What exists on a real cluster before tkf-infra runs: the node, and the operator's namespace
    # (alreadyInstalled).
    kube.create({"apiVersion": "v1", "kind": "Node",
                 "metadata": {"name": node, "labels": {"kubernetes.io/os": "linux"}}})
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns["gpuOperator"]}})
    yield es, ns, node
    release_pvcs(kube, ns["serving"])
    es.stack.destroy(color="never")
    for name in (ns["serving"], ns["gpuOperator"]):
        kube.delete("v1", "Namespace", name)
    kube.delete("v1", "Node", node)


def test_a_packed_mig_fleet_is_stored_as_planned_and_a_second_up_changes_nothing(
        packed_stack: tuple[EngineStack, dict[str, str], str], kube: KubeClient,
        tmp_path: Path) -> None:
    es, ns, node = packed_stack
    first = up(es)
    assert first.summary.result == "succeeded"
    outputs = {k: v.value for k, v in es.stack.outputs().items()}
    assert outputs["rejected"] == [] and outputs["problems"] == []
    layout = outputs["gpuLayout"][POOL]["nodes"][node]

    # every workload asks for its slice (whole GPUs for the whole-GPU model), as stored
    for m in ALL:
        isvc = kube.get(LLMISVC, "LLMInferenceService", m["name"], ns["serving"])
        assert isvc is not None, m["name"]
        limits = container(isvc["spec"]["template"])["resources"]["limits"]
        share = outputs["endpoints"][m["name"]].get("share")
        want = {"nvidia.com/gpu": "2"} if share is None else {share["resource"]: "1"}
        assert {k: v for k, v in limits.items() if k.startswith("nvidia.com/")} == want, (m["name"], limits)
        ann = isvc["metadata"]["annotations"]
        assert ann.get("tkf.io/gpu-share") == (share["share"] if share else None)

    # the mig-parted config, stored in the operator's namespace, parses and carves what was planned
    cm = kube.get("v1", "ConfigMap", MIG_CONFIG_NAME, ns["gpuOperator"])
    assert cm is not None
    result = check(cm["data"][MIG_CONFIG_KEY], layout["migConfig"])
    assert result["valid"], result
    stored = {i: d["migDevices"] or {} for d in result["configs"][layout["migConfig"]] for i in d["devices"]}
    assert stored == {g["index"]: g.get("mig", {}) for g in layout["gpus"]}

    # the node: the pool's labels and taint and the MIG config label, each from its own patch
    stored_node = kube.get("v1", "Node", node)
    assert stored_node is not None
    labels = stored_node["metadata"]["labels"]
    assert labels[MIG_CONFIG_LABEL] == layout["migConfig"]
    assert labels["tkf.io/pool"] == POOL and labels["tkf.io/node-pool"] == POOL
    assert labels["kubernetes.io/os"] == "linux"  # what was there before is kept
    assert TAINT in stored_node["spec"]["taints"]
    managers = {f["manager"] for f in stored_node["metadata"]["managedFields"]}
    assert len([m for m in managers if m.startswith("pulumi")]) >= 2, managers

    second = up(es)
    assert changes(second) == {}, second.summary.resource_changes
    print(json.dumps({g["index"]: g.get("mig") or g.get("whole") for g in layout["gpus"]}))
