"""Re-fit the calibrated constants of the release table from a set of cases (for leave-one-out).

Which constants are calibrated rather than read from source: per release row, the sampler's bytes
per logits element, the activation base, and non-torch memory at TP 1 / TP > 1. A row keeps its
source-derived default when the training cases hold no printed figure for it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from bench.calibration_cases import CaseSkipped, case_inputs
from tkf_infra.sizing.params import GIB, SizingError
from tkf_infra.sizing.release_row import VersionRow
from tkf_infra.sizing.row_run import profile_activation
from tkf_infra.sizing.versions import choose_version, engine_rows


def _row_of(inputs: Any) -> VersionRow | None:
    choice = choose_version(inputs.params.vllm_version)
    rows = engine_rows(choice, cc=inputs.gpu.cc, quantization=inputs.params.quantization,
                       dtype=inputs.params.dtype, kv_cache_dtype=inputs.params.kv_cache_dtype)
    return rows[0] if len(rows) == 1 else None


def _fit_line(points: list[tuple[float, float]], base: float) -> tuple[float, float] | None:
    """Least squares y = base + b x (two or more distinct x), else b through the prior base."""
    if not points:
        return None
    xs = [p[0] for p in points]
    if len(points) >= 3 and max(xs) - min(xs) > 0.25 * max(xs):
        n = len(points)
        mx, my = sum(xs) / n, sum(p[1] for p in points) / n
        b = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)
        return my - b * mx, b
    b = sum(y - base for _, y in points) / sum(xs)
    return base, b


def refitted_rows(rows: tuple[VersionRow, ...], cases: list[dict[str, Any]], lock: dict[str, dict[str, Any]],
                  root: Path) -> tuple[VersionRow, ...]:
    sampler: dict[str, list[tuple[float, float]]] = {}
    fast: dict[str, bool] = {}
    non_torch: dict[tuple[str, bool], list[float]] = {}
    for case in cases:
        if case.get("status") != "ok":
            continue
        try:
            inputs = case_inputs(case, root / "tests" / "data" / "calibration", lock)
        except (CaseSkipped, SizingError, KeyError, ValueError):
            continue
        row = _row_of(inputs)
        if row is None:
            continue
        if case.get("non_torch_gib") is not None:
            multi = inputs.params.tensor_parallel_size > 1
            non_torch.setdefault((row.name, multi), []).append(float(case["non_torch_gib"]))
        if case.get("activation_peak_gib") is None:
            continue
        try:
            act = profile_activation(inputs.config, inputs.gpu, inputs.params, row)
        except (SizingError, KeyError, ValueError):
            continue
        if act.sampler <= max(act.forward, act.encoder) or act.sampler == 0:
            continue  # not sampler-dominated: says nothing about the sampler term
        y = float(case["activation_peak_gib"]) - act.moe - act.encoder_cache - act.spec
        sampler.setdefault(row.name, []).append((act.sampler_elements / GIB, y))
        fast[row.name] = act.sampler_fast
    out = []
    for row in rows:
        fit = _fit_line(sampler.get(row.name, []), row.activation_base_gib)
        if fit is not None:
            base, b = fit
            if fast.get(row.name):
                row = dataclasses.replace(row, activation_base_gib=max(base, 0.0), sampler_fast_bytes=b)
            else:
                row = dataclasses.replace(row, activation_base_gib=max(base, 0.0), sampler_sort_bytes=b)
        single, several = non_torch.get((row.name, False)), non_torch.get((row.name, True))
        if single:
            row = dataclasses.replace(row, non_torch_tp1_gib=sum(single) / len(single))
        if several:
            row = dataclasses.replace(row, non_torch_multi_gib=sum(several) / len(several))
        out.append(row)
    return tuple(out)
