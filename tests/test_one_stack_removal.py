"""One stack holds the platform and the fleet: a run that would delete a platform piece's CRDs while its own
models keep objects of them stops by name, before registering anything (docs/stacks.md).

Why: deleting a CRD makes the API server delete every object of it, behind Pulumi's back — the models'
autoscalers (ScaledObjects), LeaderWorkerSets or LLMInferenceServices would vanish while the state still
lists them. A split environment's platform stack refuses the same from its fleet's `platformUse`.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pytest

from tests.mocks import SINGLE_GPU, program, stack_doc
from tkf_infra.platform_contract import PLATFORM_CONTRACT_OUTPUT

PROM = "http://prometheus.monitoring.svc:9090"
SCALED = dict(SINGLE_GPU, scaling={"minReplicas": 1, "maxReplicas": 2})
FIXED = dict(SINGLE_GPU, replicas=1)


def doc(model: dict[str, Any], keda: bool) -> dict[str, Any]:
    d = stack_doc(model, backend="vllm", prometheusUrl=PROM)
    if keda:
        d["platform"]["keda"] = {"version": "v2.18.0"}
    return d


def first_run(monkeypatch: pytest.MonkeyPatch, model: dict[str, Any]) -> dict[str, Any]:
    exported: dict[str, Any] = {}
    monkeypatch.setattr(pulumi, "export", lambda name, value: exported.__setitem__(name, value))
    h = program(doc(model, keda=True), api_key="k")
    assert h.error is None, h.error
    assert exported[PLATFORM_CONTRACT_OUTPUT]["pieces"]["keda"]["installedBy"] == "tkf-infra"
    return exported


def test_dropping_keda_while_a_model_still_autoscales_stops_the_run_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    previous = first_run(monkeypatch, SCALED)
    h = program(doc(SCALED, keda=False), api_key="k", previous=previous)
    assert h.error is not None
    text = str(h.error)
    assert "refuses to remove CRDs its own models still use" in text
    assert "platform.keda: this run would delete keda's CRDs (keda is now no longer set)" in text
    assert "keeps 1 ScaledObject object(s)" in text and "a fixed `replicas` makes none" in text
    assert not [r for r in h.resources if r.custom], "nothing registered"


def test_dropping_keda_with_the_scaling_in_the_same_run_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    previous = first_run(monkeypatch, SCALED)
    h = program(doc(FIXED, keda=False), api_key="k", previous=previous)
    assert h.error is None, h.error


def test_a_first_run_and_a_piece_never_installed_here_are_not_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    assert program(doc(SCALED, keda=False), api_key="k").error is None, "no previous contract: nothing to delete"
    previous = first_run(monkeypatch, FIXED)
    assert program(doc(SCALED, keda=True), api_key="k", previous=previous).error is None


def test_every_platform_kind_says_what_makes_a_model_hold_one() -> None:
    from tkf_infra import platform_contract as pc

    assert set(pc._WHAT_MAKES) == set(pc.PLATFORM_KINDS)
