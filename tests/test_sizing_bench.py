"""The accuracy bench on the calibration cases copied into the repo: no false accepts, errors within target."""

from __future__ import annotations

import statistics
from pathlib import Path

from bench.sizing_accuracy import run, summary

CASES = Path(__file__).parent / "data" / "calibration"


def test_h100_sweep_is_reproduced_and_never_falsely_accepted() -> None:
    report = run(CASES / "cases.json")
    kv = [s.kv_err for s in report.scored if s.kv_err is not None and not s.co_resident]
    assert not any(s.fits and not s.ok for s in report.scored), summary(report)
    assert statistics.median(kv) <= 2.0 and max(kv) <= 10.0, summary(report)
    assert len(report.scored) >= 0.9 * report.total, summary(report)


def test_diverse_cases_are_never_falsely_accepted_and_skips_name_what_is_missing() -> None:
    report = run(CASES / "cases-diverse.json")
    assert not any(s.fits and not s.ok for s in report.scored), summary(report)
    assert len(report.scored) >= 0.9 * report.total, summary(report)
    weights = [s.w_err for s in report.scored if s.w_err is not None]
    assert statistics.median(weights) <= 1.0, summary(report)
    skipped = [line for line in report.lines if ": skipped (" in line]
    assert len(skipped) == report.skipped and all("lacks" in s or "not in" in s or "without" in s for s in skipped)
