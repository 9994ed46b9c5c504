"""Platform components under mocks: node pools (moto for EC2), GPU operator, prerequisites."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from components.gpu_operator import GpuOperator, GpuOperatorArgs
from components.node_pool import GpuNodePool, GpuNodePoolArgs
from components.platform_charts import VENDORED_FOLDERS
from components.prerequisites import ServingPrerequisites, ServingPrerequisitesArgs
from tests.mocks import run
from tkf_infra.config import (
    Backend,
    GpuOperatorSettings,
    Namespaces,
    NodePool,
    Platform,
    SettingsError,
    validate_catalog,
)
from tkf_infra.config.charts import VENDORED_CHARTS
from tkf_infra.config.stack import VLLM_GPU_IMAGE
from tkf_infra.live.ec2 import ec2_facts
from tkf_infra.plan.pools import PoolFacts, PoolProblem, resolve_pool

ROOT = Path(__file__).resolve().parents[1]
CHARTS = ROOT / "components" / "data" / "charts"
EKS: dict[str, Any] = {"name": "p5", "kind": "eks", "instanceType": "p4d.24xlarge", "gpusPerNode": 8, "nodeCount": 2,
       "clusterName": "fleet", "nodeRoleArn": "arn:aws:iam::123456789012:role/nodes", "subnetIds": ["subnet-1"],
       "labels": {"team": "llm"}}



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
             taints=[{"key": "dedicated", "value": "llm"}], gpuMemoryGiB=79.5)
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
# GpuOperator (what each option does to the rendered objects: tests/engine/test_platform_charts.py)
# ---------------------------------------------------------------------------------------------

CHART = "kubernetes:helm.sh/v4:Chart"
GROUP = "kubernetes:yaml/v2:ConfigGroup"


def charts(h: Any) -> dict[str, Any]:
    """Chart v4 resources by Helm release name (what the chart's templates see as .Release.Name)."""
    return {r.inputs["name"]: r for r in h.resources if r.type == CHART}


def test_gpu_operator_chart_is_pinned_upstream_with_values_and_time_slicing() -> None:
    s = GpuOperatorSettings.model_validate(
        {"version": "v25.3.4", "driverEnabled": False, "timeSlicingReplicas": 4, "migStrategy": "single"})
    h = run(lambda: GpuOperator("gpu-operator", GpuOperatorArgs(s, skip_await=True)))
    chart = charts(h)["gpu-operator"]
    assert chart.inputs["chart"] == "gpu-operator" and chart.inputs["version"] == "v25.3.4"
    assert chart.inputs["repositoryOpts"] == {"repo": "https://helm.ngc.nvidia.com/nvidia"}
    assert chart.inputs["namespace"] == "gpu-operator" and chart.inputs["skipAwait"] is True
    v = chart.inputs["values"]
    assert v["driver"] == {"enabled": False} and v["mig"] == {"strategy": "single"}
    assert v["operator"] == v["validator"] == v["nodeStatusExporter"] == {"version": "v25.3.4"}
    config = v["devicePlugin"]["config"]
    assert (config["create"], config["name"], config["default"]) == (True, "tkf-time-slicing", "any")
    assert "replicas: 4" in config["data"]["any"] and "migStrategy: single" in config["data"]["any"]
    ns = next(r for r in h.resources if r.type == "kubernetes:core/v1:Namespace")
    assert ns.metadata["labels"] == {"pod-security.kubernetes.io/enforce": "privileged"}
    assert ns.urn in chart.depends_on and chart.parent == "tkf:platform:GpuOperator::gpu-operator"


def test_gpu_operator_from_the_vendored_chart_or_a_chart_path() -> None:
    h = run(lambda: GpuOperator("gpu-operator", GpuOperatorArgs(GpuOperatorSettings(), source="vendored")))
    chart = charts(h)["gpu-operator"]
    assert chart.inputs["chart"] == str(ROOT / "components/data/charts/gpu-operator-v26.7.0/gpu-operator")
    assert "version" not in chart.inputs and "repositoryOpts" not in chart.inputs
    assert (ROOT / chart.inputs["chart"] / "Chart.yaml").is_file()
    own = GpuOperatorSettings.model_validate({"chartPath": "/srv/charts/gpu-operator"})
    h = run(lambda: GpuOperator("gpu-operator", GpuOperatorArgs(own, source="vendored")))
    assert charts(h)["gpu-operator"].inputs["chart"] == "/srv/charts/gpu-operator"  # chartPath wins


def test_gpu_operator_already_installed_registers_nothing() -> None:
    installed = GpuOperatorSettings.model_validate({"alreadyInstalled": True})
    h = run(lambda: GpuOperator("gpu-operator", GpuOperatorArgs(installed)))
    assert [r.type for r in h.resources] == ["tkf:platform:GpuOperator"]


# ---------------------------------------------------------------------------------------------
# ServingPrerequisites
# ---------------------------------------------------------------------------------------------


def prereqs(platform: Platform, **kw: Any) -> Any:
    return run(lambda: ServingPrerequisites("prereq", ServingPrerequisitesArgs(platform, Namespaces(), **kw)))


def waits_on(h: Any, r: Any) -> set[str]:
    """Names of the steps a resource depends on (charts by release name, YAML groups by resource name)."""
    by_urn = {x.urn: x for x in h.resources}
    return {by_urn[u].inputs.get("name", by_urn[u].name) if by_urn[u].type == CHART else by_urn[u].name
            for u in r.depends_on if by_urn[u].type != "kubernetes:core/v1:Namespace"}


def test_prerequisites_install_upstream_charts_in_dependency_order() -> None:
    h = prereqs(Platform(), pipeline_parallel_preset=True)
    c = charts(h)
    assert set(c) == {"cert-manager", "kserve-llmisvc-crd", "kserve-llmisvc-resources", "kserve-runtime-configs",
                      "lws"}
    assert c["kserve-llmisvc-crd"].inputs["chart"] == "oci://ghcr.io/kserve/charts/kserve-llmisvc-crd"
    assert all(r.inputs["version"] == "v0.20.0" for n, r in c.items() if n.startswith("kserve"))
    assert c["cert-manager"].inputs["repositoryOpts"] == {"repo": "https://charts.jetstack.io"}
    assert (c["lws"].inputs["chart"], c["lws"].inputs["version"]) == ("oci://registry.k8s.io/lws/charts/lws", "0.8.0")
    assert c["kserve-runtime-configs"].inputs["values"] == {"kserve": {"llmisvcConfigs": {"enabled": True}}}
    assert c["cert-manager"].inputs["values"] == {"crds": {"enabled": True}}
    assert c["lws"].inputs["values"] == {"image": {"manager": {"tag": "v0.8.0", "pullPolicy": "IfNotPresent"}}}
    # The namespaces the charts hard-code, created here (the charts create none).
    assert {c[n].inputs["namespace"] for n in c if n.startswith("kserve")} == {"kserve"}
    assert c["lws"].inputs["namespace"] == "lws-system" and c["cert-manager"].inputs["namespace"] == "cert-manager"
    namespaces = {r.metadata["name"] for r in h.resources if r.type == "kubernetes:core/v1:Namespace"}
    assert namespaces == {"cert-manager", "kserve", "lws-system"}
    # cert-manager -> llmisvc CRDs -> Gateway API CRDs and LWS -> llmisvc resources -> runtime configs -> PP preset
    gateway = next(r for r in h.resources if r.type == GROUP)
    assert gateway.inputs["files"] == [
        "https://github.com/kubernetes-sigs/gateway-api/releases/download/v1.5.1/standard-install.yaml"]
    assert waits_on(h, c["kserve-llmisvc-crd"]) == {"cert-manager"}
    assert waits_on(h, gateway) == waits_on(h, c["lws"]) == {"kserve-llmisvc-crd"}
    assert waits_on(h, c["kserve-llmisvc-resources"]) == {"cert-manager", "kserve-llmisvc-crd", "lws",
                                                          "prereq-gateway-api"}
    assert waits_on(h, c["kserve-runtime-configs"]) == {"kserve-llmisvc-resources"}
    preset = next(r for r in h.resources if r.inputs.get("kind") == "LLMInferenceServiceConfig")
    assert waits_on(h, preset) == {"kserve-llmisvc-resources", "kserve-runtime-configs"}
    assert preset.spec["template"]["containers"][0]["image"] == VLLM_GPU_IMAGE
    assert "--headless" in preset.spec["worker"]["containers"][0]["command"][2]
    # No second copy of the Inference Extension CRDs: kserve-llmisvc-resources ships them.
    assert not [r for r in h.resources if "inference" in r.name + str(r.inputs.get("files"))]
    assert h.result is not None
    # ModelServing waits on the ends of the chains (everything else comes before them).
    assert {step for step, r in h.result.charts.items() if r in h.result.dependencies} == {
        "kserve-llmisvc-resources", "kserve-runtime-configs", "pipeline-parallel-preset", "lws", "gateway-api"}


def test_vendored_charts_and_render_mode_stand_ins() -> None:
    h = prereqs(Platform(), pipeline_parallel_preset=False, source="vendored")
    c = charts(h)
    assert c["kserve-llmisvc-crd"].inputs["chart"] == str(CHARTS / "kserve-v0.20.0/kserve-llmisvc-crd")
    assert c["cert-manager"].inputs["chart"] == str(CHARTS / "cert-manager-v1.21.1/cert-manager")
    assert all("version" not in r.inputs for r in c.values())
    assert all((ROOT / r.inputs["chart"] / "Chart.yaml").is_file() for r in c.values())
    # Gateway API from its files: CRDs through a YAML group, the policy and its binding as objects of their own.
    gateway = next(r for r in h.resources if r.type == GROUP)
    assert len(gateway.inputs["files"]) == 8 and all("vap" not in f for f in gateway.inputs["files"])
    policy = [r for r in h.resources if r.inputs.get("kind", "").startswith("ValidatingAdmissionPolicy")]
    assert sorted(r.inputs["kind"] for r in policy) == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    assert all(gateway.urn in r.depends_on for r in policy)

    h = prereqs(Platform(), source="vendored", render=True)
    c = charts(h)
    # cert-manager under a parent chart (kubeVersion gate), its values one level down.
    assert c["cert-manager"].inputs["values"] == {"cert-manager": {"crds": {"enabled": True}}}
    shim = Path(c["cert-manager"].inputs["chart"])
    assert (shim / "charts" / "cert-manager").resolve() == (CHARTS / "cert-manager-v1.21.1/cert-manager").resolve()
    # The KServe CRDs from the chart's own files (its `lookup` needs a cluster).
    crds = next(r for r in h.resources if r.name == "prereq-kserve-llmisvc-crd")
    assert crds.type == GROUP and [Path(f).name for f in crds.inputs["files"]] == [
        "serving.kserve.io_llminferenceserviceconfigs.yaml", "serving.kserve.io_llminferenceservices.yaml",
        "serving.kserve.io_clusterstoragecontainers.yaml"]
    assert "kserve-llmisvc-crd" not in c


def test_each_piece_can_be_already_installed_and_presets_turned_off() -> None:
    doc = Platform().model_dump(by_alias=True)
    for key in ("certManager", "kserve", "lws", "gatewayApi"):
        doc[key]["alreadyInstalled"] = True
    h = prereqs(Platform.model_validate(doc))
    assert [r.type for r in h.resources] == ["tkf:platform:ServingPrerequisites"]
    assert h.result is not None and h.result.dependencies == []
    h = prereqs(Platform.model_validate({"kserve": {"version": "v0.20.0", "presets": False}}))
    assert "kserve-runtime-configs" not in charts(h) and "kserve-llmisvc-resources" in charts(h)


def test_vllm_backend_needs_only_leader_worker_set() -> None:
    h = prereqs(Platform(), backend=Backend.VLLM, pipeline_parallel_preset=True)
    assert list(charts(h)) == ["lws"]
    assert not [r for r in h.resources if r.inputs.get("kind") == "LLMInferenceServiceConfig"]


def test_no_component_child_without_parent() -> None:
    h = prereqs(Platform(), pipeline_parallel_preset=True)
    assert all(r.parent == "tkf:platform:ServingPrerequisites::prereq" for r in h.resources
               if r.type != "tkf:platform:ServingPrerequisites")


# ---------------------------------------------------------------------------------------------
# Settings the charts impose
# ---------------------------------------------------------------------------------------------


def settings_problems(doc: dict[str, Any]) -> str:
    with pytest.raises(SettingsError) as err:
        validate_catalog(doc)
    return err.value.render()


def test_hard_coded_chart_namespaces_are_refused_at_load_when_we_install() -> None:
    text = settings_problems({"namespaces": {"kserve": "kserve-system", "lws": "lws"}})
    assert "namespaces.kserve is 'kserve-system', but the kserve charts hard-code namespace 'kserve'" in text
    assert "namespaces.lws is 'lws', but the lws charts hard-code namespace 'lws-system'" in text
    ok = {"namespaces": {"kserve": "kserve-system"}, "platform": {"kserve": {"alreadyInstalled": True}}}
    assert validate_catalog(ok).settings.namespaces.kserve == "kserve-system"


def test_chart_sources_are_checked_at_load() -> None:
    assert validate_catalog({}).settings.chart_source == "vendored"  # render mode: offline copies
    kube = {"cluster": {"mode": "kubeconfig", "kubeconfig": "k"}}
    assert validate_catalog(kube).settings.chart_source == "upstream"
    text = settings_problems({"platform": {"kserve": {"version": "v0.21.0"}}})
    assert "platform.kserve.version is 'v0.21.0' but the vendored chart is v0.20.0" in text
    text = settings_problems({"platform": {"charts": "upstream"}})
    for piece in ("certManager", "kserve", "gatewayApi"):
        assert f"render mode cannot template {piece} from its repository" in text
    assert "render mode cannot template lws" not in text
    fine = {**kube, "platform": {"kserve": {"version": "v0.21.0"}}}
    assert validate_catalog(fine).settings.platform.kserve.pinned == "v0.21.0"


def test_each_piece_from_a_chart_path_of_its_own() -> None:
    """An air-gapped site's copies (here the vendored folders, given relative to the project): each piece's
    chartPath wins over `platform.charts: upstream`, and nothing is fetched."""
    paths = {key: f"components/data/charts/{VENDORED_FOLDERS[key].format(v=v)}" for key, v in VENDORED_CHARTS.items()}
    doc: dict[str, Any] = {"cluster": {"mode": "kubeconfig", "kubeconfig": "k"}, "platform": {"charts": "upstream"},
                           "prometheusUrl": "https://prometheus.monitoring.svc:9091"}  # WVA needs an https one
    for key, path in paths.items():
        doc["platform"][key] = {"version": VENDORED_CHARTS[key], "chartPath": path}
    s = validate_catalog(doc).settings
    assert s.chart_source == "upstream"
    h = prereqs(s.platform, source=s.chart_source, wva_prometheus_url=s.prometheus_url)
    c = charts(h)
    assert c["cert-manager"].inputs["chart"] == str(ROOT / paths["certManager"])
    assert c["workload-variant-autoscaler"].inputs["chart"] == str(ROOT / paths["wva"])
    assert c["lws"].inputs["chart"] == str(ROOT / paths["lws"])
    for chart in ("kserve-llmisvc-crd", "kserve-llmisvc-resources", "kserve-runtime-configs"):
        assert c[chart].inputs["chart"] == str(ROOT / paths["kserve"] / chart)
    assert not [r for r in c.values() if "version" in r.inputs or "repositoryOpts" in r.inputs]
    files = next(r for r in h.resources if r.name == "prereq-gateway-api").inputs["files"]
    assert files and all(f.startswith(str(ROOT / paths["gatewayApi"])) for f in files)
    keda = next(r for r in h.resources if r.name == "prereq-keda").inputs["files"]
    assert keda == [str(ROOT / paths["keda"] / "keda-2.18.0.yaml")]
    h = run(lambda: GpuOperator("gpu-operator", GpuOperatorArgs(s.platform.gpu_operator, source=s.chart_source)))
    assert charts(h)["gpu-operator"].inputs["chart"] == str(ROOT / paths["gpuOperator"])


def test_a_chart_path_that_holds_no_chart_is_refused_at_load_for_every_piece() -> None:
    lws = f"components/data/charts/{VENDORED_FOLDERS['lws'].format(v='v0.8.0')}"
    doc = {"platform": {"gpuOperator": {"chartPath": "/nowhere/gpu-operator"},
                        "certManager": {"version": "v1.21.1", "chartPath": "charts/cert-manager"},
                        "kserve": {"version": "v0.20.0", "chartPath": lws},  # a chart, not KServe's folder of three
                        "gatewayApi": {"version": "v1.5.1", "chartPath": lws},  # YAML files, but no Gateway API CRD
                        "lws": {"version": "v0.8.0", "chartPath": lws}}}
    text = settings_problems(doc)
    assert "platform.gpuOperator.chartPath '/nowhere/gpu-operator' (/nowhere/gpu-operator) is not a chart" in text
    assert f"platform.certManager.chartPath 'charts/cert-manager' ({ROOT / 'charts/cert-manager'}) is not" in text
    assert "platform.kserve.chartPath" in text and "kserve-llmisvc-crd, kserve-llmisvc-resources" in text
    assert "platform.gatewayApi.chartPath" in text and "Gateway API's standard-channel YAML files" in text
    assert "platform.lws.chartPath" not in text  # the one right path


def test_vendored_charts_are_the_unedited_upstream_files() -> None:
    """components/data/charts/SHA256SUMS lists every vendored file (SOURCES.md says where each is from)."""
    root = CHARTS
    listed = {}
    for line in (root / "SHA256SUMS").read_text().splitlines():
        digest, path = line.split(maxsplit=1)
        listed[path.removeprefix("./")] = digest
    present = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()} - {"SHA256SUMS", "SOURCES.md"}
    assert present == set(listed)
    for path, digest in listed.items():
        assert hashlib.sha256((root / path).read_bytes()).hexdigest() == digest, path
    for key, version in VENDORED_CHARTS.items():
        assert (root / VENDORED_FOLDERS[key].format(v=version)).is_dir(), key
