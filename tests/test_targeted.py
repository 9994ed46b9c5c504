"""Targeted runs (`preview|up --models`, tkf_infra/targeted.py) under mocks: the URN patterns pick exactly the named
models' objects and the shared ones (matched as the engine matches `--target` globs), the program stops a
targeted run that would leave another model stale, and the CLI refuses an unknown name by name.

The engine tier (tests/engine/test_cli.py) and the API-server tier (tests/kube/platform/test_targeted_on_apiserver.py)
run the same patterns through the real engine."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from tests.mocks import CPU, QWEN_05B, Harness, Registered, program, stack_doc
from tkf_infra import names
from tkf_infra.outputs import DEPLOYED_OUTPUT
from tkf_infra.targeted import (
    TARGET_MODELS_ENV,
    targeted_models,
    targeted_refusal,
    untargeted_changes,
    urn_patterns,
)

A = {**CPU, "name": "a"}
B = {**CPU, "name": "a-b", "servedName": "a-b"}  # named so that model a's pattern also matches its objects
C: dict[str, Any] = {**CPU, "name": "c", "servedName": "c", "repo": "Qwen/Qwen2.5-Coder-0.5B-Instruct",
     "revision": "ea3f2471cf1b1f0db85067f1ef93848e38e88c25"}


def engine_glob(pattern: str) -> re.Pattern[str]:
    """The engine's `--target` glob (pulumi pkg/resource/deploy UrnTargets.getMatcher, CLI 3.274.1): `**` is any
    text, `*` any text without a colon, the rest literal, the whole URN matched."""
    parts = ["[^:]*".join(re.escape(p) for p in seg.split("*")) for seg in pattern.split("**")]
    return re.compile("^" + ".*".join(parts) + "$")


def urns(h: Harness[Any], stack: str) -> dict[str, Registered]:
    """Each registered resource's URN as the engine builds it: the parents' types chained with `$`."""
    by_key = {r.urn: r for r in h.resources}

    def chain(r: Registered) -> str:
        parent = by_key.get(r.parent) if r.parent else None
        return f"{chain(parent)}${r.type}" if parent is not None else r.type

    return {f"urn:pulumi:{stack}::tkf-infra::{chain(r)}::{r.name}": r for r in h.resources}


def matched(patterns: Iterable[str], all_urns: Iterable[str]) -> set[str]:
    globs = [engine_glob(p) for p in patterns]
    return {u for u in all_urns if any(g.match(u) for g in globs)}


def test_a_models_patterns_pick_its_objects_its_cache_and_the_shared_objects_only() -> None:
    h = program(stack_doc(A, C, backend="vllm"), stack="s")
    assert h.error is None, h.error
    registered = urns(h, "s")
    cache_c = names.weight_cache(str(C["repo"]), str(C["revision"]))
    got = matched(urn_patterns("s", "tkf-infra", ["c"], [cache_c]), registered)
    of_c = {u for u, r in registered.items() if r.name == "c" or r.name.startswith("c-")}
    of_cache = {u for u, r in registered.items() if r.name.startswith(cache_c)}
    shared = {u for u, r in registered.items() if r.name in (names.FIT_CHECK, names.FLEET_FACTS_RESOURCE,
                                                              names.METRICS_PROXY_RESOURCE)}
    assert len(shared) == 3 and of_c and len(of_cache) == 3  # the component, its PVC and its download Job
    assert {registered[u].type for u in of_c} >= {names.MODEL_SERVING_TYPE, "kubernetes:apps/v1:Deployment",
                                                  "kubernetes:core/v1:Service",
                                                  "kubernetes:networking.k8s.io/v1:NetworkPolicy"}
    assert got == of_c | of_cache | shared, sorted(got ^ (of_c | of_cache | shared))
    untouched = set(registered) - got
    assert any(registered[u].name == "a" for u in untouched)
    assert not any(r.type == names.STACK_TYPE for r in map(registered.get, got) if r)


def test_a_prefix_of_another_models_name_also_steps_that_model_never_skips_one() -> None:
    h = program(stack_doc(A, B, backend="vllm"), stack="s")
    registered = urns(h, "s")
    got = matched(urn_patterns("s", "tkf-infra", ["a"], []), registered)
    assert {registered[u].name for u in got} >= {"a", "a-deployment", "a-b-deployment"}
    assert "a-b" not in {registered[u].name for u in got}  # the component itself is named exactly


def test_the_fit_checks_pattern_is_its_real_type_token() -> None:
    h = program(stack_doc(A, backend="vllm"), stack="s")
    fit = [u for u, r in urns(h, "s").items() if r.name == names.FIT_CHECK]
    assert matched(urn_patterns("s", "tkf-infra", [], []), fit) == set(fit) and len(fit) == 1


def deployed_now(doc: dict[str, Any]) -> dict[str, Any]:
    """The `deployed` output a full run of `doc` publishes."""
    from tkf_infra.outputs import deployed_entry

    h = program(doc)
    assert h.error is None, h.error
    assert h.result is not None
    return {m.entry.name: deployed_entry(m.entry) for m in h.result.plan.models}


def test_the_program_stops_a_targeted_run_that_would_leave_another_model_as_it_was(
        monkeypatch: pytest.MonkeyPatch) -> None:
    last = {DEPLOYED_OUTPUT: deployed_now(stack_doc(A, C, backend="vllm"))}
    edited = stack_doc({**A, "maxNumSeqs": 4}, {**C, "maxModelLen": 2048}, backend="vllm")
    monkeypatch.setenv(TARGET_MODELS_ENV, json.dumps(["a"]))
    h = program(edited, previous=last)
    assert h.error is not None
    assert not h.mocks.of_type(names.MODEL_SERVING_TYPE)  # stopped before registering any model
    message = str(h.error)
    assert "model c changed since the last run (maxModelLen)" in message
    assert "--models a,c" in message and "without --models" in message
    monkeypatch.setenv(TARGET_MODELS_ENV, json.dumps(["a", "c"]))
    assert program(edited, previous=last).error is None
    monkeypatch.delenv(TARGET_MODELS_ENV)
    assert program(edited, previous=last).error is None  # a full run steps everything


def test_untargeted_changes_name_added_changed_and_removed_models() -> None:
    before = {"a": {"maxNumSeqs": 8}, "b": {"maxNumSeqs": 8}, "gone": {"x": 1}}
    now = {"a": {"maxNumSeqs": 4}, "b": {"maxNumSeqs": 4}, "new": {"x": 1}}
    assert untargeted_changes(frozenset({"a", "b", "new", "gone"}), now, before) == []
    assert untargeted_changes(frozenset({"a"}), now, before) == [
        "model b changed since the last run (maxNumSeqs)", "model new is new (not deployed by the last run)",
        "model gone was deployed by the last run and is not now"]


def test_the_target_list_in_the_environment_is_checked() -> None:
    assert targeted_models({}) is None
    assert targeted_models({TARGET_MODELS_ENV: '["a"]'}) == frozenset({"a"})
    with pytest.raises(ValueError, match=f"{TARGET_MODELS_ENV} is 'a,b', not a JSON list"):
        targeted_models({TARGET_MODELS_ENV: "a,b"})
    assert targeted_refusal([], {}, {TARGET_MODELS_ENV: "{"}) is not None


class FakeStack:
    """What `tkf_infra.ops.targets.resolve` asks of an Automation API stack: its stack file and its outputs."""

    name = "s"

    def __init__(self, tmp: Path, models: list[dict[str, Any]], deployed: dict[str, Any]) -> None:
        self.workspace = SimpleNamespace(work_dir=str(tmp))
        (tmp / "Pulumi.s.yaml").write_text(yaml.safe_dump({"config": {
            "tkf-infra:models": models, "tkf-infra:modelDefaults": {"revision": QWEN_05B["revision"]}}}))
        self.deployed = deployed

    def outputs(self) -> dict[str, Any]:
        from pulumi import automation as auto

        return {DEPLOYED_OUTPUT: auto.OutputValue(self.deployed, False)}


def test_the_cli_refuses_an_unknown_model_naming_it_and_the_known_ones(tmp_path: Path) -> None:
    from tkf_infra.ops.stacks import UsageError
    from tkf_infra.ops.targets import parse_models, resolve

    gone = {"repo": "x/y", "revision": "1" * 40}
    stack: Any = FakeStack(tmp_path, [{"name": "a", "repo": QWEN_05B["repo"]}], {"gone": gone})
    with pytest.raises(UsageError, match=r"no model named 'nope' in stack 's' .*known: a, gone"):
        resolve(stack, parse_models("a,nope"))
    with pytest.raises(UsageError, match="--models 'a,,b'"):
        parse_models("a,,b")


def test_the_cli_targets_a_models_cache_as_it_is_now_and_as_it_was_deployed(tmp_path: Path) -> None:
    from tkf_infra.ops.targets import resolve

    old: dict[str, str] = {"repo": "Qwen/Qwen2.5-0.5B-Instruct", "revision": "1" * 40}
    stack: Any = FakeStack(tmp_path, [{"name": "a", "repo": QWEN_05B["repo"]}], {"a": old, "gone": C})
    t = resolve(stack, ("a", "gone"))
    for repo, revision in ((QWEN_05B["repo"], QWEN_05B["revision"]), (old["repo"], old["revision"]),
                           (C["repo"], C["revision"])):
        cache = names.weight_cache(str(repo), str(revision))
        assert f"urn:pulumi:s::tkf-infra::{names.WEIGHT_CACHE_TYPE}*::{cache}" in t.urns
    assert json.loads(t.env[TARGET_MODELS_ENV]) == ["a", "gone"]
