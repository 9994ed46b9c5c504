"""`serving.overcommit`: what the plan does with an autoscaled model whose maximum does not fit (docs/scaling.md)."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from tests.mocks import CPU, program, stack_doc
from tests.sharing_fixtures import QWEN05, mig_settings
from tests.test_admission import H100_NODE, h100_pool, planned, refused
from tests.test_scaling_plan import scaled
from tests.test_settings import base_doc
from tkf_infra.config import SettingsError, validate_catalog

ALLOW = {"overcommit": "allow"}
ONE_NODE = [h100_pool(1, nodeResources=H100_NODE)]  # 8 GPUs


def named(name: str, entry: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return dict(entry, name=name, servedName=name, **kw)


def test_allow_admits_a_model_at_its_floor_and_says_what_was_not_held() -> None:
    """maxReplicas 9 on 8 GPUs: refused by default; with allow, admitted with room for minReplicas 2."""
    doc = stack_doc(scaled(9, 2), CPU, nodePools=ONE_NODE)
    assert "qwen3-8b" in refused(planned(doc)), "refuse is the default"

    plan = planned(stack_doc(scaled(9, 2), CPU, nodePools=ONE_NODE, serving=ALLOW))
    assert plan.deployed == {"qwen3-8b", "tiny"}
    assert plan.floors == {"qwen3-8b"}
    assert plan.footprints["qwen3-8b"]["replicas"] == 2 and len(plan.footprints["qwen3-8b"]["nodes"]) == 2
    (warning,) = [w for w in plan.warnings if "overcommit" in w]
    assert "model qwen3-8b: serving.overcommit is allow, so room is held for scaling.minReplicas 2, not " \
           "maxReplicas 9" in warning
    assert "replica 9 of 9 fits on no node of pool h100" in warning, "the reason at the maximum is kept"
    assert "up to 7 replicas the plan holds no room for" in warning
    assert "lower scaling.maxReplicas to 8" in warning and "serving.overcommit refuse" in warning


def test_allow_leaves_a_model_that_fits_at_its_maximum_alone() -> None:
    plan = planned(stack_doc(scaled(8, 2), nodePools=ONE_NODE, serving=ALLOW))
    assert plan.deployed == {"qwen3-8b"} and plan.floors == frozenset()
    assert plan.footprints["qwen3-8b"]["replicas"] == 8
    assert not [w for w in plan.warnings if "overcommit" in w]


def test_priority_decides_whose_maximum_is_held() -> None:
    """Two models of 5 (min 3) on 8 GPUs: the higher priority keeps its 5, the other is held at 3."""
    a, b = named("a", scaled(5, 3), priority=10), named("b", scaled(5, 3))
    plan = planned(stack_doc(a, b, nodePools=ONE_NODE, serving=ALLOW))
    assert plan.deployed == {"a", "b"} and plan.floors == {"b"}
    assert (plan.footprints["a"]["replicas"], plan.footprints["b"]["replicas"]) == (5, 3)

    swapped = planned(stack_doc(dict(a, priority=0), dict(b, priority=10), nodePools=ONE_NODE, serving=ALLOW))
    assert swapped.floors == {"a"}
    assert (swapped.footprints["a"]["replicas"], swapped.footprints["b"]["replicas"]) == (3, 5)


def test_a_floor_that_does_not_fit_either_is_refused_with_both_counts() -> None:
    a, b = named("a", scaled(5, 4), priority=10), named("b", scaled(6, 4))
    plan = planned(stack_doc(a, b, nodePools=ONE_NODE, serving=ALLOW))
    assert plan.deployed == {"a"} and plan.floors == frozenset()
    stage, reason = refused(plan)["b"]
    assert stage == "capacity"
    assert "replica 4 of 4 fits on no node of pool h100" in reason
    assert "planned at scaling.minReplicas 4 under serving.overcommit allow, after maxReplicas 6 did not fit" in reason


def test_allow_does_not_touch_fixed_counts() -> None:
    """`replicas` is not a range: nine fixed replicas on 8 GPUs are refused under allow too."""
    fixed = {k: v for k, v in scaled(1).items() if k != "scaling"}
    plan = planned(stack_doc(dict(fixed, replicas=9), CPU, nodePools=ONE_NODE, serving=ALLOW))
    assert refused(plan)["qwen3-8b"][0] == "capacity" and plan.deployed == {"tiny"}


def test_allow_on_a_mig_pool_lays_out_the_floor() -> None:
    """56 `1g.10gb` slices on one 8-GPU node: maxReplicas 60 does not place; with allow the layout carves 4."""
    small = {"name": "q05", **QWEN05, "servedName": "q05", "maxModelLen": 4096, "gpuShare": "mig:1g.10gb",
             "scaling": {"minReplicas": 4, "maxReplicas": 60}}
    settings = mig_settings([small])
    assert refused(planned(stack_doc(**settings)))["q05"][0] == "placement"
    plan = planned(stack_doc(**{**settings, "serving": {**settings.get("serving", {}), **ALLOW}}))
    assert plan.deployed == {"q05"} and plan.floors == {"q05"}
    (layout,) = [lay for lay in plan.layouts.values() if lay.kind == "mig"]
    assert len(layout.pod_nodes("q05", 1)) == 4


def test_the_endpoint_says_which_count_was_held(monkeypatch: pytest.MonkeyPatch) -> None:
    exported: dict[str, Any] = {}
    monkeypatch.setattr(pulumi, "export", lambda name, value: exported.__setitem__(name, value))
    h = program(stack_doc(scaled(9, 2), CPU, nodePools=ONE_NODE, serving=ALLOW), api_key="k")
    assert h.error is None, h.error
    assert exported["endpoints"]["qwen3-8b"]["scaling"]["reservedReplicas"] == 2
    assert exported["endpoints"]["qwen3-8b"]["scaling"]["maxReplicas"] == 9


def test_an_unknown_choice_names_the_key_and_the_choices() -> None:
    with pytest.raises(SettingsError) as err:
        validate_catalog(base_doc(serving={"overcommit": "sometimes"}))
    text = str(err.value)
    assert "serving.overcommit" in text and "'sometimes'" in text and "refuse" in text and "allow" in text, text


def test_pool_headroom_shows_both_ends_and_the_overcommit(monkeypatch: pytest.MonkeyPatch) -> None:
    """a (3-5) and b (3-5) on 8 GPUs under allow: 6 GPUs at the minimum, 10 at the maximum, 2 over."""
    exported: dict[str, Any] = {}
    monkeypatch.setattr(pulumi, "export", lambda name, value: exported.__setitem__(name, value))
    a, b = named("a", scaled(5, 3), priority=10), named("b", scaled(5, 3))
    h = program(stack_doc(a, b, CPU, nodePools=ONE_NODE, serving=ALLOW), api_key="k")
    assert h.error is None, h.error
    assert exported["poolHeadroom"] == {"h100": {"gpus": 8, "atMinimum": {"gpus": 6, "free": 2},
                                                 "atMaximum": {"gpus": 10, "free": -2}}}
    fixed = {k: v for k, v in named("c", scaled(1)).items() if k != "scaling"}
    program(stack_doc(dict(fixed, replicas=3), nodePools=ONE_NODE), api_key="k")
    assert exported["poolHeadroom"]["h100"]["atMinimum"] == exported["poolHeadroom"]["h100"]["atMaximum"] == {
        "gpus": 3, "free": 5}


def test_pool_headroom_counts_shares_by_replica_not_as_whole_gpus() -> None:
    from tkf_infra.plan.headroom import pool_headroom

    small = {"name": "q05", **QWEN05, "servedName": "q05", "maxModelLen": 4096, "gpuShare": "mig:1g.10gb",
             "scaling": {"minReplicas": 2, "maxReplicas": 9}}
    plan = planned(stack_doc(**mig_settings([small])))
    ((_pool, headroom),) = pool_headroom(plan).items()
    assert headroom["sharedReplicas"] == {"atMinimum": 2, "atMaximum": 9}
    assert headroom["atMaximum"] == {"gpus": 0, "free": headroom["gpus"]}
