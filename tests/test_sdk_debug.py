"""The SDK's per-resource debug lines stay in the program's process (`tkf_infra.sdk_debug`): a run sends
the engine none of them, still sends every warning, and `TKF_SDK_DEBUG_LOGS=1` brings the lines back."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi.log
import pytest
from pulumi.runtime.proto import engine_pb2

from tests.mocks import CPU, program, stack_doc
from tkf_infra import sdk_debug


def _sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    """Every line the SDK hands to the engine (severity, message), recorded where the SDK sends it."""
    sent: list[tuple[int, str]] = []
    real = pulumi.log._log

    def spy(engine: Any, severity: int, message: str, *rest: Any) -> None:
        sent.append((severity, message))
        real(engine, severity, message, *rest)  # type: ignore[no-untyped-call]  # the SDK leaves it untyped

    monkeypatch.setattr(pulumi.log, "_log", spy)
    monkeypatch.setattr(pulumi.log, "debug", sdk_debug.SDK_DEBUG)  # as a fresh process starts
    return sent


def _registration_lines(sent: list[tuple[int, str]]) -> list[str]:
    return [m for s, m in sent if s == engine_pb2.DEBUG and m.startswith("registering resource")]


def test_a_run_sends_no_sdk_debug_line_per_resource_and_every_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(sdk_debug.KEEP_ENV, raising=False)
    sent = _sent(monkeypatch)
    h = program(stack_doc(CPU), preview=True)
    assert h.error is None, h.error
    assert len(h.resources) > 5
    # at most the stack's own, registered when the program starts, before `set_process_state` swaps the function
    assert all(m.startswith("registering resource: ty=pulumi:pulumi:Stack,") for m in _registration_lines(sent))
    assert pulumi.log.debug is not sdk_debug.SDK_DEBUG
    warnings = [m for s, m in sent if s == engine_pb2.WARNING]
    assert warnings and warnings == h.warnings()


def test_the_environment_variable_keeps_the_sdks_debug_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sdk_debug.KEEP_ENV, "1")
    sent = _sent(monkeypatch)
    h = program(stack_doc(CPU), preview=True)
    assert h.error is None, h.error
    assert len(_registration_lines(sent)) == len(h.resources)  # one per registered resource
    assert pulumi.log.debug is sdk_debug.SDK_DEBUG
