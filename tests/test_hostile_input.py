"""Careless and hostile input, second round (issue 30): each refused by name, at load, never a traceback.

Names match whole (a trailing newline no longer passes a rule whose regex ended in `$`), Secret names
follow the API server's rule, a node listed twice is named, an unknown `tkf-infra:` key (secret or
not) gets the nearest valid one, only the dev stack runs without an API key, and the edges (EC2
without a region, a chartPath of an unknown user, a CRD another chart needs) end in named errors.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pulumi
import pytest

from tests.mocks import CPU, TP4, RecordingMocks, program, stack_doc
from tkf_infra.config import SettingsError, validate_catalog
from tkf_infra.config import kube_syntax as ks
from tkf_infra.config.reader import read_pulumi_config
from tkf_infra.hub.lock import load_lock

SHA = "b968826d9c46dd6066d109eabc6255188de91218"
GOOD = {"name": "good", "repo": "Qwen/Qwen3-8B", "revision": SHA, "servedName": "good"}
POOL = {"name": "h100", "gpuProduct": "H100-80GB", "gpusPerNode": 8, "nodeCount": 2}
EKS = {"name": "p5", "kind": "eks", "instanceType": "p5.48xlarge", "gpusPerNode": 8, "clusterName": "c",
       "nodeRoleArn": "arn:aws:iam::123456789012:role/nodes", "subnetIds": ["subnet-0abc"]}


def doc(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"nodePools": [dict(POOL)], "modelDefaults": {"nodePool": "h100", "maxModelLen": 8192},
                            "models": [dict(GOOD)]}
    base.update(over)
    return base


def stack_problems(d: dict[str, Any]) -> str:
    with pytest.raises(SettingsError) as err:
        validate_catalog(d)
    return str(err.value)


# -- names match whole ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("check", [
    lambda v: ks.subdomain_problem(v, "node name"),
    ks.label_key_problem,
    ks.label_value_problem,
    ks.env_name_problem,
])
def test_the_api_servers_rules_match_the_whole_name(check: Callable[[str], str | None]) -> None:
    assert check("abc") is None
    for bad in ("abc\n", "abc\r\n", "\nabc", "ab\nc"):
        problem = check(bad)
        assert problem is not None and repr(bad) in problem, (bad, problem)


ENTRY_FIELDS = [("name", "m\n"), ("repo", "Qwen/Qwen3-8B\n"), ("revision", SHA + "\n"), ("servedName", "m\n"),
                ("gpuShare", "whole\n"), ("hfTokenSecret", "hf-token\n")]


@pytest.mark.parametrize(("field", "value"), ENTRY_FIELDS)
def test_a_trailing_newline_in_a_catalog_name_refuses_that_entry_only(field: str, value: str) -> None:
    bad = {**GOOD, "name": "bad", "servedName": "bad", field: value}
    cat = validate_catalog(doc(models=[dict(GOOD), bad]))
    assert [m.name for m in cat.models] == ["good"], "the healthy sibling still deploys"
    (rejected,) = cat.rejected
    text = "\n".join(str(p) for p in rejected.problems)
    assert f": {field}: " in text and repr(value) in text, text
    assert "\n" not in str(rejected.problems[0]).split(": ", 1)[0], "the subject is one line"


def test_a_revision_with_a_line_break_is_told_so_not_called_a_branch() -> None:
    cat = validate_catalog(doc(models=[{**GOOD, "revision": SHA + "\n"}]))
    text = str(cat.rejected[0].problems[0])
    assert "spaces or a line break around the commit SHA; remove them" in text and "branch" not in text


def test_an_entry_name_with_a_line_break_is_quoted_where_messages_name_it() -> None:
    cat = validate_catalog(doc(models=[{**GOOD, "name": "m\n"}]))
    assert str(cat.rejected[0].problems[0]).startswith("models[0] 'm\\n': ")
    h = program(stack_doc(CPU, {**CPU, "name": "m\n", "servedName": "m"}), lock=load_lock())
    assert "'m\\n' was left out of this deployment (catalog):" in " ".join(h.errors()), h.errors()
    assert "1 catalog entry was refused ('m\\n'); the other 1 were deployed" in str(h.error)


POOL_FIELDS = [
    ({"name": "h100\n"}, "name", "'h100\\n'"),
    ({"labels": {"tkf.io/pool\n": "h100"}}, "labels", "'tkf.io/pool\\n'"),
    ({"labels": {"tkf.io/pool": "h100\n"}}, "labels", "'h100\\n'"),
    ({"taints": [{"key": "nvidia.com/gpu\n"}]}, "taints[0].key", "'nvidia.com/gpu\\n'"),
    ({"taints": [{"key": "nvidia.com/gpu", "value": "present\n"}]}, "taints[0].value", "'present\\n'"),
    ({"nodes": ["gpu-1\n", "gpu-2"]}, "nodes", "'gpu-1\\n'"),
    ({**EKS, "name": "h100", "nodeRoleArn": "arn:aws:iam::123456789012:role/nodes\nx"}, "", "role/nodes\\nx'"),
    ({**EKS, "name": "h100", "subnetIds": ["subnet-0abc\n"]}, "", "'subnet-0abc\\n'"),
]


@pytest.mark.parametrize(("over", "field", "shown"), POOL_FIELDS)
def test_a_trailing_newline_in_a_pool_setting_refuses_that_pool_naming_field_and_value(
        over: dict[str, Any], field: str, shown: str) -> None:
    cat = validate_catalog(doc(nodePools=[{**POOL, **over}]))
    text = "\n".join(str(p) for p in cat.pool_problems)
    assert text.startswith("nodePools[0]") and shown in text, text
    if field:
        assert f": {field}: " in text, text


STACK_FIELDS = [
    ({"namespaces": {"serving": "llm-serving\n"}}, "namespaces.serving", "'llm-serving\\n'"),
    ({"serving": {"storageClass": "fast-nvme\n"}}, "serving.storageClass", "'fast-nvme\\n'"),
    ({"serving": {"apiKeyEnv": "TKF_KEY\n"}}, "serving.apiKeyEnv", "'TKF_KEY\\n'"),
    ({"serving": {"vllmImage": "vllm/vllm-openai:v0.32.0\n"}}, "serving.vllmImage", "'vllm/vllm-openai:v0.32.0\\n'"),
    ({"platform": {"kserve": {"version": "v0.20.0\n"}}}, "platform.kserve.version", "'v0.20.0\\n'"),
    ({"prometheusUrl": "http://prometheus:9090\n"}, "prometheusUrl", "'http://prometheus:9090\\n'"),
]


@pytest.mark.parametrize(("over", "field", "shown"), STACK_FIELDS)
def test_a_trailing_newline_in_a_stack_setting_stops_the_run_naming_field_and_value(
        over: dict[str, Any], field: str, shown: str) -> None:
    text = stack_problems(doc(**over))
    assert f"stack settings: {field}: " in text and shown in text, text


def test_a_secret_name_follows_the_api_servers_rule_for_secret_names() -> None:
    cat = validate_catalog(doc(models=[dict(GOOD), {**GOOD, "name": "gated", "servedName": "g",
                                                    "hfTokenSecret": "MY_SECRET"}]))
    assert [m.name for m in cat.models] == ["good"]
    text = str(cat.rejected[0].problems[0])
    assert text.startswith("models[1] gated: hfTokenSecret: hfTokenSecret 'MY_SECRET' is not a valid Secret name"), text
    assert "DNS-1123 subdomain" in text and "use e.g. 'my-secret'" in text
    assert validate_catalog(doc(models=[{**GOOD, "hfTokenSecret": "hf-token.v2"}])).ok


def test_a_node_listed_twice_is_refused_by_name() -> None:
    cat = validate_catalog(doc(nodePools=[{**POOL, "nodes": ["gpu-1", "gpu-2", "gpu-1"]}]))
    text = str(cat.pool_problems[0])
    assert text.startswith("nodePools[0] h100: nodes: ")
    assert "node 'gpu-1' is listed 2 times; list each node once" in text
    assert [r.name for r in cat.rejected] == ["good"], "its models are left out with it"


# -- unknown keys, secret or not ------------------------------------------------------------------------------------

@pytest.fixture
def engine_config() -> Iterator[Callable[[dict[str, str], list[str]], None]]:
    def configure(values: dict[str, str], secrets: list[str]) -> None:
        pulumi.runtime.set_mocks(RecordingMocks(), project="tkf-infra", stack="prod")
        pulumi.runtime.set_all_config(values, secrets)

    yield configure
    pulumi.runtime.set_all_config({}, [])


def test_a_misspelt_secret_key_is_refused_with_the_nearest_key_and_never_shown(
        engine_config: Callable[[dict[str, str], list[str]], None]) -> None:
    engine_config({"tkf-infra:apiKey": "old-key", "tkf-infra:apiKeyNxt": "new-secret-key",
                   "tkf-infra:modelz": "[]"}, ["tkf-infra:apiKey", "tkf-infra:apiKeyNxt"])
    text = stack_problems(read_pulumi_config())
    assert "stack settings: apiKeyNxt: unknown key (a secret, not shown)" in text
    assert "did you mean 'apiKeyNext'?" in text
    assert "stack settings: modelz: unknown key (value [])" in text and "did you mean 'models'?" in text
    assert "new-secret-key" not in text
    engine_config({"tkf-infra:apiKey": "old-key", "tkf-infra:apiKeyNxt": "plain-new-key"}, ["tkf-infra:apiKey"])
    text = stack_problems(read_pulumi_config())
    assert "apiKeyNxt: unknown key (not shown: it may be a credential; set such keys with `pulumi config set " \
           "--secret`)" in text and "did you mean 'apiKeyNext'?" in text and "plain-new-key" not in text


def test_an_unknown_key_anywhere_gets_the_nearest_valid_key() -> None:
    text = stack_problems(doc(platform={"kserve": {"versoin": "v0.20.0"}}, modelDefault={}))
    assert "platform.kserve.versoin: unknown key (value 'v0.20.0')" in text and "did you mean 'version'?" in text
    assert "modelDefault: unknown key" in text and "did you mean 'modelDefaults'?" in text
    cat = validate_catalog(doc(models=[{**GOOD, "servdName": "x", "cost": {"inputPerTokn": 1}}],
                               nodePools=[{**POOL, "taints": [{"key": "a", "efect": "NoSchedule"}]}]))
    entry = "\n".join(str(p) for p in cat.rejected[0].problems)
    assert "servdName: unknown key" in entry and "did you mean 'servedName'?" in entry
    assert "cost.inputPerTokn: unknown key" in entry and "did you mean 'inputPerToken'?" in entry
    assert "taints[0].efect: unknown key" in str(cat.pool_problems[0]) and "'effect'" in str(cat.pool_problems[0])
    text = stack_problems(doc(modelDefaults={"maxModelLn": 4096}))
    assert "modelDefaults: unknown key(s) 'maxModelLn'" in text and "did you mean 'maxModelLen'?" in text


# -- edges: named errors, never a traceback -------------------------------------------------------------------------

def test_an_eks_pool_without_an_aws_region_leaves_out_its_models_naming_the_fix(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    for key in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    d = stack_doc(CPU, {**TP4, "nodePool": "p5"})
    d["nodePools"].append(EKS)
    h = program(d, lock=load_lock())
    assert "were refused" in str(h.error) or "was refused" in str(h.error), h.error
    errors = " ".join(h.errors())
    assert "qwen-72b was left out of this deployment (pool)" in errors, errors
    assert "node pool p5: instanceType: instance type p5.48xlarge cannot be looked up: no AWS region" in errors
    assert "set AWS_REGION" in errors
    assert {r.name for r in h.resources if r.type == "tkf:serving:ModelServing"} == {"tiny"}


@pytest.mark.parametrize(("path", "expected"), [
    ("~tkf-no-such-user/charts/lws", "starts with ~tkf-no-such-user, but user 'tkf-no-such-user' is not known"),
    ("charts/lws\n", "holds a control character"),
])
def test_a_chart_path_of_an_unknown_user_is_refused_by_name(path: str, expected: str) -> None:
    text = stack_problems(doc(platform={"lws": {"version": "0.8.0", "chartPath": path}}))
    assert f"platform.lws.chartPath {path!r} {expected}" in text, text
    assert "write the path out" in text


def test_a_chart_path_whose_home_does_not_exist_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/nonexistent/tkf-home")
    text = stack_problems(doc(platform={"lws": {"version": "0.8.0", "chartPath": "~/charts/lws"}}))
    assert "platform.lws.chartPath '~/charts/lws' starts with ~, whose home directory /nonexistent/tkf-home" in text


def test_a_kubeconfig_of_an_unknown_user_ends_in_a_named_error() -> None:
    h = program(stack_doc(CPU, cluster={"mode": "kubeconfig", "kubeconfig": "~tkf-no-such-user/kc"}), lock=load_lock())
    assert "cluster.kubeconfig '~tkf-no-such-user/kc' cannot be read" in str(h.error), h.error


def test_render_mode_refuses_an_installed_cert_manager_that_kserves_chart_needs() -> None:
    text = stack_problems(doc(platform={"certManager": {"alreadyInstalled": True}}))
    assert "platform.certManager.alreadyInstalled is true in render mode, but kserve-llmisvc-resources creates a " \
           "cert-manager Issuer and Certificate" in text, text
    assert "set platform.kserve.alreadyInstalled: true as well" in text
    # Against a cluster, or with KServe installed by its owner too, nothing needs cert-manager's CRDs in the program.
    validate_catalog(doc(platform={"certManager": {"alreadyInstalled": True}, "kserve": {"alreadyInstalled": True}}))
    validate_catalog(doc(platform={"certManager": {"alreadyInstalled": True}},
                         cluster={"mode": "kubeconfig", "kubeconfig": "/k"}))


def test_the_clis_local_catalog_reads_a_value_that_is_not_yaml_without_crashing() -> None:
    """`refresh`, `status` and `calibrate` validate the stack's config locally: "@x" or "a: b: c" is a
    plain string there (the program's own reading), refused by the settings rule, not a YAML traceback."""
    from pulumi import automation as auto

    from tkf_infra.ops.stacks import stack_catalog

    class Stack:
        def __init__(self, values: dict[str, str]) -> None:
            self.values = values

        def get_all_config(self) -> dict[str, auto.ConfigValue]:
            return {k: auto.ConfigValue(v) for k, v in self.values.items()}

    assert stack_catalog(Stack({"tkf-infra:prometheusUrl": "@x"})) is None  # type: ignore[arg-type]
    cat = stack_catalog(Stack({"tkf-infra:cluster": '{"mode": "render", "renderDir": "a: b: c"}',  # type: ignore[arg-type]
                               "tkf-infra:models": "[]"}))
    assert cat is not None and cat.settings.cluster.render_dir == "a: b: c"


def test_an_empty_api_key_secret_counts_as_none_and_refuses_every_stack_but_dev(
        engine_config: Callable[[dict[str, str], list[str]], None]) -> None:
    from tkf_infra.config.api_keys import missing_key_problem
    from tkf_infra.config.reader import read_api_keys

    engine_config({"tkf-infra:apiKey": ""}, ["tkf-infra:apiKey"])  # `pulumi config set --secret apiKey ""`
    assert read_api_keys() is None
    assert missing_key_problem("dev") is None
    assert "--stack prod`" in str(missing_key_problem("prod"))
