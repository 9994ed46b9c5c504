"""What one vLLM release row predicts for a deployment on one GPU: batch defaults, activation, every rank's
KV budget, and the doubts that row's terms leave.

Apart from `estimate.py`, which weighs the model once, runs every candidate row through `run_row` and
judges the most conservative: the per-row accounting is the part re-run for each release (and by the
calibration bench through `profile_activation`), the judging is not.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tkf_infra.sizing.arch import Arch, LayerKind, parse_arch
from tkf_infra.sizing.bnb import bnb_forces_eager
from tkf_infra.sizing.facts import resolve_text_config
from tkf_infra.sizing.gpus import GpuSpec
from tkf_infra.sizing.kv import (
    KvLayout,
    hybrid_block_size,
    kv_elem_bytes,
    kv_layout,
    recurrent_blocks,
    v4_block,
    v4_layout,
)
from tkf_infra.sizing.lora import lora_reserve
from tkf_infra.sizing.measured import activation_note, family, measured, note
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
from tkf_infra.sizing.quant import QuantScheme, quant_problems, quant_scheme
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


def _in_flight(d: _Deployment) -> int:
    """Tokens scheduled but not yet freed, which windowed caches reserve for: one batch of `max_num_batched_tokens`
    per batch in flight — async scheduling (on by default) keeps PP + 1 on model runner V2, 2 on V1 without PP, else
    PP (config/vllm.py@v0.27.1:540-561, 1095-1134)."""
    pp = d.sh.pp
    return (pp + 1 if d.v2 else 2 if pp == 1 else pp) * d.batch.tokens


def _indexer_layers(arch: Arch, rng: range) -> int:
    """How many of the stage's layers build a sparse-attention indexer (and so its cache: `kv.indexer_page`)."""
    if not arch.indexer:
        return 0
    return sum(1 for i in rng if i >= len(arch.indexer_layers) or arch.indexer_layers[i])


def _rank_kinds(arch: Arch, rng: range, extra_layers: int, last: bool) -> tuple[LayerKind, ...]:
    kinds = tuple(arch.layer_kinds[i] for i in rng)
    if last and extra_layers:
        kinds += (LayerKind("mla" if arch.mla else "full"),) * extra_layers
    return kinds


@dataclass(frozen=True)
class _Deployment:
    """What every term of one row's run reads: the model on this row's runner, sharded and batched as deployed."""

    arch: Arch
    row: VersionRow
    gpu: GpuSpec
    params: SizingParams
    max_len: int
    sh: Sharding
    act_bytes: float
    kv_bytes: float
    q: QuantScheme
    batch: Batch
    block: int
    spec_tokens: int
    draft: float
    """The speculative draft's weights (bytes, last stage)."""
    draft_layers: int
    v2: bool
    """The release starts this model on model runner V2 (`overheads.runs_v2`)."""
    ranges: list[range]
    """Each pipeline stage's decoder layers."""

    @property
    def last(self) -> int:
        return len(self.ranges) - 1


def _deployment(arch: Arch, row: VersionRow, gpu: GpuSpec, params: SizingParams, max_len: int,
                spec: tuple[str, int]) -> _Deployment:
    sh = Sharding(params.tensor_parallel_size, params.pipeline_parallel_size, params.data_parallel_size,
                  params.enable_expert_parallel)
    act_bytes = activation_bytes(params)
    kv_bytes = kv_elem_bytes(params.kv_cache_dtype, act_bytes)
    q = quant_scheme(arch.quant, params.quantization, act_bytes, arch.layers)
    seqs, mnbt = batch_defaults(row, gpu, params, max_len, arch)
    method, k = spec
    draft, draft_layers = draft_bytes(arch, method, sh, q)
    block = params.block_size or DEFAULT_BLOCK_SIZE
    if arch.compress_ratios:
        block = v4_block(params.block_size)
    if arch.recurrent is not None and row.engine == "v1":
        block = hybrid_block_size(arch, sh.tp, kv_bytes, act_bytes, k, params.block_size)
    return _Deployment(arch, row, gpu, params, max_len, sh, act_bytes, kv_bytes, q,
                       Batch(seqs, mnbt, k, arch.multimodal), block, k, draft, draft_layers, runs_v2(row, arch, method),
                       pp_layer_ranges(arch.layers, sh.pp))


