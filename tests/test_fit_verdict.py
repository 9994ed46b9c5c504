"""The three-valued fit verdict (issue 40): fits on the bound, tight (the estimate fits, the bound does not: it
deploys with a warning, a strict stack refuses it) or refuses (the estimate does not fit) — from the estimate
through the plan, the outputs, the pods' annotations, the CLI's `size` and its per-model JSON summary.

Qwen3-8B on one H100 at maxModelLen 40960 (one request needs 5.63 GiB of KV cache) with vLLM 0.32, the
product's pin, at the catalog's maxNumSeqs 256: at gpuMemoryUtilization 0.9 it fits on the bound; at 0.30 the
estimate leaves 6.30 GiB and the bound 5.51 (model runner V2's doubt, not measured on Hopper at 0.32, and the CUDA-graph
estimate), so it is tight; at 0.28 the estimate itself leaves too little, so it is refused.
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pytest
from typer.testing import CliRunner

from tests.mocks import CPU, QWEN3_8B, program, stack_doc
from tkf_infra.config.stack import VLLM_RELEASE
from tkf_infra.exit_codes import ExitCode
from tkf_infra.hub.lock import load_lock
from tkf_infra.ops.cli import app
from tkf_infra.ops.summary import RunTracker, summarize
from tkf_infra.sizing.contract import FitInputs, evaluate
from tkf_infra.sizing.estimate import estimate
from tkf_infra.sizing.gpus import lookup_gpu
from tkf_infra.sizing.params import SizingParams

FACTS = load_lock().get(QWEN3_8B["repo"], QWEN3_8B["revision"])
H100 = lookup_gpu("H100-80GB")
TIGHT_UTILIZATION, REFUSED_UTILIZATION = 0.30, 0.28
ENTRY = {"name": "qwen3-8b", **QWEN3_8B, "servedName": "qwen3-8b", "nodePool": "h100", "maxModelLen": 40960}


def params(utilization: float) -> SizingParams:
    # maxNumSeqs 256: the catalog's default (tkf_infra/config/flags.py), so the plan sizes the same entry alike
    return SizingParams(vllm_version=VLLM_RELEASE, max_model_len=40960, gpu_memory_utilization=utilization,
                        max_num_seqs=256)


@pytest.mark.parametrize(("utilization", "verdict"), [(0.9, "fits"), (TIGHT_UTILIZATION, "tight"),
                                                      (REFUSED_UTILIZATION, "refuses")])
def test_the_verdict_is_taken_on_the_estimate_and_on_the_bound(utilization: float, verdict: str) -> None:
    assert FACTS is not None
    est = estimate(FACTS, H100, params(utilization))
    need = est.need_per_request_gib
    assert est.verdict == verdict
    assert est.fits is (verdict != "refuses"), "fits: the verdict deploys (fits or tight)"
    if verdict == "tight":
        assert est.available_kv_gib_bound < need < est.available_kv_gib
        assert not est.problems and len(est.tight) == 1
        reason = est.tight[0]
        # one request plus the null block vLLM 0.29+ holds back (startup.NULL_BLOCK_RESERVED_SINCE)
        assert reason.startswith("tight: one maxModelLen 40960 request needs 5.63 GiB of KV cache on one H100-80GB")
        # the margin over one request and the null block vLLM holds back (one block of the pool)
        margin = est.available_kv_gib - need - est.kv_bytes_per_token * est.block_size / 2**30
        assert f"{est.available_kv_gib:.2f} GiB left, a margin of {margin:.2f} GiB" in reason
        assert f"does not ({est.available_kv_gib_bound:.2f} GiB)" in reason
        assert "the largest doubt is" in reason and "to remove it:" in reason, "names the doubt and its fix"
        assert reason in est.warnings, "the warning a preview and the outputs carry"
    if verdict == "refuses":
        assert est.available_kv_gib < need and est.problems[0].startswith("needs 5.6 GiB KV cache")


def test_a_tight_fit_explains_itself_and_the_way_to_fit_on_the_bound() -> None:
    assert FACTS is not None
    inputs = FitInputs(model="qwen3-8b", repo=QWEN3_8B["repo"], revision=QWEN3_8B["revision"], facts=FACTS,
                       gpu=H100, params=params(TIGHT_UTILIZATION))
    result = evaluate(inputs)
    assert result.fits and result.verdict == "tight" and result.tight
    assert result.message is not None and result.message.startswith("model qwen3-8b: tight: ")
    assert result.message.endswith("; fits with tensorParallelSize 2"), "the way to fit on the bound"
    assert result.annotations()["tkf.io/fit-verdict"] == "tight"


def _tight_doc(**overrides: Any) -> dict[str, Any]:
    return stack_doc({**ENTRY, "gpuMemoryUtilization": TIGHT_UTILIZATION}, CPU, **overrides)


def test_a_tight_model_deploys_with_its_warning_and_publishes_its_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    exported: dict[str, Any] = {}
    monkeypatch.setattr(pulumi, "export", lambda name, value: exported.__setitem__(name, value))
    h = program(_tight_doc())
    assert h.error is None, h.error
    fit = exported["endpoints"]["qwen3-8b"]["fit"]
    assert fit["verdict"] == "tight" and fit["fits"] is True
    assert exported["endpoints"]["qwen2.5-0.5b"]["fit"]["verdict"] == "fits"
    warned = [w for w in h.warnings() if w.startswith("model qwen3-8b: tight: ")]
    assert len(warned) == 1 and "the largest doubt is" in warned[0], h.warnings()
    servers = [r for r in h.resources if r.type.endswith("LLMInferenceService")]
    annotations = {r.inputs["metadata"]["labels"]["tkf.io/model"]: r.inputs["metadata"]["annotations"] for r in servers}
    assert annotations["qwen3-8b"]["tkf.io/fit-verdict"] == "tight"


def test_a_strict_stack_refuses_a_tight_model_at_stage_tight_and_deploys_the_rest() -> None:
    h = program(_tight_doc(strict=True))
    assert h.error is not None and "1 catalog entry was refused (qwen3-8b)" in str(h.error)
    refused = [e for e in h.errors() if "qwen3-8b was left out of this deployment (tight)" in e]
    assert refused and "strict: true" in refused[0] and "set strict: false" in refused[0]
    assert any(r.type.endswith("LLMInferenceService") for r in h.resources), "the CPU model still deploys"


def test_the_per_model_json_summary_carries_each_verdict() -> None:
    tracker = RunTracker()
    for name in ("tight-one", "fine", "refused", "strict-refused"):
        tracker.report(name)
    tight_reason = "tight: one maxModelLen 40960 request needs 5.63 GiB of KV cache ..."
    outputs = {
        "endpoints": {"a": {"name": "tight-one", "fit": {"verdict": "tight", "warnings": [tight_reason]}},
                      "b": {"name": "fine", "fit": {"verdict": "fits", "warnings": []}}},
        "rejected": [{"index": 2, "name": "refused", "stage": "fit", "reasons": ["model refused: needs …"]},
                     {"index": 3, "name": "strict-refused", "stage": "tight", "reasons": ["model …: tight: …"]}],
    }
    models = summarize("test", "preview", tracker, ok=False, outputs=outputs)["models"]
    assert {n: m.get("fit") for n, m in models.items()} == {
        "tight-one": "tight", "fine": "fits", "refused": "refuses", "strict-refused": "tight"}
    assert models["tight-one"]["warnings"] == [tight_reason], "the stack-level warning, given to its model"


def test_size_prints_the_three_verdicts_and_refuses_only_the_estimate() -> None:
    model = f"{QWEN3_8B['repo']}@{QWEN3_8B['revision']}"
    runner = CliRunner()

    def size(utilization: float, *extra: str) -> tuple[str, int]:
        result = runner.invoke(app, ["size", model, "--gpu", "H100-80GB", "--max-model-len", "40960",
                                     "--gpu-memory-utilization", str(utilization), *extra])
        return result.output, result.exit_code

    text, code = size(TIGHT_UTILIZATION)
    assert code == ExitCode.OK and "tight (the estimate fits, the bound does not" in text
    assert "- tight: one maxModelLen 40960 request" in text
    data, code = size(TIGHT_UTILIZATION, "--json")
    assert code == ExitCode.OK and json.loads(data)["verdict"] == "tight"
    text, code = size(REFUSED_UTILIZATION)
    assert code == ExitCode.REFUSED and "does NOT fit" in text
    text, code = size(0.9)
    assert code == ExitCode.OK and "fits (on the bound)" in text
