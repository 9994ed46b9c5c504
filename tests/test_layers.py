"""A split environment (docs/stacks.md): which layer a stack is, the platform contract, and the refusals
either side makes — the fleet by model, the platform before it removes a CRD a fleet still uses."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from components.model_serving import LLMISVC_API_VERSION, LWS_API_VERSION
from tests.mocks import CPU, MULTI_NODE, SINGLE_GPU, run, stack_doc
from tkf_infra import layers
from tkf_infra import platform_contract as pc
from tkf_infra.config import SettingsError, validate_catalog
from tkf_infra.layer_edge import LayerRun, prepare, refused
from tkf_infra.layers import Layer
from tkf_infra.names import MODEL_SERVING_TYPE


def env_doc(*models: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    return {**stack_doc(*models, **overrides), "layer": "fleet"}


def contract_of(doc: dict[str, Any], env: str = "test") -> dict[str, Any]:
    return pc.publish(validate_catalog(layers.platform_settings(doc)), env)


def outputs_from(table: dict[str, dict[str, Any]]) -> Any:
    return lambda stack: copy.deepcopy(table.get(stack))


# -- which layer -------------------------------------------------------------------------------------


def test_a_stack_without_the_key_holds_both_layers_as_before() -> None:
    layer, raw = layers.resolve("test", stack_doc(CPU), lambda env: None)
    assert layer == Layer.ALL and raw["models"][0]["name"] == "tiny"


def test_the_platform_stack_takes_the_platform_keys_of_its_environments_file() -> None:
    doc = env_doc(CPU)
    layer, raw = layers.resolve("test-platform", {}, {"test": doc}.get)
    assert layer == Layer.PLATFORM
    assert set(raw) == {"cluster", "nodePools", "platform", "serving"} and "models" not in raw


def test_the_platform_stack_refuses_settings_of_its_own_by_key() -> None:
    with pytest.raises(SettingsError) as err:
        layers.resolve("test-platform", {"models": [CPU], "nodePools": [{"name": "x"}], "strict": False},
                       {"test": env_doc()}.get)
    text = err.value.render()
    assert "tkf-infra:models, tkf-infra:nodePools" in text and "Pulumi.test.yaml" in text


def test_the_platform_stack_of_a_one_stack_environment_is_refused_with_the_way_to_split() -> None:
    with pytest.raises(SettingsError) as err:
        layers.resolve("test-platform", {}, {"test": stack_doc(CPU)}.get)
    assert "tkf-infra:layer: fleet" in err.value.render() and "split --stack test" in err.value.render()
    with pytest.raises(SettingsError, match=r"no Pulumi\.nope\.yaml"):
        layers.resolve("nope-platform", {}, lambda env: None)


# -- the contract -----------------------------------------------------------------------------------


def test_the_contract_names_the_components_own_api_versions() -> None:
    assert pc.PLATFORM_KINDS["LLMInferenceService"][1] == LLMISVC_API_VERSION
    assert pc.PLATFORM_KINDS["LeaderWorkerSet"][1] == LWS_API_VERSION


def test_the_contract_round_trips_and_gives_the_fleet_its_pools_and_pieces() -> None:
    doc = env_doc(SINGLE_GPU, installed=False)
    contract = pc.read(contract_of(doc), "test-platform")
    assert contract.pieces["lws"].installed_by == "tkf-infra" and "LeaderWorkerSet" in contract.apis
    fleet_doc = {**doc, "nodePools": [], "platform": {}}  # what the fleet's own view of the platform does not matter
    settings = validate_catalog(pc.fleet_settings(fleet_doc, contract)).settings
    assert [p["name"] for p in pc.fleet_settings(fleet_doc, contract)["nodePools"]] == ["h100"]
    assert all(c.already_installed for c in settings.platform.pieces().values()), "the fleet installs no piece"


@pytest.mark.parametrize(("change", "expected"), [
    ({"contractVersion": 2}, "is 2, and this tkf-infra reads version 1 only; update tkf-infra"),
    ({"contractVersion": "1"}, "contractVersion: is '1', not a version number"),
    ({"contractVersion": 1.5}, "contractVersion: is 1.5, not a version number"),
    ({"nodePools": "h100"}, "nodePools"),
])
def test_a_contract_the_fleet_cannot_use_is_refused_by_name(change: dict[str, Any], expected: str) -> None:
    value = {**contract_of(env_doc()), **change}
    with pytest.raises(SettingsError) as err:
        pc.read(value, "test-platform")
    text = err.value.render()
    assert "test-platform" in text and pc.PLATFORM_CONTRACT_OUTPUT in text and expected in text


# -- the fleet refuses by model ----------------------------------------------------------------------


def _fleet(doc: dict[str, Any], platform: dict[str, Any], *, dry_run: bool = False,
           own: dict[str, Any] | None = None) -> LayerRun:
    table = {"test-platform": {pc.PLATFORM_CONTRACT_OUTPUT: platform}, **({"test": own} if own else {})}
    return prepare("test", doc, dry_run=dry_run, read_outputs=outputs_from(table))


def test_a_multi_node_model_is_refused_when_the_platform_has_no_lws_and_its_sibling_deploys() -> None:
    doc = env_doc(SINGLE_GPU, MULTI_NODE)
    platform = contract_of(doc)
    del platform["pieces"]["lws"], platform["apis"]["LeaderWorkerSet"]
    run_ = _fleet(doc, platform)
    reasons = refused(run_, validate_catalog(run_.settings))
    name = str(MULTI_NODE["name"])
    assert list(reasons) == [name]
    assert "LeaderWorkerSet (leaderworkerset.x-k8s.io/v1)" in reasons[name][0] and "test-platform" in reasons[name][0]


def test_a_mig_share_is_refused_when_the_platform_applies_no_mig_layout() -> None:
    pool = {"name": "mig", "gpuProduct": "A100-80GB", "gpusPerNode": 8, "nodeCount": 1, "mig": True,
            "nodes": ["n1"]}
    model = {**SINGLE_GPU, "name": "small", "nodePool": "mig", "gpuShare": "mig:3g.40gb", "maxModelLen": 4096}
    doc = env_doc(model, nodePools=[pool], platform={"gpuOperator": {"migStrategy": "mixed", "alreadyInstalled": True}})
    platform = contract_of(doc)
    assert platform["gpuSharing"]["migConfig"] is None  # the GPU Operator is someone else's here
    run_ = _fleet(doc, platform)
    assert "needs mig-manager to apply the layout" in refused(run_, validate_catalog(run_.settings))["small"][0]


def test_a_fleet_preview_before_the_platform_is_applied_plans_against_the_file_and_says_so() -> None:
    doc = env_doc(CPU)
    run_ = prepare("test", doc, dry_run=True, read_outputs=lambda s: None)
    assert run_.layer == Layer.FLEET and "has not been applied yet" in run_.warnings[0]
    with pytest.raises(SettingsError, match="run `python -m tkf_infra up --stack test-platform` first"):
        prepare("test", doc, dry_run=False, read_outputs=lambda s: None)


def test_a_fleet_with_an_applied_platform_reads_no_outputs_of_its_own_to_plan() -> None:
    """Each read of this stack's outputs makes the engine load its whole state file (7.9 MB at 200 models,
    docs/performance.md); the one-stack check needs them only while the platform has published nothing."""
    doc = env_doc(CPU)
    read: list[str] = []
    table = outputs_from({"test-platform": {pc.PLATFORM_CONTRACT_OUTPUT: contract_of(doc)},
                          "test": {"contractVersion": 1, "layer": "fleet"}})

    def reader(stack: str) -> Any:
        read.append(stack)
        return table(stack)

    assert prepare("test", doc, dry_run=False, read_outputs=reader).layer == Layer.FLEET
    assert read == ["test-platform"]
    read.clear()
    prepare("test", doc, dry_run=True, read_outputs=lambda s: reader(s) if s == "test" else None)
    assert read == ["test"], "before the platform is applied, the one-stack check still reads them"


def test_a_one_stack_deployment_switched_to_fleet_is_refused_until_it_is_split() -> None:
    own = {"contractVersion": 1, "deployed": {"tiny": {}}}
    with pytest.raises(SettingsError, match="split --stack test"):
        prepare("test", env_doc(CPU), dry_run=True, read_outputs=outputs_from({"test": own}))


def test_the_fleet_warns_when_the_file_asks_the_platform_for_more_than_it_applied() -> None:
    doc = env_doc(CPU)
    applied = contract_of(doc)
    assert _fleet(doc, pc.as_read(applied)).warnings == (), "as read back through the engine, nothing differs"
    doc["nodePools"] = [*doc["nodePools"], {"name": "h200", "gpuProduct": "H200", "gpusPerNode": 8, "nodeCount": 1}]
    run_ = _fleet(doc, applied)
    assert "differ from what platform stack test-platform last applied (nodePools)" in run_.warnings[0]
    assert [p["name"] for p in run_.settings["nodePools"]] == ["h100"], "plans against what is applied"


# -- the platform refuses to remove a CRD in use ----------------------------------------------------


def test_the_platform_refuses_to_drop_lws_while_the_fleet_has_leaderworkersets() -> None:
    before = contract_of(env_doc(installed=False))
    after = contract_of(env_doc(installed=False, platform={"lws": {"alreadyInstalled": True}}))
    problems = pc.crd_removal_problems(before, after, {"test": {"LeaderWorkerSet": 2.0, "LLMInferenceService": 3}})
    assert len(problems) == 1
    assert "platform.lws" in problems[0] and "fleet stack test has 2 LeaderWorkerSet" in problems[0]
    assert pc.crd_removal_problems(before, after, {"test": {"LeaderWorkerSet": 0}}) == []
    never_ours = contract_of(env_doc(installed=True))
    assert pc.crd_removal_problems(never_ours, after, {"test": {"LeaderWorkerSet": 2}}) == []


def test_the_platform_run_stops_with_the_refusal_before_registering_anything() -> None:
    doc = env_doc(installed=False)
    previous = contract_of(doc)
    doc["serving"] = {**doc["serving"], "backend": "vllm"}  # KServe no longer needed: its CRDs would go
    table = {"test-platform": {pc.PLATFORM_CONTRACT_OUTPUT: previous},
             "test": {pc.PLATFORM_USE_OUTPUT: {"LLMInferenceService": 2, "LeaderWorkerSet": 0}}}
    with pytest.raises(SettingsError) as err:
        prepare("test-platform", {}, dry_run=True, read_outputs=outputs_from(table), env_file={"test": doc}.get)
    assert "no longer needed by serving.backend" in err.value.render()
    assert "2 LLMInferenceService" in err.value.render()


# -- the program, per layer, under mocks -------------------------------------------------------------


def _program(stack: str, settings: dict[str, Any], doc: dict[str, Any], table: dict[str, Any]) -> Any:
    from tkf_infra.config.api_keys import ApiKeys
    from tkf_infra.hub.lock import load_lock
    from tkf_infra.program import Edge
    from tkf_infra.program import run as run_program

    def build() -> Any:
        return run_program(Edge(settings=settings, lock=load_lock(), api_keys=ApiKeys("unit-test-key"),
                                read_api_key=False, stack_outputs=outputs_from(table),
                                env_file={"test": doc}.get))

    return run(build, stack=stack, expect_error=True)


def test_each_layer_registers_only_its_own_resources() -> None:
    doc = env_doc(SINGLE_GPU, installed=False, platform={"gpuOperator": {"alreadyInstalled": True}})
    platform = _program("test-platform", {}, doc, {})
    assert platform.error is None, platform.error
    types = {r.type for r in platform.resources}
    assert "tkf:platform:ServingPrerequisites" in types and "tkf:platform:GpuNodePool" in types
    assert MODEL_SERVING_TYPE not in types and "kubernetes:core/v1:Secret" not in types
    table = {"test-platform": {pc.PLATFORM_CONTRACT_OUTPUT: contract_of(doc)}}
    fleet = _program("test", doc, doc, table)
    assert fleet.error is None, fleet.error
    types = {r.type for r in fleet.resources}
    assert MODEL_SERVING_TYPE in types
    assert not types & {"tkf:platform:ServingPrerequisites", "tkf:platform:GpuNodePool", "tkf:platform:GpuOperator"}
    providers = {r.name for r in [*platform.resources, *fleet.resources] if r.type.startswith("pulumi:providers:")}
    assert providers == {"k8s-test"}, "one provider name per environment: moving resources keeps their provider"


def test_preview_and_up_of_the_split_dev_environment_run_its_platform_first() -> None:
    from tkf_infra.ops.layer_runs import Only, layer_stacks

    assert layer_stacks("dev", Only.both) == ["dev-platform", "dev"]
    assert layer_stacks("dev", Only.fleet) == ["dev"] and layer_stacks("dev", Only.platform) == ["dev-platform"]
    assert layer_stacks("dev-platform", Only.both) == ["dev-platform"]
    assert layer_stacks("prod", Only.both) == ["prod"], "prod is one stack until it is split"


def test_split_moves_the_platform_components_and_everything_under_them_only() -> None:
    from tkf_infra.ops.split import platform_urns

    def urn(t: str, n: str) -> str:
        return f"urn:pulumi:e::tkf-infra::{t}::{n}"

    stack, prov = urn("pulumi:pulumi:Stack", "tkf-infra-e"), urn("pulumi:providers:kubernetes", "k8s-e")
    prereq = urn("tkf:platform:ServingPrerequisites", "serving-prerequisites")
    chart = urn("tkf:platform:ServingPrerequisites$kubernetes:helm.sh/v4:Chart", "serving-prerequisites-lws")
    crd = urn("kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition", "lws-crd")
    model = urn("tkf:serving:ModelServing", "tiny")
    resources = [{"urn": stack, "type": "pulumi:pulumi:Stack"}, {"urn": prov, "type": "pulumi:providers:kubernetes"},
                 {"urn": prereq, "type": "tkf:platform:ServingPrerequisites", "parent": stack},
                 {"urn": chart, "type": "kubernetes:helm.sh/v4:Chart", "parent": prereq},
                 {"urn": crd, "type": "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition", "parent": chart},
                 {"urn": model, "type": "tkf:serving:ModelServing", "parent": stack}]
    assert platform_urns(resources) == [prereq, chart, crd]
