"""The platform's charts rendered by the real provider (render mode, no cluster): what `make up` writes.

Why here and not under mocks: Chart v4 renders inside the Kubernetes provider, which mocks never
run, and the GPU Operator chart has no values schema — a misspelt values key is silently ignored.
So every platform option is checked in the objects the chart actually produced: the dev stack's
render shows one side of each option (its defaults), an inline program of GpuOperator variants the
other. The same charts are installed into a real API server in tests/kube/platform/.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi import automation as auto

from components.gpu_operator import TIME_SLICING_CONFIG, TIME_SLICING_KEY, GpuOperator, GpuOperatorArgs
from tests.engine_fixtures import EngineStack
from tkf_infra.config import GpuOperatorSettings
from tkf_infra.names import MIG_CONFIG_NAME
from tkf_infra.ops.stacks import DEV_PASSPHRASE, pulumi_home

pytestmark = pytest.mark.engine

Objects = dict[tuple[str, str], dict[str, Any]]
CHART_CRDS = {
    # cert-manager (templates/crd-*.yaml with crds.enabled)
    "certificaterequests.cert-manager.io", "certificates.cert-manager.io", "challenges.acme.cert-manager.io",
    "clusterissuers.cert-manager.io", "issuers.cert-manager.io", "orders.acme.cert-manager.io",
    # kserve-llmisvc-crd, and the Inference Extension / llm-d CRDs kserve-llmisvc-resources ships
    "llminferenceservices.serving.kserve.io", "llminferenceserviceconfigs.serving.kserve.io",
    "clusterstoragecontainers.serving.kserve.io", "inferencepools.inference.networking.k8s.io",
    "inferencepools.inference.networking.x-k8s.io", "inferenceobjectives.llm-d.ai", "inferencemodelrewrites.llm-d.ai",
    # Gateway API v1.5.1 standard channel
    "backendtlspolicies.gateway.networking.k8s.io", "gatewayclasses.gateway.networking.k8s.io",
    "gateways.gateway.networking.k8s.io", "grpcroutes.gateway.networking.k8s.io",
    "httproutes.gateway.networking.k8s.io",
    "listenersets.gateway.networking.k8s.io", "referencegrants.gateway.networking.k8s.io",
    "tlsroutes.gateway.networking.k8s.io",
    # LeaderWorkerSet (crds/)
    "leaderworkersets.leaderworkerset.x-k8s.io",
    # GPU Operator (crds/) and its node-feature-discovery subchart (crds/)
    "clusterpolicies.nvidia.com", "nvidiadrivers.nvidia.com", "gpuclusters.nvidia.com",
    "computedomains.resource.nvidia.com", "computedomaincliques.resource.nvidia.com",
    "nodefeatures.nfd.k8s-sigs.io", "nodefeaturerules.nfd.k8s-sigs.io", "nodefeaturegroups.nfd.k8s-sigs.io",
}


def read_rendered(directory: Path) -> list[dict[str, Any]]:
    return [doc for path in sorted(directory.rglob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc]


def keyed(docs: list[dict[str, Any]]) -> Objects:
    return {(d["kind"], f"{d['metadata'].get('namespace', '')}/{d['metadata']['name']}"): d for d in docs}


def images(docs: list[dict[str, Any]]) -> set[str]:
    found: set[str] = set()
    for d in docs:
        if d["kind"] in {"Deployment", "DaemonSet"}:
            pod = d["spec"]["template"]["spec"]
            found |= {c["image"] for c in pod.get("containers", []) + pod.get("initContainers", [])}
    return found


def cluster_policy(objs: Objects) -> dict[str, Any]:
    spec: dict[str, Any] = objs[("ClusterPolicy", "/cluster-policy")]["spec"]
    return spec


@pytest.fixture(scope="module")
def dev_platform(tmp_path_factory: pytest.TempPathFactory, lean_engine_env: dict[str, str],
                 engine_ready: None) -> list[dict[str, Any]]:
    """`up` of the dev stack as shipped (platform from the vendored charts), rendered to a directory."""
    from tests.engine_fixtures import dev_config
    from tkf_infra.ops.stacks import copy_project, engine_env

    tmp = tmp_path_factory.mktemp("dev-platform")
    project = copy_project(tmp / "project")
    doc = dev_config(platform=True)
    doc["config"]["tkf-infra:cluster"]["renderDir"] = str(tmp / "rendered")
    name = f"t{uuid.uuid4().hex[:8]}"
    (project / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    (tmp / "state").mkdir()
    env = {**engine_env("dev", project, f"file://{tmp / 'state'}"), "PULUMI_CONFIG_PASSPHRASE": DEV_PASSPHRASE,
           **lean_engine_env}
    opts = auto.LocalWorkspaceOptions(env_vars=env, pulumi_command=auto.PulumiCommand(root=str(pulumi_home())))
    stack = auto.create_stack(name, work_dir=str(project), opts=opts)
    try:
        res = stack.up(color="never")
        assert res.summary.result == "succeeded"
        second = stack.preview(color="never")
        changed = {str(k): v for k, v in second.change_summary.items() if str(k) != "same"}
        assert changed == {}, f"a second run must change nothing: {changed}"
        return read_rendered(tmp / "rendered")
    finally:
        stack.workspace.remove_stack(name, force=True)


def test_dev_renders_every_platform_piece_from_the_charts(dev_platform: list[dict[str, Any]]) -> None:
    objs = keyed(dev_platform)
    crds = {name.removeprefix("/") for kind, name in objs if kind == "CustomResourceDefinition"}
    assert crds == CHART_CRDS
    kinds = Counter(kind for kind, _ in objs)
    assert kinds["LLMInferenceServiceConfig"] == 10  # KServe's presets (runtime-configs with llmisvcConfigs on)
    assert kinds["ClusterPolicy"] == 1 and kinds["ValidatingAdmissionPolicy"] == 1
    deployments = {name for kind, name in objs if kind == "Deployment"}
    assert {"cert-manager/cert-manager", "cert-manager/cert-manager-webhook", "cert-manager/cert-manager-cainjector",
            "kserve/llmisvc-controller-manager", "lws-system/lws-controller-manager",
            "gpu-operator/gpu-operator"} <= deployments
    # Every pinned release image, none of the repositories' development tags.
    found = images(dev_platform)
    assert {"nvcr.io/nvidia/gpu-operator:v26.7.0", "registry.k8s.io/lws/lws:v0.8.0",
            "quay.io/jetstack/cert-manager-controller:v1.21.1", "kserve/llmisvc-controller:v0.20.0"} <= found
    assert not [i for i in found if i.endswith((":main", ":main-latest", ":latest"))], found
    lws = objs[("Deployment", "lws-system/lws-controller-manager")]["spec"]["template"]["spec"]["containers"][0]
    assert lws["imagePullPolicy"] == "IfNotPresent"
    # Chart v4 applies no hooks (docs/platform.md): no Job from a chart at all, only our weight downloads.
    assert not [d for d in dev_platform if "helm.sh/hook" in (d["metadata"].get("annotations") or {})]
    assert {name for kind, name in objs if kind == "Job"} == {
        f"llm-serving/{d['metadata']['name']}-download" for d in dev_platform if d["kind"] == "PersistentVolumeClaim"}


def test_dev_defaults_reach_the_cluster_policy(dev_platform: list[dict[str, Any]]) -> None:
    """One side of each GPU Operator option (the settings' defaults); the other side is the test below."""
    spec = cluster_policy(keyed(dev_platform))
    assert spec["driver"]["enabled"] is True and spec["toolkit"]["enabled"] is True
    assert spec["dcgmExporter"]["enabled"] is True and spec["dcgmExporter"]["serviceMonitor"]["enabled"] is True
    assert spec["mig"] == {"strategy": "none"}  # the chart's own default is "single"
    assert "config" not in spec["devicePlugin"]  # no time-slicing
    assert spec["migManager"]["config"] == {"default": "all-disabled"}  # mig-manager's built-in configs
    assert spec["validator"]["version"] == spec["nodeStatusExporter"]["version"] == "v26.7.0"
    assert not [d for d in dev_platform if d["kind"] == "ConfigMap" and d["metadata"]["name"] == TIME_SLICING_CONFIG]


def render_inline(tmp: Path, env: dict[str, str], program: Callable[[Callable[[str], Any]], None]) -> Path:
    """`up` of an inline program; ``program(provider_for)`` gets one render provider per variant name."""
    import pulumi
    import pulumi_kubernetes as k8s

    def run() -> None:
        def provider_for(variant: str) -> pulumi.ResourceOptions:
            return pulumi.ResourceOptions(provider=k8s.Provider(
                f"render-{variant}", render_yaml_to_directory=str(tmp / "rendered" / variant)))

        program(provider_for)

    (tmp / "state").mkdir()
    full_env = {"PULUMI_BACKEND_URL": f"file://{tmp / 'state'}", "PULUMI_CONFIG_PASSPHRASE": DEV_PASSPHRASE,
                "PULUMI_SKIP_UPDATE_CHECK": "true", **env}
    opts = auto.LocalWorkspaceOptions(env_vars=full_env, work_dir=str(tmp),
                                      pulumi_command=auto.PulumiCommand(root=str(pulumi_home())))
    stack = auto.create_stack(f"v{uuid.uuid4().hex[:6]}", project_name="tkf-platform-values", program=run, opts=opts)
    try:
        assert stack.up(color="never").summary.result == "succeeded"
    finally:
        stack.workspace.remove_stack(stack.name, force=True)
    return tmp / "rendered"


def test_every_gpu_operator_option_changes_the_rendered_objects(tmp_path: Path, lean_engine_env: dict[str, str],
                                                                engine_ready: None) -> None:
    variants = {
        "flipped": {"driverEnabled": False, "toolkitEnabled": False, "dcgmExporterEnabled": False,
                    "timeSlicingReplicas": 4, "migStrategy": "mixed"},
        "single": {"migStrategy": "single", "timeSlicingReplicas": 2},
    }

    mig_config = {"flipped": MIG_CONFIG_NAME}  # what build_fleet passes when a pool is MIG (components/fleet.py)

    def program(provider_for: Callable[[str], Any]) -> None:
        for variant, settings in variants.items():
            GpuOperator(f"gpu-{variant}",
                        GpuOperatorArgs(GpuOperatorSettings.model_validate(settings), source="vendored",
                                        mig_config=mig_config.get(variant)),
                        opts=provider_for(variant))

    rendered = render_inline(tmp_path, lean_engine_env, program)
    flipped = read_rendered(rendered / "flipped")
    spec = cluster_policy(keyed(flipped))
    assert spec["driver"]["enabled"] is False and spec["toolkit"]["enabled"] is False
    assert spec["dcgmExporter"]["enabled"] is False and spec["dcgmExporter"]["serviceMonitor"]["enabled"] is False
    assert spec["mig"] == {"strategy": "mixed"}
    assert spec["devicePlugin"]["config"] == {"name": TIME_SLICING_CONFIG, "default": TIME_SLICING_KEY}
    config_map = keyed(flipped)[("ConfigMap", f"gpu-operator/{TIME_SLICING_CONFIG}")]
    sharing = yaml.safe_load(config_map["data"][TIME_SLICING_KEY])
    assert sharing["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    assert sharing["flags"] == {"migStrategy": "mixed"}
    # mig-manager reads the layout planner's ConfigMap (components/gpu_sharing.py makes it), not one of the chart's
    assert spec["migManager"]["config"] == {"name": MIG_CONFIG_NAME, "default": "all-disabled"}
    assert ("ConfigMap", f"gpu-operator/{MIG_CONFIG_NAME}") not in keyed(flipped)

    single = keyed(read_rendered(rendered / "single"))
    assert cluster_policy(single)["mig"] == {"strategy": "single"}
    assert "name" not in cluster_policy(single)["migManager"]["config"]
    sharing = yaml.safe_load(single[("ConfigMap", f"gpu-operator/{TIME_SLICING_CONFIG}")]["data"][TIME_SLICING_KEY])
    assert sharing["sharing"]["timeSlicing"]["resources"][0]["replicas"] == 2


def test_make_stack_leaves_the_platform_out_unless_asked(make_stack: Callable[..., EngineStack]) -> None:
    """The model tests' stacks skip the charts (minutes each); this module renders them on purpose."""
    es = make_stack()
    doc = yaml.safe_load((es.project / f"Pulumi.{es.stack.name}.yaml").read_text())
    pieces = [p for p in doc["config"]["tkf-infra:platform"].values() if isinstance(p, dict)]
    assert pieces and all(p["alreadyInstalled"] for p in pieces)
