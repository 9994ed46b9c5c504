"""``python -m tkf_infra size REPO@REV --gpu H100-80GB …``: what vLLM will print, offline from the lock.

Answers "will it fit, and if not, what is the smallest tensorParallelSize / largest maxModelLen that
does" before anyone books a GPU. The verdict is three-valued (docs/sizing.md): fits, tight (deploys with a
warning; strict stacks refuse it) or refuses. Exit codes (`tkf_infra.exit_codes`): OK fits or tight (the
verdict says which), REFUSED refuses, USAGE cannot answer (unknown GPU, model not in the lock, facts too thin).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from tkf_infra.exit_codes import ExitCode
from tkf_infra.hub.lock import load_lock, parse_repo_revision, resolve_facts
from tkf_infra.plan.share import mig_fit, slice_fit
from tkf_infra.sizing.contract import FitInputs, FitResult
from tkf_infra.sizing.estimate import estimate
from tkf_infra.sizing.estimate_result import Estimate
from tkf_infra.sizing.facts import ModelFacts
from tkf_infra.sizing.gpus import GpuSpec, lookup_gpu
from tkf_infra.sizing.mig import mig_board
from tkf_infra.sizing.params import LoraSlots, SizingError, SizingParams
from tkf_infra.sizing.suggest import Suggestion, doubt_text, suggest

#: How `size` shows each verdict: the estimate against the bound, in words.
VERDICT_SHOWN = {"fits": "fits (on the bound)", "tight": "tight (the estimate fits, the bound does not: deploys with a "
                 "warning, strict stacks refuse it)", "refuses": "does NOT fit"}
VERDICT_WORD = {"fits": "fits", "tight": "tight", "refuses": "does NOT fit"}


def shares(facts: ModelFacts, repo: str, revision: str, gpu: GpuSpec, params: SizingParams,
           time_slices: int) -> list[dict[str, Any]]:
    """The model on each MIG profile of the GPU, and on k of `time_slices` time-sliced replicas, smallest first.

    The same sizing the plan does for `gpuShare` (`tkf_infra.plan.share`): a MIG device at the given
    gpuMemoryUtilization; a time-sliced share at its budget with the KV cache pinned."""
    if params.tensor_parallel_size * params.pipeline_parallel_size * params.data_parallel_size != 1:
        return []  # a share is part of one GPU
    inputs = FitInputs(model=repo, repo=repo, revision=revision, facts=facts, gpu=gpu, params=params)
    rows: list[dict[str, Any]] = []
    board = mig_board(gpu)
    for profile in board.by_size() if board is not None and "-MIG-" not in gpu.name else ():
        final, fit = mig_fit(inputs, profile)
        rows.append(_share_row(f"mig:{profile.name}", final.gpu.memory_gib if final.gpu else 0.0, fit,
                               params.gpu_memory_utilization))
    for k in range(1, time_slices + 1) if time_slices > 1 else ():
        u, kv, final, fit = slice_fit(inputs, k, time_slices)
        rows.append({**_share_row(f"slice:{k}/{time_slices}", k * gpu.memory_gib / time_slices, fit, u),
                     "kvCacheMemoryBytes": kv})
    return rows


def _share_row(share: str, memory: float, fit: FitResult, utilization: float) -> dict[str, Any]:
    return {"share": share, "memoryGiB": round(memory, 2),
            "gpuMemoryUtilization": utilization, "fits": fit.fits, "verdict": fit.verdict,
            "kvCacheTokensBound": fit.kv_cache_tokens_bound,
            "maxConcurrencyBound": fit.max_concurrency_bound, "problem": (fit.problems or (None,))[0]}


def size_command(model: str, gpu_name: str, params: SizingParams, *, as_json: bool = False,
                 lock_path: Path | None = None, max_tp: int = 8, time_slices: int = 0) -> tuple[str, int]:
    """Return (text or JSON, exit code). The exit code is the whole-GPU verdict; shares are reported beside it."""
    try:
        repo, revision = parse_repo_revision(model)
        gpu = lookup_gpu(gpu_name)
        facts = resolve_facts(repo, revision, lock=load_lock(lock_path), use_hub=False)
        est = estimate(facts, gpu, params, model=repo)
        sugg = None if est.verdict == "fits" else suggest(facts, gpu, params, max_tp=max_tp, current=est)
        share_rows = shares(facts, repo, revision, gpu, params, time_slices)
    except (KeyError, ValueError, LookupError, SizingError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        if as_json:
            return json.dumps({"error": message}), ExitCode.USAGE
        return f"error: {message}", ExitCode.USAGE
    code = ExitCode.OK if est.fits else ExitCode.REFUSED
    print_ = footprint(repo, revision, facts, params, est.lora_host_gib)
    if as_json:
        return json.dumps(_size_json(est, sugg, share_rows, print_), indent=2), code
    console = Console(record=True, width=110, force_terminal=False, file=io.StringIO())
    console.print(_size_table(f"{repo}@{revision[:12]}", gpu.name, params, est))
    for line in _size_notes(est, sugg):
        console.print(line, soft_wrap=True)
    if share_rows:
        _print_shares(console, gpu, share_rows, est.max_model_len)
    if params.lora:
        console.print(_lora_note(est, params.lora), soft_wrap=True)
    if print_:
        console.print(_footprint_note(print_), soft_wrap=True)
    return console.export_text(), code


def _size_json(est: Estimate, sugg: Suggestion | None, share_rows: list[dict[str, Any]],
               print_: dict[str, Any] | None) -> dict[str, Any]:
    data = est.model_dump()
    data["uncertainty"] = doubt_text(est)
    data["suggested_tensor_parallel_size"] = sugg.tensor_parallel_size if sugg else None
    data["suggested_max_model_len"] = sugg.max_model_len if sugg else None
    data["shares"] = share_rows
    data["smallest_share"] = next((r["share"] for r in share_rows if r["verdict"] == "fits"), None)
    data["footprint"] = print_
    return data


def _size_table(model: str, gpu: str, params: SizingParams, est: Estimate) -> Table:
    """The per-rank figures: each estimate beside its bound, and the verdict taken on the bound."""
    table = Table(title=f"{model} on {gpu} (per GPU rank, vLLM {params.vllm_version}, profile {est.vllm_profile})")
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
        *([(f"LoRA slots ({params.lora.max_adapters} x rank {params.lora.max_rank}"
            + (", host memory" if est.cpu else "") + ")", f"{est.lora_gib:.2f} GiB", "")]
          if params.lora else []),
        ("available KV cache", f"{est.available_kv_gib:.2f} GiB", f"{est.available_kv_gib_bound:.2f} GiB"),
        ("KV cache tokens", f"{est.kv_cache_tokens:,}", f"{est.kv_cache_tokens_bound:,}"),
        (f"max concurrency at {est.max_model_len:,} tokens", f"{est.max_concurrency:.2f}x",
         f"{est.max_concurrency_bound:.2f}x"),
        ("largest maxModelLen that fits", "", f"{est.max_fitting_model_len or 0:,}"),
        ("verdict", "", VERDICT_SHOWN[est.verdict]),
    ]
    for name, value, bound in rows:
        table.add_row(name, value, bound)
    return table


def _size_notes(est: Estimate, sugg: Suggestion | None) -> list[str]:
    """The lines under the table: problems, warnings, what makes the fit tight, the uncertainty and the way out."""
    lines = [f"- {problem}" for problem in est.problems]
    lines += [f"warning: {warning}" for warning in est.warnings if warning not in est.tight]
    lines += [f"- {reason}" for reason in est.tight]
    if doubt := doubt_text(est):
        lines.append(f"uncertainty: {doubt}")
    if sugg:
        lines.append(f"way out: {sugg.text()}")
    return lines


def _lora_note(est: Estimate, lora: LoraSlots) -> str:
    return (f"LoRA: vLLM reserves {est.lora_gib:.2f} GiB per GPU rank for {lora.max_adapters} adapter slot(s) at rank "
            f"{lora.max_rank} (taken from the KV cache above), and keeps up to {lora.cpu_adapters} adapter(s) loaded "
            f"in host memory: at most {est.lora_host_gib:.2f} GiB")


def _footprint_note(print_: dict[str, Any]) -> str:
    pod = print_["pod"]
    return (f"node footprint: each pod asks {pod['cpuMillis'] / 1000:g} CPU, {pod['memoryMiB'] / 1024:.1f} GiB memory "
            f"and {pod['gpus']} GPU(s) on one node; its weight cache is {print_['weightCacheGiB']} GiB at "
            f"weightCacheHeadroom {print_['weightCacheHeadroom']}")


def footprint(repo: str, revision: str, facts: ModelFacts, params: SizingParams,
              lora_host_gib: float = 0.0) -> dict[str, Any] | None:
    """What one replica asks of a node and of storage (the node capacity and storage checks' figures), on
    one node at the sizing's parallelism; None when the checkpoint's size is not known."""
    from tkf_infra.config import ModelEntry, Serving
    from tkf_infra.program import cache_gib, pod_requests
    from tkf_infra.sizing.weights import checkpoint_bytes

    gpus = params.tensor_parallel_size * params.pipeline_parallel_size * params.data_parallel_size
    try:
        weight_bytes = checkpoint_bytes(facts, quantization=params.quantization)
        entry = ModelEntry.model_validate({
            "name": "size", "repo": repo, "revision": revision, "servedName": "size", "maxModelLen": 4096,
            "gpusPerNode": gpus, "tensorParallelSize": params.tensor_parallel_size,
            "pipelineParallelSize": params.pipeline_parallel_size, "dataParallelSize": params.data_parallel_size})
    except (SizingError, KeyError, ValueError):
        return None
    cpu, memory = pod_requests(entry, weight_bytes, lora_host_gib)
    headroom = float(Serving.model_fields["weight_cache_headroom"].default)  # the stack's default
    return {"pod": {"cpuMillis": cpu, "memoryMiB": memory, "gpus": gpus}, "weightCacheGiB": cache_gib(weight_bytes,
            headroom), "weightCacheHeadroom": headroom}


def _print_shares(console: Console, gpu: GpuSpec, rows: list[dict[str, Any]], max_len: int) -> None:
    """Each share of one GPU (gpuShare), and the smallest that fits."""
    table = Table(title=f"Shares of one {gpu.name} (gpuShare; verdicts on the bound)")
    for column in ("share", "memory", "gpuMemoryUtilization", "verdict", "KV tokens (bound)",
                   f"concurrency at {max_len:,}"):
        table.add_column(column, justify="left" if column in ("share", "verdict") else "right")
    for r in rows:
        table.add_row(r["share"], f"{r['memoryGiB']:.2f} GiB", f"{r['gpuMemoryUtilization']:g}",
                      VERDICT_WORD[r["verdict"]], f"{r['kvCacheTokensBound']:,}",
                      f"{r['maxConcurrencyBound']:.2f}x")
    console.print(table)
    if not any(r["fits"] for r in rows):
        console.print(f"no share fits; the largest: {rows[-1]['problem']}", soft_wrap=True)
        return
    for kind in ("mig", "slice"):
        first = next((r for r in rows if r["verdict"] == "fits" and r["share"].startswith(kind)), None) or next(
            (r for r in rows if r["fits"] and r["share"].startswith(kind)), None)
        if first:
            what = "MIG profile" if kind == "mig" else "time-sliced share"
            console.print(f"smallest {what}: {first['share']} ({first['kvCacheTokensBound']:,} KV tokens, "
                          f"concurrency {first['maxConcurrencyBound']:.2f}x at maxModelLen {max_len:,})",
                          soft_wrap=True)