def _layouts(d: _Deployment, prefix_caching: bool | None) -> tuple[list[KvLayout], list[KvLayout]]:
    """Each stage's KV layout, (estimate, bound). Hybrid models: prefix caching (a release default, or
    --enable-prefix-caching in extraArgs) decides how many state blocks a request holds; the bound assumes it on
    unless the input says."""
    row, arch = d.row, d.arch

    def stage_layouts(pc: bool, all_mode: bool) -> list[KvLayout]:
        if arch.compress_ratios:
            return [v4_layout(arch, rng, d.block, _in_flight(d)) for rng in d.ranges]
        blocks, per_len = recurrent_blocks(arch, d.spec_tokens, pc, all_mode=all_mode,
                                           checkpoint_block=row.mamba2_checkpoint_block)
        return [kv_layout(arch, _rank_kinds(arch, rng, d.draft_layers, i == d.last), d.sh.tp, d.kv_bytes, d.block,
                          group_ratio=row.hybrid_group_ratio, v0=row.engine == "v0", recurrent_blocks=blocks,
                          recurrent_per_len=per_len, indexer_layers=_indexer_layers(arch, rng),
                          dcp=d.params.decode_context_parallel_size)
                for i, rng in enumerate(d.ranges)]

    central = stage_layouts(row.hybrid_prefix_caching if prefix_caching is None else prefix_caching,
                            row.mamba2_all_mode and bool(prefix_caching))
    return central, central if prefix_caching is not None else stage_layouts(True, False)


def _whole_model_need(d: _Deployment, bounding: list[KvLayout]) -> float:
    """Bytes of one max-length request over every layer of the model, as vLLM's global KV cache groups count it
    (the check some releases make under pipeline parallelism against the smallest stage: startup.py)."""
    if len(d.ranges) == 1:
        return bounding[0].need_per_request(d.max_len, d.batch.tokens)
    if d.arch.compress_ratios:
        return v4_layout(d.arch, range(d.arch.layers), d.block, _in_flight(d)).need_per_request(d.max_len, 0)
    blocks, per_len = recurrent_blocks(d.arch, d.spec_tokens, True, all_mode=False,
                                       checkpoint_block=d.row.mamba2_checkpoint_block)
    whole = kv_layout(d.arch, _rank_kinds(d.arch, range(d.arch.layers), d.draft_layers, True), d.sh.tp, d.kv_bytes,
                      d.block, group_ratio=d.row.hybrid_group_ratio, v0=d.row.engine == "v0", recurrent_blocks=blocks,
                      recurrent_per_len=per_len, indexer_layers=_indexer_layers(d.arch, range(d.arch.layers)),
                      dcp=d.params.decode_context_parallel_size)
    return whole.need_per_request(d.max_len, d.batch.tokens)


@dataclass(frozen=True)
class _NonKv:
    """What the budget charges besides weights and the KV cache, per rank (GiB)."""

    act: Activation
    full_profile: float
    """What a profile that runs the full sampler warm-up reserves: the V1 runner's, and what V2's bound keeps."""
    non_torch: float
    non_torch_doubt: float
    reserved: bool
    """The CUDA-graph estimate comes out of the budget."""
    bins: float
    """V2's penalty bins on the last stage."""
    receive: float
    """Pipeline receive buffers on every stage after the first."""
    lora: list[float]
    lora_host: float


def _non_kv(d: _Deployment, architecture: str) -> _NonKv:
    row = d.row
    plain = d.v2 and row.profile_sampler_plain
    act = activation(d.arch, row, d.batch, d.sh, d.act_bytes, d.q, plain_sampler=plain)
    full_profile = activation(d.arch, row, d.batch, d.sh, d.act_bytes, d.q).total if plain else act.total
    non_torch, non_torch_doubt = non_torch_gib(row, d.gpu, d.sh)
    if row.budget_counts_device:  # 0.8.0-0.9.0 V1: no snapshot, so the CUDA context counts too (NCCL's set-up
        non_torch += row.context_single_gib  # is already in the row's figure: 0.9.1's snapshot is before NCCL init)
    reserved = row.graphs_reserved and (row.v2_graph_estimate or not d.v2)
    # V2's penalty bins and pipeline receive buffers are allocated before the profile: non-KV only where vLLM
    # counts the drop in free memory (0.27+); the V1 runner allocates its receive buffers inside the profile.
    counted = not d.v2 or row.non_kv_free_memory_drop
    bins = v2_sampler_state_gib(d.arch, d.batch.seqs) if d.v2 and counted else 0.0
    receive = pp_receive_buffers_gib(d.arch, d.batch.tokens, d.act_bytes) if row.engine == "v1" and counted else 0.0
    lora = lora_reserve(d.arch, architecture, d.params, d.batch.seqs, d.batch.tokens, d.act_bytes)
    lora_gib = [lora.per_stage_gib(i) + lora.workspace / GIB if lora else 0.0 for i in range(len(d.ranges))]
    return _NonKv(act, full_profile, non_torch, non_torch_doubt, reserved, bins, receive, lora_gib,
                  lora.host / GIB if lora else 0.0)


