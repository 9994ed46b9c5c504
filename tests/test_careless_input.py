"""Careless input, third round (issue 41), fixed as classes: each class below is refused at preview by name (the
entry, the field, the value, the fix), with several spellings each, and never takes a healthy sibling down.

- an `extraArgs` word that is no option of the pinned vLLM's `vllm serve` (two flags typed as one word, a typo);
- a name claimed before its claimant is validated (an adapter taking a model's served name; a refused entry
  taking a name from a good one);
- a quantity without its unit, read silently in the smallest unit (a node's memory as a bare number);
- a pool setting that contradicts its GPUs (`gpusPerNode: 0` with a `gpuProduct`), refused once as the pool;
- a bad adapter: dropped, never its base;
- tool-calling flags on a model that serves no chat completions;
- settings only `up` would trip on (a render directory that is no directory, a URL whose port is out of range).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.mocks import CPU, SINGLE_GPU, program, stack_doc
from tkf_infra.config import Catalog, SettingsError, validate_catalog
from tkf_infra.config.stack import VLLM_RELEASE

SHA = "b968826d9c46dd6066d109eabc6255188de91218"
SIBLING = {**SINGLE_GPU, "name": "sibling", "servedName": "sibling"}
ADAPTER = {"name": "sql", "repo": "org/sql-lora", "revision": SHA, "servedName": "qwen3-8b-sql"}
LORA = {"maxAdapters": 2, "maxRank": 16}


def only_sibling_left(doc: dict[str, Any]) -> str:
    """The one rejected entry's problems, as the user reads them; the sibling still deploys."""
    cat = validate_catalog(doc)
    assert [m.name for m in cat.models] == ["sibling"], cat.rejected
    (rejected,) = cat.rejected
    return "\n".join(str(p) for p in rejected.problems)


def stack_error(doc: dict[str, Any]) -> str:
    with pytest.raises(SettingsError) as err:
        validate_catalog(doc)
    return str(err.value)


# -- 1. every extraArgs word is an option of the pinned vLLM ------------------------------------------------------

@pytest.mark.parametrize(("words", "bad", "said"), [
    (["--disable-log-stats --enable-log-requests"], 0, "holds 2 words in one"),
    (["--seed 3"], 0, "holds 2 words in one"),
    (["--disable-log-stats\t--seed", "3"], 0, "holds 2 words in one"),
    (["--seed", "3", "--enable-log-requestz"], 2, "did you mean --enable-log-requests?"),
    (["--disable_log_statz"], 0, "did you mean --disable-log-stats?"),
    (["-x"], 0, "is no option of `vllm serve` of vLLM 0.32.0"),
])
def test_a_word_that_is_no_option_of_vllm_serve_refuses_its_entry_naming_the_word(words: list[str], bad: int,
                                                                                   said: str) -> None:
    msg = only_sibling_left(stack_doc({**SINGLE_GPU, "extraArgs": words}, SIBLING))
    assert f"extraArgs: word {words[bad]!r}" in msg and said in msg and "start-up" in msg, msg
    assert msg.count("extraArgs: word") == 1, "only the bad word is named"


def test_two_flags_in_one_word_are_told_how_to_split() -> None:
    msg = only_sibling_left(stack_doc({**SINGLE_GPU, "extraArgs": ["--disable-log-stats --enable-log-requests"]},
                                      SIBLING))
    assert "give each flag and each value as its own list item: ['--disable-log-stats', '--enable-log-requests']" \
        in msg


@pytest.mark.parametrize("words", [
    ["--disable-log-stats"], ["--seed", "3"], ["--seed=3"], ["--disable_log_stats"], ["--disable-log-stat"],
    ["--seed", "-3"], ["--override-generation-config", '{"temperature": 0.5}'], ["--no-enable-log-requests"],
])
def test_options_vllm_parses_pass(words: list[str]) -> None:
    """Exact spellings, underscores, `=value`, unambiguous abbreviations, negative values, `--no-` forms."""
    cat = validate_catalog(stack_doc({**SINGLE_GPU, "extraArgs": words}, SIBLING))
    assert not cat.rejected, cat.rejected


def test_a_stack_on_another_vllm_release_is_not_held_to_the_pinned_releases_options() -> None:
    """The option table is 0.32.0's: another release may have options 0.32 dropped."""
    assert VLLM_RELEASE == "0.32.0"
    doc = stack_doc({**SINGLE_GPU, "extraArgs": ["--some-option-of-0.10"]}, SIBLING,
                    serving={"vllmImage": "vllm/vllm-openai:v0.10.2", "vllmCpuImage": "x/vllm-cpu:v0.10.2"})
    assert not validate_catalog(doc).rejected


# -- 2. a name is claimed only by an entry that survives, adapters after every model -------------------------------

