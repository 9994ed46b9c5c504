"""Catalog validation: one test per rule, asserting the message a person editing the stack sees."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tkf_infra.config import Catalog, SettingsError, catalog_json_schema, read_stack_file, validate_catalog

ROOT = Path(__file__).resolve().parents[1]
SHA = "b968826d9c46dd6066d109eabc6255188de91218"


def base_doc(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "nodePools": [
            {"name": "h100", "gpuProduct": "H100-80GB", "gpusPerNode": 8, "nodeCount": 2},
            {"name": "cpu", "gpusPerNode": 0},
        ],
        "modelDefaults": {"nodePool": "h100", "maxModelLen": 8192},
        "models": [{"name": "qwen3-8b", "repo": "Qwen/Qwen3-8B", "revision": SHA, "servedName": "qwen3-8b"}],
    }
    doc.update(over)
    return doc


def with_model(**fields: Any) -> dict[str, Any]:
    doc = base_doc()
    doc["models"] = [{"name": "m", "repo": "Qwen/Qwen3-8B", "revision": SHA, "servedName": "m", **fields}]
    return doc


def only_problem(doc: dict[str, Any]) -> str:
    cat = validate_catalog(doc)
    assert not cat.models, "the bad entry must be left out"
    assert len(cat.rejected) == 1
    return "\n".join(str(p) for p in cat.rejected[0].problems)


def test_valid_entry_gets_defaults_merged() -> None:
    cat = validate_catalog(base_doc())
    assert [m.name for m in cat.models] == ["qwen3-8b"]
    m = cat.models[0]
    assert (m.node_pool, m.max_model_len, m.profile.value) == ("h100", 8192, "single-gpu")
    assert cat.ok


def test_branch_revision_refused_with_reason() -> None:
    msg = only_problem(with_model(revision="main"))
    assert "models[0] m: revision: revision 'main' is a branch" in msg
    assert "pin the 40-character commit SHA" in msg


def test_every_problem_of_an_entry_reported_at_once() -> None:
    msg = only_problem(with_model(revision="main", gpusPerNode=2))
    assert "revision 'main' is a branch" in msg
    assert "tensorParallelSize × pipelineParallelSize = 1 × 1 = 1, but nodeCount × gpusPerNode = 1 × 2 = 2" in msg


def test_tag_and_short_sha_refused() -> None:
    assert "is a tag" in only_problem(with_model(revision="v2.0.1"))
    assert "abbreviated commit" in only_problem(with_model(revision=SHA[:12]))
    assert "upper-case" in only_problem(with_model(revision=SHA.upper()))


def test_name_must_be_dns1035() -> None:
    msg = only_problem(with_model(name="Qwen_8B"))
    assert "name 'Qwen_8B' is not a DNS-1035 label" in msg


def test_name_length_keeps_k8s_names_within_63() -> None:
    msg = only_problem(with_model(name="a" * 40))
    assert "at most 36 keep every generated Kubernetes name within 63 characters" in msg


def test_repo_must_be_org_slash_name() -> None:
    assert "write it as 'org/name'" in only_problem(with_model(repo="Qwen3-8B"))


def test_parallelism_must_cover_the_gpus() -> None:
    msg = only_problem(with_model(gpusPerNode=4, tensorParallelSize=2))
    assert "tensorParallelSize × pipelineParallelSize = 2 × 1 = 2, but nodeCount × gpusPerNode = 1 × 4 = 4" in msg


def test_multi_node_means_pipeline_equals_nodes() -> None:
    msg = only_problem(with_model(nodeCount=2, gpusPerNode=4, tensorParallelSize=2, pipelineParallelSize=4))
    assert "pipelineParallelSize (4) must equal nodeCount (2)" in msg


def test_topology_must_match_counts() -> None:
    msg = only_problem(with_model(topology="multi-node"))
    assert "topology 'multi-node' does not match the GPU counts, which describe 'single-gpu'" in msg


def test_platform_owned_flags_refused() -> None:
    msg = only_problem(with_model(extraArgs=["--disable-log-stats", "--tensor-parallel-size=2"]))
    assert ("'--tensor-parallel-size=2', a flag the platform owns: set `tensorParallelSize` instead (the fit check "
            "sizes the model with it); remove it") in msg


@pytest.mark.parametrize(("arg", "owner"), [
    ("--max-num-batched-tokens=65536", "maxNumBatchedTokens"),  # emitted and sized: was not blocked
    ("--max_num_batched_tokens", "maxNumBatchedTokens"),  # vLLM's parser reads underscores as dashes
    ("--enforce-eager", "enforceEager"),
    ("--no-enforce-eager", "enforceEager"),  # the negated boolean form
    ("--tool-call-parser=hermes", "toolCallParser"),
    ("--block-size", "blockSize"),  # the KV rounding uses it
    ("--max-model", "maxModelLen"),  # an abbreviation argparse would expand
    ("-O3", "CUDA-graph capture sizes"),
    ("--kv-cache-memory-bytes=1e9", "kvCacheMemoryBytes"),  # a sized row of the table now
])
def test_extra_args_cannot_override_what_the_fit_check_sized(arg: str, owner: str) -> None:
    msg = only_problem(with_model(extraArgs=["--disable-log-stats", arg]))
    assert f"extraArgs contains {arg!r}, a flag the platform owns" in msg and owner in msg
    assert "--disable-log-stats" not in msg


def test_every_owned_flag_problem_is_reported_at_once() -> None:
    msg = only_problem(with_model(extraArgs=["--port=9000", "--max-num-seqs", "8"]))
    assert "'--port=9000'" in msg and "'--max-num-seqs'" in msg


def test_costs_cannot_be_negative() -> None:
    msg = only_problem(with_model(cost={"inputPerToken": -1}))
    assert "cost.inputPerToken" in msg and "greater than or equal to 0" in msg


def test_tool_choice_needs_parser() -> None:
    assert "enableAutoToolChoice needs toolCallParser" in only_problem(with_model(enableAutoToolChoice=True))


def test_unknown_key_named() -> None:
    msg = only_problem(with_model(maxModelLength=4096))
    assert "maxModelLength: unknown key" in msg and "python -m tkf_infra schema" in msg


def test_missing_required_field() -> None:
    doc = with_model()
    del doc["models"][0]["servedName"]
    assert "servedName: is required but missing" in only_problem(doc)


def test_served_name_unique_first_wins() -> None:
    doc = base_doc()
    doc["models"].append({"name": "other", "repo": "Qwen/Qwen3-8B", "revision": SHA, "servedName": "qwen3-8b"})
    cat = validate_catalog(doc)
    assert [m.name for m in cat.models] == ["qwen3-8b"]
    assert "servedName: 'qwen3-8b' is already served by models[0] qwen3-8b" in str(cat.rejected[0].problems[0])


def test_name_unique() -> None:
    doc = base_doc()
    doc["models"].append({"name": "qwen3-8b", "repo": "Qwen/Qwen3-8B", "revision": SHA, "servedName": "x"})
    assert "'qwen3-8b' is already used by models[0] qwen3-8b" in str(validate_catalog(doc).rejected[0].problems[0])


def test_node_pool_must_exist() -> None:
    assert "'nope' is not a node pool of this stack; choose one of 'h100', 'cpu'" in only_problem(
        with_model(nodePool="nope"))


def test_node_pool_must_have_the_gpus() -> None:
    msg = only_problem(with_model(gpusPerNode=16, tensorParallelSize=16))
    assert "16 but node pool 'h100' has 8 GPUs per node" in msg


def test_cpu_profile_only_where_allowed() -> None:
    msg = only_problem(with_model(gpusPerNode=0, nodePool="cpu"))
    assert "CPU profile, which this stack does not allow (serving.allowCpu is false)" in msg
    ok = validate_catalog({**with_model(gpusPerNode=0, nodePool="cpu"), "serving": {"allowCpu": True}})
    assert ok.models[0].profile.value == "cpu"


def test_three_bad_two_good_gives_three_errors_and_two_models() -> None:
    doc = base_doc()
    doc["models"] = [
        {"name": "good-a", "repo": "Qwen/Qwen3-8B", "revision": SHA, "servedName": "a"},
        {"name": "bad-rev", "repo": "Qwen/Qwen3-8B", "revision": "main", "servedName": "b"},
        {"name": "good-b", "repo": "Qwen/Qwen3-8B", "revision": SHA, "servedName": "c"},
        {"name": "bad-pool", "repo": "Qwen/Qwen3-8B", "revision": SHA, "servedName": "d", "nodePool": "x"},
        {"name": "bad-tp", "repo": "Qwen/Qwen3-8B", "revision": SHA, "servedName": "e", "gpusPerNode": 2},
    ]
    cat = validate_catalog(doc)
    assert [m.name for m in cat.models] == ["good-a", "good-b"]
    assert [r.name for r in cat.rejected] == ["bad-rev", "bad-pool", "bad-tp"]
    assert not cat.ok


def test_strict_stops_everything_with_all_messages() -> None:
    doc = base_doc(strict=True)
    doc["models"].append({"name": "bad", "repo": "Qwen/Qwen3-8B", "revision": "main", "servedName": "x"})
    with pytest.raises(SettingsError) as err:
        validate_catalog(doc)
    assert "strict: true and the stack has bad entries; nothing was registered" in str(err.value)
    assert "models[1] bad: revision" in str(err.value)


def test_stack_level_errors_all_reported_at_once_with_key_value_and_fix() -> None:
    doc = base_doc(cluster={"mode": "kubeconfig"}, bogus=1, namespaces={"serving": "LLM_Serving"},
                   prometheusUrl="not a url", serving={"vllmImage": "vllm/vllm-openai:latest",
                                                      "vllmCpuImage": "vllm/vllm-cpu"})
    with pytest.raises(SettingsError) as err:
        validate_catalog(doc)
    text = str(err.value)
    assert "(6 problems)" in text, text
    assert "cluster.kubeconfig is not set" in text
    assert "bogus: unknown key" in text
    assert "namespaces.serving: 'LLM_Serving' is not a Kubernetes namespace name" in text and "'llm-serving'" in text
    assert "prometheusUrl: 'not a url' is not an http(s) URL" in text
    assert "serving.vllmImage: 'vllm/vllm-openai:latest' has tag 'latest'" in text and "(set serving.vllmImage)" in text
    assert "'vllm/vllm-cpu' has no tag" in text and "(set serving.vllmCpuImage)" in text


def test_a_bad_pool_refuses_only_its_models() -> None:
    doc = base_doc()
    doc["nodePools"].append({"name": "a100", "gpuProduct": "A100-120GB", "gpusPerNode": 8})
    doc["nodePools"].append({"name": "l4", "gpuProduct": "L4", "gpusPerNode": -1})
    doc["models"].append({"name": "on-a100", "repo": "Qwen/Qwen3-8B", "revision": SHA, "servedName": "b",
                          "nodePool": "a100"})
    cat = validate_catalog(doc)
    assert [m.name for m in cat.models] == ["qwen3-8b"]
    problems = [str(p) for p in cat.pool_problems]
    assert any(p.startswith("nodePools[2] a100: gpuProduct: unknown GPU 'A100-120GB'") for p in problems), problems
    assert any(p.startswith("nodePools[3] l4: gpusPerNode:") for p in problems), problems
    assert [r.name for r in cat.rejected] == ["on-a100"]
    assert "nodePool: 'a100' is not usable: nodePools[2] a100 has errors" in str(cat.rejected[0].problems[0])
    assert not cat.ok


def test_unpinned_platform_version_refused() -> None:
    with pytest.raises(SettingsError, match="version 'latest' is not pinned"):
        validate_catalog(base_doc(platform={"kserve": {"version": "latest"}}))


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_committed_stacks_validate(stack: str) -> None:
    cat = validate_catalog(read_stack_file(ROOT / f"Pulumi.{stack}.yaml"))
    assert cat.ok and cat.models
    if stack == "dev":
        assert {m.profile.value for m in cat.models} == {"cpu"}
    else:
        assert {m.profile.value for m in cat.models} >= {"single-gpu", "tensor-parallel", "multi-node"}


def test_schema_describes_entries() -> None:
    schema = catalog_json_schema()
    entry = schema["$defs"]["ModelEntry"]
    assert {"name", "repo", "revision", "servedName", "maxModelLen"} <= set(entry["required"])
    assert "cpuKvCacheGiB" in entry["properties"]
    json.dumps(schema)


def test_defaults_never_mutated_between_entries() -> None:
    doc = base_doc()
    doc["modelDefaults"]["extraArgs"] = ["--disable-log-stats"]
    doc["models"].append({"name": "b", "repo": "Qwen/Qwen3-8B", "revision": SHA, "servedName": "b"})
    before = copy.deepcopy(doc)
    cat: Catalog = validate_catalog(doc)
    assert doc == before
    assert cat.models[0].extra_args == cat.models[1].extra_args == ["--disable-log-stats"]
