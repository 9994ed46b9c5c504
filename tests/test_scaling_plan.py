"""The fleet plan holds room for every autoscaled model's maxReplicas, failing closed (docs/scaling.md)."""

from __future__ import annotations

from typing import Any

from tests.mocks import CPU, SINGLE_GPU, stack_doc
from tests.sharing_fixtures import QWEN05, mig_settings
from tests.test_admission import H100_NODE, SERVED, h100_pool, kube, live, planned, refused
from tkf_infra.plan.admission import ClusterState
from tkf_infra.plan.scaling import KEDA_API, WVA_API

PROM = "http://prometheus.monitoring.svc:9090"


def scaled(maximum: int, minimum: int = 1, **kw: Any) -> dict[str, Any]:
    return dict(SINGLE_GPU, scaling={"minReplicas": minimum, "maxReplicas": maximum, **kw})


def test_a_maximum_that_does_not_fit_is_refused_by_name_with_the_figure_and_the_way_out() -> None:
    """One 8-GPU node: minReplicas 1 would fit, maxReplicas 9 does not, so the model is left out."""
    plan = planned(stack_doc(scaled(9), CPU, nodePools=[h100_pool(1, nodeResources=H100_NODE)]))
    stage, reason = refused(plan)["qwen3-8b"]
    assert stage == "capacity"
    assert "model qwen3-8b: replica 9 of 9 fits on no node of pool h100" in reason
    assert "ran out of: GPUs (asked 1, at most 0 free on a node)" in reason
    assert "lower scaling.maxReplicas to 8" in reason
    assert plan.deployed == {"tiny"}, "its sibling deploys"


def test_the_same_maximum_fits_and_is_what_the_plan_reserves() -> None:
    plan = planned(stack_doc(scaled(8), nodePools=[h100_pool(1, nodeResources=H100_NODE)]))
    assert plan.deployed == {"qwen3-8b"}
    assert plan.footprints["qwen3-8b"]["replicas"] == 8
    assert len(plan.footprints["qwen3-8b"]["nodes"]) == 8


def test_the_maxima_of_several_models_are_held_at_once() -> None:
    """Two models at 5 each: each fits alone, both at their maximum take 10 of 8 GPUs: the second is refused."""
    second = dict(scaled(5), name="qwen3-8b-b", servedName="qwen3-8b-b")
    plan = planned(stack_doc(scaled(5), second, nodePools=[h100_pool(1, nodeResources=H100_NODE)]))
    assert plan.deployed == {"qwen3-8b"}
    assert "replica 4 of 5" in refused(plan)["qwen3-8b-b"][1]
    assert "lower scaling.maxReplicas to 3" in refused(plan)["qwen3-8b-b"][1]


def test_mig_layout_plans_the_maximum() -> None:
    """Seven 1g slices per H100: maxReplicas 8 of mig:1g.10gb on one GPU-node of 8 GPUs fits 56; 57 does not."""
    small = {"name": "q05", **QWEN05, "servedName": "q05", "maxModelLen": 4096, "gpuShare": "mig:1g.10gb"}
    fits = planned(stack_doc(**mig_settings([dict(small, scaling={"maxReplicas": 56})])))
    assert fits.deployed == {"q05"}
    over = planned(stack_doc(**mig_settings([dict(small, scaling={"maxReplicas": 57})])))
    stage, reason = refused(over)["q05"]
    assert stage == "placement"
    assert "cannot place 57 x MIG 1g.10gb" in reason
    assert "planned at scaling.maxReplicas 57, the most its autoscaler may run" in reason


def test_vllm_backend_needs_the_stacks_prometheus() -> None:
    plan = planned(stack_doc(scaled(2), backend="vllm"))
    stage, reason = refused(plan)["qwen3-8b"]
    assert stage == "topology" and "sets no prometheusUrl" in reason and "tkf-infra:prometheusUrl" in reason
    assert planned(stack_doc(scaled(2), backend="vllm", prometheusUrl=PROM)).deployed == {"qwen3-8b"}


def test_a_cluster_without_keda_or_wva_refuses_the_scaled_model_only() -> None:
    nodes = (live("n1"),)
    doc = stack_doc(scaled(2), dict(SINGLE_GPU, name="fixed", servedName="fixed"), cluster=kube(),
                    nodePools=[h100_pool(1)])
    plan = planned(doc, ClusterState("the test cluster", nodes, api_versions=SERVED | {KEDA_API}))
    stage, reason = refused(plan)["qwen3-8b"]
    assert stage == "topology" and f"needs {WVA_API} on the cluster" in reason and "the test cluster" in reason
    assert plan.deployed == {"fixed"}
    vllm = stack_doc(scaled(2), cluster=kube(), nodePools=[h100_pool(1)], backend="vllm", prometheusUrl=PROM)
    assert f"needs {KEDA_API} on the cluster" in refused(planned(vllm, ClusterState("c", nodes, api_versions=SERVED)))[
        "qwen3-8b"][1]
    full = ClusterState("c", nodes, api_versions=SERVED | {KEDA_API, WVA_API})
    assert planned(doc, full).deployed == {"qwen3-8b", "fixed"}


