"""Predict, per GPU rank, the memory figures vLLM prints at start-up, with a conservative bound, and judge.

Pure functions, no Pulumi and no I/O, so the same code runs in ``pulumi preview`` (the plan), in
the ``size`` command and in the accuracy bench. The accounting follows vLLM's own start-up
profiling (``docs/sizing.md``)::

    requested      R  = total x gpu_memory_utilization
    available_kv      = R - weights - activation_peak - non_torch   (- cuda_graphs where reserved)
    num_blocks        = floor(available_kv / bytes per block over the rank's layers/groups)

The central estimate is what vLLM should print. The bound subtracts every doubt the inputs leave
(approximate terms, an unknown release, a derived GPU total, a shared GPU); the verdict is taken on
the bound, so an estimate can only err towards refusing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from tkf_infra.sizing.arch import Arch, parse_arch
from tkf_infra.sizing.bnb import bnb_problems
from tkf_infra.sizing.config_fields import reading_config
from tkf_infra.sizing.cpu import estimate_cpu
from tkf_infra.sizing.estimate_result import Estimate
from tkf_infra.sizing.facts import ModelFacts, resolve_text_config
from tkf_infra.sizing.gpus import GpuSpec
from tkf_infra.sizing.kv import KvLayout, largest_fitting_len
from tkf_infra.sizing.kv_v4 import v4_problems
from tkf_infra.sizing.lora import architecture_of, lora_problems, lora_reserve
from tkf_infra.sizing.parallelism import dcp_problems, parallelism_problems
from tkf_infra.sizing.params import GIB, SizingError, SizingParams, activation_bytes
from tkf_infra.sizing.quant import quant_problems, quant_scheme
from tkf_infra.sizing.rank_weights import deployment_weights
from tkf_infra.sizing.release_row import VersionRow
from tkf_infra.sizing.row_run import run_row, speculation
from tkf_infra.sizing.startup import (
    TIGHT_PREFIX,
    Doubt,
    Findings,
    RowRun,
    budget_problems,
    pinned_kv_problems,
    pp_whole_model_problems,
)
from tkf_infra.sizing.versions import DEFAULT_GPU_MEMORY_UTILIZATION, VersionChoice, choose_version, engine_rows

_Memo = dict[tuple[int, str, str, bool | None], tuple[ModelFacts, "Estimate"]]
_memo: ContextVar[_Memo | None] = ContextVar("tkf_estimate_memo", default=None)


@contextmanager
def sized_once() -> Iterator[None]:
    """Within this block, a GPU estimate asked again with the same facts, GPU and flags is a copy of the first.

    Why: a fleet plan sizes many entries of few checkpoints at few settings (`gpuShare: auto` tries each
    candidate MIG profile of every model; 300 generated models ask 486 estimates of 160 distinct inputs),
    and each estimate walks every layer. Scoped to one plan (`plan_fleet`) rather than process-wide, so
    nothing outlives the tables it was computed from. The facts are keyed by identity and kept alive by the
    memo (frozen, one object per lock entry); GPU and flags by their JSON; the model's name, which only
    labels the estimate, is set on each copy."""
    token = _memo.set({})
    try:
        yield
    finally:
        _memo.reset(token)


def _memo_key(facts: ModelFacts | dict[str, Any], gpu: GpuSpec | None, params: SizingParams,
              prefix_caching: bool | None) -> tuple[int, str, str, bool | None] | None:
    """What a memoised GPU estimate is looked up by (None: not memoised): the lock facts by identity, the GPU
    and the flags by their JSON, as the fit record digests them (`FitInputs.summary`)."""
    if gpu is None or not isinstance(facts, ModelFacts):
        return None
    try:
        return id(facts), gpu.model_dump_json(), params.model_dump_json(), prefix_caching
    except ValueError:  # a flag value JSON cannot carry (speculativeConfig is free-form): sized each time
        return None


def estimate(facts: ModelFacts | dict[str, Any], gpu: GpuSpec | None, params: SizingParams,
             model: str = "", prefix_caching: bool | None = None) -> Estimate:
    """Predict what vLLM prints for ``params`` on ``gpu`` (None = CPU profile) and judge the fit.

    `prefix_caching`: whether the deployment turns prefix caching on (None: the release default, and
    the bound assumes on); it only changes hybrid models' recurrent state blocks.

    A config.json field sizing cannot use raises `ConfigFieldError` (a SizingError) naming it; so does any
    shape the reader let through (`reading_config`), so a config never crashes its caller. Inside
    `sized_once`, a GPU estimate of lock facts is computed once per input."""
    memo = _memo.get()
    key = _memo_key(facts, gpu, params, prefix_caching) if memo is not None else None
    if memo is None or key is None or not isinstance(facts, ModelFacts):
        with reading_config():
            return _estimate(facts, gpu, params, model, prefix_caching)
    hit = memo.get(key)
    if hit is None:
        with reading_config():
            hit = memo[key] = (facts, _estimate(facts, gpu, params, "", prefix_caching))
    return hit[1].model_copy(update={"model": model or facts.repo}, deep=True)


def _estimate(facts: ModelFacts | dict[str, Any], gpu: GpuSpec | None, params: SizingParams, model: str,
              prefix_caching: bool | None) -> Estimate:
    if isinstance(facts, ModelFacts):
        full, config = facts.config, facts.text_config()
        name = model or facts.repo
    else:
        full, config = facts, resolve_text_config(facts)  # as ModelFacts.text_config: any nesting
        name = model or str(config.get("_name_or_path", "model"))
    arch = parse_arch(config, full)
    tp, pp = params.tensor_parallel_size, params.pipeline_parallel_size
    choice = choose_version(params.vllm_version)
    derived_len = arch.max_len
    max_len = params.max_model_len or derived_len
    if not max_len:
        raise SizingError("maxModelLen is not set and config.json has no max_position_embeddings")
    problems = parallelism_problems(arch, tp, pp) if gpu is not None else []
    dcp = params.decode_context_parallel_size
    problems += (dcp_problems(arch, dcp, tp, choice.version) if gpu is not None else
                 [f"decodeContextParallelSize {dcp} applies to GPUs only"] if dcp > 1 else [])
    if arch.compress_ratios:
        problems += v4_problems(choice.version, params.speculative_config is not None, dcp)
    warnings: list[str] = [choice.warning] if choice.warning else []
    if derived_len and max_len > derived_len:
        problems.append(
            f"maxModelLen {max_len} is longer than the model's {derived_len} positions (vLLM refuses it "
            f"unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1); use maxModelLen <= {derived_len}"
        )
    if gpu is None:
        if params.lora is None:
            return estimate_cpu(arch, facts, name, params, max_len, problems, warnings, choice)
        problems += lora_problems(arch, architecture_of(facts))
        est = estimate_cpu(arch, facts, name, params, max_len, problems, warnings, choice)
        lora = lora_reserve(arch, architecture_of(facts), params, est.max_num_seqs, est.max_num_batched_tokens,
                            activation_bytes(params))
        # On CPU the slots sit in host memory beside the weights; the KV space is fixed, so they change no KV figure.
        return est.model_copy(update={"lora_gib": lora.per_stage_gib(0) if lora else 0.0,
                                      "lora_host_gib": lora.host / GIB if lora else 0.0})
    return _estimate_gpu(facts, arch, gpu, params, name, max_len, problems, warnings, choice, prefix_caching)


#: How a co-tenant's charge is named among the doubts (`_setting_doubts`); the estimate's checks subtract it.
COTENANT_TERM = "GPU shared"
#: The unified-memory doubt, a share of the total: a TP 2 start-up over two GB10 (DGX Spark) nodes printed 96,000 and
#: 76,560 KV tokens where the estimate is 115,152 (3.3 and 6.8 GiB of host-side use the estimate cannot see; 5.6 % of
#: 121.69 GiB at most), rounded up.
UNIFIED_DOUBT = 0.06
#: A unified-memory GPU's verdict until a rule for what vLLM sees as free there is proven on printed start-ups.
UNIFIED_TIGHT = (TIGHT_PREFIX + "{gpu} is a unified-memory GPU (CPU and GPU share one memory): what vLLM finds free "
                 "at start-up depends on what the operating system and other processes hold, and no rule for it is "
                 "proven on printed start-ups yet, so the verdict is tight at best (docs/sizing.md, 'Unified "
                 "memory'); it deploys, a strict stack or the policy pack refuses it")
#: DeepSeek V4's verdict while its activation term (`kv_v4.V4_EXTRA_BYTES_PER_TOKEN`) is a slope measured on two
#: start-ups rather than read from vLLM's source term by term: a figure fitted to the rows it came from cannot
#: prove a fit on the bound.
V4_TIGHT = (TIGHT_PREFIX + "DeepSeek V4's activation memory (hyper-connections, sparse-attention scratch) is a "
            "figure measured on two start-ups, not yet derived from vLLM's source, so the verdict is tight at best "
            "(docs/sizing.md, 'DeepSeek V4'); it deploys, a strict stack or the policy pack refuses it")


def _setting_doubts(runs: list[RowRun], run: RowRun, row: VersionRow, gpu: GpuSpec, requested: float,
                    unpinned: bool) -> list[Doubt]:
    """The doubts the deployment's setting leaves besides the row's terms: an unknown release, a derived GPU total,
    unified memory, a GPU shared with other engines (time-sliced, or, where the release charges other processes'
    memory to this budget, given room by a low utilization)."""
    doubts = []
    if len(runs) > 1:
        spread = max(r.available for r in runs) - run.available
        doubts.append(Doubt(term=f"unknown vLLM release (the most conservative of {len(runs)} profiles is used; "
                                 f"they differ by {spread:.2f} GiB)", gib=0.0,
                            pin="pin serving.vllmImage to a release tag"))
    if not gpu.memory_measured:
        doubts.append(Doubt(term=f"{gpu.name} total memory ({gpu.memory_source}; taken at its conservative value)",
                            gib=0.0, pin=f"set nodePools[].gpuMemoryGiB to the total vLLM prints on a {gpu.name}"))
    total = gpu.memory_gib
    if gpu.unified_memory:
        # On an integrated GPU vLLM takes free memory from the OS (`psutil.virtual_memory().available`: cudaMemGetInfo
        # leaves out reclaimable page cache, vllm/utils/mem_utils.py@v0.28.0:148-155, @v0.32.0:144-151,
        # @v0.33.0:144-151), so the host side of every process on the box, vLLM's own included, is in its budget.
        doubts.append(Doubt(term=f"unified memory: what vLLM finds free is what the operating system has available, "
                                 f"so host memory on the node counts against the budget (up to {UNIFIED_DOUBT:.0%} of "
                                 "the total, as two GB10 nodes of one start-up showed)", gib=UNIFIED_DOUBT * total,
                            pin="measure free memory on the node and set gpuMemoryUtilization below it"))
    leaves = total * (DEFAULT_GPU_MEMORY_UTILIZATION - requested / total)
    if row.budget_counts_device and unpinned and leaves > 0.005 and not gpu.shared:
        # 0.8.0-0.9.0 V1 charges this budget with everything in use on the GPU (`VersionRow.budget_counts_device`):
        # leaving more outside it than vLLM's default does is how a GPU is shared, and what the sharer holds there
        # comes out of this engine's KV cache (a 0.8.5 start-up at utilization 0.4 found none left).
        doubts.append(Doubt(term=f"{COTENANT_TERM} by a utilization below vLLM's default: gpuMemoryUtilization "
                                 f"{requested / total:.2f} leaves {leaves:.2f} GiB more outside the budget than "
                                 f"{DEFAULT_GPU_MEMORY_UTILIZATION} does, and {row.name} counts what other processes "
                                 "hold there against this budget", gib=leaves,
                            pin=f"gpuMemoryUtilization {DEFAULT_GPU_MEMORY_UTILIZATION} on a GPU of its own, or a "
                                "release from 0.9.1 (its budget counts only this engine's memory)"))
    if gpu.shared and unpinned:  # a pinned KV cache does not depend on what co-tenants allocate
        doubts.append(Doubt(term=f"{COTENANT_TERM} by time-slicing: other engines may allocate while this one "
                                 "profiles, and vLLM counts the drop in free memory against this model",
                            gib=max(total - requested - run.context, 0.0),
                            pin="give the model whole GPUs (time-slicing off)"))
    return doubts


def _estimate_gpu(facts: ModelFacts | dict[str, Any], arch: Arch, gpu: GpuSpec, params: SizingParams, name: str,
                  max_len: int, problems: list[str], warnings: list[str], choice: VersionChoice,
                  prefix_caching: bool | None) -> Estimate:
    w = deployment_weights(facts, arch, params)
    weights, extra, w_doubts = w.stages, w.extra_gib, w.doubts
    warnings += w.warnings
    spec = speculation(params)
    rows = engine_rows(choice, cc=gpu.cc, quantization=params.quantization, dtype=params.dtype,
                       kv_cache_dtype=params.kv_cache_dtype)
    architecture = architecture_of(facts)
    if params.lora is not None:
        problems += lora_problems(arch, architecture)
    runs = [run_row(arch, row, gpu, params, max_len, weights, extra, w_doubts, spec, prefix_caching, architecture)
            for row in rows]
    # The most conservative row when the release is unknown; rows that leave the same memory differ
    # only in how vLLM reports it, and the newest convention is the likelier one.
    least = min(r.available for r in runs)
    run = [r for r in runs if r.available <= least + 0.01][-1]
    row = next(r for r in rows if r.name == run.row)
    scheme = quant_scheme(arch.quant, params.quantization, activation_bytes(params), arch.layers)
    problems += bnb_problems(arch.quant, params.tensor_parallel_size, arch.is_moe, choice.version)
    problems += run.problems + quant_problems(scheme,
                                              params.quantization, choice.version, None, gpu.name)
    total, u = gpu.memory_gib, params.gpu_memory_utilization
    requested = total * u
    pinned = params.kv_cache_memory_bytes
    doubts = list(run.doubts) + _setting_doubts(runs, run, row, gpu, requested, pinned is None)
    gap = sum(d.gib for d in doubts)
    # What other tenants of the GPU may take from this engine's budget: not a doubt about the model's figures but a
    # term of the deployment, so the estimate's checks are made with it (docs/sizing.md "Co-tenants").
    cotenant = sum(d.gib for d in doubts if d.term.startswith(COTENANT_TERM))
    layout: KvLayout = run.layout
    low: KvLayout = run.layout_low
    if low.recurrent_blocks != layout.recurrent_blocks:
        doubts.append(Doubt(term=f"prefix caching for the recurrent layers ({low.recurrent_blocks} state blocks per "
                                 f"request in the bound, {layout.recurrent_blocks} in the estimate)", gib=0.0,
                            pin="state --enable-prefix-caching or --no-enable-prefix-caching"))
    avail, avail_low = run.available, run.available - gap
    spare: float | None = None
    found = Findings()
    if pinned is not None:  # --kv-cache-memory-bytes: the cache is exactly this, if the budget holds it
        shared_graphs = run.graphs if gpu.shared and not run.reserved else 0.0
        left, left_low = avail - shared_graphs, avail_low - shared_graphs
        # On a time-sliced GPU nothing outside the budget is ours: graphs vLLM captures after allocating
        # must come out of the budget too, and the warm-up has only what the budget leaves.
        found.add(pinned_kv_problems(pinned, left, left_low, choice.version, run.row, doubts))
        spare = shared_graphs + max(left_low - pinned / GIB, 0.0) if gpu.shared else None
        avail = avail_low = pinned / GIB
    blocks, blocks_low = layout.num_blocks(avail * GIB), low.num_blocks(avail_low * GIB)
    mnbt = run.mnbt
    tokens_rule = row.tokens_from_concurrency
    found.add(budget_problems(run, gpu, params, avail - cotenant, avail_low, max_len, requested, doubts,
                              spare_gib=spare, version=choice.version, cotenant=cotenant))
    if pinned is None:
        found.add(pp_whole_model_problems(run, params, choice.version, gap, max_len, doubts))
    problems += found.refusals
    tight = found.tight
    if gpu.unified_memory and not problems and not tight:
        tight.append(UNIFIED_TIGHT.format(gpu=gpu.name))
    if arch.compress_ratios and not problems and not tight:
        tight.append(V4_TIGHT)
    warnings += tight
    fit_len = (largest_fitting_len(low, avail_low * GIB, mnbt, run.block, arch.max_len or max_len)
               if avail_low > 0 else 0)
    return Estimate(
        model=name, gpu=gpu.name, vllm_profile=run.row, tensor_parallel_size=params.tensor_parallel_size,
        pipeline_parallel_size=params.pipeline_parallel_size, max_model_len=max_len, max_num_seqs=run.seqs,
        max_num_batched_tokens=mnbt, block_size=run.block, total_gib=total, requested_gib=requested,
        weights_gib=run.weights, activation_gib=run.activation, non_torch_gib=run.non_torch,
        cuda_graph_gib=run.graphs, cuda_graph_reserved=run.reserved, available_kv_gib=avail,
        kv_bytes_per_token=run.per_token, num_blocks=blocks,
        kv_cache_tokens=layout.tokens(blocks, max_len, mnbt, tokens_rule), need_per_request_gib=run.need / GIB,
        max_concurrency=layout.concurrency(blocks, max_len, mnbt), available_kv_gib_bound=avail_low,
        kv_cache_tokens_bound=low.tokens(blocks_low, max_len, mnbt, tokens_rule),
        max_concurrency_bound=low.concurrency(blocks_low, max_len, mnbt),
        doubts=[d for d in doubts if d.gib > 0.005 or d.gib == 0.0], problems=problems, tight=tight,
        warnings=warnings, max_fitting_model_len=fit_len, lora_gib=run.lora, lora_host_gib=run.lora_host,
    )

