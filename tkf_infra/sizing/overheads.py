"""What vLLM's start-up profile charges besides weights: activation peak, non-torch memory, CUDA graphs.

The profile run (`profile_run` in the V1 model runner, `_dummy_run` in V0) pushes one batch of
`max_num_batched_tokens` tokens split over `min(max_num_seqs, tokens)` requests through the model,
after the multimodal encoder has run on a dummy batch, and then warms the sampler up on one logits
row per request. The torch peak of that run is the activation term (`memory_profiling` in
vllm/utils/mem_utils.py). Each part below names what it follows; the constants that cannot be read
from source are calibrated per release row (`versions`) and carry an uncertainty.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tkf_infra.sizing.arch import Arch
from tkf_infra.sizing.gpus import GpuSpec
from tkf_infra.sizing.kv_v4 import v4_extra_gib
from tkf_infra.sizing.params import GIB
from tkf_infra.sizing.quant import QuantScheme
from tkf_infra.sizing.release_row import VersionRow
from tkf_infra.sizing.weights import Sharding

#: Fused-MoE intermediate caches are sized for at most this many tokens per chunk
#: (VLLM_FUSED_MOE_CHUNK_SIZE default, vllm/envs.py@v0.19.0).
MOE_CHUNK_TOKENS = 32768
#: Dynamic-resolution vision encoders (Qwen-VL family) profile one image at the processor's largest
#: size: 16384 merged tokens = 65536 patches (max_pixels 12845056 / 28^2 in Qwen2-VL's processor).
DYNAMIC_ENCODER_PATCHES = 65536
#: Bytes per logits element of the speculative rejection-sampler warm-up, which runs after the sampler's
#: (random logits for draft + bonus tokens, vllm/v1/worker/gpu_model_runner.py@v0.19.0:5609-5635): approximate.
SPEC_SAMPLER_BYTES = 10.0


def logits_gib(rows: int, vocab: int, tp: int, act_bytes: float) -> float:
    """The logits of the profile's sampler rows when model runner V2 samples them without parameters.

    V2's profile (`_dummy_sampler_run`, vllm/v1/worker/gpu/model_runner.py@v0.26.0:654-665, @v0.27.1:683-694,
    @v0.29.0:832-843, @v0.31.0:942-953) samples a dummy batch that carries no sampling parameters, so
    `Sampler._requires_logits_processing` is false: no float32 copy, no top-k/top-p, and the Gumbel sample
    is one Triton kernel over the logits (gpu/sample/sampler.py@v0.27.1:200-271). What the pass holds is the
    logits in the model dtype (logits_processor.py@v0.27.1:84-95); at TP > 1 they are all-gathered along
    the vocabulary, which keeps the local shard, the gathered buffer and its reshaped copy at once
    (device_communicators/cuda_communicator.py@v0.27.1:377-385): 2 + 1/tp copies."""
    copies = 1.0 if tp == 1 else 2.0 + 1.0 / tp
    return rows * vocab * act_bytes * copies / GIB


@dataclass(frozen=True)
class Batch:
    """The profile run's shape and the deployment features that change it."""

    seqs: int
    tokens: int
    spec_tokens: int = 0
    multimodal: bool = False


@dataclass
class Activation:
    """The activation peak and its parts (GiB), with the approximate share the bound widens."""

    base: float
    sampler: float
    forward: float
    moe: float
    encoder: float
    encoder_cache: float
    spec: float
    total: float
    sampler_elements: float = 0.0
    """Logits elements the warm-up samples (rows x vocabulary), for calibration."""
    sampler_fast: bool = False
    approximate: dict[str, float] = field(default_factory=dict)
    sampler_profiled: float | None = None
    """What the profile's sampler pass takes when it is not the full warm-up (`sampler`, which the
    post-allocation warm-up still needs): model runner V2's parameterless pass, the logits only. None: the
    profile runs the full warm-up."""

    @property
    def profiled_sampler(self) -> float:
        return self.sampler if self.sampler_profiled is None else self.sampler_profiled