@dataclass(frozen=True)
class _Stage:
    """The limiting pipeline stage: the fewest KV blocks (vLLM takes the minimum over ranks)."""

    index: int
    available: float
    weights: float
    graphs: float
    least_available: float
    """The smallest available KV memory over the stages (GiB, central)."""


def _limiting_stage(d: _Deployment, n: _NonKv, weights: list[float], weights_extra: float,
                    central: list[KvLayout]) -> _Stage:
    requested = d.gpu.memory_gib * d.params.gpu_memory_utilization
    absorbed = mla_absorbed_bytes(d.arch, d.sh.tp, d.act_bytes) if d.row.mla_absorbed_weights else 0.0
    eager = d.params.enforce_eager or bnb_forces_eager(d.arch.quant)
    best: tuple[int, _Stage] | None = None
    least_avail = float("inf")
    for stage, rng in enumerate(d.ranges):
        w = (weights[stage] + (d.draft if stage == d.last else 0.0) + absorbed * len(rng)) / GIB
        w += weights_extra if stage == 0 else 0.0
        graphs = graph_gib(d.arch, len(rng), d.sh, d.batch, eager)
        state = n.bins if stage == d.last else 0.0  # V2's sampler lives on the last stage only
        state += n.receive if stage > 0 else 0.0  # every stage after the first receives
        avail = (requested - w - n.act.total - n.non_torch - (graphs if n.reserved else 0.0) - n.lora[stage]
                 - state)
        if d.row.reserve_includes_fragmentation:
            avail -= 0.1 * n.act.total  # V0 <= 0.6 kept torch's cached blocks in the measured peak
        blocks = central[stage].num_blocks(avail * GIB)
        least_avail = min(least_avail, avail)
        if best is None or blocks < best[0] or (blocks == best[0] and avail < best[1].available):
            best = (blocks, _Stage(stage, avail, w, graphs, 0.0))
    assert best is not None
    return replace(best[1], least_available=least_avail)


def _row_doubts(d: _Deployment, n: _NonKv, graphs: float, weights_doubts: list[Doubt]) -> list[Doubt]:
    """The doubts this row's terms leave, each with what would pin it."""
    row, act = d.row, n.act
    doubts = list(weights_doubts)
    doubts.append(Doubt(term=f"activation peak ({row.name} profile; {activation_note(d.gpu, row.name)})",
                        gib=activation_doubt(act, row),
                        pin="a start-up log of this model on this release (its 'Available KV cache memory' "
                            "line) pins the activation term"))
    if d.act_bytes == 4.0:  # one float32 start-up (0.19, H100): the sampler warm-up took 17.0 B per element, not 14.45
        doubts.append(Doubt(term="float32 activations (sampler warm-up measured 18 % above 16-bit models once)",
                            gib=FP32_SAMPLER_EXTRA * act.sampler, pin="dtype bfloat16 or float16"))
    for term, gib in act.approximate.items():
        doubts.append(Doubt(term=f"{term} (approximate)", gib=gib,
                            pin="a start-up log of this model pins it"))
    gpu = d.gpu
    if n.non_torch_doubt:
        doubts.append(_non_torch_doubt(d, n))
    if n.reserved and graphs:
        m = measured("graphs", gpu, row.name)
        doubts.append(Doubt(term="CUDA-graph memory estimate (extrapolated by vLLM from two captures; " + (
            f"{m.width:.0%} of it, as measured on {family(gpu)}" if m else
            note(gpu, row.name, "taken whole")) + ")", gib=graphs * (m.width if m else 1.0),
            pin="enforceEager: true removes the CUDA-graph term"))
    v2_gap = (graphs if d.v2 and row.graphs_reserved and not n.reserved else 0.0) + (n.full_profile - act.total)
    if d.v2 and v2_gap > 0:
        # V2's 0.27.1 start-ups at TP 1 and PP 2 printed 1.3-1.6 GiB more non-KV than every term the source shows
        # (at TP 2: none). Where no start-up of the family and release measured the gap, the bound keeps what the
        # V1 runner would have reserved, the full sampler warm-up its profile leaves out and, on 0.26-0.28, the
        # CUDA graphs it does not reserve (the widest reading); where one did, what it measured, if smaller.
        m = measured("v2-gap", gpu, row.name)
        unreserved = " and the CUDA graphs it does not reserve" if not n.reserved and graphs else ""
        how = (f"at most {m.width:.2f} GiB as measured on {family(gpu)}" if m else
               note(gpu, row.name, f"sized as the sampler warm-up its profile leaves out{unreserved}"))
        doubts.append(Doubt(term=f"model runner V2's non-KV use beyond the source's terms ({row.name}; {how})",
                            gib=min(v2_gap, m.width) if m else v2_gap, pin="a start-up log on this release pins it"))
    return doubts


