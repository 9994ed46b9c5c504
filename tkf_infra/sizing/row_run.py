"""What one vLLM release row predicts for a deployment on one GPU: batch defaults, activation, every rank's
KV budget, and the doubts that row's terms leave.

Apart from `estimate.py`, which weighs the model once, runs every candidate row through `run_row` and
judges the most conservative: the per-row accounting is the part re-run for each release (and by the
calibration bench through `profile_activation`), the judging is not.
"""

from __future__ import annotations

from typing import Any

from tkf_infra.sizing.arch import Arch, LayerKind, parse_arch
from tkf_infra.sizing.bnb import bnb_forces_eager
from tkf_infra.sizing.facts import resolve_text_config
from tkf_infra.sizing.gpus import GpuSpec
from tkf_infra.sizing.kv import KvLayout, hybrid_block_size, kv_elem_bytes, kv_layout, recurrent_blocks
from tkf_infra.sizing.lora import lora_reserve
from tkf_infra.sizing.overheads import (
    Activation,
    Batch,
    activation,
    activation_doubt,
    graph_gib,
    non_torch_gib,
    pp_receive_buffers_gib,
    runs_v2,
    v2_sampler_state_gib,
)
from tkf_infra.sizing.parallelism import pp_layer_ranges
from tkf_infra.sizing.params import DEFAULT_BLOCK_SIZE, GIB, SizingParams, activation_bytes
from tkf_infra.sizing.quant import quant_problems, quant_scheme
from tkf_infra.sizing.release_row import VersionRow
from tkf_infra.sizing.startup import Doubt, RowRun
from tkf_infra.sizing.weights import Sharding, draft_bytes, mla_absorbed_bytes

#: Kernel warm-up workspace MXFP4 MoE layers hold after the KV cache is allocated (kernel_warmup /
#: autotune run before the sampler warm-up, vllm/v1/worker/gpu_worker.py@v0.19.0:580-590). Not in the
#: profiled peak; gpt-oss-20b on one H100 ran out of memory with 4.48 GiB free where the sampler alone
#: needs 2.77 GiB, while dense and FP8 models warmed up with 0.83 GiB to spare. Approximate.
MXFP4_WARMUP_GIB = 2.0
#: float32 serving: the one start-up in the case files (Llama-3.1-8B, dtype float32, vLLM 0.19 on an
#: H100) profiled 2.21 GiB where 16-bit models of the same vocabulary take 1.89 GiB; a doubt, not a term.
FP32_SAMPLER_EXTRA = 0.25


def speculation(params: SizingParams) -> tuple[str, int]:
    sc = params.speculative_config or {}
    method = str(sc.get("method") or ("draft_model" if sc.get("model") else "")).lower()
    return method, int(sc.get("num_speculative_tokens") or (1 if method else 0))


def batch_defaults(row: VersionRow, gpu: GpuSpec, params: SizingParams, max_len: int, arch: Arch) -> tuple[int, int]:
    """vLLM's max_num_seqs / max_num_batched_tokens when the entry leaves them unset (API server)."""
    if row.engine == "v0":
        seqs = params.max_num_seqs or 256
        chunked = (max_len > 32768 and arch.mla is None and not arch.multimodal and params.speculative_config is None
                   and all(k.kind == "full" for k in arch.layer_kinds))
        mnbt = params.max_num_batched_tokens or (2048 if chunked else max(max_len, 2048))
        return seqs, mnbt
    large = (gpu.memory_gib >= 70 and not (row.defaults_exclude_a100 and gpu.name.startswith("A100"))
             and gpu.cc not in row.defaults_exclude_cc)
    xl = row.defaults_xl_gib is not None and gpu.memory_gib >= row.defaults_xl_gib
    seqs = params.max_num_seqs or (1024 if large else 256)
    mnbt = params.max_num_batched_tokens or (16384 if xl else 8192 if large else 2048)
    return seqs, max(mnbt, 1)


def _rank_kinds(arch: Arch, rng: range, extra_layers: int, last: bool) -> tuple[LayerKind, ...]:
    kinds = tuple(arch.layer_kinds[i] for i in rng)
    if last and extra_layers:
        kinds += (LayerKind("mla" if arch.mla else "full"),) * extra_layers
    return kinds