def sampler_bytes(row: VersionRow, rows: int) -> float:
    if row.sampler_fast_bytes is not None and rows >= row.sampler_fast_min_rows:
        return row.sampler_fast_bytes
    return row.sampler_sort_bytes


def forward_bytes(arch: Arch, tokens: int, sh: Sharding, act_bytes: float) -> float:
    """Peak live activations of one decoder layer for `tokens` tokens (dense part)."""
    h = arch.hidden
    inter = (arch.intermediate or 0) / sh.tp
    if arch.is_moe and arch.shared_intermediate:
        inter = arch.shared_intermediate / sh.tp
    elif arch.is_moe:
        inter = 0
    mlp = (3 * inter if arch.gated_mlp else 2 * inter) + 2 * h
    q = arch.heads * arch.head_dim / sh.tp
    kv = 2 * max(1, arch.kv_heads // sh.tp) * arch.head_dim
    attn = q * (2 if arch.q_gate else 1) + kv + q + 2 * h
    rec = 0.0
    if arch.recurrent is not None:
        r = arch.recurrent
        rec = (r.conv_dim + r.heads * r.head_dim) / sh.tp + 2 * h
        rec += r.heads / sh.tp * r.head_dim * r.state_dim * 4 / 64 * 2 / act_bytes  # chunk states, fp32
    return tokens * max(mlp, attn, rec) * act_bytes


def moe_bytes(arch: Arch, tokens: int, sh: Sharding, act_bytes: float, q: QuantScheme) -> float:
    """Fused-MoE workspaces (intermediate caches 1-3), kept across the profile run."""
    if not arch.is_moe or not arch.moe_intermediate or q.name == "mxfp4":
        return 0.0
    m = min(tokens, MOE_CHUNK_TOKENS) * arch.experts_per_tok
    n = 2 * arch.moe_intermediate / (1 if sh.ep else sh.moe_ranks)
    return m * (n + n / 2 + arch.hidden) * act_bytes


def encoder_bytes(arch: Arch, batch: Batch, act_bytes: float, tp: int = 1) -> tuple[float, float]:
    """(encoder profile peak, encoder-cache bytes) of the multimodal dummy batch, on one TP rank.

    The profile run encodes the modality with the most tokens at its largest size and keeps the
    outputs in the encoder cache while the decoder runs (gpu_model_runner.py@v0.11.0:3326-3388).
    The vision tower is tensor-parallel by default (`mm_encoder_tp_mode` "weights", config/multimodal.py
    @v0.24.0:145, @v0.27.1:165, @v0.31.0:205): its QKV and attention output (QKVParallelLinear / RowParallelLinear,
    models/qwen2_5_vl.py@v0.24.0:367-391) and its MLP's hidden layer (ColumnParallelLinear,
    models/qwen3_vl.py@v0.24.0:377-405) hold 1/tp of their width per rank; the residual stream stays whole."""
    v = arch.vision
    if not batch.multimodal or not v:
        return 0.0, 0.0
    patches = DYNAMIC_ENCODER_PATCHES
    tokens_per_item = patches // 4
    if v.get("image") and v.get("patch"):
        patches = (v["image"] // v["patch"]) ** 2
        tokens_per_item = 256
    budget = max(batch.tokens, tokens_per_item)
    per_patch = ((4 * v["hidden"] + v["intermediate"]) / tp + v["hidden"]) * act_bytes
    cache = budget * arch.hidden * act_bytes
    return patches * per_patch, cache


def activation(arch: Arch, row: VersionRow, batch: Batch, sh: Sharding, act_bytes: float, q: QuantScheme,
               sampling_rank: bool = True, plain_sampler: bool = False) -> Activation:
    """The torch peak of the profile run on one rank (GiB).

    `plain_sampler`: the profile samples without parameters (model runner V2 before 0.33, `logits_gib`), so
    its sampler pass holds the logits only; `sampler` stays the full warm-up's figure."""
    rows = min(batch.seqs, batch.tokens)
    vocab = arch.vocab or 0
    sampler = sampler_bytes(row, rows) * rows * vocab / GIB if sampling_rank else 0.0
    profiled = min(logits_gib(rows, vocab, sh.tp, act_bytes), sampler) if plain_sampler else sampler
    spec = SPEC_SAMPLER_BYTES * 2 * rows * vocab / GIB if batch.spec_tokens and sampling_rank else 0.0
    forward = forward_bytes(arch, batch.tokens, sh, act_bytes) / GIB
    moe = moe_bytes(arch, batch.tokens, sh, act_bytes, q) / GIB
    enc, cache = (x / GIB for x in encoder_bytes(arch, batch, act_bytes, sh.tp))
    # Peaks do not stack: the encoder runs first, then the decoder, then the sampler, then (with
    # speculative decoding) the rejection sampler on fresh random logits; the encoder cache and the
    # MoE workspaces stay allocated across all of them (gpu_model_runner.py@v0.9.1:1866-1940).
    v4 = v4_extra_gib(arch.compress_ratios, batch.tokens)
    peak = max(forward + v4, profiled, spec, enc) + cache + moe
    total = row.activation_base_gib + peak
    approx = {"encoder profile": 0.5 * (enc + cache), "speculative sampler": 0.5 * spec,
              "DeepSeek V4's hyper-connection and sparse-attention buffers (measured on two H200 start-ups)": v4}
    fast = row.sampler_fast_bytes is not None and rows >= row.sampler_fast_min_rows
    return Activation(row.activation_base_gib, sampler, forward, moe, enc, cache, spec, total,
                      rows * vocab if sampling_rank else 0.0, fast, {k: v for k, v in approx.items() if v > 0},
                      profiled if plain_sampler else None)


def activation_doubt(act: Activation, row: VersionRow) -> float:
    """How much more than `act.total` the profile may take (GiB), term by term.

    The peak is a maximum of phases that do not overlap, so its upper end is the maximum of each
    phase's upper end, plus the parts that stay allocated across phases. The sampler warm-up gets the
    row's `sampler_uncertainty` (its bytes per logits element are a property of the sampler's code path,
    measured per release), every other part `activation_uncertainty`. With both equal this is
    `activation_uncertainty x total`, the row's old single figure."""
    au = row.activation_uncertainty
    # The sampler's own (measured) uncertainty is that of the full warm-up; V2's logits-only pass takes the row's.
    su = au if row.sampler_uncertainty is None or act.sampler_profiled is not None else row.sampler_uncertainty
    sampler = act.profiled_sampler
    peak = max(act.forward, sampler, act.spec, act.encoder)
    high = max(act.forward * (1 + au), sampler * (1 + su), act.spec * (1 + au), act.encoder * (1 + au))
    return high - peak + au * (act.total - peak)


def non_torch_gib(row: VersionRow, gpu: GpuSpec, sh: Sharding) -> tuple[float, float]:
    """(central, extra for the bound): NCCL/all-reduce buffers and library workspaces."""
    if sh.tp * sh.dp == 1:
        return row.non_torch_tp1_gib, row.non_torch_uncertainty_gib
    nvlink = row.non_torch_multi_gib
    if gpu.interconnect == "nvlink":
        if row.non_torch_multi_nvswitch_gib is not None and gpu.cc == (9, 0):
            return row.non_torch_multi_nvswitch_gib, row.non_torch_uncertainty_gib
        return nvlink, row.non_torch_uncertainty_gib
    pcie = row.non_torch_multi_pcie_gib
    # No PCIe start-up shows this figure: the bound takes the NVLink one, less the all-reduce fusion
    # workspace on the GPUs whose release never builds it (`VersionRow.pcie_ceiling_no_fusion_gib`).
    ceiling = nvlink if row.pcie_ceiling_no_fusion_gib is None or builds_ar_fusion(gpu, sh) else \
        row.pcie_ceiling_no_fusion_gib
    return pcie, max(ceiling - pcie, 0.0) + row.non_torch_uncertainty_gib


def builds_ar_fusion(gpu: GpuSpec, sh: Sharding) -> bool:
    """Whether vLLM builds FlashInfer's all-reduce + RMSNorm workspace here: TP > 1 on compute capability
    9.0 or 10.x (`enable_allreduce_rms_fusion`, config/vllm.py@v0.24.0:131-151). 0.17.0 named 10.0 alone
    (@v0.17.0:113-133); taking the whole 10.x family keeps the bound the wider one."""
    major, minor = gpu.cc
    return sh.tp > 1 and ((major, minor) == (9, 0) or major == 10)


def capture_sizes(seqs: int, tokens: int, spec_tokens: int) -> int:
    """How many CUDA graphs vLLM captures: [1, 2, 4] + 8..248 step 8 + 256..max step 16.

    vllm/config/vllm.py@v0.19.0:1349-1353: max = min(max_num_seqs x (1 + spec) x 2, 512, batched tokens)."""
    top = min(seqs * (1 + spec_tokens) * 2, 512, tokens)
    return sum(1 for s in [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)] if s <= top)


def graph_gib(arch: Arch, layers_rank: int, sh: Sharding, batch: Batch, enforce_eager: bool) -> float:
    """CUDA-graph pool: 0.65-1.84 GiB in the 0.19 H100 logs (51 graphs), growing with layers, more for MoE.

    Fitted on those logs (0.40 + 0.016 GiB per layer, less at TP > 1 where each graph is smaller,
    +1.0 GiB for MoE) and scaled down for fewer captured sizes; approximate."""
    if enforce_eager:
        return 0.0
    g = 0.40 + 0.016 * layers_rank - (0.15 if sh.tp == 2 else 0.24 if sh.tp > 2 else 0.0)
    if arch.is_moe:
        g += 1.0
    if arch.recurrent is not None:
        g *= 1.5  # FULL_AND_PIECEWISE: two graph sets for hybrid recurrent models
    share = capture_sizes(batch.seqs, batch.tokens, batch.spec_tokens) / 51
    return max(g * (0.35 + 0.65 * share), 0.05)


def runs_v2(row: VersionRow, arch: Arch, spec_method: str) -> bool:
    """Whether this release starts the model on model runner V2 (`VersionRow.runner_v2`).

    0.26-0.28 default to V2 for generative decoders that are neither MoE nor hybrid (recurrent); a
    speculative config is taken as V1 there (V2 refuses some methods and falls back), since V2 on those
    releases reserves no CUDA-graph memory and assuming it would leave more KV cache than may be there."""
    if row.runner_v2 == "all":
        return True
    return row.runner_v2 == "dense" and not arch.is_moe and arch.recurrent is None and not spec_method


def pp_receive_buffers_gib(arch: Arch, tokens: int, act_bytes: float) -> float:
    """What a non-first pipeline stage keeps to receive the previous stage's output: `hidden_states` and
    `residual` for `max_num_batched_tokens` tokens in the model dtype (`make_empty_intermediate_tensors_factory`,
    models/utils.py@v0.27.1:866-879; llama.py@v0.27.1:393 and qwen2.py@v0.27.1:386, which Qwen3 reuses, pass both
    keys). The V1 runner
    allocates them in the profile's first dummy run and keeps them (v1/worker/gpu_model_runner.py@v0.24.0:5923-5931,
    @v0.27.1:6118-6126), so they are in the profiled peak: Llama-3.1-8B at PP 2 on 0.19 printed 2.01 GiB on the last
    stage against its 1.89 GiB sampler term, 0.125 GiB apart, the buffers' size. Model runner V2 allocates them in
    `load_model`, after the weights are measured (v1/worker/gpu/model_runner.py@v0.27.1:390-399): counted where the
    release's non-KV is the drop in free memory (`VersionRow.non_kv_free_memory_drop`)."""
    return 2 * tokens * arch.hidden * act_bytes / GIB


def v2_sampler_state_gib(arch: Arch, seqs: int) -> float:
    """V2's penalty state on each last-stage rank: `output_bin_counts` (seqs x vocab int32) and
    `prompt_bin_mask` (seqs x ceil(vocab / 32) int32), allocated after the weights are measured and never
    freed, so vLLM's free-memory drop counts them as non-KV (gpu/sample/penalties.py@v0.27.1:32-42)."""
    vocab = arch.vocab or 0
    return seqs * (vocab + -(-vocab // 32)) * 4 / GIB
