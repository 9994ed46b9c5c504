"""The release table: one row per way vLLM budgets memory, chosen by the image tag, conservative when unknown."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tkf_infra.sizing.contract import FitInputs, evaluate
from tkf_infra.sizing.estimate import estimate
from tkf_infra.sizing.facts import ModelFacts
from tkf_infra.sizing.gpus import lookup_gpu
from tkf_infra.sizing.params import SizingParams
from tkf_infra.sizing.versions import ROWS, choose_version, engine_rows, parse_vllm_version

CONFIGS = Path(__file__).parent / "data" / "calibration" / "configs"
SOURCE = re.compile(r"^vllm/[\w/]+\.py@v\d+\.\d+\.\d+(?:\.\d+)?(:\d+(-\d+)?(,\d+(-\d+)?)*)? \(.+\)$")


def llama() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CONFIGS / "meta-llama__Llama-3.1-8B-Instruct.json").read_text())
    return data


def test_every_row_names_the_source_lines_it_follows() -> None:
    for row in ROWS:
        assert row.sources, row.name
        for src in row.sources:
            assert SOURCE.match(src), (row.name, src)
            assert ":" in src.split("@")[1], f"{row.name}: {src} names no lines"


def test_rows_cover_0_5_to_0_32_without_gaps_per_engine() -> None:
    for engine in ("v0", "v1"):
        rows = sorted((r for r in ROWS if r.engine == engine), key=lambda r: r.first)
        for before, after in itertools.pairwise(rows):
            major, minor, patch = before.last  # patch 99: every patch of the minor release; else the next patch
            expected = (major, minor + 1, 0) if patch == 99 else (major, minor, patch + 1)
            assert after.first == expected, (before.name, after.name)
    assert any(r.first <= (0, 32, 0) <= r.last and r.engine == "v1" for r in ROWS), "the stacks run 0.32"


@pytest.mark.parametrize(
    ("text", "version"),
    [("0.32.0", (0, 32, 0)), ("vllm/vllm-openai:v0.32.0", (0, 32, 0)), ("v0.11.2", (0, 11, 2)),
     ("0.9.1.dev705+g01220ce89", (0, 9, 1)), ("latest", None), ("nightly-2026-01-02", None)],
)
def test_version_read_from_an_image_tag(text: str, version: tuple[int, int, int] | None) -> None:
    assert parse_vllm_version(text) == version


def test_the_0_32_tag_selects_the_0_32_row() -> None:
    choice = choose_version("vllm/vllm-openai:v0.32.0")
    assert [r.name for r in choice.rows] == ["v0.32"] and choice.warning is None


@pytest.mark.parametrize("text", ["latest", "unknown", "0.99.0", "0.4.0"])
def test_an_unknown_release_is_sized_with_every_row_and_says_so(text: str) -> None:
    choice = choose_version(text)
    assert len(choice.rows) == len(ROWS) and choice.warning and "most conservative" in choice.warning


def test_an_unknown_release_with_a_cap_is_sized_with_the_rows_begun_by_then_only() -> None:
    choice = choose_version("unknown-v1<=0.19.0")
    assert [r.name for r in choice.rows] == [r.name for r in ROWS if r.engine == "v1" and r.first <= (0, 19, 0)]
    assert choice.warning and "no newer than 0.19.0" in choice.warning and "most conservative" in choice.warning
    gpu, facts = lookup_gpu("H100-80GB"), llama()
    capped = estimate(facts, gpu, SizingParams(vllm_version="unknown-v1<=0.19.0", max_model_len=8192))
    each = [estimate(facts, gpu, SizingParams(vllm_version=f"{r.first[0]}.{r.first[1]}.{r.first[2]}-v1",
                                              max_model_len=8192)) for r in choice.rows]
    assert capped.available_kv_gib == pytest.approx(min(e.available_kv_gib for e in each), abs=0.011)


@pytest.mark.parametrize("text", ["unknown<=soon", "unknown<=0.1.0"])
def test_a_cap_that_names_no_row_is_ignored_and_the_warning_says_so(text: str) -> None:
    choice = choose_version(text)
    assert len(choice.rows) == len(ROWS)
    assert choice.warning and "is ignored" in choice.warning and text.split("<=")[1] in choice.warning


def test_the_unknown_release_warning_reaches_the_published_figures() -> None:
    facts = ModelFacts(repo="meta-llama/Llama-3.1-8B-Instruct", revision="0" * 40, config=llama())
    params = SizingParams(vllm_version="vllm/vllm-openai:latest", max_model_len=8192)
    result = evaluate(FitInputs(model="chat", repo=facts.repo, revision=facts.revision, facts=facts,
                                gpu=lookup_gpu("H100-80GB"), params=params))
    assert any("most conservative" in w for w in result.warnings)
    assert "most conservative" in result.annotations()["tkf.io/fit-warnings"]
    pinned = evaluate(FitInputs(model="chat", repo=facts.repo, revision=facts.revision, facts=facts,
                                gpu=lookup_gpu("H100-80GB"),
                                params=params.model_copy(update={"vllm_version": "0.32.0"})))
    assert pinned.warnings == () and pinned.kv_cache_tokens >= result.kv_cache_tokens


def test_the_most_conservative_row_is_the_one_leaving_least_kv() -> None:
    gpu, facts = lookup_gpu("H100-80GB"), llama()
    unknown = estimate(facts, gpu, SizingParams(vllm_version="unknown", max_model_len=8192))
    each = [estimate(facts, gpu, SizingParams(vllm_version=f"{r.first[0]}.{r.first[1]}.{r.first[2]}"
                                              + (f"-{r.engine}" if r.first < (0, 11, 0) else ""),
                                              max_model_len=8192)) for r in ROWS]
    assert unknown.available_kv_gib == pytest.approx(min(e.available_kv_gib for e in each), abs=0.011)


def test_0_8_to_0_10_fall_back_to_v0_where_the_v1_oracle_said_so() -> None:
    def rows(gpu: str, **kw: Any) -> list[str]:
        params: dict[str, Any] = {"quantization": None, "dtype": "auto", "kv_cache_dtype": "auto", **kw}
        return [r.engine for r in engine_rows(choose_version("0.9.1"), cc=lookup_gpu(gpu).cc, **params)]

    assert rows("H100-80GB") == ["v1"]
    assert rows("T4") == ["v0"], "compute capability 7.5 < 8.0 ran V0"
    assert rows("H100-80GB", quantization="gguf") == ["v0"]
    assert rows("L40S", kv_cache_dtype="fp8") == ["v0"], "fp8 KV before Hopper ran V0"
    assert [r.engine for r in choose_version("0.8.5-v0").rows] == ["v0"], "VLLM_USE_V1=0"


def test_graph_memory_is_reserved_from_0_20_and_hybrid_prefix_caching_from_0_28() -> None:
    by_name = {r.name: r for r in ROWS}
    assert not by_name["v0.17-0.19"].graphs_reserved and by_name["v0.20"].graphs_reserved
    # arg_utils.py@v0.26.0:2518-2522 and @v0.27.1:2602-2606 keep it opt-in for hybrid models; on from @v0.28.0:2650.
    assert not any(by_name[n].hybrid_prefix_caching for n in ("v0.21-0.25", "v0.26", "v0.27"))
    assert by_name["v0.28"].hybrid_prefix_caching
    assert by_name["v0.32"].mamba2_checkpoint_block


@pytest.mark.parametrize(("serving", "said"), [
    ({"vllmImage": "vllm/vllm-openai:v0.40.0"}, "newer than every release"),
    ({"vllmImage": "registry.example/vllm@sha256:" + "a" * 64, "vllmVersion": "in-house build"}, "names no release"),
])
def test_a_pinned_release_the_table_lacks_is_sized_conservatively_and_the_preview_says_so(
        serving: dict[str, str], said: str) -> None:
    from tests.mocks import SINGLE_GPU, stack_doc
    from tkf_infra.config.validate import validate_catalog
    from tkf_infra.hub.lock import load_lock
    from tkf_infra.plan.fleet import plan_fleet

    plan = plan_fleet(validate_catalog(stack_doc(SINGLE_GPU, serving=serving)), lock=load_lock())
    assert [m.entry.name for m in plan.models] == ["qwen3-8b"]
    assert any(w.startswith("model qwen3-8b: vLLM version") and said in w for w in plan.warnings), plan.warnings
    assert said in plan.models[0].fit.annotations()["tkf.io/fit-warnings"]
