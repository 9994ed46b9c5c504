"""A LoRA model and an autoscaled model on the cluster tier (issue 39), `up` waiting for real.

**Autoscaled, on a pool the plan fills exactly** (vllm backend): two TP 8 models on two whole nodes, an autoscaled TP 2
model with room held for its ``maxReplicas``, a base serving a LoRA adapter and single-GPU replicas filling the
rest — 32 of 32 GPUs. What a user would meet if the plan's promise for an autoscaled model were not binding: `up`
succeeds at ``minReplicas`` (nothing has scaled yet), and the first burst of load asks for replicas the default
scheduler can no longer place, because it spread the other pods over the room the plan held. Here the scale-up is
the one the autoscaler writes — the Deployment's replica count, as the HPA behind KEDA's ScaledObject does — and
every replica the plan reserved must be bound and Ready, with no other model's pod moved.

KEDA itself is installed from its chart but its operator is one of kwok's pods: it is not built here (377 modules,
every scaler's cloud SDK; the cold CI has no room for it), so the test decides when load arrives. On the kserve
backend that gap decides more: KServe's LLMInferenceService of an autoscaled model reports Ready only from the
ScaledObject's own conditions ("ScaledObject conditions not yet available" until KEDA's operator writes them, seen
on this tier), so an autoscaled kserve model cannot turn Ready here; its objects are checked on the API-server tier
(tests/kube/platform/test_wva_on_apiserver.py).

**LoRA, both backends**: the adapter is in the project's lock (as `lock` records it), its weights ride its base's
download Job (components/weight_cache.py) and its pod waits for the adapter's marker as well as the base's: it
must turn Ready through the same download, init-container and readiness path as the others, with
``--lora-modules`` naming the adapter's served name.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from tests.cluster.fleet import Fleet, Kubelets, assert_all_ready, is_serving_pod, small
from tests.cluster.harness import describe_pods, pod_ready, unscheduled
from tests.kube.client import KubeClient, Obj
from tests.kube.platform.readback import merge_patch
from tests.kube.platform.test_up_against_apiserver import QWEN3_8B, QWEN_72B
from tkf_infra import names
from tkf_infra.sizing.adapter_facts import AdapterFacts

pytestmark = [pytest.mark.apiserver, pytest.mark.engine, pytest.mark.cluster]

PROM = "http://prometheus.monitoring.svc:9090"
ADAPTER_REPO, ADAPTER_REVISION = "tkf-test/qwen3-8b-sql-lora", "5" * 40
ADAPTER = AdapterFacts(repo=ADAPTER_REPO, revision=ADAPTER_REVISION, source="test", config={
    "base_model_name_or_path": QWEN3_8B["repo"], "r": 8, "lora_alpha": 16, "bias": "none", "peft_type": "LORA",
    "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]})
SCALED, LORA, FILL = "qwen3-8b-scaled", "qwen3-8b-lora", "qwen3-8b-fill"
ADAPTER_SERVED = "qwen3-8b-sql"
MAX_REPLICAS = 4


def lora_model() -> dict[str, Any]:
    return small(LORA, 1, lora={"maxAdapters": 2, "maxRank": 16, "adapters": [
        {"name": "sql", "repo": ADAPTER_REPO, "revision": ADAPTER_REVISION, "servedName": ADAPTER_SERVED}]})


def full_pool() -> list[dict[str, Any]]:
    """2 x 8 + 4 x 2 + 1 + 7 = 32 GPUs: every GPU of the prod pool is promised to a pod the plan admits (two whole
    nodes for the TP 8 models, as the 405B's pods of the issue need them; their smaller downloads keep the tier
    short)."""
    scaled = {k: v for k, v in small(SCALED, 2).items() if k != "replicas"}
    scaled["scaling"] = {"minReplicas": 1, "maxReplicas": MAX_REPLICAS}
    return [*(small(f"qwen-72b-{i}", 8, QWEN_72B) for i in range(2)), scaled, lora_model(), small(FILL, 1, replicas=7)]


def autoscaling(config: dict[str, Any]) -> None:
    """KEDA from its chart and the Prometheus its trigger would read (the vllm backend's autoscaler)."""
    config["tkf-infra:platform"]["keda"] = {"version": "v2.18.0"}
    config["tkf-infra:prometheusUrl"] = PROM


def serving_pods(kube: KubeClient, namespace: str, model: str) -> list[Obj]:
    return [p for p in kube.list_objects("v1", "Pod", namespace, f"{names.MODEL_LABEL}={model}") if is_serving_pod(p)]


def workload_of(kube: KubeClient, namespace: str, model: str) -> str:
    """The Deployment that runs ``model``'s pods (ours on vllm, KServe's on kserve): the HPA's scale target."""
    found: list[str] = [d["metadata"]["name"] for d in kube.list_objects("apps/v1", "Deployment", namespace)
             if (d["spec"]["template"]["metadata"].get("labels") or {}).get(names.MODEL_LABEL) == model]
    assert len(found) == 1, f"one Deployment runs {model}'s pods: {found}"
    return found[0]


def placement(kube: KubeClient, namespace: str) -> dict[str, str]:
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in kube.list_objects("v1", "Pod", namespace)
            if is_serving_pod(p)}


