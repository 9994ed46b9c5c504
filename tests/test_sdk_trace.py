"""Each registration carries only the frame that created the resource (`tkf_infra.sdk_trace`): the
source position the engine shows stays exactly the SDK's own, for every resource of the dev stack."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulumi
import pytest
from pulumi.runtime import resource as sdk_resource
from pulumi.runtime.proto import source_pb2

from tests.test_program import program, stack_config
from tkf_infra import sdk_trace

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def config() -> Iterator[dict[str, Any]]:
    values: dict[str, Any] = {}
    yield values
    pulumi.runtime.set_all_config({}, [])


def test_every_resource_keeps_the_sdks_source_position_and_nothing_else(
        config: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    pairs: list[tuple[source_pb2.StackTrace, source_pb2.StackTrace]] = []
    ours = sdk_trace.creation_frame_only

    def both() -> source_pb2.StackTrace:
        # Called where the SDK calls it: the SDK's full walk and ours see the same constructor frames.
        pair = (sdk_trace.SDK_STACK_TRACE(), ours())
        pairs.append(pair)
        return pair[1]

    monkeypatch.setattr(sdk_trace, "creation_frame_only", both)
    monkeypatch.setattr(sdk_resource, sdk_trace.SDK_FUNCTION, sdk_trace.SDK_STACK_TRACE)
    h = program(stack_config("dev"), config, expect_error=False)

    assert len(pairs) >= len(h.resources) > 10  # every registration went through the swapped function
    assert getattr(sdk_resource, sdk_trace.SDK_FUNCTION) is both
    for full, mine in pairs:
        assert len(full.frames) > 1, "the SDK walks the whole stack; nothing to cut means the test is moot"
        assert list(mine.frames) == [full.frames[0]]
    # the positions name the project's own lines (where the resource was built), as before the swap
    files = {Path(f.pc.uri.removeprefix("file://")) for _, m in pairs for f in m.frames}
    created_in = {p.relative_to(ROOT).parts[0] for p in files if p.is_relative_to(ROOT)}
    assert "components" in created_in, created_in