def _non_torch_doubt(d: _Deployment, n: _NonKv) -> Doubt:
    """Non-torch memory's doubt: the row's, at TP > 1 over PCIe up to the NVLink figure unless the family's
    start-ups measured it (`measured.MEASURED`)."""
    sh, gpu, row = d.sh, d.gpu, d.row
    pcie = gpu.interconnect == "pcie" and sh.tp * sh.dp > 1
    m = measured("non-torch-pcie", gpu, row.name) if pcie else None
    where = f" at TP {sh.tp} over {gpu.interconnect}" if sh.tp * sh.dp > 1 else ""
    how = (f"; {m.width:.2f} GiB as measured on {family(gpu)}" if m else
           f"; {note(gpu, row.name, 'up to the NVLink figure')}" if pcie else "")
    pin = ("set nodePools[].interconnect if the GPUs talk over NVLink, or read a start-up log on this box"
           if pcie else "a start-up log on this release pins it")
    return Doubt(term=f"non-torch memory{where} ({row.name} profile{how})",
                 gib=min(n.non_torch_doubt, m.width) if m else n.non_torch_doubt, pin=pin)


def _context(row: VersionRow, gpu: GpuSpec, sh: Sharding) -> float:
    """Memory in use on each GPU before vLLM's start-up snapshot: the CUDA context, and with more than one GPU the
    communicators (`VersionRow.context_multi_gib`, over PCIe `context_multi_pcie_gib`)."""
    if sh.tp * sh.pp * sh.dp == 1:
        return row.context_single_gib
    return row.context_multi_gib if gpu.interconnect == "nvlink" else row.context_multi_pcie_gib


def _warmup_gib(d: _Deployment, act: Activation) -> float:
    """After the cache is allocated vLLM warms the sampler on the same rows as in profiling.

    What of the profiled peak the warm-up finds freed inside the budget is all of it (`RowRun.warmup_reuse`),
    and where the profile sampled without parameters (model runner V2 before 0.33) that is the logits-only peak,
    while the warm-up (`warmup_kernels`, every sampling feature on) needs the full sampler: the rest comes from
    outside. 0.33 adds that pass to the profile for this reason ("warmup_kernels ... pays for the fp32 logits
    pipeline, so the profiled peak must too", gpu/model_runner.py@v0.33.0:1008-1009); V2 warms up after capturing
    the graphs (gpu_worker.py@v0.27.1:793-795), so unreserved graphs are not free then."""
    return max(act.sampler, act.spec) + (MXFP4_WARMUP_GIB if d.q.name == "mxfp4" and d.arch.is_moe else 0.0)


def run_row(arch: Arch, row: VersionRow, gpu: GpuSpec, params: SizingParams, max_len: int, weights: list[float],
            weights_extra: float, weights_doubts: list[Doubt], spec: tuple[str, int],
            prefix_caching: bool | None = None, architecture: str = "") -> RowRun:
    """Everything one release row predicts; the limiting PP rank decides (vLLM takes the minimum)."""
    d = _deployment(arch, row, gpu, params, max_len, spec)
    n = _non_kv(d, architecture)
    central, bounding = _layouts(d, prefix_caching)
    stage = _limiting_stage(d, n, weights, weights_extra, central)
    last = stage.index == d.last
    packed = central[stage.index].packed
    per_token = packed.block_stride / d.block if packed is not None else (central[stage.index].page_bytes * sum(
        1 for kind in _rank_kinds(arch, d.ranges[-1], d.draft_layers, True)
        if kind.attention or kind.kind == "linear") + central[-1].side_bytes) / d.block
    return RowRun(row=row.name, seqs=d.batch.seqs, mnbt=d.batch.tokens, block=d.block, weights=stage.weights,
                  activation=n.act.total, non_torch=n.non_torch, graphs=stage.graphs, reserved=n.reserved,
                  available=stage.available, layout=central[stage.index], layout_low=bounding[stage.index],
                  need=max(lay.need_per_request(max_len, d.batch.tokens) for lay in bounding), per_token=per_token,
                  doubts=_row_doubts(d, n, stage.graphs, weights_doubts),
                  problems=quant_problems(d.q, params.quantization, None, gpu.cc, gpu.name),
                  context=_context(row, gpu, d.sh), warmup=_warmup_gib(d, n.act),
                  warmup_reuse=n.act.total, need_whole=_whole_model_need(d, bounding),
                  least_available=stage.least_available, lora=n.lora[stage.index], lora_host=n.lora_host,
                  sampler_state=n.bins if last else 0.0, receive_buffers=n.receive if stage.index > 0 else 0.0)


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