def with_adapter(served: str, **entry: Any) -> dict[str, Any]:
    return {**SINGLE_GPU, **entry, "lora": {**LORA, "adapters": [{**ADAPTER, "servedName": served}]}}


@pytest.mark.parametrize("adapter_first", [True, False])
def test_an_adapter_given_another_models_served_name_never_takes_it(adapter_first: bool) -> None:
    base = with_adapter("sibling")
    cat = validate_catalog(stack_doc(*((base, SIBLING) if adapter_first else (SIBLING, base))))
    assert sorted(m.name for m in cat.models) == ["qwen3-8b", "sibling"] and not cat.rejected
    (problem,) = cat.adapter_problems
    assert "lora.adapters sql.servedName" in str(problem) and "already served by models[" in str(problem)
    assert "the adapter is left out, its base deploys" in str(problem)
    (based,) = (m for m in cat.models if m.name == "qwen3-8b")
    assert based.lora is not None and based.lora.adapters == []


def test_between_two_adapters_the_first_keeps_the_name_and_both_bases_deploy() -> None:
    one = with_adapter("shared")
    two = {**with_adapter("shared"), "name": "other", "servedName": "other"}
    cat = validate_catalog(stack_doc(one, two))
    assert [m.name for m in cat.models] == ["qwen3-8b", "other"]
    (problem,) = cat.adapter_problems
    assert str(problem).startswith("models[1] other: lora.adapters sql.servedName: 'shared' is already served by "
                                   "models[0] qwen3-8b adapter sql")


@pytest.mark.parametrize("refused_for", [{"nodePool": "nowhere"}, {"gpusPerNode": 16}, {"revision": "main"}])
@pytest.mark.parametrize("key", ["name", "servedName"])
def test_an_entry_refused_for_its_own_problems_takes_no_name_from_a_good_one(refused_for: dict[str, Any],
                                                                           key: str) -> None:
    refused = {**SINGLE_GPU, "name": "first", "servedName": "first", key: "sibling", **refused_for}
    cat = validate_catalog(stack_doc(refused, SIBLING))
    assert [m.name for m in cat.models] == ["sibling"]
    (rejected,) = cat.rejected
    text = "\n".join(str(p) for p in rejected.problems)
    assert "already" not in text, "refused for its own problem only, not for the name it did not get"


def test_two_good_entries_under_one_served_name_still_leave_the_second_out() -> None:
    msg = only_sibling_left(stack_doc(SIBLING, {**SINGLE_GPU, "servedName": "sibling"}))
    assert "servedName: 'sibling' is already served by models[0] sibling" in msg


# -- 3. a quantity without its unit -------------------------------------------------------------------------------

def pool_with(**resources: Any) -> dict[str, Any]:
    return {"name": "h100", "gpuProduct": "H100-80GB", "gpusPerNode": 8, "nodeCount": 3,
            "nodeResources": {"cpu": "190", "memory": "2000Gi", **resources}}


def pool_refused(doc: dict[str, Any]) -> tuple[str, Catalog]:
    cat = validate_catalog(doc)
    (problem,) = cat.pool_problems
    assert not cat.models and all("nodePool: 'h100' is not usable: nodePools[0] h100 has errors" in str(p)
                                  for r in cat.rejected for p in r.problems), "each model points at the pool"
    return str(problem), cat


@pytest.mark.parametrize(("field", "value", "likely"), [
    ("memory", "2000", "2000Gi"), ("memory", 2000, "2000Gi"), ("memory", 2000.0, "2000Gi"),
    ("memory", "2095697", "2095697Mi"), ("memory", "2145993852", "2145993852Ki"),
    ("memory", 2145993852000, "1999Gi"), ("memory", "1e12", "931Gi"),
    ("ephemeralStorage", "3500", "3500Gi"), ("ephemeralStorage", 3500, "3500Gi"),
])
def test_a_byte_quantity_without_a_unit_refuses_the_pool_naming_the_field_and_the_likely_unit(
        field: str, value: Any, likely: str) -> None:
    msg, _ = pool_refused(stack_doc(SINGLE_GPU, SIBLING, nodePools=[pool_with(**{field: value})]))
    assert f"nodePools[0] h100: nodeResources.{field}: " in msg and "has no unit, so it is read as" in msg
    assert f"bytes; write the unit, e.g. {likely}" in msg, msg


@pytest.mark.parametrize("value", ["191450", 191450, "5000"])
def test_a_cpu_figure_only_millicores_explain_is_refused_with_the_m(value: Any) -> None:
    msg, _ = pool_refused(stack_doc(SINGLE_GPU, nodePools=[pool_with(cpu=value)]))
    assert "nodeResources.cpu: " in msg and f"millicores take an m: {value}m" in msg


