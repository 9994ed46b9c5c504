"""Predict, per GPU rank, the memory figures vLLM prints at start-up, and decide fit / no fit.

Pure functions, no Pulumi and no I/O, so the same code runs in ``pulumi preview`` (dynamic
provider), in the ``size`` CLI and in the accuracy bench.

The accounting follows vLLM's v1 engine (see docs/sizing.md in the project and the sizing
reference it cites):

    requested      R  = total x gpu_memory_utilization
    available_kv      = R - weights - activation_peak - non_torch   (- cuda_graphs from v0.21)
    num_blocks        = floor(available_kv / bytes per block over the rank's layers/groups)

Weights are counted tensor by tensor from ``config.json`` with vLLM's sharding rules (TP splits
linears and the vocabulary, KV projections are replicated when there are fewer KV heads than
ranks, norms/routers are replicated, PP gives each rank its slice of layers). Activation,
non-torch and CUDA-graph terms are version-dependent constants and slopes calibrated on real
start-up logs (``VersionProfile``); they are the approximate part.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

from tkf_infra.sizing.facts import DTYPE_BYTES, ModelFacts
from tkf_infra.sizing.gpus import GpuSpec

GIB = 2**30
DEFAULT_BLOCK_SIZE = 16
VOCAB_PADDING = 64  # vLLM pads the vocabulary to a multiple of 64 before splitting it across TP ranks

_MLA_MODEL_TYPES = frozenset({
    "deepseek_v2", "deepseek_v3", "deepseek_v32", "deepseek_mtp", "kimi_k2", "kimi_linear",
    "longcat_flash", "pangu_ultra_moe", "pangu_ultra_moe_mtp",
})  # fmt: skip
# Models whose config leaves num_key_value_heads implicit use these aliases.
_KV_HEAD_KEYS = ("num_key_value_heads", "n_head_kv", "num_kv_heads", "multi_query_group_num")
_MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                 "model_max_length", "max_target_positions", "max_sequence_length")  # fmt: skip


class SizingError(ValueError):
    """The facts are not enough to size the model (the message names the missing field)."""


# --------------------------------------------------------------------------------------------
# Versions and calibrated constants
# --------------------------------------------------------------------------------------------


def parse_vllm_version(text: str) -> tuple[int, int, int]:
    """Accept ``0.11.0``, ``v0.11.0`` or an image ref such as ``vllm/vllm-openai:v0.11.0``."""
    tag = text.rsplit(":", 1)[-1] if ":" in text else text
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", tag)
    if not match:
        raise SizingError(
            f"cannot read a vLLM version from {text!r}: pin the image to a release tag such as "
            "vllm/vllm-openai:v0.19.0 (a floating tag like 'latest' cannot be sized)"
        )
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


@dataclass(frozen=True)
class VersionProfile:
    """Constants that change between vLLM releases.

    ``sampler_bytes_per_element`` x max_num_seqs x vocab is the sampler's share of the profiled
    activation peak; ``warmup_bytes_per_element`` is what the sampler warm-up after KV allocation
    needs (fp32 logits + sorted values + int64 indices + probabilities + noise = 24 B).
    """

    name: str
    sampler_bytes_per_element: float
    activation_base_gib: float
    non_torch_tp1_gib: float
    non_torch_multi_gib: float
    context_single_gib: float
    context_multi_gib: float
    graphs_reserved: bool
    warmup_bytes_per_element: float = 24.0
    source: str = ""


# v0.19: fitted on the 29 H100 start-ups in tests/data/calibration (activation = 0.123 GiB +
# 14.45 B x seqs x vocab; non-torch 0.24-0.27 GiB at TP1, 2.06-2.21 GiB at TP>1; memory in use
# before vLLM's snapshot 0.51 GiB single-GPU, 1.43-1.55 GiB multi-GPU).
_V019 = VersionProfile(
    "v0.19-calibrated",
    14.45,
    0.123,
    0.25,
    2.15,
    0.51,
    1.55,
    False,
    source="fitted on vLLM 0.19.0 H100 start-up logs (llm-d-planner PR 205)",
)
# v0.11: sampler-dominated activation of ~39 B per element and non-torch 0.13 / 0.55 GiB, as
# reported by llm-d's H100 measurements (sizing reference, table b). Used for every release before
# 0.19 because it is the larger (safer) of the two measured profiles.
_V011 = VersionProfile(
    "v0.11-reference",
    39.0,
    0.0,
    0.13,
    0.55,
    0.51,
    1.55,
    False,
    source="llm-d empirical results for vLLM 0.11 (sizing reference table b)",
)


def version_profile(version: tuple[int, int, int]) -> VersionProfile:
    if version < (0, 19, 0):
        return _V011
    if version >= (0, 21, 0):
        # CUDA-graph memory is reserved out of the KV budget by default since v0.21.
        return replace(_V019, name="v0.21+-graphs-reserved", graphs_reserved=True)
    return _V019


# --------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServingParams:
    """How one model is served (the catalog entry's vLLM flags). ``None`` means vLLM's default."""

    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.9
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    dtype: str = "auto"
    quantization: str | None = None
    kv_cache_dtype: str = "auto"
    enforce_eager: bool = False
    block_size: int | None = None
    vllm_version: str = "0.19.0"
    cpu_kv_cache_gib: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServingParams:
        """Rebuild from a dict; integral floats become ints again (the Pulumi wire has only doubles)."""
        fields = cls.__dataclass_fields__
        known: dict[str, Any] = {}
        for k, v in data.items():
            if k not in fields or v is None:
                continue
            if isinstance(v, float) and v.is_integer() and "int" in str(fields[k].type) and "float" not in str(
                    fields[k].type):
                v = int(v)
            known[k] = v
        return cls(**known)


@dataclass(frozen=True)
class LayerKind:
    """Attention kind of one decoder layer: full, sliding (with window) or mla."""

    kind: str
    window: int | None = None


@dataclass(frozen=True)
class Arch:
    """The architecture fields sizing needs, normalised from a (text) config."""

    model_type: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int | None
    vocab: int | None
    tied: bool
    layer_kinds: tuple[LayerKind, ...]
    gated_mlp: bool
    qkv_bias: bool
    all_bias: bool
    norms_per_layer: int
    qk_norm: bool
    num_experts: int
    experts_per_tok: int
    moe_intermediate: int | None
    shared_intermediate: int
    moe_layers: tuple[bool, ...]
    mla: dict[str, int] | None
    max_len: int | None
    rotary_dim: int
    torch_dtype: str | None
    quant: dict[str, Any] | None
    multimodal: bool
    missing: tuple[str, ...] = ()

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0


def _first(cfg: dict[str, Any], *keys: str) -> Any:
    for key in keys:
        if cfg.get(key) is not None:
            return cfg[key]
    return None


def derive_max_len(cfg: dict[str, Any]) -> int | None:
    """vLLM's default max_model_len: the smallest length key, scaled by the rope factor."""
    lengths = [int(cfg[k]) for k in _MAX_LEN_KEYS if isinstance(cfg.get(k), int | float)]
    if not lengths:
        return None
    length = min(lengths)
    rope = cfg.get("rope_scaling") or {}
    if isinstance(rope, dict) and cfg.get("model_type") not in ("gemma3", "gemma3_text"):
        rtype = str(rope.get("rope_type") or rope.get("type") or "")
        factor = rope.get("factor")
        if factor and rtype not in ("llama3", "longrope", "su", "mrope", "default", ""):
            if rtype == "yarn" and rope.get("original_max_position_embeddings"):
                length = int(rope["original_max_position_embeddings"])
            length = int(length * float(factor))
    return length


def parse_arch(config: dict[str, Any]) -> Arch:
    """Normalise a text config. Raises SizingError naming any field sizing cannot do without."""
    cfg = config
    mt = str(cfg.get("model_type") or "")
    missing: list[str] = []

    def need(*keys: str) -> int:
        val = _first(cfg, *keys)
        if val is None:
            missing.append(keys[0])
            return 0
        return int(val)

    layers = need("num_hidden_layers", "n_layer", "num_layers")
    hidden = need("hidden_size", "n_embd", "d_model")
    heads = need("num_attention_heads", "n_head", "num_heads")
    kv_val = _first(cfg, *_KV_HEAD_KEYS)
    if kv_val is None:
        kv_val = 1 if cfg.get("multi_query") else heads
    kv_heads = int(kv_val)
    hd = _first(cfg, "head_dim", "hidden_size_per_head")
    head_dim = int(hd) if hd else (hidden // heads if heads else 0)
    if missing:
        raise SizingError("config.json lacks " + ", ".join(missing))

    mla: dict[str, int] | None = None
    if cfg.get("kv_lora_rank") and (mt in _MLA_MODEL_TYPES or "qk_rope_head_dim" in cfg):
        mla = {
            "kv_lora_rank": int(cfg["kv_lora_rank"]),
            "qk_rope_head_dim": int(cfg.get("qk_rope_head_dim") or 64),
            "qk_nope_head_dim": int(cfg.get("qk_nope_head_dim") or 128),
            "v_head_dim": int(cfg.get("v_head_dim") or 128),
            "q_lora_rank": int(cfg.get("q_lora_rank") or 0),
        }

    # Attention pattern per layer.
    window = cfg.get("sliding_window")
    use_sw = cfg.get("use_sliding_window", True)
    layer_types = cfg.get("layer_types")
    kinds: list[LayerKind] = []
    if mla:
        kinds = [LayerKind("mla")] * layers
    elif isinstance(layer_types, list) and len(layer_types) == layers:
        for lt in layer_types:
            sliding = "sliding" in str(lt) or "local" in str(lt)
            kinds.append(LayerKind("sliding", int(window)) if sliding and window else LayerKind("full"))
    elif window and use_sw is not False and mt in ("gemma2", "gemma3", "gemma3_text"):
        pattern = int(cfg.get("sliding_window_pattern") or (6 if mt.startswith("gemma3") else 2))
        kinds = [LayerKind("full") if (i + 1) % pattern == 0 else LayerKind("sliding", int(window))
                 for i in range(layers)]  # fmt: skip
    elif (
        window
        and use_sw is not False
        and mt in ("mistral", "mixtral", "phi3", "starcoder2", "qwen2")
        and (mt != "qwen2" or cfg.get("use_sliding_window"))
    ):
        # Qwen2 only slides when use_sliding_window is true; Mistral-style configs slide every layer.
        kinds = [LayerKind("sliding", int(window))] * layers
    if not kinds:
        kinds = [LayerKind("full")] * layers

    # MoE.
    num_experts = int(_first(cfg, "num_experts", "n_routed_experts", "num_local_experts") or 0)
    topk = int(_first(cfg, "num_experts_per_tok", "experts_per_token", "moe_topk") or 0)
    moe_inter = _first(cfg, "moe_intermediate_size")
    intermediate = _first(cfg, "intermediate_size", "ffn_hidden_size", "n_inner")
    if intermediate is None and "n_inner" in cfg and hidden:
        intermediate = 4 * hidden  # GPT-style configs: n_inner null means 4 x n_embd
    if num_experts and moe_inter is None:
        moe_inter = intermediate
    shared = int(_first(cfg, "shared_expert_intermediate_size") or 0)
    if not shared and cfg.get("n_shared_experts") and moe_inter:
        shared = int(cfg["n_shared_experts"]) * int(moe_inter)
    moe_layers = [False] * layers
    if num_experts:
        first_dense = int(cfg.get("first_k_dense_replace") or 0)
        step = int(cfg.get("decoder_sparse_step") or cfg.get("moe_layer_freq") or 1)
        only_mlp = set(cfg.get("mlp_only_layers") or [])
        moe_layers = [i >= first_dense and (i + 1) % step == 0 and i not in only_mlp for i in range(layers)]

    non_gated = mt in (
        "phi",
        "mixformer-sequential",
        "gpt2",
        "gpt_neox",
        "falcon",
        "starcoder2",
        "gpt_bigcode",
        "opt",
        "bloom",
    )
    rotary_dim = head_dim
    if cfg.get("partial_rotary_factor"):
        rotary_dim = int(head_dim * float(cfg["partial_rotary_factor"]))
    if cfg.get("rotary_dim"):
        rotary_dim = int(cfg["rotary_dim"])
    if mla:
        rotary_dim = mla["qk_rope_head_dim"]

    vocab = _first(cfg, "vocab_size", "padded_vocab_size")
    tied = bool(cfg.get("tie_word_embeddings", mt in ("gemma", "gemma2", "gemma3", "gemma3_text")))
    quant = cfg.get("quantization_config") if isinstance(cfg.get("quantization_config"), dict) else None
    return Arch(
        model_type=mt,
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=int(intermediate) if intermediate else None,
        vocab=int(vocab) if vocab else None,
        tied=tied,
        layer_kinds=tuple(kinds),
        gated_mlp=not non_gated,
        qkv_bias=bool(cfg.get("attention_bias") or mt in ("qwen2", "qwen2_moe", "gpt_oss")),
        all_bias=non_gated,
        norms_per_layer=4 if mt.startswith("gemma2") or mt.startswith("gemma3") else 2,
        qk_norm=mt in ("qwen3", "qwen3_moe", "gemma3", "gemma3_text"),
        num_experts=num_experts,
        experts_per_tok=topk,
        moe_intermediate=int(moe_inter) if moe_inter else None,
        shared_intermediate=shared,
        moe_layers=tuple(moe_layers),
        mla=mla,
        max_len=derive_max_len(cfg),
        rotary_dim=rotary_dim,
        torch_dtype=_first(cfg, "torch_dtype", "dtype"),
        quant=quant,
        multimodal=bool(cfg.get("_multimodal")),
    )


# --------------------------------------------------------------------------------------------
# Parallelism rules
# --------------------------------------------------------------------------------------------


def parallelism_problems(arch: Arch, tp: int, pp: int) -> list[str]:
    """vLLM's divisibility rules; each message names the value and what is allowed."""
    problems: list[str] = []
    if tp < 1 or pp < 1:
        return [f"tensorParallelSize ({tp}) and pipelineParallelSize ({pp}) must be at least 1"]
    if arch.heads % tp:
        ok = [d for d in range(1, arch.heads + 1) if arch.heads % d == 0 and d <= 16]
        problems.append(
            f"tensorParallelSize {tp} does not divide the {arch.heads} attention heads "
            f"(vLLM refuses it); use one of {ok}"
        )
    if arch.mla is None and arch.kv_heads:
        kv = arch.kv_heads
        if (kv >= tp and kv % tp) or (kv < tp and tp % kv):
            problems.append(
                f"tensorParallelSize {tp} does not split the {kv} KV heads evenly (needs {kv} % tp == 0 "
                f"or tp % {kv} == 0)"
            )
    if arch.vocab:
        padded = _round_up(arch.vocab, VOCAB_PADDING)
        if padded % tp:
            problems.append(
                f"tensorParallelSize {tp} does not divide the padded vocabulary ({padded}); vLLM stops "
                f"with 'AssertionError: {padded} is not divisible by {tp}'"
            )
    if arch.is_moe and arch.moe_intermediate and arch.moe_intermediate % tp:
        problems.append(
            f"tensorParallelSize {tp} does not divide the expert intermediate size {arch.moe_intermediate}"
        )
    if pp > arch.layers:
        problems.append(f"pipelineParallelSize {pp} exceeds the {arch.layers} layers")
    return problems


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def pp_layer_ranges(layers: int, pp: int) -> list[range]:
    """Contiguous layer slices per PP rank; the remainder goes to the later ranks (as vLLM does)."""
    base, rem = divmod(layers, pp)
    sizes = [base + (1 if i >= pp - rem else 0) for i in range(pp)]
    out: list[range] = []
    start = 0
    for size in sizes:
        out.append(range(start, start + size))
        start += size
    return out


# --------------------------------------------------------------------------------------------
# Weights
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QuantScheme:
    """Bytes per element for each tensor class once vLLM has loaded the model."""

    name: str
    linear: float  # attention/MLP projections
    expert: float  # MoE experts
    other: float  # embeddings, lm_head, norms, routers (kept in the activation dtype)
    expert_pad: int = 1  # experts' intermediate size per rank is padded to this multiple


def quant_scheme(arch: Arch, params: ServingParams, act_bytes: float) -> QuantScheme:
    """Pick per-class bytes from ``--quantization`` and the checkpoint's quantization_config."""
    qc = arch.quant or {}
    method = str(params.quantization or qc.get("quant_method") or "").lower()
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
        inter_rank = _round_up(inter // tp, q.expert_pad)
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
    vocab_rank = _round_up(arch.vocab, VOCAB_PADDING) / tp
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


# --------------------------------------------------------------------------------------------
# KV cache
# --------------------------------------------------------------------------------------------


def kv_elem_bytes(kv_cache_dtype: str, act_bytes: float) -> float:
    if kv_cache_dtype.startswith("fp8"):
        return 1.0
    if kv_cache_dtype in ("auto", "", "bfloat16", "float16", "half"):
        return act_bytes
    raise SizingError(f"kvCacheDtype {kv_cache_dtype!r} is not known: use auto, fp8, fp8_e4m3 or fp8_e5m2")


@dataclass(frozen=True)
class KvLayout:
    """KV layout of one PP rank: per-layer page bytes grouped as vLLM's KV cache manager does."""

    block_size: int
    page_bytes: float  # bytes of one block of one layer
    kinds: tuple[LayerKind, ...]
    group_size: int  # layers sharing one tensor (hybrid) or 1 for uniform
    groups: tuple[LayerKind, ...]  # one entry per group (hybrid) / per layer (uniform)
    hybrid: bool

    @property
    def bytes_per_block_all_layers(self) -> float:
        return self.page_bytes * self.group_size * len(self.groups)

    def blocks_for(self, kind: LayerKind, max_len: int, mnbt: int) -> int:
        if kind.kind == "sliding" and kind.window:
            tokens = min(kind.window - 1 + mnbt, max_len)
            return -(-tokens // self.block_size) + 1
        return -(-max_len // self.block_size)

    def need_per_request(self, max_len: int, mnbt: int) -> float:
        """Bytes one max-length request needs on this rank (vLLM's start-up check)."""
        return sum(self.blocks_for(k, max_len, mnbt) for k in self.groups) * self.page_bytes * self.group_size

    def num_blocks(self, available: float) -> int:
        if available <= 0:
            return 0
        return int(
            available // (self.page_bytes * self.group_size * (len(self.groups) if not self.hybrid else 1))
        )

    def tokens(self, num_blocks: int) -> int:
        if self.hybrid:
            return (num_blocks // len(self.groups)) * self.block_size
        return num_blocks * self.block_size

    def concurrency(self, num_blocks: int, max_len: int, mnbt: int) -> float:
        if self.hybrid:
            per_req = sum(self.blocks_for(k, max_len, mnbt) for k in self.groups)
        else:
            per_req = self.blocks_for(self.groups[0], max_len, mnbt) if self.groups else 0
        return num_blocks / per_req if per_req else 0.0


def kv_layout(arch: Arch, layer_range: range, tp: int, kv_bytes: float, block_size: int) -> KvLayout:
    kinds = tuple(arch.layer_kinds[i] for i in layer_range)
    if arch.mla:
        m = arch.mla
        page = (
            block_size * (m["kv_lora_rank"] + m["qk_rope_head_dim"]) * kv_bytes
        )  # latent, no x2, replicated
    else:
        page = 2 * block_size * max(1, arch.kv_heads // tp) * arch.head_dim * kv_bytes
    types: dict[LayerKind, int] = {}
    for k in kinds:
        types[k] = types.get(k, 0) + 1
    if len(types) <= 1:
        return KvLayout(block_size, page, kinds, 1, kinds, hybrid=False)
    counts = list(types.values())
    g = min(counts)
    if max(counts) < 1.5 * min(counts):
        g = max(counts)
    groups: list[LayerKind] = []
    for kind, count in types.items():
        groups.extend([kind] * -(-count // g))
    return KvLayout(block_size, page, kinds, g, tuple(groups), hybrid=True)


# --------------------------------------------------------------------------------------------
# Estimate
# --------------------------------------------------------------------------------------------


@dataclass
class Estimate:
    """Per-rank prediction in the units vLLM prints (GiB), plus the verdict and the way out."""

    model: str
    gpu: str
    vllm_profile: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    total_gib: float
    requested_gib: float
    weights_gib: float
    activation_gib: float
    non_torch_gib: float
    cuda_graph_gib: float
    cuda_graph_reserved: bool
    available_kv_gib: float
    kv_bytes_per_token: float
    num_blocks: int
    kv_cache_tokens: int
    need_per_request_gib: float
    max_concurrency: float
    fits: bool
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    max_fitting_model_len: int | None = None
    cpu: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _act_bytes(arch: Arch, params: ServingParams) -> float:
    """vLLM's dtype resolution: fp32 checkpoints are downcast to bf16 under ``auto``."""
    dtype = params.dtype.lower()
    if dtype in ("float32", "fp32", "float"):
        return 4.0
    return 2.0


def _defaults(gpu: GpuSpec | None, params: ServingParams, max_len: int) -> tuple[int, int]:
    large = gpu.large_defaults if gpu else False
    seqs = params.max_num_seqs or (1024 if large else 256)
    mnbt = params.max_num_batched_tokens or (8192 if large else 2048)
    return seqs, max(mnbt, 1)


def _activation_gib(arch: Arch, prof: VersionProfile, seqs: int, mnbt: int, tp: int,
                    act_bytes: float, q: QuantScheme) -> float:  # fmt: skip
    vocab = arch.vocab or 0
    sampler = prof.sampler_bytes_per_element * min(seqs, mnbt) * vocab
    moe = 0.0
    if arch.is_moe and q.name != "mxfp4" and arch.moe_intermediate:
        # Fused-MoE intermediate caches over one profiling batch (chunked at 32768 tokens).
        m = min(mnbt, 32768) * arch.experts_per_tok
        n = 2 * arch.moe_intermediate / tp
        moe = m * (n + n / 2 + arch.hidden) * act_bytes
    return prof.activation_base_gib + (sampler + moe) / GIB


def _graph_gib(arch: Arch, layers_rank: int, tp: int, enforce_eager: bool) -> float:
    """CUDA-graph pool size; observed 0.65-1.8 GiB in v0.19 logs, growing with layers, higher for MoE."""
    if enforce_eager:
        return 0.0
    g = 0.40 + 0.016 * layers_rank - (0.15 if tp == 2 else 0.24 if tp > 2 else 0.0)
    if arch.is_moe:
        g += 1.0
    return max(g, 0.1)


def estimate(facts: ModelFacts | dict[str, Any], gpu: GpuSpec | None, params: ServingParams,
             model: str = "") -> Estimate:  # fmt: skip
    """Predict what vLLM prints for ``params`` on ``gpu`` (None = CPU profile) and judge the fit."""
    config = facts.text_config() if isinstance(facts, ModelFacts) else facts
    name = model or (
        facts.repo if isinstance(facts, ModelFacts) else str(config.get("_name_or_path", "model"))
    )
    arch = parse_arch(config)
    tp, pp = params.tensor_parallel_size, params.pipeline_parallel_size
    version = parse_vllm_version(params.vllm_version)
    prof = version_profile(version)
    act_bytes = _act_bytes(arch, params)
    kv_bytes = kv_elem_bytes(params.kv_cache_dtype, act_bytes)
    block = params.block_size or DEFAULT_BLOCK_SIZE
    derived_len = arch.max_len
    max_len = params.max_model_len or derived_len
    if not max_len:
        raise SizingError("maxModelLen is not set and config.json has no max_position_embeddings")
    problems = parallelism_problems(arch, tp, pp) if gpu is not None else []
    warnings: list[str] = []
    if derived_len and max_len > derived_len:
        problems.append(
            f"maxModelLen {max_len} is longer than the model's {derived_len} positions (vLLM refuses it "
            f"unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1); use maxModelLen <= {derived_len}"
        )
    if arch.multimodal:
        warnings.append("multimodal model: vision/audio tower memory and encoder profiling are not modelled")

    if gpu is None:
        try:  # the weights still live in memory on CPU: report them, the fit is about KV space
            cpu_weights = sum(weights_bytes_per_rank(arch, 1, 1, quant_scheme(arch, params, act_bytes), act_bytes))
        except SizingError:
            cpu_weights = _checkpoint_bytes(facts, act_bytes) or 0.0
        return _estimate_cpu(arch, name, params, max_len, kv_bytes, block, problems, warnings, prof,
                             cpu_weights / GIB)

    q = quant_scheme(arch, params, act_bytes)
    seqs, mnbt = _defaults(gpu, params, max_len)
    total = gpu.memory_gib
    u = params.gpu_memory_utilization
    requested = total * u
    try:
        weights = weights_bytes_per_rank(arch, tp, pp, q, act_bytes)
    except SizingError:
        # Config too thin for a tensor-by-tensor count: fall back to the checkpoint's own size.
        total_bytes = _checkpoint_bytes(facts, act_bytes)
        if total_bytes is None:
            raise
        weights = [total_bytes / (tp * pp)] * pp
        warnings.append("weights estimated from the checkpoint size split evenly (config.json incomplete)")
    activation = _activation_gib(arch, prof, seqs, mnbt, tp, act_bytes, q)
    multi = tp * pp > 1
    non_torch = prof.non_torch_multi_gib if tp > 1 else prof.non_torch_tp1_gib
    context = prof.context_multi_gib if multi else prof.context_single_gib
    ranges = pp_layer_ranges(arch.layers, pp)

    # Every rank sizes its own KV; vLLM then uses the smallest block count of all ranks.
    best: tuple[int, KvLayout, float, float, float] | None = None
    for stage, rng in enumerate(ranges):
        layout = kv_layout(arch, rng, tp, kv_bytes, block)
        graphs = _graph_gib(arch, len(rng), tp, params.enforce_eager)
        avail = requested - weights[stage] / GIB - activation - non_torch
        if prof.graphs_reserved:
            avail -= graphs
        blocks = layout.num_blocks(avail * GIB)
        if best is None or blocks < best[0] or (blocks == best[0] and avail < best[2]):
            best = (blocks, layout, avail, weights[stage] / GIB, graphs)
    assert best is not None
    blocks, layout, avail, w_gib, graphs = best
    need = max(layout.need_per_request(max_len, mnbt) for layout in
               (kv_layout(arch, r, tp, kv_bytes, block) for r in ranges))  # fmt: skip
    per_token = layout.page_bytes * len(layout.kinds) / block

    if context > total - requested + 1e-9:
        problems.append(
            f"gpuMemoryUtilization {u:.2f} asks for {requested:.2f} GiB but only about "
            f"{total - context:.2f} GiB of the {total:.2f} GiB is free when vLLM starts; "
            "use gpuMemoryUtilization <= "
            f"{math.floor((total - context) / total * 100) / 100:.2f}"
        )
    if avail <= 0:
        problems.append(
            f"no memory left for the KV cache: {w_gib:.1f} GiB of weights + {activation:.2f} GiB "
            f"activation + {non_torch:.2f} GiB non-torch exceed the {requested:.1f} GiB budget "
            f"({u:.2f} x {total:.2f} GiB)"
        )
    elif need > avail * GIB:
        problems.append(
            f"needs {need / GIB:.1f} GiB KV cache for maxModelLen {max_len} but {avail:.1f} GiB "
            f"is left after {w_gib:.1f} GiB of weights on one {gpu.name} at utilization {u:.2f}"
        )
    # The sampler warm-up after KV allocation runs in what is left outside the KV cache.
    if not problems:
        headroom = (total - context - requested) + activation - (0.0 if prof.graphs_reserved else graphs)
        warm = prof.warmup_bytes_per_element * min(seqs, mnbt) * (arch.vocab or 0) / GIB
        if warm > headroom:
            problems.append(
                f"the sampler warm-up with {min(seqs, mnbt)} dummy requests needs about {warm:.2f} GiB "
                f"but only {headroom:.2f} GiB stays free after weights, KV cache and CUDA graphs on one "
                f"{gpu.name}; "
                "vLLM would fail with 'CUDA out of memory occurred when warming up sampler' - lower "
                "maxNumSeqs or gpuMemoryUtilization"
            )

    fit_len = (
        largest_fitting_len(layout, avail * GIB, mnbt, block, derived_len or max_len) if avail > 0 else 0
    )
    return Estimate(
        model=name, gpu=gpu.name, vllm_profile=prof.name, tensor_parallel_size=tp, pipeline_parallel_size=pp,
        max_model_len=max_len, max_num_seqs=seqs, max_num_batched_tokens=mnbt, block_size=block,
        total_gib=total, requested_gib=requested, weights_gib=w_gib, activation_gib=activation,
        non_torch_gib=non_torch, cuda_graph_gib=graphs, cuda_graph_reserved=prof.graphs_reserved,
        available_kv_gib=avail, kv_bytes_per_token=per_token, num_blocks=blocks,
        kv_cache_tokens=layout.tokens(blocks), need_per_request_gib=need / GIB,
        max_concurrency=layout.concurrency(blocks, max_len, mnbt), fits=not problems,
        problems=problems, warnings=warnings, max_fitting_model_len=fit_len,
    )  # fmt: skip


def largest_fitting_len(layout: KvLayout, available: float, mnbt: int, block: int, limit: int) -> int:
    """Largest max_model_len (a multiple of the block size, <= limit) whose request fits."""
    lo, hi = 0, limit // block
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if layout.need_per_request(mid * block, mnbt) <= available:
            lo = mid
        else:
            hi = mid - 1
    return lo * block


def _estimate_cpu(arch: Arch, name: str, params: ServingParams, max_len: int, kv_bytes: float, block: int,
                  problems: list[str], warnings: list[str], prof: VersionProfile,
                  weights_gib: float) -> Estimate:  # fmt: skip
    """CPU profile: no GPU fit; the KV space (``cpuKvCacheGiB``) must hold one max-length request."""
    layout = kv_layout(arch, range(arch.layers), 1, kv_bytes, block)
    mnbt = params.max_num_batched_tokens or max_len
    space = (params.cpu_kv_cache_gib or 0.0) * GIB
    blocks = layout.num_blocks(space)
    need = layout.need_per_request(max_len, mnbt)
    if params.cpu_kv_cache_gib is None:
        problems.append("CPU serving needs cpuKvCacheGiB (VLLM_CPU_KVCACHE_SPACE) to be set")
    elif need > space:
        fit = largest_fitting_len(layout, space, mnbt, block, max_len)
        problems.append(
            f"needs {need / GIB:.2f} GiB KV cache for maxModelLen {max_len} but cpuKvCacheGiB is "
            f"{params.cpu_kv_cache_gib:g}; raise cpuKvCacheGiB to {math.ceil(need / GIB * 100) / 100:g} "
            f"or use maxModelLen <= {fit}"
        )
    return Estimate(
        model=name, gpu="cpu", vllm_profile=prof.name, tensor_parallel_size=1, pipeline_parallel_size=1,
        max_model_len=max_len, max_num_seqs=params.max_num_seqs or 256, max_num_batched_tokens=mnbt,
        block_size=block, total_gib=0.0, requested_gib=0.0, weights_gib=weights_gib, activation_gib=0.0,
        non_torch_gib=0.0, cuda_graph_gib=0.0, cuda_graph_reserved=False,
        available_kv_gib=space / GIB, kv_bytes_per_token=layout.page_bytes * len(layout.kinds) / block,
        num_blocks=blocks, kv_cache_tokens=layout.tokens(blocks), need_per_request_gib=need / GIB,
        max_concurrency=layout.concurrency(blocks, max_len, mnbt), fits=not problems, problems=problems,
        warnings=warnings, max_fitting_model_len=largest_fitting_len(layout, space, mnbt, block, max_len),
        cpu=True,
    )  # fmt: skip


# --------------------------------------------------------------------------------------------
# Suggestions
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Suggestion:
    """Ways out of a no-fit: smallest TP that fits, largest maxModelLen that fits at this TP."""

    tensor_parallel_size: int | None
    max_model_len: int | None

    def text(self) -> str:
        parts = []
        if self.tensor_parallel_size:
            parts.append(f"fits with tensorParallelSize {self.tensor_parallel_size}")
        if self.max_model_len:
            parts.append(f"maxModelLen <= {self.max_model_len}")
        return (
            ", or ".join(parts) if parts else "no tensorParallelSize up to the limit fits; use a larger GPU"
        )


def suggest(facts: ModelFacts | dict[str, Any], gpu: GpuSpec, params: ServingParams, max_tp: int = 8,
            current: Estimate | None = None) -> Suggestion:  # fmt: skip
    """Smallest power-of-two-or-divisor TP (<= max_tp) that fits, and the largest fitting maxModelLen."""
    cur = current or estimate(facts, gpu, params)
    best_tp: int | None = None
    for tp in range(1, max_tp + 1):
        if tp == params.tensor_parallel_size:
            if cur.fits:
                best_tp = tp
                break
            continue
        try:
            est = estimate(facts, gpu, replace(params, tensor_parallel_size=tp))
        except SizingError:
            continue
        if est.fits:
            best_tp = tp
            break
    fit_len: int | None = None
    only_kv = all(p.startswith("needs ") for p in cur.problems)
    if cur.max_fitting_model_len and only_kv:
        trial = estimate(facts, gpu, replace(params, max_model_len=cur.max_fitting_model_len))
        fit_len = cur.max_fitting_model_len if trial.fits else None
    return Suggestion(best_tp, fit_len)


def fit_message(est: Estimate, sugg: Suggestion | None) -> str:
    """One line a user can act on: model, numbers, and the way out."""
    reasons = "; ".join(est.problems)
    way = f"; {sugg.text()}" if sugg else ""
    return f"model {est.model}: {reasons}{way}"


def weight_bytes_from_params(facts: ModelFacts) -> float | None:
    """Checkpoint bytes from safetensors element counts (storage dtypes), when the Hub was read."""
    if not facts.param_counts:
        return None
    return sum(DTYPE_BYTES.get(dt.upper(), 2) * n for dt, n in facts.param_counts.items())


def _checkpoint_bytes(facts: ModelFacts | dict[str, Any], act_bytes: float) -> float | None:
    if not isinstance(facts, ModelFacts):
        return None
    if facts.param_counts or facts.weight_bytes:
        return float(facts.weight_bytes or weight_bytes_from_params(facts) or 0) or None
    if facts.parameter_count:
        return facts.parameter_count * act_bytes
    return None