def run_row(arch: Arch, row: VersionRow, gpu: GpuSpec, params: SizingParams, max_len: int, weights: list[float],
         weights_extra: float, weights_doubts: list[Doubt], spec: tuple[str, int],
         prefix_caching: bool | None = None, architecture: str = "") -> RowRun:
    """Everything one release row predicts; the limiting PP rank decides (vLLM takes the minimum)."""
    sh = Sharding(params.tensor_parallel_size, params.pipeline_parallel_size, params.data_parallel_size,
                  params.enable_expert_parallel)
    act_bytes = activation_bytes(params)
    kv_bytes = kv_elem_bytes(params.kv_cache_dtype, act_bytes)
    q = quant_scheme(arch.quant, params.quantization, act_bytes, arch.layers)
    seqs, mnbt = batch_defaults(row, gpu, params, max_len, arch)
    lora = lora_reserve(arch, architecture, params, seqs, mnbt, activation_bytes(params))
    method, k = spec
    draft, draft_layers = draft_bytes(arch, method, sh, q)
    block = params.block_size or DEFAULT_BLOCK_SIZE
    if arch.recurrent is not None and row.engine == "v1":
        block = hybrid_block_size(arch, sh.tp, kv_bytes, act_bytes, k, params.block_size)
    batch = Batch(seqs, mnbt, k, arch.multimodal)
    v2 = runs_v2(row, arch, method)
    plain = v2 and row.profile_sampler_plain
    act = activation(arch, row, batch, sh, act_bytes, q, plain_sampler=plain)
    # What a profile that runs the full sampler warm-up reserves: the V1 runner's, and what V2's bound keeps.
    full_profile = activation(arch, row, batch, sh, act_bytes, q).total if plain else act.total
    non_torch, non_torch_doubt = non_torch_gib(row, gpu, sh)
    reserved = row.graphs_reserved and (row.v2_graph_estimate or not v2)
    # V2's penalty bins and pipeline receive buffers are allocated before the profile: non-KV only where vLLM
    # counts the drop in free memory (0.27+); the V1 runner allocates its receive buffers inside the profile.
    counted = not v2 or row.non_kv_free_memory_drop
    bins = v2_sampler_state_gib(arch, seqs) if v2 and counted else 0.0
    receive = pp_receive_buffers_gib(arch, mnbt, act_bytes) if row.engine == "v1" and counted else 0.0
    total, u = gpu.memory_gib, params.gpu_memory_utilization
    requested = total * u
    multi = sh.tp * sh.pp * sh.dp > 1
    context = row.context_multi_gib if multi else row.context_single_gib
    ranges = pp_layer_ranges(arch.layers, sh.pp)
    absorbed = mla_absorbed_bytes(arch, sh.tp, act_bytes) if row.mla_absorbed_weights else 0.0

    def stage_layouts(pc: bool, all_mode: bool) -> list[KvLayout]:
        blocks, per_len = recurrent_blocks(arch, k, pc, all_mode=all_mode, checkpoint_block=row.mamba2_checkpoint_block)
        return [kv_layout(arch, _rank_kinds(arch, rng, draft_layers, i == len(ranges) - 1), sh.tp, kv_bytes, block,
                          group_ratio=row.hybrid_group_ratio, v0=row.engine == "v0", recurrent_blocks=blocks,
                          recurrent_per_len=per_len) for i, rng in enumerate(ranges)]

    # Hybrid models: prefix caching (a release default, or --enable-prefix-caching in extraArgs) decides
    # how many state blocks a request holds; the bound assumes it on unless the input says.
    central = stage_layouts(row.hybrid_prefix_caching if prefix_caching is None else prefix_caching,
                            row.mamba2_all_mode and bool(prefix_caching))
    bounding = central if prefix_caching is not None else stage_layouts(True, False)
    best: tuple[int, int, float, float, float] | None = None
    least_avail = float("inf")
    lora_gib = [lora.per_stage_gib(i) + lora.workspace / GIB if lora else 0.0 for i in range(len(ranges))]
    for stage, rng in enumerate(ranges):
        w = (weights[stage] + (draft if stage == len(ranges) - 1 else 0.0) + absorbed * len(rng)) / GIB
        w += weights_extra if stage == 0 else 0.0
        graphs = graph_gib(arch, len(rng), sh, batch, params.enforce_eager or bnb_forces_eager(arch.quant))
        state = bins if stage == len(ranges) - 1 else 0.0  # V2's sampler lives on the last stage only
        state += receive if stage > 0 else 0.0  # every stage after the first receives
        avail = requested - w - act.total - non_torch - (graphs if reserved else 0.0) - lora_gib[stage] - state
        if row.reserve_includes_fragmentation:
            avail -= 0.1 * act.total  # V0 <= 0.6 kept torch's cached blocks in the measured peak
        blocks = central[stage].num_blocks(avail * GIB)
        least_avail = min(least_avail, avail)
        if best is None or blocks < best[0] or (blocks == best[0] and avail < best[2]):
            best = (blocks, stage, avail, w, graphs)
    assert best is not None
    _, stage, avail, w_gib, graphs = best
    layout, layout_low = central[stage], bounding[stage]
    need = max(lay.need_per_request(max_len, mnbt) for lay in bounding)
    # One request over every layer of the model, as vLLM's global KV cache groups count it (the check
    # some releases make under pipeline parallelism against the smallest stage: startup.py).
    blocks_pc, per_len_pc = recurrent_blocks(arch, k, True, all_mode=False,
                                             checkpoint_block=row.mamba2_checkpoint_block)
    whole = kv_layout(arch, _rank_kinds(arch, range(arch.layers), draft_layers, True), sh.tp, kv_bytes, block,
                      group_ratio=row.hybrid_group_ratio, v0=row.engine == "v0", recurrent_blocks=blocks_pc,
                      recurrent_per_len=per_len_pc) if len(ranges) > 1 else bounding[0]
    per_token = layout.page_bytes * sum(1 for kind in _rank_kinds(arch, ranges[-1], draft_layers, True)
                                        if kind.attention or kind.kind == "linear") / block
    doubts = list(weights_doubts)
    doubts.append(Doubt(term=f"activation peak ({row.name} profile)", gib=activation_doubt(act, row),
                        pin="a start-up log of this model on this release (its 'Available KV cache memory' "
                            "line) pins the activation term"))
    if act_bytes == 4.0:  # one float32 start-up (0.19, H100): the sampler warm-up took 17.0 B per element, not 14.45
        doubts.append(Doubt(term="float32 activations (sampler warm-up measured 18 % above 16-bit models once)",
                            gib=FP32_SAMPLER_EXTRA * act.sampler, pin="dtype bfloat16 or float16"))
    for term, gib in act.approximate.items():
        doubts.append(Doubt(term=f"{term} (approximate)", gib=gib,
                            pin="a start-up log of this model pins it"))
    if non_torch_doubt:
        pin = ("set nodePools[].interconnect if the GPUs talk over NVLink, or read a start-up log on this box"
               if gpu.interconnect == "pcie" and sh.tp * sh.dp > 1 else "a start-up log on this release pins it")
        where = f" at TP {sh.tp} over {gpu.interconnect}" if sh.tp * sh.dp > 1 else ""
        doubts.append(Doubt(term=f"non-torch memory{where} ({row.name} profile)", gib=non_torch_doubt, pin=pin))
    if reserved and graphs:
        doubts.append(Doubt(term="CUDA-graph memory estimate (extrapolated by vLLM from two captures)", gib=graphs,
                            pin="enforceEager: true removes the CUDA-graph term"))
    v2_gap = (graphs if v2 and row.graphs_reserved and not reserved else 0.0) + (full_profile - act.total)
    if v2 and v2_gap > 0:
        # V2's 0.27.1 start-ups at TP 1 and PP 2 printed 1.3-1.6 GiB more non-KV than every term the source shows
        # (at TP 2: none): the bound keeps what the V1 runner would have reserved, the full sampler warm-up its
        # profile leaves out and, on 0.26-0.28, the CUDA graphs it does not reserve, so the estimate gains the
        # accuracy and the bound loses none of its margin.
        unreserved = " and the CUDA graphs it does not reserve" if not reserved and graphs else ""
        doubts.append(Doubt(term=f"model runner V2's non-KV use beyond the source's terms ({row.name}: 1.3-1.6 GiB "
                                 "seen on 0.27.1 at TP 1 and PP 2), sized as the sampler warm-up its profile leaves "
                                 f"out{unreserved}", gib=v2_gap, pin="a start-up log on this release pins it"))
    problems = quant_problems(q, params.quantization, None, gpu.cc, gpu.name)
    # After the cache is allocated vLLM warms the sampler on the same rows as in profiling.
    warmup = max(act.sampler, act.spec) + (MXFP4_WARMUP_GIB if q.name == "mxfp4" and arch.is_moe else 0.0)
    # What of the profiled peak the warm-up finds freed inside the budget: all of it, and where the profile
    # sampled without parameters (model runner V2 before 0.33) that is the logits-only peak, while the warm-up
    # (`warmup_kernels`, every sampling feature on) needs the full sampler: the rest comes from outside. 0.33 adds
    # that pass to the profile for this reason ("warmup_kernels ... pays for the fp32 logits pipeline, so the
    # profiled peak must too", gpu/model_runner.py@v0.33.0:1008-1009); V2 warms up after capturing the graphs
    # (gpu_worker.py@v0.27.1:793-795), so unreserved graphs are not free then.
    reused = act.total
    return RowRun(row=row.name, seqs=seqs, mnbt=mnbt, block=block, weights=w_gib, activation=act.total,
                non_torch=non_torch, graphs=graphs, reserved=reserved, available=avail, layout=layout,
                layout_low=layout_low,
                need=need, per_token=per_token, doubts=doubts, problems=problems, context=context, warmup=warmup,
                  warmup_reuse=reused, need_whole=whole.need_per_request(max_len, mnbt),
                  least_available=least_avail, lora=lora_gib[stage], lora_host=lora.host / GIB if lora else 0.0,
                  sampler_state=bins if stage == len(ranges) - 1 else 0.0,
                  receive_buffers=receive if stage > 0 else 0.0)


def profile_activation(config: dict[str, Any], gpu: GpuSpec, params: SizingParams, row: VersionRow) -> Activation:
    """The activation peak's parts one release row predicts (for calibration against printed logs)."""
    full = config
    text = resolve_text_config(config)
    arch = parse_arch(text, full)
    max_len = params.max_model_len or arch.max_len or 0
    seqs, mnbt = batch_defaults(row, gpu, params, max_len, arch)
    sh = Sharding(params.tensor_parallel_size, params.pipeline_parallel_size, params.data_parallel_size,
                  params.enable_expert_parallel)
    act_bytes = activation_bytes(params)
    q = quant_scheme(arch.quant, params.quantization, act_bytes, arch.layers)
    return activation(arch, row, Batch(seqs, mnbt, speculation(params)[1], arch.multimodal), sh, act_bytes, q)
