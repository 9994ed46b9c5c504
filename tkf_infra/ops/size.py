"""``python -m tkf_infra size REPO@REV --gpu H100-80GB …``: what vLLM will print, offline from the lock.

Answers "will it fit, and if not, what is the smallest tensorParallelSize / largest maxModelLen that
does" before anyone books a GPU. Exit codes (`tkf_infra.ops.exit_codes`): OK fits, REFUSED does not
fit, USAGE cannot answer (unknown GPU, model not in the lock, facts too thin).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tkf_infra.hub.lock import LockMissError, load_lock, parse_repo_revision
from tkf_infra.ops.exit_codes import ExitCode
from tkf_infra.sizing.estimate import estimate
from tkf_infra.sizing.gpus import lookup_gpu
from tkf_infra.sizing.params import SizingError, SizingParams
from tkf_infra.sizing.suggest import doubt_text, suggest


def size_command(model: str, gpu_name: str, params: SizingParams, *, as_json: bool = False,
                 lock_path: Path | None = None, max_tp: int = 8) -> tuple[str, int]:
    """Return (text or JSON, exit code)."""
    try:
        repo, revision = parse_repo_revision(model)
        gpu = lookup_gpu(gpu_name)
        facts = load_lock(lock_path).get(repo, revision)
        if facts is None:
            raise LockMissError(
                f"{repo}@{revision} is not in models.lock.json; run "
                f"`python -m tkf_infra lock {repo}@{revision}` on a machine with Hub access and commit the lock"
            )
        est = estimate(facts, gpu, params, model=repo)
        sugg = None if est.fits else suggest(facts, gpu, params, max_tp=max_tp, current=est)
    except (KeyError, ValueError, LookupError, SizingError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        if as_json:
            return json.dumps({"error": message}), ExitCode.USAGE
        return f"error: {message}", ExitCode.USAGE
    code = ExitCode.OK if est.fits else ExitCode.REFUSED
    if as_json:
        data = est.model_dump()
        data["uncertainty"] = doubt_text(est)
        data["suggested_tensor_parallel_size"] = sugg.tensor_parallel_size if sugg else None
        data["suggested_max_model_len"] = sugg.max_model_len if sugg else None
        return json.dumps(data, indent=2), code

    table = Table(title=f"{repo}@{revision[:12]} on {gpu.name} (per GPU rank, vLLM {params.vllm_version}, "
                        f"profile {est.vllm_profile})")
    table.add_column("figure")
    table.add_column("estimate", justify="right")
    table.add_column("bound", justify="right")
    rows = [
        ("GPU total (as CUDA reports)", f"{est.total_gib:.2f} GiB", ""),
        (f"requested ({est.requested_gib / est.total_gib:.2f} x total)", f"{est.requested_gib:.2f} GiB", ""),
        ("weights", f"{est.weights_gib:.2f} GiB", ""),
        ("activation peak", f"{est.activation_gib:.2f} GiB", ""),
        ("non-torch", f"{est.non_torch_gib:.2f} GiB", ""),
        ("CUDA graphs" + (" (reserved)" if est.cuda_graph_reserved else " (outside budget)"),
         f"{est.cuda_graph_gib:.2f} GiB", ""),
        ("available KV cache", f"{est.available_kv_gib:.2f} GiB", f"{est.available_kv_gib_bound:.2f} GiB"),
        ("KV cache tokens", f"{est.kv_cache_tokens:,}", f"{est.kv_cache_tokens_bound:,}"),
        (f"max concurrency at {est.max_model_len:,} tokens", f"{est.max_concurrency:.2f}x",
         f"{est.max_concurrency_bound:.2f}x"),
        ("largest maxModelLen that fits", "", f"{est.max_fitting_model_len or 0:,}"),
        ("verdict (taken on the bound)", "", "fits" if est.fits else "does NOT fit"),
    ]  # fmt: skip
    for name, value, bound in rows:
        table.add_row(name, value, bound)
    console = Console(record=True, width=110, force_terminal=False, file=io.StringIO())
    console.print(table)
    for problem in est.problems:
        console.print(f"- {problem}", soft_wrap=True)
    for warning in est.warnings:
        console.print(f"warning: {warning}", soft_wrap=True)
    doubt = doubt_text(est)
    if doubt:
        console.print(f"uncertainty: {doubt}", soft_wrap=True)
    if sugg:
        console.print(f"way out: {sugg.text()}", soft_wrap=True)
    return console.export_text(), code
