"""Per-model attribution of engine events and the drift details a refresh reports."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from tests.mocks import SINGLE_GPU, TP4, program, stack_doc
from tkf_infra.ops.summary import RunTracker, changed_paths, summarize
from tkf_infra.plan import Exclusion, Stage


def test_changed_paths_names_what_a_person_edited_and_ignores_bookkeeping() -> None:
    old = {"metadata": {"labels": {"team": "a"}, "resourceVersion": "1", "managedFields": [1]},
           "spec": {"ports": [{"port": 8000}]}}
    new = {"metadata": {"labels": {"team": "b"}, "resourceVersion": "9", "managedFields": [2]},
           "spec": {"ports": [{"port": 9000}]}}
    assert changed_paths(old, new) == ["metadata.labels.team", "spec.ports"]
    assert changed_paths({"metadata": {"resourceVersion": "1"}}, {"metadata": {"resourceVersion": "2"}}) == []


def test_resources_are_attributed_to_their_model_through_parents() -> None:
    tracker = RunTracker("preview")
    stack = "urn:pulumi:dev::tkf-infra::pulumi:pulumi:Stack::tkf-infra-dev"
    serving = "urn:pulumi:dev::tkf-infra::tkf:serving:ModelServing::qwen"
    svc = "urn:pulumi:dev::tkf-infra::tkf:serving:ModelServing$kubernetes:core/v1:Service::qwen-openai"
    fit = "urn:pulumi:dev::tkf-infra::pulumi-python:dynamic/tkf:FitCheck::qwen-fit"
    tracker.parents.update({serving: stack, svc: serving})
    assert tracker.model_of(svc) == "qwen"
    assert tracker.model_of(fit) == "qwen"  # a per-model check left in an older state
    assert tracker.model_of(stack) is None
    fleet_fit = "urn:pulumi:dev::tkf-infra::pulumi-python:dynamic/tkf:FitCheck::fit-checks"
    assert tracker.model_of(fleet_fit) is None, "the stack's one FitCheck holds every model: it is none of them"
    tracker.report("qwen").errors.append("does not fit")
    summary = summarize("dev", "preview", tracker, ok=False)
    assert summary["failedModels"] == ["qwen"] and summary["models"]["qwen"]["status"] == "failed"
    assert summary["ok"] is False


def test_left_out_models_come_from_the_rejected_output_with_their_stage() -> None:
    tracker = RunTracker("up")
    gated = Exclusion.of("llama", 1, Stage.ACCESS, ("model llama: meta-llama/x is gated but hfTokenSecret is not set",))
    tracker.outputs = {"rejected": [gated.as_output()], "problems": ["nodePool h100: models need 9 GPUs"],
                       "deployed": {"qwen": {}}}
    # What the program logged for it and the run's final verdict are the same facts: not repeated as stack errors.
    tracker.diagnostics += [gated.log_line(), "nodePool h100: models need 9 GPUs",
                            "1 catalog entry was refused (llama); the other 1 were deployed. Fix the errors above "
                            "and run again.", "a crash nobody explains"]
    summary = summarize("dev", "up", tracker, ok=False)
    assert summary["models"]["llama"] == {"status": "rejected", "changes": {}, "stage": "access",
                                          "reasons": list(gated.reasons),
                                          "refusals": [{"field": "hfTokenSecret", "reason": gated.reasons[0]}]}
    assert summary["errors"] == ["nodePool h100: models need 9 GPUs", "a crash nobody explains"]
    assert summary["failedModels"] == ["llama"]


@pytest.mark.parametrize("preview", [True, False], ids=["preview", "up"])
def test_what_the_program_says_of_a_left_out_model_reaches_the_summary_as_data(
        preview: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plan → program log and outputs → `--json` summary, under mocks: the refused entry arrives with
    its stage and the field to change, and none of the program's own lines about it (its log line,
    the run's verdict) is repeated as a stack error — the summary rebuilds them from the outputs."""
    exported: dict[str, Any] = {}
    monkeypatch.setattr(pulumi, "export", lambda name, value: exported.__setitem__(name, value))
    h = program(stack_doc(SINGLE_GPU, {**TP4, "revision": "main"}), preview=preview)
    said = h.errors() + ([str(h.error)] if h.error else [])
    assert any("catalog entry was refused" in s for s in said), said
    tracker = RunTracker("preview" if preview else "up")
    tracker.diagnostics += said
    summary = summarize("test", tracker.operation, tracker, ok=False, outputs=exported)
    refused = summary["models"][TP4["name"]]
    assert refused["status"] == "rejected" and refused["stage"] == "catalog"
    assert [r["field"] for r in refused["refusals"]] == ["revision"]
    assert [r["reason"] for r in refused["refusals"]] == refused["reasons"]
    assert summary["errors"] == [], "the program's own lines about a left-out model are not stack errors"
    assert summary["failedModels"] == [TP4["name"]]
