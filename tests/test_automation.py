"""Per-model attribution of engine events and the drift details a refresh reports."""

from __future__ import annotations

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
    gated = Exclusion("llama", 1, Stage.ACCESS, ("model llama: meta-llama/x is gated but hfTokenSecret is not set",))
    tracker.outputs = {"rejected": [gated.as_output()], "problems": ["nodePool h100: models need 9 GPUs"]}
    # What the program logged for it and the run's final verdict are the same facts: not repeated as stack errors.
    tracker.diagnostics += [gated.log_line(), "nodePool h100: models need 9 GPUs",
                            "1 catalog entry was refused (llama); the other 1 were deployed. Fix the errors above "
                            "and run again.", "a crash nobody explains"]
    summary = summarize("dev", "up", tracker, ok=False)
    assert summary["models"]["llama"] == {"status": "rejected", "changes": {}, "stage": "access",
                                          "reasons": list(gated.reasons)}
    assert summary["errors"] == ["nodePool h100: models need 9 GPUs", "a crash nobody explains"]
    assert summary["failedModels"] == ["llama"]
