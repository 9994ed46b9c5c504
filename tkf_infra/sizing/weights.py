"""Bytes of weights each GPU rank holds once vLLM has loaded the model, and a checkpoint's size.

Counted tensor by tensor from ``config.json`` with vLLM's sharding rules: TP splits linears and the
(padded) vocabulary, KV projections are replicated when there are fewer KV heads than ranks,
norms and routers are replicated, PP gives each rank its slice of layers. MoE experts are split
across TP x DP ranks — TP-sharded without expert parallelism, whole experts per rank with it
(vllm/model_executor/layers/fused_moe/config.py@v0.32.0:1128-1240). Vision towers and speculative
draft layers are added where the deployment loads them.
"""

from __future__ import annotations

from dataclasses import dataclass

from tkf_infra.sizing.arch import Arch, parse_arch
from tkf_infra.sizing.config_fields import ConfigFieldError, reading_config
from tkf_infra.sizing.facts import ModelFacts, bytes_of_counts
from tkf_infra.sizing.parallelism import VOCAB_PADDING, pp_layer_ranges, round_up
from tkf_infra.sizing.params import SizingError
from tkf_infra.sizing.quant import QuantScheme, quant_scheme


@dataclass(frozen=True)
class Sharding:
    """How the ranks split the model: TP within a replica, PP stages, DP replicas, expert parallelism."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: bool = False

    @property
    def moe_ranks(self) -> int:
        return self.tp * self.dp


def _attention_elements(arch: Arch, tp: int, heads: int | None = None) -> tuple[float, float]:
    """(quantizable linear elements, other elements) of one attention block on one rank (`heads`: this
    layer's query heads where they vary by layer)."""
    h, hd = arch.hidden, arch.head_dim
    n_heads = heads or arch.heads
    lin, other = 0.0, 0.0
    if arch.mla:
        m = arch.mla
        qk = m["qk_nope_head_dim"] + m["qk_rope_head_dim"]
        if m["q_lora_rank"]:
            lin += h * m["q_lora_rank"] + m["q_lora_rank"] * n_heads * qk / tp
            other += m["q_lora_rank"]
        else:
            lin += h * n_heads * qk / tp
        lin += h * (m["kv_lora_rank"] + m["qk_rope_head_dim"])  # replicated on every rank
        lin += m["kv_lora_rank"] * n_heads * (m["qk_nope_head_dim"] + m["v_head_dim"]) / tp
        lin += n_heads * m["v_head_dim"] * h / tp
        other += m["kv_lora_rank"]
        return lin, other
    kv_rank = max(1, arch.kv_heads // tp)  # replicated when there are fewer KV heads than ranks
    q_out = n_heads * hd / tp
    lin += h * q_out * (2 if arch.q_gate else 1) + 2 * h * kv_rank * hd + q_out * h
    if arch.qkv_bias or arch.all_bias:
        other += q_out + 2 * kv_rank * hd
    if arch.all_bias:
        other += h
    if arch.qk_norm:
        other += 2 * hd
    if arch.model_type == "gpt_oss":
        other += n_heads / tp  # attention sinks
    return lin, other


def _v4_attention_elements(arch: Arch, idx: int, tp: int) -> tuple[float, float]:
    """DeepSeek V4's attention on one rank: (quantized linear elements, other elements). Its low-rank query, the
    single latent KV head and the grouped low-rank output (`fused_wqa_wkv` replicated, `wq_b` and `wo_a` split by
    TP's columns, `wo_b` by its rows: models/deepseek_v4/attention.py@v0.27.1:225-260); on compressed layers the
    compressor's unquantized `fused_wkv_wgate` and float32 `ape` (compressor.py@v0.27.1:270-293), on ratio-4
    layers the replicated indexer (`wq_b` quantized, `weights_proj` not, its own compressor: attention.py
    @v0.27.1:750-765, 797-806); the hyper-connections' float32 mixers (nvidia/model.py@v0.27.1:852-896), counted as
    twice their elements at 16 bits."""
    v, h, hd, heads = arch.v4, arch.hidden, arch.head_dim, arch.heads
    ratio = arch.compress_ratios[idx] if idx < len(arch.compress_ratios) else 1
    lin = h * (v["q_lora"] + hd) + v["q_lora"] * heads * hd / tp + heads * hd * v["o_lora"] / tp
    lin += v["o_groups"] * v["o_lora"] * h / tp
    mix = (2 + v["hc_mult"]) * v["hc_mult"]
    other = v["q_lora"] + hd + 2 * heads / tp + 2 * 2 * mix * (v["hc_mult"] * h + 1)
    if ratio > 1:
        coff = 2 if ratio == 4 else 1
        other += h * 2 * coff * hd + 2 * ratio * coff * hd + hd
    if ratio == 4:
        ih, ihd = v["index_heads"], v["index_head_dim"]
        lin += v["q_lora"] * ih * ihd
        other += h * ih + h * 2 * 2 * ihd + 2 * 4 * 2 * ihd + 2 * ihd
    return lin, other


def mla_absorbed_bytes(arch: Arch, tp: int, act_bytes: float) -> float:
    """Per-layer copies vLLM 0.7's V0 MLA backend builds after loading (matrix absorption, on by default).

    vllm/attention/backends/mla/utils.py@v0.7.1:313-395: W_Q_UK (q_in x heads*kv_lora), W_UV_O
    (heads*kv_lora x hidden) and W_QR (q_in x heads*rope) are new tensors in the activation dtype;
    W_UK/W_UV are views of kv_b_proj. They count in "Loading model weights took"."""
    m = arch.mla
    if m is None:
        return 0.0
    heads = arch.heads / tp
    q_in = m["q_lora_rank"] or arch.hidden
    per_layer = q_in * heads * m["kv_lora_rank"] + heads * m["kv_lora_rank"] * arch.hidden
    per_layer += q_in * heads * m["qk_rope_head_dim"]
    return per_layer * act_bytes


def _recurrent_elements(arch: Arch, tp: int) -> tuple[float, float]:
    """(linear, other) elements of one gated-delta-net / Mamba2 mixer on one rank."""
    r = arch.recurrent
    assert r is not None
    h = arch.hidden
    if r.style == "gdn":
        value = r.heads * r.head_dim
        lin = h * (r.conv_dim + value + 2 * r.heads) / tp + value * h / tp  # in_proj qkv, z, b, a; out_proj
        other = (r.conv_dim * r.conv_kernel + 2 * r.heads) / tp + r.head_dim  # conv1d, A_log, dt_bias, norm
        return lin, other
    inter = r.intermediate
    lin = h * (2 * inter + 2 * r.groups * r.state_dim + r.heads) / tp + inter * h / tp
    other = (r.conv_dim * r.conv_kernel + 3 * r.heads + inter) / tp
    return lin, other


@dataclass(frozen=True)
class Elements:
    """Weight elements one rank holds, by the tensor class a quantization scheme prices separately.

    Why by class: bytes are elements x each class's bytes per element (`QuantScheme`), and the checkpoint's
    own bytes per class (the lock's safetensors facts, `checkpoint_weights.py`) replace the scheme's price
    class by class while vLLM's sharding rules, counted here, still decide which rank holds what."""

    linear: float = 0.0  # attention projections
    mlp: float = 0.0  # dense MLP and shared experts
    expert: float = 0.0  # routed experts
    other: float = 0.0  # norms, routers, biases (kept in the activation dtype)
    embed: float = 0.0  # embeddings and lm_head

    def __add__(self, o: Elements) -> Elements:
        return Elements(self.linear + o.linear, self.mlp + o.mlp, self.expert + o.expert, self.other + o.other,
                        self.embed + o.embed)

    def bytes(self, q: QuantScheme) -> float:
        mlp = q.mlp if q.mlp is not None else q.linear
        embed = q.embed if q.embed is not None else q.other
        return self.linear * q.linear + self.mlp * mlp + self.expert * q.expert + self.other * q.other + \
            self.embed * embed


def _mlp_elements(arch: Arch, idx: int, sh: Sharding, expert_pad: int) -> tuple[float, float, float]:
    """(mlp, expert, other) elements of layer `idx`'s MLP on one rank."""
    h = arch.hidden
    if arch.is_moe and arch.moe_layers[idx]:
        inter = arch.moe_intermediate or 0
        mats = 3 if arch.gated_mlp else 2
        if sh.ep:
            experts_rank = -(-arch.num_experts // sh.moe_ranks)
            expert_elems = experts_rank * mats * h * inter
            inter_rank = inter
        else:
            inter_rank = round_up(inter // sh.moe_ranks, expert_pad)
            expert_elems = arch.num_experts * mats * h * inter_rank
            experts_rank = arch.num_experts
        other = h * arch.num_experts  # router, replicated
        if arch.model_type == "gpt_oss":  # expert biases, kept in fp32
            other += experts_rank * (2 * inter_rank + h) * 2
        shared = 3 * h * arch.shared_intermediate / sh.tp if arch.shared_intermediate else 0.0
        if arch.shared_intermediate and arch.model_type in ("qwen2_moe",):
            other += h
        return shared, expert_elems, other
    width = arch.mlp_width(idx)  # per layer where intermediate_size is a per-layer list
    if width:
        n_mats = 3 if arch.gated_mlp else 2
        extra = (width / sh.tp + h) if arch.all_bias else 0.0
        return n_mats * h * width / sh.tp, 0.0, extra
    return 0.0, 0.0, 0.0


def layer_elements(arch: Arch, idx: int, sh: Sharding, expert_pad: int = 1) -> Elements:
    """Weight elements of decoder layer `idx` on one rank (`expert_pad`: the scheme's expert padding)."""
    kind = arch.layer_kinds[idx] if idx < len(arch.layer_kinds) else None
    if kind is not None and kind.kind == "linear" and arch.recurrent is not None:
        lin, other = _recurrent_elements(arch, sh.tp)
    elif arch.compress_ratios:
        lin, other = _v4_attention_elements(arch, idx, sh.tp)
    else:
        lin, other = _attention_elements(arch, sh.tp, arch.heads_at(idx))
    other += arch.norms_per_layer * arch.hidden
    if arch.indexer and idx < len(arch.indexer_layers) and arch.indexer_layers[idx] and arch.mla:
        # Replicated on every rank: `wq_b` (quantized like the attention) and `wk` + `weights_proj` in the model
        # dtype (vLLM upcasts an FP8 `wk`), its LayerNorm (vllm/models/deepseek_v32/attention.py@v0.32.0:71-86).
        heads, hd = arch.indexer["heads"], arch.indexer["head_dim"]
        lin += arch.mla["q_lora_rank"] * heads * hd
        other += arch.hidden * (hd + heads) + 2 * hd
    mlp, expert, mlp_other = _mlp_elements(arch, idx, sh, expert_pad)
    return Elements(linear=lin, mlp=mlp, expert=expert, other=other + mlp_other)


def layer_bytes(arch: Arch, idx: int, sh: Sharding, q: QuantScheme) -> float:
    """Bytes of decoder layer `idx` on one rank."""
    return layer_elements(arch, idx, sh, q.expert_pad).bytes(q)


def rank_elements(arch: Arch, sh: Sharding, expert_pad: int = 1, vocab_pad: int = VOCAB_PADDING) -> list[Elements]:
    """Weight elements each PP stage's rank holds after loading (one entry per PP rank); `expert_pad` and
    `vocab_pad` are the padding vLLM allocates (1: the checkpoint's own shapes)."""
    if arch.vocab is None:
        raise SizingError("config.json lacks vocab_size (needed for the embedding and lm_head)")
    if not arch.is_moe and arch.intermediate is None:
        raise SizingError("config.json lacks intermediate_size")
    emb = Elements(embed=round_up(arch.vocab, vocab_pad) / sh.tp * arch.hidden)
    out: list[Elements] = []
    ranges = pp_layer_ranges(arch.layers, sh.pp)
    for stage, rng in enumerate(ranges):
        lin = mlp = expert = other = 0.0
        for i in rng:
            e = layer_elements(arch, i, sh, expert_pad)
            lin, mlp, expert, other = lin + e.linear, mlp + e.mlp, expert + e.expert, other + e.other
        total = Elements(lin, mlp, expert, other)
        first, last = stage == 0, stage == len(ranges) - 1
        if first:
            total += emb
        if last:
            total += Elements(other=arch.hidden)  # final norm
            if not arch.tied or not first:
                total += emb  # lm_head (a tied head is materialised on the last rank under PP)
        out.append(total)
    return out


def rotary_bytes(arch: Arch, act_bytes: float) -> float:
    """The rotary cos/sin cache buffers every rank builds (counted in vLLM's weights)."""
    return (arch.rope_positions or arch.max_len or 0) * arch.rotary_dim * act_bytes


def weights_bytes_per_rank(arch: Arch, sh: Sharding, q: QuantScheme, act_bytes: float) -> list[float]:
    """Bytes each PP stage's rank holds after loading (one entry per PP rank), priced by `q`.

    Raises `ConfigFieldError` when config.json cannot price the weights (`QuantScheme.headers_needed`)."""
    if q.headers_needed:
        raise ConfigFieldError(q.headers_needed)
    rotary = rotary_bytes(arch, act_bytes)
    return [e.bytes(q) + rotary for e in rank_elements(arch, sh, q.expert_pad)]


def vision_bytes(arch: Arch, act_bytes: float) -> float:
    """A ViT tower and its projector from ``vision_config`` (kept in the activation dtype, unsharded).

    Approximate: layer count, width, MLP size and gating are read; patch/position embeddings and the
    projector are the usual shapes (the bound carries +30 %)."""
    v = arch.vision
    if not v:
        return 0.0
    h, inter, layers = v["hidden"], v["intermediate"], v["layers"]
    mlp = (3 if v.get("gated") else 2) * h * inter  # gate+up+down, or fc1+fc2 (vision._GATED_VISION_ACTS)
    per_layer = 4 * h * h + 4 * h + mlp + inter + h + 4 * h
    patch = v["channels"] * v["patch"] ** 2 * h * 2
    out = v["out"] or arch.hidden
    projector = 4 * h * 4 * h + 4 * h * out if v["out"] else h * out
    return (layers * per_layer + patch + projector) * act_bytes


def draft_bytes(arch: Arch, method: str, sh: Sharding, q: QuantScheme) -> tuple[float, int]:
    """(bytes, extra attention layers) a speculative-decoding drafter adds on one rank.

    MTP reuses the checkpoint's MTP layers (one decoder layer each, plus the hidden-state projection;
    embedding and LM head are shared). EAGLE/EAGLE3 drafts are one decoder layer of the target's
    shape plus their input projection; ngram needs no GPU memory."""
    if method in ("ngram", "suffix", "") or not method:
        return 0.0, 0
    h = arch.hidden
    last = arch.layers - 1
    if method in ("mtp", "deepseek_mtp", "qwen3_next_mtp", "ernie_mtp"):
        n = max(arch.mtp_layers, 1)
        return n * (layer_bytes(arch, last, sh, q) + 2 * h * h / sh.tp * q.linear + 4 * h * q.other), n
    if method in ("eagle", "eagle3", "eagle-3", "medusa"):
        fc = (3 if method.startswith("eagle3") or method == "eagle-3" else 2) * h * h * q.other
        return layer_bytes(arch, 0, Sharding(sh.tp, 1, 1, False), q) + fc, 1
    raise SizingError(f"speculative method {method!r} loads a separate draft model the lock does not describe: "
                      "use method mtp (checkpoint's own MTP layers), eagle, eagle3 or ngram")


def checkpoint_bytes(facts: ModelFacts, act_bytes: float = 2.0, quantization: str | None = None) -> int:
    """Bytes of the checkpoint's tensors — the one definition (PVC size, memory requests, weights).

    In order of trust: the lock's measured sum, its bytes per layer kind, the safetensors element
    counts, the sourced parameter count at the activation dtype, and last a tensor-by-tensor count of
    one unsharded rank from ``config.json`` (several lock entries lack the first four). Raises
    SizingError when the config is too thin for that too.
    """
    if facts.weight_bytes:
        return int(facts.weight_bytes)
    if facts.tensor_bytes:
        return sum(n for per in facts.tensor_bytes.values() for n in per.values())
    if facts.param_counts:
        return bytes_of_counts(facts.param_counts)
    if facts.parameter_count:
        return int(facts.parameter_count * act_bytes)
    with reading_config():
        arch = parse_arch(facts.text_config())
        scheme = quant_scheme(arch.quant, quantization, act_bytes, arch.layers)
        return int(sum(weights_bytes_per_rank(arch, Sharding(), scheme, act_bytes)))