@pytest.mark.parametrize("resources", [
    {"memory": "2000Gi"}, {"memory": "2095697Mi"}, {"memory": "2T"}, {"cpu": "191450m"}, {"cpu": 191.45},
    {"cpu": "192"}, {"ephemeralStorage": "3500Gi"},
])
def test_quantities_with_units_or_plausible_cores_pass(resources: dict[str, Any]) -> None:
    cat = validate_catalog(stack_doc(SINGLE_GPU, nodePools=[pool_with(**resources)]))
    assert not cat.pool_problems and [m.name for m in cat.models] == ["qwen3-8b"]


@pytest.mark.parametrize(("value", "write"), [("80Gi", "write 80"), ("80G", "write 74.50580596923828125"),
                                              ("81920Mi", "write 80")])
def test_a_gib_setting_given_a_unit_says_the_number_to_write(value: str, write: str) -> None:
    msg, _ = pool_refused(stack_doc(SINGLE_GPU, nodePools=[{**pool_with(), "gpuMemoryGiB": value}]))
    assert f"gpuMemoryGiB: {value!r} is a quantity with a unit, but this setting is a number of GiB" in msg
    assert write in msg
    assert "weightCacheBudgetGiB: '500Gi' is a quantity" in stack_error(
        stack_doc(SINGLE_GPU, serving={"weightCacheBudgetGiB": "500Gi"}))
    entry = only_sibling_left(stack_doc({**CPU, "cpuKvCacheGiB": "4Gi"}, SIBLING))
    assert "cpuKvCacheGiB: '4Gi' is a quantity with a unit" in entry and "write 4" in entry


# -- 4. a pool contradicting its GPUs is refused once, as the pool ----------------------------------------------

@pytest.mark.parametrize(("gpu_setting", "said"), [
    ({"gpuProduct": "H100-80GB"}, "gpuProduct 'H100-80GB' describes GPUs"),
    ({"gpuProduct": "NVIDIA-H100-80GB-HBM3"}, "gpuProduct 'NVIDIA-H100-80GB-HBM3' describes GPUs"),
    ({"mig": True}, "mig true describes GPUs"),
    ({"gpuProduct": "A100-80GB", "interconnect": "nvlink"}, "gpuProduct 'A100-80GB' and interconnect nvlink describe"),
    ({"gpuMemoryGiB": 80}, "gpuMemoryGiB 80 describes GPUs"),
])
def test_gpus_per_node_zero_on_a_pool_with_gpu_settings_is_refused_as_the_pool(gpu_setting: dict[str, Any],
                                                                                said: str) -> None:
    pool = {"name": "h100", "gpusPerNode": 0, "nodeCount": 2, **gpu_setting}
    msg, cat = pool_refused(stack_doc(SINGLE_GPU, SIBLING, nodePools=[pool]))
    assert msg.startswith("nodePools[0] h100: gpusPerNode 0 marks a CPU pool, but ") and said in msg, msg
    assert "set gpusPerNode to the GPUs each node has" in msg
    assert not any("is a CPU pool; a model" in str(p) for r in cat.rejected for p in r.problems)


def test_a_cpu_pool_without_gpu_settings_still_runs_cpu_models() -> None:
    cat = validate_catalog(stack_doc({**CPU, "nodePool": "cpu"},
                                     nodePools=[{"name": "cpu", "gpusPerNode": 0, "nodeCount": 1}]))
    assert not cat.pool_problems and [m.name for m in cat.models] == [CPU["name"]]


# -- 5. a bad adapter drops the adapter, never its base -----------------------------------------------------------

@pytest.mark.parametrize(("bad", "said"), [
    ({"revision": "main"}, "revision 'main' is a branch"),
    ({"revision": SHA[:12]}, "revision"),
    ({"repo": "not a repo"}, "is not a Hugging Face repo id"),
    ({"servedName": "has space"}, "servedName"),
])
def test_a_bases_only_adapter_being_bad_leaves_the_base_deploying_without_it(bad: dict[str, Any], said: str) -> None:
    base = {**SINGLE_GPU, "lora": {**LORA, "adapters": [{**ADAPTER, **bad}]}}
    cat = validate_catalog(stack_doc(base, SIBLING))
    assert [m.name for m in cat.models] == ["qwen3-8b", "sibling"] and not cat.rejected
    (deployed, _) = cat.models
    assert deployed.lora is not None and deployed.lora.adapters == [] and deployed.lora.max_adapters == 2
    assert cat.adapter_problems and all("lora.adapters sql" in str(p) for p in cat.adapter_problems)
    assert said in "\n".join(str(p) for p in cat.adapter_problems)


