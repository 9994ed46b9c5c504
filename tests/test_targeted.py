"""Targeted runs (`preview|up --models`, tkf_infra/targeted.py) under mocks: the program registers the named models'
objects and the shared ones, the exclusions (matched as the engine matches `--exclude` globs) keep every other
object of a full run and none of those, the program stops a targeted run that would leave another model stale,
and the CLI refuses an unknown name by name.

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
from tkf_infra.ops.targets import Targeting
from tkf_infra.outputs import DEPLOYED_OUTPUT
from tkf_infra.targeted import (
    TARGET_KEEP_ENV,
    TARGET_MODELS_ENV,
    TARGET_TICKET_ENV,
    Keep,
    exclude_patterns,
    kept,
    moved_models,
    skip_set,
    targeted_models,
    targeted_refusal,
    untargeted_changes,
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


def caches_of(*models: dict[str, Any]) -> dict[str, str | None]:
    return {str(m["name"]): names.weight_cache(str(m["repo"]), str(m["revision"])) for m in models}


def targeted(doc: dict[str, Any], named: list[str], *models: dict[str, Any],
             monkeypatch: pytest.MonkeyPatch) -> tuple[set[str], set[str], dict[str, Registered]]:
    """A targeted run of `doc` naming `named`, as the CLI sets it up: (the URNs it registers, the URNs its
    exclusions match among a full run's, the full run's URNs)."""
    monkeypatch.delenv(TARGET_MODELS_ENV, raising=False)
    monkeypatch.delenv(TARGET_KEEP_ENV, raising=False)
    last = {DEPLOYED_OUTPUT: deployed_now(doc)}
    full = urns(program(doc, stack="s", previous=last), "s")
    keep = skip_set(named, caches_of(*models), {})
    for key, value in Targeting(tuple(named), keep, []).env.items():
        monkeypatch.setenv(key, value)
    h = program(doc, stack="s", previous=last)
    assert h.error is None, h.error
    return set(urns(h, "s")), matched(exclude_patterns("s", "tkf-infra", keep), full), full


def test_a_targeted_run_steps_its_models_objects_its_cache_and_the_shared_ones_and_keeps_the_rest(
        monkeypatch: pytest.MonkeyPatch) -> None:
    registered, kept_urns, full = targeted(stack_doc(A, C, backend="vllm"), ["c"], A, C, monkeypatch=monkeypatch)
    # nothing is deleted: every object of a full run is registered or kept by an exclusion
    assert set(full) <= registered | kept_urns, sorted(set(full) - registered - kept_urns)
    stepped = registered - kept_urns
    cache_c = names.weight_cache(str(C["repo"]), str(C["revision"]))
    of_c = {u for u, r in full.items() if r.name == "c" or r.name.startswith("c-")}
    of_cache = {u for u, r in full.items() if r.name.startswith(cache_c)}
    shared = {u for u, r in full.items() if r.name in (names.FIT_CHECK, names.FLEET_FACTS_RESOURCE,
                                                       names.METRICS_PROXY_RESOURCE)}
    assert len(shared) == 3 and of_c and len(of_cache) == 3  # the component, its PVC and its download Job
    assert {full[u].type for u in of_c} >= {names.MODEL_SERVING_TYPE, "kubernetes:apps/v1:Deployment",
                                            "kubernetes:core/v1:Service",
                                            "kubernetes:networking.k8s.io/v1:NetworkPolicy"}
    assert of_c | of_cache | shared <= stepped, sorted((of_c | of_cache | shared) - stepped)
    of_a = {u for u, r in full.items() if r.name == "a" or r.name.startswith("a-")}
    assert of_a and of_a <= kept_urns and not of_a & registered  # model a is neither registered nor stepped
    assert not any(full[u].type == names.STACK_TYPE for u in kept_urns)


def test_a_prefix_of_another_models_name_steps_both_never_keeps_a_named_models_object(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for named in (["a"], ["a-b"]):
        registered, kept_urns, full = targeted(stack_doc(A, B, backend="vllm"), named, A, B,
                                               monkeypatch=monkeypatch)
        names_stepped = {full[u].name for u in registered - kept_urns if u in full}
        assert {"a", "a-b", "a-deployment", "a-b-deployment"} <= names_stepped, (named, sorted(names_stepped))


def test_skip_set_keeps_unnamed_models_and_caches_only_nobody_stepped_reads() -> None:
    now = {"a": "w-x", "b": "w-x", "c": "w-y", "d": "w-z"}
    keep = skip_set(["a"], now, {"a": "w-old", "gone": "w-g"})
    assert keep == Keep(frozenset({"b", "c", "d", "gone"}), frozenset({"w-y", "w-z", "w-g"}))
    # a cache whose name extends a stepped one's is stepped with it (its objects' glob would match)
    assert skip_set(["a"], {"a": "w", "b": "w-2"}, {}).caches == frozenset()


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


def test_a_kept_model_the_plan_placed_anew_is_named_and_older_stacks_keys_are_not_changes() -> None:
    pin = {"nodes": ["n1"], "podsPerNode": 1}
    before = {"x": {"name": "b", "footprint": {"pin": {"nodes": ["n1"], "podsPerNode": 1.0}}},
              "y": {"name": "c", "footprint": {"pin": pin}}, "z": {"name": "a", "footprint": {}}}
    now = {"x": {"name": "b", "footprint": {"pin": pin, "weightCacheAccess": "ReadWriteOnce"}},  # same, as floats
           "y": {"name": "c", "footprint": {"pin": {"nodes": ["n2"], "podsPerNode": 1}}},
           "z": {"name": "a", "footprint": {"pin": pin}}, "w": {"name": "new"}}
    assert moved_models(frozenset({"a"}), now, before) == ["model c was placed anew by the plan (footprint.pin)"]
    assert moved_models(frozenset(), now, before)[-1] == "model a was placed anew by the plan (footprint.pin)"


def test_the_program_refuses_a_targeted_run_that_would_leave_a_kept_model_where_it_was(
        monkeypatch: pytest.MonkeyPatch) -> None:
    doc = stack_doc(A, C, backend="vllm")
    h = program(doc)
    assert h.error is None and h.result is not None
    from tkf_infra.outputs import ENDPOINTS_OUTPUT, endpoints_output

    endpoints = endpoints_output(h.result.plan)
    served_c = next(k for k, ep in endpoints.items() if ep["name"] == "c")
    endpoints[served_c] = {**endpoints[served_c], "footprint": {**endpoints[served_c].get("footprint", {}),
                                                                  "pin": {"nodes": ["gone"], "podsPerNode": 1}}}
    last = {DEPLOYED_OUTPUT: deployed_now(doc), ENDPOINTS_OUTPUT: endpoints}
    monkeypatch.setenv(TARGET_MODELS_ENV, json.dumps(["a"]))
    refused = program(doc, previous=last)
    assert refused.error is not None and not refused.mocks.of_type(names.MODEL_SERVING_TYPE)
    assert "model c was placed anew by the plan (footprint.pin)" in str(refused.error), refused.error
    assert "--models a,c" in str(refused.error)
    monkeypatch.setenv(TARGET_MODELS_ENV, json.dumps(["a", "c"]))
    assert program(doc, previous=last).error is None


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
    assert kept({}) is None
    run = Targeting(("a",), Keep(frozenset({"b"}), frozenset()), [])
    assert kept(run.env) == Keep(frozenset({"b"}), frozenset())
    # a keep list left over without named models (a full run) is ignored: the engine would delete what it keeps
    keep = run.env[TARGET_KEEP_ENV]
    assert kept({TARGET_KEEP_ENV: keep}) is None and kept({TARGET_MODELS_ENV: "", TARGET_KEEP_ENV: keep}) is None
    with pytest.raises(ValueError, match=f"{TARGET_KEEP_ENV} is '\\[\\]', not a JSON"):
        kept({**run.env, TARGET_KEEP_ENV: "[]"})
    assert targeted_refusal([], {}, {TARGET_MODELS_ENV: '["a"]', TARGET_KEEP_ENV: "x"}) is not None


def test_variables_exported_by_hand_without_the_clis_live_ticket_are_refused_before_anything_is_registered(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain `pulumi up` with the targeted run's variables in its environment: the program must not leave the kept
    models unregistered (the engine, given no --exclude, would delete them)."""
    run = Targeting(("a",), Keep(frozenset({"c"}), frozenset()), [])
    by_hand = {k: v for k, v in run.env.items() if k != TARGET_TICKET_ENV}
    with pytest.raises(ValueError, match=f"{TARGET_TICKET_ENV} is not set.*unset both variables"):
        kept(by_hand)
    with pytest.raises(ValueError, match="gone or for another run"):  # a ticket of another run
        kept({**run.env, TARGET_MODELS_ENV: '["c"]'})
    run.ticket.unlink()  # the CLI that wrote it has exited
    with pytest.raises(ValueError, match="gone or for another run"):
        kept(run.env)
    doc = stack_doc(A, C, backend="vllm")
    last = {DEPLOYED_OUTPUT: deployed_now(doc)}
    for key, value in by_hand.items():
        monkeypatch.setenv(key, value)
    h = program(doc, stack="s", previous=last)
    assert h.error is not None and TARGET_TICKET_ENV in str(h.error), h.error
    assert not [r for r in h.resources if r.type == names.MODEL_SERVING_TYPE], "nothing of a model registered"


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


def test_the_cli_steps_a_models_cache_as_it_is_now_and_as_it_was_deployed(tmp_path: Path) -> None:
    from tkf_infra.ops.targets import resolve

    old: dict[str, str] = {"repo": "Qwen/Qwen2.5-0.5B-Instruct", "revision": "1" * 40}
    stack: Any = FakeStack(tmp_path, [{"name": "a", "repo": QWEN_05B["repo"]}, {"name": "k", "repo": "x/k"}],
                           {"a": old, "gone": C})
    t = resolve(stack, ("a", "gone"))
    caches = {names.weight_cache(str(repo), str(revision)) for repo, revision in (
        (QWEN_05B["repo"], QWEN_05B["revision"]), (old["repo"], old["revision"]), (C["repo"], C["revision"]))}
    assert t.keep == Keep(frozenset({"k"}), frozenset({names.weight_cache("x/k", str(QWEN_05B["revision"]))}))
    assert not caches & t.keep.caches
    assert f"urn:pulumi:s::tkf-infra::{names.MODEL_SERVING_TYPE}*::k" in t.excludes
    assert json.loads(t.env[TARGET_MODELS_ENV]) == ["a", "gone"]
    assert kept(t.env) == t.keep
