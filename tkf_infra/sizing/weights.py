"""Bytes of weights each GPU rank holds once vLLM has loaded the model, and a checkpoint's size.

Counted tensor by tensor from ``config.json`` with vLLM's sharding rules: TP splits linears and the
(padded) vocabulary, KV projections are replicated when there are fewer KV heads than ranks,
norms and routers are replicated, PP gives each rank its slice of layers.
"""

from __future__ import annotations

from dataclasses import dataclass

from tkf_infra.sizing.arch import VOCAB_PADDING, Arch, parse_arch, pp_layer_ranges, round_up
from tkf_infra.sizing.facts import ModelFacts, bytes_of_counts
from tkf_infra.sizing.params import SizingError


@dataclass(frozen=True)
class QuantScheme:
    """Bytes per element for each tensor class once vLLM has loaded the model."""

    name: str
    linear: float  # attention/MLP projections
    expert: float  # MoE experts
    other: float  # embeddings, lm_head, norms, routers (kept in the activation dtype)
    expert_pad: int = 1  # experts' intermediate size per rank is padded to this multiple


def quant_scheme(arch: Arch, quantization: str | None, act_bytes: float) -> QuantScheme:
    """Pick per-class bytes from ``--quantization`` and the checkpoint's quantization_config."""
    qc = arch.quant or {}
    method = str(quantization or qc.get("quant_method") or "").lower()
    method = method.replace("_marlin", "").replace("-marlin", "")
    if not method or method in ("none", "null"):
        return QuantScheme("none", act_bytes, act_bytes, act_bytes)
    bits = int(qc.get("bits") or qc.get("w_bit") or 4)
    group = int(qc.get("group_size") or qc.get("q_group_size") or 128)
    if method == "compressed-tensors":
        groups = qc.get("config_groups") or {}
        weights = next((g.get("weights") for g in groups.values() if isinstance(g, dict)), None) or {}
        nbits = int(weights.get("num_bits") or 8)
        if weights.get("type") == "float" or (nbits == 8 and weights.get("type") != "int"):
            return QuantScheme("compressed-tensors-fp8", 1.0, 1.0, act_bytes)
        bits, group = nbits, int(weights.get("group_size") or 128)
        method = "gptq"
    if method in ("fp8", "fbgemm_fp8", "modelopt", "ptpc_fp8"):
        return QuantScheme(method, 1.0, 1.0, act_bytes)
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin", "gptq_bitblas"):
        g = group if group > 0 else 4096
        per = bits / 8 + 2 / g + (bits / 8 / g)  # packed weights + fp16 scales + packed zeros
        return QuantScheme(method, per, per, act_bytes)
    if method == "mxfp4":
        # 4-bit values + one E8M0 scale per 32; attention stays in the activation dtype. The
        # expert intermediate size is padded to a multiple of 256 for the kernels.
        return QuantScheme("mxfp4", act_bytes, 0.5 + 1 / 32, act_bytes, expert_pad=256)
    if method in ("bitsandbytes", "bnb"):
        return QuantScheme("bitsandbytes", 0.5 + 1 / 64, 0.5 + 1 / 64, act_bytes)
    if method in ("nvfp4", "modelopt_fp4"):
        return QuantScheme(method, 0.5625, 0.5625, act_bytes)
    raise SizingError(
        f"quantization {method!r} is not modelled: use one of awq, gptq, fp8, compressed-tensors, "
        "mxfp4, bitsandbytes, nvfp4 (or none)"
    )


