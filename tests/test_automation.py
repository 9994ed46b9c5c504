"""Per-model attribution of engine events and the drift details a refresh reports."""

from __future__ import annotations

from tkf_infra.automation import RunTracker, changed_paths, summarize


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
    assert tracker.model_of(fit) == "qwen"
    assert tracker.model_of(stack) is None
    tracker.report("qwen").errors.append("does not fit")
    summary = summarize("dev", "preview", tracker, None, ok=False)
    assert summary["failedModels"] == ["qwen"] and summary["models"]["qwen"]["status"] == "failed"
    assert summary["ok"] is False
