"""The dev stack end to end under the real Pulumi engine: preview, up (render), idempotence, removal,
fit-check failures reaching the preview, and no plaintext secret in the state."""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from collections.abc import Callable

import pytest
import yaml
from pulumi import automation as auto

from tests.engine_fixtures import EngineStack, dev_config, resource_events

DEV_MODELS = dev_config()["config"]["tkf-infra:models"]
DEV_API_KEY = "tkf-dev-api-key"  # the dev stack's documented dev-only key (Pulumi.dev.yaml, encrypted)


def run_preview(es: EngineStack) -> tuple[auto.PreviewResult, list[tuple[str, str, str]], str]:
    events: list[auto.events.EngineEvent] = []
    lines: list[str] = []
    res = es.stack.preview(on_event=events.append, on_output=lines.append)
    return res, resource_events(events), "\n".join(lines)


def test_preview_lists_expected_resources(make_stack: Callable[..., EngineStack]) -> None:
    es = make_stack()
    res, steps, _ = run_preview(es)
    types = Counter(t for op, t, _ in steps if op == "create")
    assert types["tkf:serving:ModelServing"] == 2
    assert types["kubernetes:serving.kserve.io/v1alpha2:LLMInferenceService"] == 2
    assert types["kubernetes:core/v1:Service"] >= 2  # one alias Service per model
    assert types["kubernetes:networking.k8s.io/v1:NetworkPolicy"] == 2
    assert types["kubernetes:core/v1:PersistentVolumeClaim"] == 2  # two distinct repo@revision
    assert types["kubernetes:batch/v1:Job"] == 2
    assert [n for _, t, n in steps if t.endswith(":FitCheck")] == ["fit-checks"]  # one for the stack
    assert res.change_summary.get(auto.events.OpType.CREATE, 0) >= sum(types.values()) - 2  # less default providers


def test_up_renders_manifests_then_is_idempotent_then_removes_one_model(
    make_stack: Callable[..., EngineStack],
) -> None:
    es = make_stack()
    es.stack.up()
    objs = es.manifests()
    kinds = Counter(kind for kind, _ in objs)
    assert kinds["LLMInferenceService"] == 2 and kinds["NetworkPolicy"] == 2
    for model in DEV_MODELS:
        isvc = objs[("LLMInferenceService", model["name"])]
        assert isvc["spec"]["model"]["name"] == model["servedName"]
        assert ("Service", f"{model['name']}-openai") in objs
    # the runtime API key is rendered only inside a Secret, never in a workload
    for (kind, _), doc in objs.items():
        if kind != "Secret":
            assert DEV_API_KEY not in json.dumps(doc)

    second = es.stack.up()
    changes = {k: v for k, v in (second.summary.resource_changes or {}).items() if k != auto.events.OpType.SAME}
    assert changes == {}, f"a second up must change nothing, got {changes}"

    removed, kept = DEV_MODELS[1], DEV_MODELS[0]
    es.set_models([kept])
    third = es.stack.up()
    after = es.manifests()
    assert ("LLMInferenceService", removed["name"]) not in after
    assert ("Service", f"{removed['name']}-openai") not in after
    assert ("LLMInferenceService", kept["name"]) in after
    # the removed model's weight cache is retained (never lose downloaded weights)
    pvcs_before = {n for k, n in objs if k == "PersistentVolumeClaim"}
    pvcs_after = {n for k, n in after if k == "PersistentVolumeClaim"}
    assert pvcs_before == pvcs_after
    deleted = (third.summary.resource_changes or {}).get(auto.events.OpType.DELETE, 0)
    assert deleted > 0


def test_fit_failure_reaches_preview_output_and_the_healthy_model_still_previews(
        make_stack: Callable[..., EngineStack]) -> None:
    """The preview names the refusal with its numbers; it does not abort, because `pulumi up` runs
    this same preview first and would then deploy nothing — not even the healthy model."""
    es = make_stack()
    bad = dict(DEV_MODELS[1], maxModelLen=1_000_000)
    es.set_models([DEV_MODELS[0], bad])
    _, steps, text = run_preview(es)
    assert f"{bad['name']} was left out of this deployment (fit)" in text
    assert "maxModelLen 1000000 is longer than the model's 32768 positions" in text
    created = {name for op, _, name in steps if op == "create"}
    assert DEV_MODELS[0]["name"] in created and bad["name"] not in created


def test_rejected_entry_left_out_and_run_fails(make_stack: Callable[..., EngineStack]) -> None:
    es = make_stack()
    bad = dict(DEV_MODELS[1], revision="main")
    es.set_models([DEV_MODELS[0], bad])
    with pytest.raises(auto.CommandError) as err:
        es.stack.up()
    assert "revision 'main' is a branch" in str(err.value)
    objs = es.manifests()
    assert ("LLMInferenceService", DEV_MODELS[0]["name"]) in objs
    assert ("LLMInferenceService", bad["name"]) not in objs
    rejected = es.stack.outputs()["rejected"].value
    assert [r["name"] for r in rejected] == [bad["name"]]


def test_state_holds_no_plaintext_secret(make_stack: Callable[..., EngineStack]) -> None:
    es = make_stack()
    es.stack.up()
    # `pulumi stack export` as a person runs it (the Automation API's export shows secrets)
    exported = subprocess.run(["pulumi", "stack", "export", "--stack", es.stack.name], cwd=es.project,
                              env={**os.environ, **es.env}, capture_output=True, text=True, check=True).stdout
    assert DEV_API_KEY not in exported
    assert '"ciphertext"' in exported  # the key is there, encrypted
    outs = es.stack.outputs()
    assert all(DEV_API_KEY not in json.dumps(v.value) for k, v in outs.items() if not v.secret)
    assert yaml.safe_dump(outs["gatewayModelList"].value)


def test_state_names_the_line_that_built_each_resource(make_stack: Callable[..., EngineStack]) -> None:
    """`tkf_infra.sdk_trace` sends one frame per registration: the engine still records each
    resource's source position in the project, and the state carries no interpreter stack."""
    es = make_stack()
    es.stack.up()
    state = es.stack.export_stack().deployment or {}
    made = [r for r in state.get("resources", []) if r["type"].startswith(("kubernetes:", "tkf:"))]
    assert made
    for r in made:
        assert r["sourcePosition"].startswith("project:///"), r["urn"]
        assert [f.get("sourcePosition") for f in r.get("stackTrace", [])] == [r["sourcePosition"]], r["urn"]