def test_every_adapter_bad_still_deploys_the_base_and_plans_it(ec2: Any) -> None:
    base = {**SINGLE_GPU, "lora": {**LORA, "adapters": [{**ADAPTER, "revision": "main"},
                                                        {**ADAPTER, "name": "b", "servedName": "b", "repo": "x y"}]}}
    h = program(stack_doc(base))
    assert h.error is not None and "the models were deployed but the fleet needs fixing" in str(h.error)
    dropped = [e for e in h.errors() if "deployed without that adapter" in e]
    assert len(dropped) == 2 and all("lora.adapters" in e for e in dropped), h.errors()
    assert any(r.name == "qwen3-8b" for r in h.resources if r.type.endswith("ModelServing")), "the base is registered"


def test_a_lora_block_written_with_no_adapter_is_refused_with_the_fix() -> None:
    msg = only_sibling_left(stack_doc({**SINGLE_GPU, "lora": {**LORA, "adapters": []}}, SIBLING))
    assert "lora.adapters: lists no adapter; give at least one, or remove `lora`" in msg


# -- 6. tool calling on a model that serves no chat completions -------------------------------------------------

@pytest.mark.parametrize("mode", ["embedding", "rerank"])
@pytest.mark.parametrize("tools", [{"enableAutoToolChoice": True, "toolCallParser": "hermes"},
                                   {"toolCallParser": "llama3_json"}])
def test_tool_calling_on_a_pooling_model_is_refused(mode: str, tools: dict[str, Any]) -> None:
    msg = only_sibling_left(stack_doc({**SINGLE_GPU, "mode": mode, **tools}, SIBLING))
    assert f"which a mode {mode} model does not serve" in msg and "remove them, or set mode: chat" in msg
    assert all(k in msg for k in tools)


def test_tool_calling_on_a_chat_model_passes() -> None:
    cat = validate_catalog(stack_doc({**SINGLE_GPU, "enableAutoToolChoice": True, "toolCallParser": "hermes"}))
    assert not cat.rejected


# -- 7. what only `up` would trip on, refused at preview -----------------------------------------------------------

@pytest.mark.parametrize(("url", "said"), [
    ("http://prometheus:99999", "has port '99999'"), ("http://prometheus:65536/", "has port '65536'"),
    ("https://prometheus:0", "has port '0'"), ("http://prometheus:90x0", "has port '90x0'"),
    ("http://:9090", "names no host"),
])
def test_a_prometheus_url_that_cannot_be_reached_by_its_port_is_refused(url: str, said: str) -> None:
    msg = stack_error(stack_doc(SINGLE_GPU, prometheusUrl=url))
    assert f"prometheusUrl: {url!r} {said}" in msg, msg


@pytest.mark.parametrize("url", ["http://prometheus:9090", "https://prometheus", "http://[::1]:9090/prom"])
def test_prometheus_urls_with_a_real_port_or_none_pass(url: str) -> None:
    assert validate_catalog(stack_doc(SINGLE_GPU, prometheusUrl=url)).settings.prometheus_url == url.rstrip("/")


def _render_dirs(tmp: Path) -> dict[str, tuple[str, str]]:
    (tmp / "a-file").write_text("x")
    os.symlink(tmp / "gone", tmp / "dangling")
    return {"device": ("/dev/null", "is a character device"),
            "under a device": ("/dev/null/rendered", "lies under '/dev/null', which is a character device"),
            "file": (str(tmp / "a-file"), "is a file"),
            "under a file": (str(tmp / "a-file" / "dev"), f"lies under '{tmp / 'a-file'}', which is a file"),
            "dangling link": (str(tmp / "dangling" / "dev"), f"lies under '{tmp / 'dangling'}', which is a link to "
                                                             f"'{tmp / 'gone'}', which does not exist")}


@pytest.mark.parametrize("case", ["device", "under a device", "file", "under a file", "dangling link"])
@pytest.mark.parametrize("preview", [True, False])
def test_a_render_directory_the_provider_cannot_write_stops_the_preview_naming_the_key(
        case: str, preview: bool, tmp_path: Path) -> None:
    path, said = _render_dirs(tmp_path)[case]
    h = program(stack_doc(SINGLE_GPU, cluster={"mode": "render", "renderDir": path}), preview=preview)
    assert h.error is not None, "refused before anything is registered"
    assert f"cluster.renderDir {path!r} {said}" in str(h.error) and "tkf-infra:cluster.renderDir" in str(h.error)
    assert not h.resources


def test_a_render_directory_yet_to_be_made_under_a_writable_one_passes(tmp_path: Path) -> None:
    h = program(stack_doc(SINGLE_GPU, cluster={"mode": "render", "renderDir": str(tmp_path / "new" / "dev")}))
    assert h.error is None, h.error
