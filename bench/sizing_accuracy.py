"""Accuracy bench: predicted vs printed vLLM start-up figures for a case file.

Usage: ``python bench/sizing_accuracy.py --cases tests/data/calibration/cases.json``

Each case's model facts come from, in order: its ``config_file`` (relative to the case file's
folder), with ``--lock`` the lock entry for the same repo, or its inline ``model_facts``.
Cases whose facts are too thin to size (no vocabulary, no intermediate size …) are listed as
skipped and left out of the score rather than guessed. The last line is the summary the project
tracks:

``cases=N kv_tokens_median_abs_err_pct=X kv_tokens_max_abs_err_pct=Y weights_median_abs_err_pct=Z
false_accepts=A false_rejects=R``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tkf_infra.sizing.estimate import estimate  # noqa: E402
from tkf_infra.sizing.facts import resolve_text_config  # noqa: E402
from tkf_infra.sizing.gpus import GPUS, GpuSpec  # noqa: E402
from tkf_infra.sizing.params import SizingError, SizingParams  # noqa: E402

_INLINE_KEYS = (
    "model_type", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
    "hidden_size", "intermediate_size", "moe_intermediate_size", "vocab_size", "sliding_window",
    "max_position_embeddings", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
    "q_lora_rank", "n_routed_experts", "num_experts", "num_local_experts", "num_experts_per_tok",
    "n_shared_experts", "first_k_dense_replace", "tie_word_embeddings", "torch_dtype",
)  # fmt: skip


def _lock_configs(path: Path | None) -> dict[str, dict[str, Any]]:
    if path is None or not path.exists():
        return {}
    data = json.loads(path.read_text())
    out: dict[str, dict[str, Any]] = {}
    for entry in data.get("models", []):
        if entry.get("config") and "config" not in entry.get("unknown_fields", []):
            out.setdefault(str(entry["repo"]), entry["config"])
    return out


def case_config(
    case: dict[str, Any], folder: Path, lock: dict[str, dict[str, Any]]
) -> tuple[dict[str, Any], str]:
    facts = case.get("model_facts") or {}
    if facts.get("config_file"):
        return resolve_text_config(json.loads((folder / facts["config_file"]).read_text())), "config_file"
    if case.get("model") in lock:
        return resolve_text_config(lock[case["model"]]), "lock"
    cfg = {k: facts[k] for k in _INLINE_KEYS if facts.get(k) is not None}
    if facts.get("text_model_type"):
        cfg["model_type"] = facts["text_model_type"]
    if "kv_lora_rank" in cfg and "model_type" not in cfg:
        cfg["model_type"] = "deepseek_v2"
    return cfg, "inline model_facts"


def case_gpu(case: dict[str, Any]) -> GpuSpec:
    label = str(case.get("gpu") or "")
    printed = case.get("gpu_total_memory_gib_printed")
    match = next(
        (g for g in GPUS if g.name.split("-")[0] in label and str(int(g.nominal_gib)) in label), None
    )
    if match is None:
        if printed is None:
            raise SizingError(f"unknown GPU {label!r} and no printed total memory")
        match = GpuSpec(name=label or "gpu", memory_gib=float(printed), nominal_gib=float(printed),
                        compute_capability="", product_labels=())
    if printed is not None:
        match = match.with_memory(float(printed), "printed in the case")
    return match


def case_params(case: dict[str, Any]) -> SizingParams:
    return SizingParams(
        tensor_parallel_size=int(case.get("tensor_parallel_size") or 1),
        pipeline_parallel_size=int(case.get("pipeline_parallel_size") or 1),
        max_model_len=case.get("max_model_len"),
        gpu_memory_utilization=float(case.get("gpu_memory_utilization") or 0.9),
        max_num_seqs=case.get("max_num_seqs"),
        max_num_batched_tokens=case.get("max_num_batched_tokens"),
        dtype=str(case.get("dtype") or "auto"),
        quantization=case.get("quantization"),
        kv_cache_dtype=str(case.get("kv_cache_dtype") or "auto"),
        enforce_eager=bool(case.get("enforce_eager")),
        block_size=case.get("block_size"),
        vllm_version=str(case.get("vllm_version") or "0.19.0"),
    )


def _pct(pred: float, real: float) -> float:
    return abs(pred - real) / real * 100 if real else 0.0


def run(cases_path: Path, lock_path: Path | None = None) -> tuple[list[str], str]:
    cases = json.loads(cases_path.read_text())
    lock = _lock_configs(lock_path)
    lines: list[str] = []
    kv_err: list[float] = []
    w_err: list[float] = []
    scored = false_accepts = false_rejects = 0
    for case in cases:
        cid = str(case.get("case_id") or case.get("model"))
        try:
            cfg, src = case_config(case, cases_path.parent, lock)
            est = estimate(cfg, case_gpu(case), case_params(case), model=str(case.get("model")))
        except (SizingError, KeyError, ValueError) as exc:
            lines.append(f"{cid}: skipped ({exc})")
            continue
        scored += 1
        ok = case.get("status") == "ok"
        if est.fits and not ok:
            false_accepts += 1
        if ok and not est.fits:
            false_rejects += 1
        parts = [f"{cid} [{src}] status={case.get('status')} predicted={'fit' if est.fits else 'refuse'}"]
        if case.get("weights_gib") is not None:
            w_err.append(_pct(est.weights_gib, case["weights_gib"]))
            parts.append(f"weights {est.weights_gib:.2f}/{case['weights_gib']:.2f}")
        if case.get("activation_peak_gib") is not None:
            parts.append(f"act {est.activation_gib:.2f}/{case['activation_peak_gib']:.2f}")
        if case.get("available_kv_cache_gib") is not None:
            parts.append(f"kv_gib {est.available_kv_gib:.2f}/{case['available_kv_cache_gib']:.2f}")
        if case.get("kv_cache_tokens") is not None:
            if ok:
                kv_err.append(_pct(est.kv_cache_tokens, case["kv_cache_tokens"]))
            parts.append(f"tokens {est.kv_cache_tokens}/{case['kv_cache_tokens']}")
        if case.get("max_concurrency") is not None:
            parts.append(f"conc {est.max_concurrency:.2f}/{case['max_concurrency']:.2f}")
        if est.problems:
            parts.append("reasons: " + " | ".join(est.problems))
        lines.append(" ".join(parts))

    def med(xs: list[float]) -> float:
        return statistics.median(xs) if xs else 0.0

    summary = (
        f"cases={scored} kv_tokens_median_abs_err_pct={med(kv_err):.2f} "
        f"kv_tokens_max_abs_err_pct={max(kv_err, default=0.0):.2f} "
        f"weights_median_abs_err_pct={med(w_err):.2f} "
        f"false_accepts={false_accepts} false_rejects={false_rejects}"
    )
    return lines, summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cases", required=True, type=Path, help="case file in the calibration format")
    parser.add_argument(
        "--lock",
        type=Path,
        default=None,
        help="also take configs from this models.lock.json for cases without a config_file (off by default)",
    )
    args = parser.parse_args(argv)
    lines, summary = run(args.cases, args.lock)
    for line in lines:
        print(line)
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
