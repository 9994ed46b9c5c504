"""The accuracy bench on the calibration cases copied into the repo: no false accepts, errors within target."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from bench.calibration_cases import _version, release_cap
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


def test_a_case_on_a_pre_volta_gpu_is_the_products_refusal_and_an_unknown_gpu_is_skipped(tmp_path: Path) -> None:
    cases = [
        {"case_id": "p40-fail", "status": "fail", "model": "org/any", "gpu": "Tesla P40", "max_model_len": 4096},
        {"case_id": "p100-ok", "status": "ok", "model": "org/any", "gpu": "Tesla P100-PCIE-16GB"},
        {"case_id": "unknown", "status": "ok", "model": "org/any", "gpu": "NVIDIA Future 99GB"},
    ]
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(cases))
    report = run(path)
    verdicts = {s.case_id: (s.ok, s.fits) for s in report.scored}
    assert verdicts == {"p40-fail": (False, False), "p100-ok": (True, False)}  # a right refusal, a false reject
    assert "compute capability 7.0 or newer" in report.lines[0]
    assert report.skipped == 1 and "'NVIDIA Future 99GB' is not in the GPU table" in report.lines[2]


def test_a_malformed_case_is_skipped_by_field_and_the_others_still_run(tmp_path: Path) -> None:
    good = json.loads((CASES / "cases.json").read_text())[0]
    cases = [{**good, "case_id": "len-32k", "max_model_len": "32k"},
             {**good, "case_id": "util-0", "gpu_memory_utilization": 0},
             {**good, "case_id": "total-0", "gpu_total_memory_gib_printed": 0}, "not a case", good]
    (tmp_path / "configs").symlink_to(CASES / "configs")  # config files are named relative to the case file
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(cases))
    report = run(path)
    assert [s.case_id for s in report.scored] == [good["case_id"]] and report.skipped == 4, report.lines
    assert "max_model_len '32k': input should be a valid integer" in report.lines[0]
    assert "case #4: skipped (a case is a JSON object, got str)" in report.lines[3]


def test_a_case_of_unknown_release_is_capped_by_the_day_its_source_was_written() -> None:
    # 0.18.0 reached PyPI on 2026-03-20 and 0.19.0 on 2026-04-03: a log of 2026-03-12 ran 0.19.0 at the newest
    # (a nightly of that day may be in 0.18.0's branch or, branched earlier, only in 0.19.0).
    assert release_cap("2026-03-12") == "0.19.0"
    assert release_cap("2099-01-01") is None, "after the table's last release there is no cap"
    case = {"engine": "v1", "source": {"date": "2026-03-12"}}
    assert _version(case) == "unknown-v1<=0.19.0"
    assert _version({"engine": "v1", "source": {"date": "March 2026"}}) == "unknown-v1"
    assert _version({**case, "vllm_version": "0.17.1"}) == "0.17.1-v1", "a printed release is not capped"
