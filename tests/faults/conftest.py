"""A fault test that fails half-way must not leave a run of the CLI (and its engine) behind."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.faults import harness


@pytest.fixture(autouse=True)
def no_run_left_behind() -> Iterator[None]:
    yield
    for run in harness.STARTED:
        if run.proc is not None and run.proc.poll() is None:
            harness.kill_tree_at_once(harness.process_tree(run.pid))
            run.proc.wait()
    harness.STARTED.clear()