def _layer_bytes(arch: Arch, idx: int, tp: int, q: QuantScheme) -> float:
    h, hd = arch.hidden, arch.head_dim
    lin = 0.0  # quantizable linear elements on this rank
    other = float(arch.norms_per_layer * h)
    if arch.mla:
        m = arch.mla
        qk = m["qk_nope_head_dim"] + m["qk_rope_head_dim"]
        if m["q_lora_rank"]:
            lin += h * m["q_lora_rank"] + m["q_lora_rank"] * arch.heads * qk / tp
            other += m["q_lora_rank"]
        else:
            lin += h * arch.heads * qk / tp
        lin += h * (m["kv_lora_rank"] + m["qk_rope_head_dim"])  # replicated on every rank
        lin += m["kv_lora_rank"] * arch.heads * (m["qk_nope_head_dim"] + m["v_head_dim"]) / tp
        lin += arch.heads * m["v_head_dim"] * h / tp
        other += m["kv_lora_rank"]
    else:
        kv_rank = max(1, arch.kv_heads // tp)  # replicated when there are fewer KV heads than ranks
        q_out = arch.heads * hd / tp
        lin += h * q_out + 2 * h * kv_rank * hd + q_out * h
        if arch.qkv_bias or arch.all_bias:
            other += q_out + 2 * kv_rank * hd
        if arch.all_bias:
            other += h
        if arch.qk_norm:
            other += 2 * hd
        if arch.model_type == "gpt_oss":
            other += arch.heads / tp  # attention sinks
    expert_elems = 0.0
    if arch.is_moe and arch.moe_layers[idx]:
        inter = arch.moe_intermediate or 0
        inter_rank = round_up(inter // tp, q.expert_pad)
        expert_elems = arch.num_experts * (3 if arch.gated_mlp else 2) * h * inter_rank
        if arch.model_type == "gpt_oss":  # expert biases, kept in fp32
            other += arch.num_experts * (2 * inter_rank + h) * 2
        other += h * arch.num_experts  # router, replicated
        if arch.shared_intermediate:
            lin += 3 * h * arch.shared_intermediate / tp
            if arch.model_type in ("qwen2_moe",):
                other += h
    elif arch.intermediate:
        n_mats = 3 if arch.gated_mlp else 2
        lin += n_mats * h * arch.intermediate / tp
        if arch.all_bias:
            other += arch.intermediate / tp + h
    return lin * q.linear + expert_elems * q.expert + other * q.other


def weights_bytes_per_rank(arch: Arch, tp: int, pp: int, q: QuantScheme, act_bytes: float) -> list[float]:
    """Bytes each PP stage's rank holds after loading (one entry per PP rank)."""
    if arch.vocab is None:
        raise SizingError("config.json lacks vocab_size (needed for the embedding and lm_head)")
    if not arch.is_moe and arch.intermediate is None:
        raise SizingError("config.json lacks intermediate_size")
    vocab_rank = round_up(arch.vocab, VOCAB_PADDING) / tp
    emb = vocab_rank * arch.hidden * q.other
    rotary = (arch.max_len or 0) * arch.rotary_dim * act_bytes  # cos/sin cache buffer
    out: list[float] = []
    ranges = pp_layer_ranges(arch.layers, pp)
    for stage, rng in enumerate(ranges):
        total = sum(_layer_bytes(arch, i, tp, q) for i in rng) + rotary
        first, last = stage == 0, stage == len(ranges) - 1
        if first:
            total += emb
        if last:
            total += arch.hidden * q.other  # final norm
            if not arch.tied or not first:
                total += emb  # lm_head (a tied head is materialised on the last rank under PP)
        out.append(total)
    return out


def checkpoint_bytes(facts: ModelFacts, act_bytes: float = 2.0, quantization: str | None = None) -> int:
    """Bytes of the checkpoint's tensors — the one definition (PVC size, memory requests, weights).

    In order of trust: the lock's measured sum, the safetensors element counts, the sourced
    parameter count at the activation dtype, and last a tensor-by-tensor count of one unsharded rank
    from ``config.json`` (several lock entries lack the first three). Raises SizingError when the
    config is too thin for that too.
    """
    if facts.weight_bytes:
        return int(facts.weight_bytes)
    if facts.param_counts:
        return bytes_of_counts(facts.param_counts)
    if facts.parameter_count:
        return int(facts.parameter_count * act_bytes)
    arch = parse_arch(facts.text_config())
    return int(sum(weights_bytes_per_rank(arch, 1, 1, quant_scheme(arch, quantization, act_bytes), act_bytes)))
