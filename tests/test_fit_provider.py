"""The fit check's contract (`evaluate`) and the FitCheck provider called as Pulumi's plugin process
would: the verdict and its message, check/diff/create, pickling, a clean import."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import dill  # type: ignore[import-untyped]
from pulumi.output import UNKNOWN

from providers.fit import PROVIDER_VERSION, FitProvider
from tkf_infra.sizing.contract import FitInputs, FitResult, evaluate, fit_record
from tkf_infra.sizing.facts import ModelFacts
from tkf_infra.sizing.gpus import lookup_gpu
from tkf_infra.sizing.params import SizingParams

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = Path(__file__).parent / "data" / "models" / "configs"


def fit_inputs(config: str, gpu: str | None, model: str = "chat", **serving: Any) -> FitInputs:
    facts = ModelFacts(repo="org/" + config, revision="0" * 40, config=json.loads((CONFIGS / config).read_text()))
    return FitInputs(model=model, repo=facts.repo, revision=facts.revision, facts=facts,
                     gpu=lookup_gpu(gpu) if gpu else None, params=SizingParams(vllm_version="0.19.0", **serving))


Checked = tuple[FitInputs, FitResult]


def checked(config: str, gpu: str | None, model: str = "chat", **serving: Any) -> Checked:
    inputs = fit_inputs(config, gpu, model, **serving)
    return inputs, evaluate(inputs)


def props(check: Checked, model: str = "chat", **others: Checked) -> dict[str, Any]:
    """FitCheck properties as the program records them (`fit_record`) and the engine hands them over."""
    results = {model: check, **others}
    return {"models": {name: fit_record(*c) for name, c in results.items()}, "providerVersion": PROVIDER_VERSION}


def test_70b_on_one_h100_is_refused_with_numbers_and_way_out() -> None:
    result = evaluate(fit_inputs("meta-llama__Meta-Llama-3.1-70B.json", "H100-80GB", max_model_len=131072))
    assert result.fits is False and result.message is not None
    assert result.message.startswith("model chat: ")
    assert "no memory left for the KV cache" in result.message
    assert "GiB of weights" in result.message
    assert "fits with tensorParallelSize 4" in result.message


def test_kv_shortfall_message_names_max_model_len() -> None:
    message = evaluate(fit_inputs("Qwen__Qwen3-8B.json", "L4", max_model_len=40960)).message or ""
    assert "needs 5.6 GiB KV cache for maxModelLen 40960" in message
    assert "on one L4 at utilization 0.90" in message
    assert "maxModelLen <= " in message


def test_a_fit_publishes_its_figures_under_documented_keys() -> None:
    result = evaluate(fit_inputs("meta-llama__Llama-3.1-8B-Instruct.json", "H100-80GB", max_model_len=8192))
    assert result.fits and result.verdict == "fits" and result.message is None
    figures = result.published()
    assert set(figures) == {"fits", "verdict", "weightsGiB", "kvCacheGiB", "kvCacheTokens", "maxConcurrency",
                            "maxFittingModelLen", "kvCacheGiBBound", "kvCacheTokensBound", "maxConcurrencyBound",
                            "vllmProfile", "loraGiB", "uncertainty", "warnings"}
    assert int(str(figures["kvCacheTokensBound"])) <= int(str(figures["kvCacheTokens"]))
    assert 14.9 < float(str(figures["weightsGiB"])) < 15.1
    assert result.annotations()["tkf.io/fit-kv-cache-tokens"] == str(result.kv_cache_tokens)
    assert result.annotations()["tkf.io/fit-verdict"] == "fits"


def test_inputs_summary_is_small_and_names_what_the_verdict_depends_on() -> None:
    inputs = fit_inputs("Qwen__Qwen3-8B.json", "H100-80GB", max_model_len=8192)
    summary = inputs.summary()
    assert summary["gpu"] == "H100-80GB" and summary["revision"] == "0" * 40
    assert summary["params"] == {**inputs.params.model_dump(exclude_none=True)}
    assert len(json.dumps(summary)) < 600, "state must not carry the whole config.json"
    other = fit_inputs("Qwen__Qwen3-8B.json", "H100-80GB", max_model_len=8192, dtype="float16").summary()
    assert other != summary


def test_check_gates_on_the_recorded_verdict() -> None:
    ok = checked("meta-llama__Llama-3.1-8B-Instruct.json", "H100-80GB", max_model_len=8192)
    assert FitProvider().check({}, props(ok)).failures == []
    refused = checked("meta-llama__Meta-Llama-3.1-70B.json", "L4", max_model_len=8192)
    failures = FitProvider().check({}, props(refused)).failures
    assert [f.reason for f in failures] == [refused[1].message]


def test_every_refused_model_in_one_check_is_named_and_the_fitting_one_is_not() -> None:
    """One FitCheck holds the whole fleet: a refusal must still name its own model, each one apart."""
    fits = checked("meta-llama__Llama-3.1-8B-Instruct.json", "H100-80GB", max_model_len=8192)
    too_big = checked("meta-llama__Meta-Llama-3.1-70B.json", "L4", "big", max_model_len=8192)
    too_long = checked("Qwen__Qwen3-8B.json", "L4", "long", max_model_len=40960)
    failures = FitProvider().check({}, props(fits, "small", big=too_big, long=too_long)).failures
    assert [f.property for f in failures] == ["models.big.result", "models.long.result"]
    assert failures[0].reason.startswith("model big: ") and "no memory left for the KV cache" in failures[0].reason
    assert failures[1].reason.startswith("model long: ") and "maxModelLen <= " in failures[1].reason


def test_unknown_result_is_skipped_at_preview() -> None:
    news = props(checked("meta-llama__Meta-Llama-3.1-70B.json", "L4", max_model_len=8192))
    news["models"]["chat"]["result"] = UNKNOWN
    assert FitProvider().check({}, news).failures == []
    news["models"]["chat"]["result"] = {"fits": "04da6b54-80e4-46f7-96ec-b56ff0331ba9"}
    assert FitProvider().check({}, news).failures == []
    news["models"] = UNKNOWN
    assert FitProvider().check({}, news).failures == []


def test_create_records_the_verdict_and_a_changed_input_shows_as_that_models_change() -> None:
    old = props(checked("Qwen__Qwen3-8B.json", "H100-80GB", max_model_len=8192))
    outs = FitProvider().create(old).outs
    assert outs is not None and outs["models"]["chat"]["result"] == {"fits": True}
    assert FitProvider().diff("chat", old, dict(old)).changes is False
    new = props(checked("Qwen__Qwen3-8B.json", "H100-80GB", max_model_len=16384))
    assert new["models"]["chat"]["result"] == old["models"]["chat"]["result"], "still fits"
    assert new["models"]["chat"]["sizedFor"] != old["models"]["chat"]["sizedFor"]
    assert FitProvider().diff("chat", old, new).changes is True


def test_the_record_is_small_whatever_the_catalog_entry() -> None:
    """Every leaf of the FitCheck is paid for at each preview, once per model (issue 18)."""
    record = fit_record(*checked("Qwen__Qwen3-8B.json", "H100-80GB", max_model_len=8192))
    assert set(record) == {"sizedFor", "result"} and len(str(record["sizedFor"])) == 16
    refused = fit_record(*checked("meta-llama__Meta-Llama-3.1-70B.json", "L4", max_model_len=8192))
    assert isinstance(refused["result"], dict) and set(refused["result"]) == {"fits", "message"}


def test_provider_pickles_and_still_works() -> None:
    refused = props(checked("meta-llama__Meta-Llama-3.1-70B.json", "L4", max_model_len=8192))
    for module in (pickle, dill):
        clone = module.loads(module.dumps(FitProvider()))
        assert clone.check({}, refused).failures


def test_module_imports_only_pulumi_in_a_fresh_process() -> None:
    code = ("import sys, providers.fit as f; print(f.FitProvider.__name__, "
            "any(m.startswith('tkf_infra') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "FitProvider False"