def assert_lora_served(kube: KubeClient, namespace: str) -> None:
    pods = serving_pods(kube, namespace, LORA)
    assert pods and all(pod_ready(p) for p in pods), describe_pods(pods)
    args = " ".join(a for p in pods for c in p["spec"]["containers"]
                    for a in [*(c.get("command") or []), *(c.get("args") or [])])
    assert "--lora-modules" in args and ADAPTER_SERVED in args, args


def test_a_lora_model_turns_ready_through_its_bases_download_on_kserve(fleet: Fleet) -> None:
    run = fleet.up([lora_model()], backend="kserve", adapters=[ADAPTER])
    assert not run.stuck, run.explain()
    assert_all_ready(run, pods=1)
    assert_lora_served(fleet.kube, fleet.namespace)


def test_an_autoscaled_model_scales_to_its_reserved_maximum_on_a_full_pool(fleet: Fleet) -> None:
    run = fleet.up(full_pool(), backend="vllm", adapters=[ADAPTER], config=autoscaling)
    assert not run.stuck, run.explain()
    assert_all_ready(run, pods=2 + 1 + 1 + 7)  # the TP 8 models, the scaled model at minReplicas, LoRA, fill
    kube, ns = fleet.kube, fleet.namespace
    assert_lora_served(kube, ns)

    before = placement(kube, ns)
    deployment = workload_of(kube, ns, SCALED)
    merge_patch(kube, "apps/v1", "Deployment", deployment, ns, {"spec": {"replicas": MAX_REPLICAS}},
                manager="horizontal-pod-autoscaler")  # the replica count the HPA writes
    kubelets = Kubelets()

    def scaled() -> bool:
        kubelets.tick(kube, ns)
        pods = serving_pods(kube, ns, SCALED)
        return len(pods) == MAX_REPLICAS and all(pod_ready(p) for p in pods)

    with contextlib.suppress(TimeoutError):  # the assertion below names what is missing
        kube.wait_for(scaled, f"{SCALED} at {MAX_REPLICAS} Ready replicas", 180, interval=0.5)
    pods = serving_pods(kube, ns, SCALED)
    assert len(pods) == MAX_REPLICAS and all(pod_ready(p) for p in pods), (
        f"scaled to {MAX_REPLICAS}: unschedulable {unscheduled(kube, ns)}; pods {describe_pods(pods)}")
    assert not unscheduled(kube, ns)
    after = placement(kube, ns)
    assert {p: n for p, n in after.items() if p in before} == before, "no other pod moved or was evicted"
    gpus = sum(int(c["resources"].get("requests", {}).get(names.GPU_RESOURCE, 0))
               for p in kube.list_objects("v1", "Pod", ns) if pod_ready(p) for c in p["spec"]["containers"])
    assert gpus == 32, f"every GPU of the pool in use by a Ready pod the plan admitted: {gpus}"
