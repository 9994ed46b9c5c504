"""Platform components under mocks: node pools (moto for EC2), GPU operator, prerequisites."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from components.gpu_operator import GpuOperator, GpuOperatorArgs
from components.node_pool import GpuNodePool, GpuNodePoolArgs
from components.prerequisites import ServingPrerequisites, ServingPrerequisitesArgs
from tests.mocks import run
from tkf_infra.config import Backend, GpuOperatorSettings, Namespaces, NodePool, Platform, validate_catalog
from tkf_infra.plan.pools import PoolFacts, PoolProblem, resolve_pool
from tkf_infra.program import ec2_facts

EKS: dict[str, Any] = {"name": "p5", "kind": "eks", "instanceType": "p4d.24xlarge", "gpusPerNode": 8, "nodeCount": 2,
       "clusterName": "fleet", "nodeRoleArn": "arn:aws:iam::123456789012:role/nodes", "subnetIds": ["subnet-1"],
       "labels": {"team": "llm"}}  # fmt: skip


@pytest.fixture()
def ec2(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "testing")
    with mock_aws():
        yield boto3.client("ec2", region_name="us-east-1")


def pool(name: str | None = None, **kw: Any) -> NodePool:
    return NodePool.model_validate({"name": name, **kw} if name else kw)


def eks_facts(ec2: Any, **over: Any) -> PoolFacts:
    """An EKS pool resolved the way the program does it: EC2 read at the edge, then planned."""
    p = pool(**{**EKS, **over})
    found, errors = ec2_facts(validate_catalog({"nodePools": [p.model_dump(by_alias=True)]}), client=ec2)
    if errors:
        raise PoolProblem(errors[str(p.instance_type)])
    return resolve_pool(p, found, shared=False)


# ---------------------------------------------------------------------------------------------
# Node pools: what they are (planned), what they register (GpuNodePool)
# ---------------------------------------------------------------------------------------------


def test_eks_pool_reads_gpus_from_ec2_and_taints_the_node_group(ec2: Any) -> None:
    facts = eks_facts(ec2)
    assert facts.gpus_per_node == 8 and facts.gpu is not None and facts.gpu.name == "A100-40GB"
    # A100-40GB has two product labels (SXM4 / PCIe): the pool label alone selects the node group.
    assert facts.node_selector == {"team": "llm", "tkf.io/node-pool": "p5"}
    h = run(lambda: GpuNodePool("p5", GpuNodePoolArgs(facts)))
    ng = next(r for r in h.resources if r.type == "aws:eks/nodeGroup:NodeGroup")
    assert ng.inputs["instanceTypes"] == ["p4d.24xlarge"] and ng.inputs["amiType"] == "AL2023_x86_64_NVIDIA"
    assert ng.inputs["scalingConfig"] == {"desiredSize": 2, "minSize": 2, "maxSize": 2}
    assert {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"} in ng.inputs["taints"]
    assert ng.inputs["labels"] == {"team": "llm", "tkf.io/node-pool": "p5"}
    assert ng.parent == "tkf:platform:GpuNodePool::p5"
    assert ng.options["ignoreChanges"] == ["scalingConfig.desiredSize"]


def test_eks_pool_errors_name_the_pool_and_the_fix(ec2: Any) -> None:
    with pytest.raises(PoolProblem, match=r"g99\.huge"):
        eks_facts(ec2, instanceType="g99.huge")
    with pytest.raises(PoolProblem, match=r"node pool p5: instanceType m5\.large has no GPUs but gpusPerNode is 8"):
        eks_facts(ec2, instanceType="m5.large")
    with pytest.raises(PoolProblem, match=r"node pool p5: gpusPerNode is 4 .* set gpusPerNode: 8"):
        eks_facts(ec2, gpusPerNode=4)


def test_existing_pool_without_nodes_creates_nothing_but_selects_and_tolerates() -> None:
    p = pool("h100", gpuProduct="H100-80GB", gpusPerNode=8, nodeCount=2, labels={"tier": "gpu"},
             taints=[{"key": "dedicated", "value": "llm"}], gpuMemoryGiB=79.5)  # fmt: skip
    facts = resolve_pool(p, {}, shared=True)
    assert facts.node_selector == {"tier": "gpu", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED"}
    assert list(facts.tolerations) == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Equal", "value": "llm", "effect": "NoSchedule"},
    ]
    assert facts.gpu is not None and facts.gpu.memory_gib == 79.5 and facts.node_count == 2
    h = run(lambda: GpuNodePool("h100", GpuNodePoolArgs(facts)))
    assert [r.type for r in h.resources] == ["tkf:platform:GpuNodePool"]


def test_existing_pool_with_nodes_patches_labels_and_taints_server_side() -> None:
    p = pool("a10", gpuProduct="NVIDIA-A10G", gpusPerNode=1, nodes=["node-a", "node-b"])
    h = run(lambda: GpuNodePool("a10", GpuNodePoolArgs(resolve_pool(p, {}, shared=False))))
    patches = [r for r in h.resources if r.type == "kubernetes:core/v1:NodePatch"]
    assert sorted(r.metadata["name"] for r in patches) == ["node-a", "node-b"]
    assert patches[0].metadata["labels"] == {"tkf.io/node-pool": "a10"}
    assert patches[0].spec["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]


def test_ambiguous_gpu_product_names_the_pool_and_the_labels() -> None:
    p = pool("a100", gpuProduct="A100-80GB", gpusPerNode=8)
    with pytest.raises(PoolProblem, match=r"node pool a100: gpuProduct 'A100-80GB' \(A100-80GB\) matches several"):
        resolve_pool(p, {}, shared=False)


# ---------------------------------------------------------------------------------------------
# GpuOperator
# ---------------------------------------------------------------------------------------------


def test_gpu_operator_release_is_pinned_with_values_and_time_slicing() -> None:
    s = GpuOperatorSettings.model_validate(
        {"version": "v25.3.4", "driverEnabled": False, "timeSlicingReplicas": 4, "migStrategy": "single"}
    )
    h = run(lambda: GpuOperator("gpu-operator", GpuOperatorArgs(s)))
    rel = next(r for r in h.resources if r.type == "kubernetes:helm.sh/v3:Release")
    assert rel.inputs["chart"] == "gpu-operator" and rel.inputs["version"] == "v25.3.4"
    assert rel.inputs["repositoryOpts"] == {"repo": "https://helm.ngc.nvidia.com/nvidia"}
    v = rel.inputs["values"]
    assert v["driver"] == {"enabled": False} and v["mig"] == {"strategy": "single"}
    assert v["devicePlugin"] == {"config": {"name": "tkf-time-slicing", "default": "any"}}
    cm = next(r for r in h.resources if r.type == "kubernetes:core/v1:ConfigMap")
    assert "replicas: 4" in cm.inputs["data"]["any"]
    assert cm.urn in rel.depends_on


def test_gpu_operator_already_installed_registers_nothing() -> None:
    installed = GpuOperatorSettings.model_validate({"alreadyInstalled": True})
    h = run(lambda: GpuOperator("gpu-operator", GpuOperatorArgs(installed)))
    assert [r.type for r in h.resources] == ["tkf:platform:GpuOperator"]


# ---------------------------------------------------------------------------------------------
# ServingPrerequisites
# ---------------------------------------------------------------------------------------------


def prereqs(platform: Platform, **kw: Any) -> Any:
    return run(lambda: ServingPrerequisites("prereq", ServingPrerequisitesArgs(platform, Namespaces(), **kw)))


def test_prerequisites_install_in_dependency_order_at_pinned_versions() -> None:
    h = prereqs(Platform(), pipeline_parallel_preset=True)
    rel = {r.inputs["name"]: r for r in h.resources if r.type == "kubernetes:helm.sh/v3:Release"}
    assert set(rel) == {"cert-manager", "kserve-llmisvc-crd", "kserve-llmisvc-resources", "kserve-runtime-configs",
                        "lws"}  # fmt: skip
    assert rel["kserve-llmisvc-crd"].inputs["chart"] == "oci://ghcr.io/kserve/charts/kserve-llmisvc-crd"
    assert all(r.inputs["version"] == "v0.20.0" for n, r in rel.items() if n.startswith("kserve"))
    assert rel["kserve-runtime-configs"].inputs["values"] == {"kserve": {"llmisvcConfigs": {"enabled": True}}}
    assert rel["cert-manager"].inputs["values"] == {"crds": {"enabled": True}}
    ctrl = rel["kserve-llmisvc-resources"].depends_on
    assert rel["kserve-llmisvc-crd"].urn in ctrl and rel["cert-manager"].urn in ctrl
    gateway = [r for r in h.resources if r.type == "kubernetes:yaml/v2:ConfigFile"]
    assert any("gateway-api/releases/download/v1.5.1/standard-install.yaml" in r.inputs["file"] for r in gateway)
    assert all(g.urn in ctrl for g in gateway)
    preset = next(r for r in h.resources if r.inputs.get("kind") == "LLMInferenceServiceConfig")
    assert rel["kserve-llmisvc-crd"].urn in preset.depends_on
    assert preset.spec["template"]["containers"][0]["image"] == "vllm/vllm-openai:v0.32.0"
    assert "--headless" in preset.spec["worker"]["containers"][0]["command"][2]
    assert h.result is not None and len(h.result.dependencies) == 8


def test_each_piece_can_be_already_installed() -> None:
    doc = Platform().model_dump(by_alias=True)
    for key in ("certManager", "kserve", "lws", "gatewayApi"):
        doc[key]["alreadyInstalled"] = True
    h = prereqs(Platform.model_validate(doc))
    assert [r.type for r in h.resources] == ["tkf:platform:ServingPrerequisites"]
    assert h.result is not None and h.result.dependencies == []


def test_vllm_backend_needs_only_leader_worker_set() -> None:
    h = prereqs(Platform(), backend=Backend.VLLM, pipeline_parallel_preset=True)
    rel = [r.inputs["name"] for r in h.resources if r.type == "kubernetes:helm.sh/v3:Release"]
    assert rel == ["lws"]


def test_no_component_child_without_parent() -> None:
    h = prereqs(Platform(), pipeline_parallel_preset=True)
    assert all(r.parent == "tkf:platform:ServingPrerequisites::prereq" for r in h.resources if r.custom)