def test_render_mode_warns_that_the_autoscaler_was_not_checked() -> None:
    plan = planned(stack_doc(scaled(2)))
    assert any("autoscale through KEDA" in w and "was not checked" in w for w in plan.warnings)


def test_kserve_warns_that_metric_and_target_are_the_wvas() -> None:
    plan = planned(stack_doc(scaled(2, metric="kvCacheUsage", target=0.7)))
    assert any("scaling.metric/target not used on the kserve backend" in w for w in plan.warnings)
    cooled = planned(stack_doc(scaled(2, cooldownSeconds=60)))
    assert any("scaling.cooldownSeconds not used on the kserve" in w for w in cooled.warnings)
    assert not any("not used on the kserve" in w for w in planned(stack_doc(scaled(2))).warnings)


def test_a_refused_edit_keeps_an_autoscaled_model_at_its_last_deployed_range() -> None:
    """The `deployed` output of a scaled model validates again, so a bad edit does not take it down."""
    from tests.mocks import program
    from tkf_infra.outputs import deployed_entry

    catalog = planned(stack_doc(scaled(3), CPU)).catalog
    previous = {"deployed": {e.name: deployed_entry(e) for e in catalog.models}}
    h = program(stack_doc(dict(scaled(3), maxModelLen=10_000_000), CPU), previous=previous, api_key="k")
    (svc,) = [r.spec for r in h.resources if r.inputs.get("kind") == "LLMInferenceService"
              and r.metadata["name"] == "qwen3-8b"]
    assert svc["scaling"]["maxReplicas"] == 3 and "replicas" not in svc
    assert "qwen3-8b: the new settings were refused (fit); it keeps serving at its last deployed settings" in " ".join(
        h.errors())


def test_kserve_installed_here_needs_the_prometheus_its_scaling_path_reads() -> None:
    """KServe v0.20.0 writes an autoscaled model's ScaledObject only once its inferenceservice-config names
    a Prometheus; tkf-infra writes that from prometheusUrl when it installs KServe, so without one it refuses."""
    doc = stack_doc(scaled(2), dict(SINGLE_GPU, name="fixed", servedName="fixed"), installed=False)
    stage, reason = refused(planned(doc))["qwen3-8b"]
    assert stage == "topology" and "autoscaling-wva-controller-config" in reason and "tkf-infra:prometheusUrl" in reason
    assert planned(doc).deployed == {"fixed"}
    assert planned(stack_doc(scaled(2), installed=False, prometheusUrl=PROM)).deployed == {"qwen3-8b"}
    assert planned(stack_doc(scaled(2))).deployed == {"qwen3-8b"}, "someone else's KServe: its config is theirs"


def test_scale_to_zero_is_refused_on_kserve_by_name_and_planned_at_its_maximum_on_vllm() -> None:
    """KServe v0.20.0's CRD starts minReplicas and idleReplicaCount at 1; the vllm backend's ScaledObject
    wakes a model at zero on the gateway's requests (components/autoscaling.py)."""
    doc = stack_doc(scaled(2, minimum=0), dict(SINGLE_GPU, name="fixed", servedName="fixed"), prometheusUrl=PROM)
    plan = planned(doc)
    stage, reason = refused(plan)["qwen3-8b"]
    assert stage == "topology" and "minReplicas 0 (scale-to-zero) is not possible on the kserve backend" in reason
    assert "set minReplicas to 1 or more, or serve the model on serving.backend vllm" in reason
    assert plan.deployed == {"fixed"}
    one_node = [h100_pool(1, nodeResources=H100_NODE)]
    on_vllm = planned(stack_doc(scaled(8, minimum=0), backend="vllm", prometheusUrl=PROM, nodePools=one_node))
    assert on_vllm.deployed == {"qwen3-8b"} and on_vllm.footprints["qwen3-8b"]["replicas"] == 8
    too_many = planned(stack_doc(scaled(9, minimum=0), backend="vllm", prometheusUrl=PROM, nodePools=one_node))
    stage, reason = refused(too_many)["qwen3-8b"]
    assert stage == "capacity" and "replica 9 of 9" in reason, "held at its maximum, not at zero"
