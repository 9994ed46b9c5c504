"""Accuracy bench: predicted vs printed vLLM start-up figures for a case file.

Usage: ``python bench/sizing_accuracy.py --cases tests/data/calibration/cases.json [--by group] [--holdout]``

Each case becomes the inputs a user would give the product (`bench/calibration_cases.py`): the GPU
through `lookup_gpu`, the model's config.json, the serving flags and the vLLM version (an unknown
version is sized with the most conservative release profile, as the product does). A case the
product cannot size is listed as skipped with what is missing; a case on a part older than Volta
is the product's refusal and scored as one. Per case: estimate/printed for
weights, activation, available KV and KV tokens, plus the conservative bound and the verdict.

KV-token errors compare the central estimate with the printed figure; cases whose printed KV
includes another engine's allocations on a shared GPU (`other_printed.co_resident`) are scored for
their verdict but listed apart from the error statistics. The summary line the project tracks:

``cases=N scored=S/T kv_tokens_median_abs_err_pct=X kv_tokens_max_abs_err_pct=Y
weights_median_abs_err_pct=Z fits=F tight=G refuses=H false_accepts=A false_rejects=R``

The verdict is three-valued (docs/sizing.md): *fits* on the bound, *tight* (the estimate fits, the bound does not:
it deploys), *refuses*. A false accept is a case that failed and was not refused (fits or tight, since tight
deploys); a false reject is a case that started and was refused (tight is not a refusal).

``--by group`` adds a breakdown by GPU and by vLLM release profile; ``--holdout`` re-fits the
calibrated constants without each model family in turn and predicts that family (leave-one-family-out),
the honest estimate of the error on case files the constants have never seen.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.calibration_cases import (  # noqa: E402
    CaseRefused,
    CaseSkipped,
    case_inputs,
    family,
    lock_configs,
    read_case,
)
from bench.refit import refitted_rows  # noqa: E402
from tkf_infra.sizing import versions  # noqa: E402
from tkf_infra.sizing.estimate import estimate  # noqa: E402
from tkf_infra.sizing.estimate_result import Estimate  # noqa: E402
from tkf_infra.sizing.params import SizingError  # noqa: E402


@dataclass
class Scored:
    case_id: str
    ok: bool
    verdict: str
    gpu: str
    profile: str
    family: str
    co_resident: bool
    kv_err: float | None = None
    w_err: float | None = None
    line: str = ""
    since: tuple[int, int, int] | None = None
    """The first release of the row the case was sized with, when its release is known (None: unknown)."""

    @property
    def fits(self) -> bool:
        """It deploys: fits or tight."""
        return self.verdict != "refuses"


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    scored: list[Scored] = field(default_factory=list)
    skipped: int = 0
    total: int = 0
    #: Cases that started but that the product itself could not size (a refusal by name at preview, not a gap in
    #: the case's inputs): counted apart from the scored verdicts, so a "cannot size" never hides among the skips.
    unsized_started: int = 0


def _pct(pred: float, real: float) -> float:
    return abs(pred - real) / abs(real) * 100 if real else 0.0


_SHOWN = {"fits": "fit", "tight": "tight", "refuses": "refuse"}


def _fmt(est: Estimate, case: dict[str, Any], src: str, ok: bool) -> str:
    parts = [f"{case.get('case_id')} [{src}; {est.gpu}; {est.vllm_profile}] status={case.get('status')} "
             f"predicted={_SHOWN[est.verdict]}"]
    pairs = (("weights", est.weights_gib, "weights_gib"), ("act", est.activation_gib, "activation_peak_gib"),
             ("non_torch", est.non_torch_gib, "non_torch_gib"),
             ("kv_gib", est.available_kv_gib, "available_kv_cache_gib"))
    for label, pred, key in pairs:
        if case.get(key) is not None:
            parts.append(f"{label} {pred:.2f}/{case[key]:.2f}")
    if case.get("kv_cache_tokens") is not None:
        parts.append(f"tokens {est.kv_cache_tokens}/{case['kv_cache_tokens']} (bound {est.kv_cache_tokens_bound})")
    if case.get("max_concurrency") is not None:
        parts.append(f"conc {est.max_concurrency:.2f}/{case['max_concurrency']:.2f}")
    if est.problems or est.tight:
        parts.append("reasons: " + " | ".join(est.problems or est.tight))
    return " ".join(parts)


def run(cases_path: Path, lock_path: Path | None = None, only: set[str] | None = None) -> Report:
    cases = json.loads(cases_path.read_text())
    if not isinstance(cases, list):
        raise SystemExit(f"{cases_path}: a case file is a JSON list of cases, got {type(cases).__name__}")
    lock = lock_configs(lock_path)
    report = Report()
    for number, raw in enumerate(cases, 1):
        named = raw if isinstance(raw, dict) else {}
        cid = str(named.get("case_id") or named.get("model") or f"case #{number}")
        if only is not None and cid not in only:
            continue
        report.total += 1
        inputs = None
        try:
            case = read_case(raw)
            inputs = case_inputs(case, cases_path.parent, lock)
            est = estimate(inputs.config, inputs.gpu, inputs.params, model=str(case.get("model")),
                           prefix_caching=inputs.prefix_caching)
        except CaseRefused as exc:
            ok = case.get("status") == "ok"
            s = Scored(cid, ok, "refuses", str(case.get("gpu")), "-", family(case), False)
            s.line = f"{cid} [{case.get('gpu')}] status={case.get('status')} predicted=refuse reasons: {exc}"
            report.scored.append(s)
            report.lines.append(s.line)
            continue
        except (CaseSkipped, SizingError, KeyError, ValueError) as exc:
            gap = _inline_gap(exc, inputs)
            report.lines.append(f"{cid}: skipped ({exc}{gap})")
            report.skipped += 1
            if isinstance(exc, SizingError) and case.get("status") == "ok" and not gap:
                report.unsized_started += 1
            continue
        ok = case.get("status") == "ok"
        unknown = any("most conservative" in w for w in est.warnings)
        profile = est.vllm_profile + (" [release unknown: most conservative]" if unknown else "")
        s = Scored(cid, ok, est.verdict, est.gpu, profile, family(case), inputs.co_resident)
        row = next((r for r in versions.ROWS if r.name == est.vllm_profile), None)
        s.since = row.first if row is not None and not unknown else None
        if (case.get("weights_gib") or 0) > 0:
            s.w_err = _pct(est.weights_gib, case["weights_gib"])
        if ok and case.get("kv_cache_tokens"):
            s.kv_err = _pct(est.kv_cache_tokens, case["kv_cache_tokens"])
        s.line = _fmt(est, case, inputs.config_source, ok) + (" [co-resident GPU]" if inputs.co_resident else "")
        report.scored.append(s)
        report.lines.append(s.line)
    return report


def _inline_gap(exc: Exception, inputs: Any) -> str:
    """A required config field missing from a config the bench built out of the case's own inline facts (no
    config.json copy was found) is a gap in the case's inputs, not the product's refusal: every real config.json of
    such a model has it. Said so on the skip line and not counted as unsized."""
    if (isinstance(exc, SizingError) and inputs is not None and inputs.config_source == "inline model_facts"
            and str(exc).startswith("config.json lacks")):
        return "; the case gives inline facts only, without this field"
    return ""


def _verdicts(scored: list[Scored]) -> str:
    """How many of each verdict, and how many started cases were tight (issue 40: at most a fifth)."""
    count = {v: sum(1 for s in scored if s.verdict == v) for v in _SHOWN}
    tight_ok = sum(1 for s in scored if s.ok and s.verdict == "tight")
    return (f"fits={count['fits']} tight={count['tight']} refuses={count['refuses']} "
            f"tight_started={tight_ok}/{sum(1 for s in scored if s.ok)}")


def _med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else 0.0


def summary(report: Report) -> str:
    kv = [s.kv_err for s in report.scored if s.kv_err is not None and not s.co_resident]
    co = [s.kv_err for s in report.scored if s.kv_err is not None and s.co_resident]
    w = [s.w_err for s in report.scored if s.w_err is not None]
    fa = sum(1 for s in report.scored if s.fits and not s.ok)
    fr = sum(1 for s in report.scored if s.ok and not s.fits)
    n = len(report.scored)
    share = n / report.total * 100 if report.total else 0.0
    line = (f"cases={n} scored={n}/{report.total} ({share:.0f}%) kv_tokens_median_abs_err_pct={_med(kv):.2f} "
            f"kv_tokens_max_abs_err_pct={max(kv, default=0.0):.2f} weights_median_abs_err_pct={_med(w):.2f} "
            f"{_verdicts(report.scored)} false_accepts={fa} false_rejects={fr} "
            f"unsized_started={report.unsized_started}")
    if co:
        line += f" co_resident_kv_err_pct={','.join(f'{x:.1f}' for x in co)}"
    return line


#: The releases issue 29's bar is set on (KV-token median and max, false rejects per case that started).
RECENT = (0, 17, 0)


def recent(report: Report) -> str:
    """The summary over cases of a known release from 0.17 on (sized with a row that starts there or later)."""
    members = [s for s in report.scored if s.since is not None and s.since >= RECENT]
    kv = [s.kv_err for s in members if s.kv_err is not None and not s.co_resident]
    started = sum(1 for s in members if s.ok)
    fa = sum(1 for s in members if s.fits and not s.ok)
    fr = sum(1 for s in members if s.ok and not s.fits)
    spread = f"kv_median={_med(kv):.2f}% kv_max={max(kv):.2f}%" if kv else "kv=not printed"
    w = [s.w_err for s in members if s.w_err is not None]
    weights = f"weights_median={_med(w):.2f}% (of {len(w)})" if w else "weights=not printed"
    return (f"  releases>=0.17 (known): cases={len(members)} kv_scored={len(kv)} {spread} {weights} "
            f"{_verdicts(members)} "
            f"false_accepts={fa} false_rejects={fr}/{started} started")


def by_group(report: Report) -> list[str]:
    out = []
    keys: tuple[tuple[Callable[[Scored], str], str], ...] = ((lambda s: s.gpu, "gpu"), (lambda s: s.profile, "vllm"))
    for key, label in keys:
        groups: dict[str, list[Scored]] = defaultdict(list)
        for s in report.scored:
            groups[key(s)].append(s)
        for name, members in sorted(groups.items()):
            kv = [s.kv_err for s in members if s.kv_err is not None and not s.co_resident]
            fa = sum(1 for s in members if s.fits and not s.ok)
            fr = sum(1 for s in members if s.ok and not s.fits)
            spread = f"kv_median={_med(kv):.2f}% kv_max={max(kv):.2f}%" if kv else "kv=not printed"
            out.append(f"  {label}={name}: cases={len(members)} kv_scored={len(kv)} {spread} "
                       f"false_accepts={fa} false_rejects={fr}")
    return out


def holdout(cases_paths: list[Path], lock_path: Path | None) -> list[str]:
    """Leave one model family out: re-fit the calibrated constants on the rest, predict the family."""
    cases = [(p, c) for p in cases_paths for c in json.loads(p.read_text())]
    families = sorted({family(c) for _, c in cases})
    errors: list[float] = []
    fa = 0
    lines = []
    original = versions.ROWS
    try:
        for fam in families:
            train = [c for _, c in cases if family(c) != fam]
            versions.ROWS = refitted_rows(original, train, lock_configs(lock_path), ROOT)
            fam_errs = []
            for path, case in cases:
                if family(case) != fam:
                    continue
                rep = run(path, lock_path, only={str(case.get("case_id") or case.get("model"))})
                for s in rep.scored:
                    if s.kv_err is not None and not s.co_resident:
                        fam_errs.append(s.kv_err)
                    fa += int(s.fits and not s.ok)
            errors += fam_errs
            lines.append(f"  holdout family={fam}: kv_errs={','.join(f'{e:.2f}' for e in fam_errs) or '-'}")
    finally:
        versions.ROWS = original
    lines.append(f"holdout=leave-one-family-out families={len(families)} "
                 f"kv_tokens_median_abs_err_pct={_med(errors):.2f} "
                 f"kv_tokens_max_abs_err_pct={max(errors, default=0.0):.2f} false_accepts={fa}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cases", required=True, type=Path, action="append",
                        help="case file in the calibration format (repeat for several)")
    parser.add_argument("--lock", type=Path, default=None,
                        help="also take configs from this models.lock.json for cases without a config_file")
    parser.add_argument("--by", choices=["group"], default=None, help="add a per-GPU / per-release breakdown")
    parser.add_argument("--holdout", action="store_true", help="leave-one-family-out error over all case files")
    args = parser.parse_args(argv)
    for path in args.cases:
        report = run(path, args.lock)
        for line in report.lines:
            print(line)
        print(summary(report))
        print(recent(report))
        if args.by:
            for line in by_group(report):
                print(line)
    if args.holdout:
        for line in holdout(args.cases, args.lock):
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
