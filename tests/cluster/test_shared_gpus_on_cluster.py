"""Models on shared GPUs reach Ready through `up`'s own waiting (issue 39): the plan's MIG layout and time-sliced
shares are what the cluster then carves and schedules, not only what a render or the API server stores.

- **MIG**: the program writes the mig-parted ConfigMap and labels the node with its layout; the device plugin
  stand-in (``tests.cluster.nodes.DevicePlugin``, mig-manager's and the device plugin's mixed strategy) then
  advertises the node's ``nvidia.com/mig-<profile>`` slices, and the real scheduler binds each model's pod to a
  slice of its profile. Until the layout is applied no slice exists, so a pod that asked too early waits and is
  bound when the slices appear — as on a node mig-manager is still carving.
- **Time slicing**: a pool whose device plugin advertises each GPU ``timeSlicingReplicas`` times; each
  ``slice:k`` model's pod takes one advertised replica with a k/N memory budget, and all fit on the node the plan
  counted.

Both on the vllm backend (the project's own Deployments; KServe's path to Ready is test_issue39_placement.py's).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.cluster.fleet import Fleet, assert_all_ready
from tests.cluster.harness import pod_ready
from tests.sharing_fixtures import POOL, QWEN3_8B, TEN_SMALL, mig_pool
from tkf_infra import names

pytestmark = [pytest.mark.apiserver, pytest.mark.engine, pytest.mark.cluster]

#: Three MIG models: two whose profile the fit check picks (gpuShare auto) and one pinned to 3g.40gb.
MIG_MODELS: list[dict[str, Any]] = [
    {**copy.deepcopy(m), "nodePool": POOL, "gpuShare": m.get("gpuShare", "auto"), "gpusPerNode": 1, "maxNumSeqs": 32,
     "dtype": "bfloat16"}
    for m in TEN_SMALL if m["name"] in ("qwen05-chat", "coder05", "qwen3-8b-3g")]
SLICED_POOL = {"name": "h100-ts", "kind": "existing", "gpuProduct": "H100-80GB", "gpusPerNode": 2, "nodeCount": 1}
#: Shares of 2 GPUs x 4 time-slicing replicas: 1/4, 1/4 and 2/4 of a GPU's memory.
SLICED_MODELS: list[dict[str, Any]] = [
    {"name": f"ts-{i}", **QWEN3_8B, "servedName": f"ts-{i}", "nodePool": "h100-ts", "gpuShare": share, "gpusPerNode": 1,
     "maxModelLen": 8192, "maxNumSeqs": 16} for i, share in enumerate(["slice:1", "slice:1", "slice:2"])]


def serving_pods(pods: list[dict[str, Any]], model: str) -> list[dict[str, Any]]:
    return [p for p in pods if (p["metadata"].get("labels") or {}).get(names.MODEL_LABEL) == model
            and all(o["kind"] != "Job" for o in p["metadata"].get("ownerReferences") or [])]


def requests_of(pod: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for c in pod["spec"]["containers"]:
        out.update((c.get("resources") or {}).get("limits") or {})
    return out


def test_mig_models_are_bound_to_the_slices_the_plans_layout_carves_and_turn_ready(fleet: Fleet) -> None:
    # The GPU Operator is already installed (as every piece is here): its namespace, where the layout goes, exists.
    fleet.kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}})
    run = fleet.up(MIG_MODELS, pools=[mig_pool(["mig-node-0"])], backend="vllm", platform=False,
                   gpu_operator={"migStrategy": "mixed"})
    assert_all_ready(run, pods=3)
    assert run.summary["readiness"]["models"] == sorted(m["name"] for m in MIG_MODELS), run.explain()
    node = fleet.kube.get("v1", "Node", "mig-node-0")
    assert node is not None
    assert node["metadata"]["labels"].get(names.MIG_CONFIG_LABEL), "the plan labelled the node with its layout"
    for model in ("qwen05-chat", "coder05", "qwen3-8b-3g"):
        [pod] = serving_pods(run.pods, model)
        asked = [k for k in requests_of(pod) if k.startswith(names.MIG_RESOURCE_PREFIX)]
        assert len(asked) == 1 and pod_ready(pod) and pod["spec"]["nodeName"] == "mig-node-0", run.explain()
        advertised = node["status"]["allocatable"].get(asked[0])
        assert advertised and int(advertised) >= 1, (asked, node["status"]["allocatable"])
    assert requests_of(serving_pods(run.pods, "qwen3-8b-3g")[0]).get(names.MIG_RESOURCE_PREFIX + "3g.40gb") == "1"


def utilization(pod: dict[str, Any]) -> float:
    """The `--gpu-memory-utilization` the serving container runs with (its share's memory budget)."""
    words = [str(w) for c in pod["spec"]["containers"] for w in (c.get("command") or []) + (c.get("args") or [])]
    text = " ".join(words).replace("=", " ").split()
    return float(text[text.index("--gpu-memory-utilization") + 1])


def test_time_sliced_models_share_the_gpus_the_device_plugin_advertises_and_turn_ready(fleet: Fleet) -> None:
    """Each pod takes one of the advertised replicas (the device plugin spreads a larger request over physical
    GPUs, docs/sharing.md) and carries its k/N memory budget; all three run on the pool's one node."""
    run = fleet.up(SLICED_MODELS, pools=[SLICED_POOL], backend="vllm", platform=False,
                   gpu_operator={"timeSlicingReplicas": 4})
    assert_all_ready(run, pods=3)
    pods = {m["name"]: serving_pods(run.pods, m["name"])[0] for m in SLICED_MODELS}
    assert {n: requests_of(p).get(names.GPU_RESOURCE) for n, p in pods.items()} == dict.fromkeys(pods, "1")
    assert {p["spec"]["nodeName"] for p in pods.values()} == {"h100-ts-0"}
    budgets = {n: utilization(p) for n, p in pods.items()}
    assert budgets["ts-0"] == budgets["ts-1"] < 0.25 < budgets["ts-2"] < 0.5, budgets
