"""A model's architecture as sizing needs it, normalised from ``config.json``, and vLLM's parallelism rules.

Why normalise: configs spell the same fact many ways (``n_head_kv``, ``num_kv_heads``,
``multi_query_group_num``…), nest the language model inside multimodal configs and leave fields
implicit; every later step (weights, KV cache, activation) reads one `Arch` instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tkf_infra.sizing.params import SizingError

VOCAB_PADDING = 64  # vLLM pads the vocabulary to a multiple of 64 before splitting it across TP ranks

_MLA_MODEL_TYPES = frozenset({
    "deepseek_v2", "deepseek_v3", "deepseek_v32", "deepseek_mtp", "kimi_k2", "kimi_linear",
    "longcat_flash", "pangu_ultra_moe", "pangu_ultra_moe_mtp", "kimi_vl",
})  # fmt: skip
# Models whose config leaves num_key_value_heads implicit use these aliases.
_KV_HEAD_KEYS = ("num_key_value_heads", "n_head_kv", "num_kv_heads", "multi_query_group_num")
_MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                 "model_max_length", "max_target_positions", "max_sequence_length")  # fmt: skip
_NON_GATED = frozenset({"phi", "mixformer-sequential", "gpt2", "gpt_neox", "falcon", "starcoder2", "gpt_bigcode",
                        "opt", "bloom"})  # fmt: skip


@dataclass(frozen=True)
class LayerKind:
    """What one decoder layer keeps per request: full/sliding/chunked attention, MLA latent, or a
    recurrent state (``linear``: gated delta net / mamba), which is constant in the sequence length."""

    kind: str
    window: int | None = None

    @property
    def attention(self) -> bool:
        return self.kind in ("full", "sliding", "chunked", "mla")


@dataclass(frozen=True)
class Recurrent:
    """Recurrent-state layers (Qwen3-Next/3.5 gated delta net, Mamba2): state shapes vLLM allocates."""

    style: str  # "gdn" or "mamba2"
    heads: int  # value heads (gdn) / SSM heads (mamba2)
    head_dim: int
    state_dim: int  # key head dim (gdn) / d_state (mamba2)
    conv_dim: int
    conv_kernel: int
    k_heads: int = 0
    groups: int = 0
    intermediate: int = 0
    ssm_dtype: str | None = None


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
    recurrent: Recurrent | None = None
    rope_positions: int = 0
    """Rows of every distinct rotary cos/sin cache the model builds (summed): what the buffers hold."""
    mtp_layers: int = 0
    """Multi-token-prediction layers shipped in the checkpoint (used only for MTP speculative decoding)."""
    q_gate: bool = False
    """The query projection also produces an output gate (Qwen3-Next/3.5): twice the query width."""
    vision: dict[str, int] = field(default_factory=dict)
    """Vision tower shape from ``vision_config`` (layers, hidden, intermediate, gated MLP, patch, out)."""

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def attention_layers(self) -> int:
        return sum(1 for k in self.layer_kinds if k.attention)


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


def _recurrent(cfg: dict[str, Any], hidden: int) -> Recurrent | None:
    ssm_dtype = cfg.get("mamba_ssm_dtype")
    if cfg.get("linear_num_value_heads"):
        k_heads, v_heads = int(cfg["linear_num_key_heads"]), int(cfg["linear_num_value_heads"])
        k_dim, v_dim = int(cfg["linear_key_head_dim"]), int(cfg["linear_value_head_dim"])
        return Recurrent("gdn", v_heads, v_dim, k_dim, conv_dim=2 * k_heads * k_dim + v_heads * v_dim,
                         conv_kernel=int(cfg.get("linear_conv_kernel_dim") or 4), k_heads=k_heads,
                         ssm_dtype=str(ssm_dtype) if ssm_dtype else None)
    if cfg.get("mamba_n_heads") or cfg.get("mamba_d_state"):
        heads = int(cfg.get("mamba_n_heads") or 0)
        head_dim = int(cfg.get("mamba_d_head") or cfg.get("mamba_head_dim") or 64)
        inter = int(cfg.get("mamba_expand", 2) * hidden) if not heads else heads * head_dim
        heads = heads or inter // head_dim
        groups, d_state = int(cfg.get("mamba_n_groups") or 1), int(cfg.get("mamba_d_state") or 128)
        return Recurrent("mamba2", heads, head_dim, d_state, conv_dim=inter + 2 * groups * d_state,
                         conv_kernel=int(cfg.get("mamba_d_conv") or 4), groups=groups, intermediate=inter,
                         ssm_dtype=str(ssm_dtype) if ssm_dtype else None)
    return None


def _layer_kinds(cfg: dict[str, Any], mt: str, layers: int, mla: bool, recurrent: Recurrent | None) -> list[LayerKind]:
    window = cfg.get("sliding_window")
    use_sw = cfg.get("use_sliding_window", True)
    chunk = cfg.get("attention_chunk_size")
    types = cfg.get("layer_types") or cfg.get("layers_block_type")
    if mla:
        return [LayerKind("mla")] * layers
    if isinstance(types, list) and len(types) == layers:
        out = []
        for lt in (str(t).lower() for t in types):
            if "linear" in lt or "mamba" in lt:
                out.append(LayerKind("linear"))
            elif ("sliding" in lt or "local" in lt) and window:
                out.append(LayerKind("sliding", int(window)))
            else:
                out.append(LayerKind("full"))
        return out
    if recurrent is not None and cfg.get("full_attention_interval"):
        every = int(cfg["full_attention_interval"])
        return [LayerKind("full") if (i + 1) % every == 0 else LayerKind("linear") for i in range(layers)]
    if chunk and mt.startswith("llama4"):
        # Llama 4: every 4th layer (no RoPE) attends globally, the others in chunks.
        step = int(cfg.get("no_rope_layer_interval") or 4)
        return [LayerKind("full") if (i + 1) % step == 0 else LayerKind("chunked", int(chunk)) for i in range(layers)]
    if window and use_sw is not False and mt in ("gemma2", "gemma3", "gemma3_text"):
        pattern = int(cfg.get("sliding_window_pattern") or (6 if mt.startswith("gemma3") else 2))
        return [LayerKind("full") if (i + 1) % pattern == 0 else LayerKind("sliding", int(window))
                for i in range(layers)]  # fmt: skip
    if (window and use_sw is not False and mt in ("mistral", "mixtral", "phi3", "starcoder2", "qwen2")
            and (mt != "qwen2" or cfg.get("use_sliding_window"))):
        # Qwen2 only slides when use_sliding_window is true; Mistral-style configs slide every layer.
        return [LayerKind("sliding", int(window))] * layers
    return [LayerKind("full")] * layers


#: A SiLU vision tower has a gated MLP (gate, up and down projections), as the text models do: vLLM's
#: `PixtralHFMLP` (Pixtral/Mistral3/LightOnOCR) and `Qwen2_5_VisionMLP` build `gate_up_proj` + `down_proj`
#: (vllm/model_executor/models/pixtral.py, qwen2_5_vl.py @v0.32.0). GELU towers (SigLIP, CLIP, Llama 4,
#: Qwen3-VL/3.5) have two projections.
_GATED_VISION_ACTS = frozenset({"silu", "swish"})


def _vision(config: dict[str, Any]) -> dict[str, int]:
    vc = config.get("vision_config")
    if not isinstance(vc, dict):
        return {}
    layers = _first(vc, "num_hidden_layers", "depth", "num_layers", "n_layers")
    hidden = _first(vc, "hidden_size", "embed_dim", "width")
    if not layers or not hidden:
        return {}
    inter = _first(vc, "intermediate_size", "mlp_dim") or 4 * int(hidden)
    return {"layers": int(layers), "hidden": int(hidden), "intermediate": int(inter),
            "gated": int(str(vc.get("hidden_act") or "") in _GATED_VISION_ACTS),
            "patch": int(vc.get("patch_size") or 14), "channels": int(vc.get("num_channels") or 3),
            "image": int(vc.get("image_size") or 0),
            "out": int(_first(vc, "out_hidden_size", "projection_dim", "vision_output_dim") or 0)}


def parse_arch(config: dict[str, Any], full_config: dict[str, Any] | None = None) -> Arch:
    """Normalise a text config. Raises SizingError naming any field sizing cannot do without.

    `full_config` is the checkpoint's whole config when `config` is its text part (vision tower)."""
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
    recurrent = _recurrent(cfg, hidden)
    kinds = _layer_kinds(cfg, mt, layers, mla is not None, recurrent)

    # MoE.
    num_experts = int(_first(cfg, "num_experts", "n_routed_experts", "num_local_experts") or 0)
    topk = int(_first(cfg, "num_experts_per_tok", "experts_per_token", "moe_topk") or 0)
    moe_inter = _first(cfg, "moe_intermediate_size", "intermediate_size_moe")
    intermediate = _first(cfg, "intermediate_size", "ffn_hidden_size", "n_inner", "intermediate_size_mlp")
    if intermediate is None and "n_inner" in cfg and hidden:
        intermediate = 4 * hidden  # GPT-style configs: n_inner null means 4 x n_embd
    if num_experts and moe_inter is None:
        moe_inter = intermediate
    shared = int(_first(cfg, "shared_expert_intermediate_size") or 0)
    if not shared and cfg.get("n_shared_experts") and moe_inter:
        shared = int(cfg["n_shared_experts"]) * int(moe_inter)
    if not shared and num_experts and mt.startswith("llama4"):
        shared = int(moe_inter or 0)  # every Llama 4 MoE layer adds one shared expert of the routed size
    moe_layers = [False] * layers
    if num_experts:
        first_dense = int(cfg.get("first_k_dense_replace") or 0)
        step = int(cfg.get("decoder_sparse_step") or cfg.get("moe_layer_freq") or cfg.get("interleave_moe_layer_step")
                   or 1)
        only_mlp = set(cfg.get("mlp_only_layers") or [])
        moe_layers = [i >= first_dense and (i + 1) % step == 0 and i not in only_mlp for i in range(layers)]

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
    mtp = int(_first(cfg, "num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers") or 0)
    return Arch(
        model_type=mt, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        intermediate=int(intermediate) if intermediate else None, vocab=int(vocab) if vocab else None, tied=tied,
        layer_kinds=tuple(kinds), gated_mlp=mt not in _NON_GATED,
        qkv_bias=bool(cfg.get("attention_bias") or mt in ("qwen2", "qwen2_moe", "gpt_oss")),
        all_bias=mt in _NON_GATED,
        norms_per_layer=4 if mt.startswith("gemma2") or mt.startswith("gemma3") else 2,
        qk_norm=mt.startswith(("qwen3", "gemma3")), num_experts=num_experts, experts_per_tok=topk,
        moe_intermediate=int(moe_inter) if moe_inter else None, shared_intermediate=shared,
        moe_layers=tuple(moe_layers), mla=mla, max_len=derive_max_len(cfg), rotary_dim=rotary_dim,
        rope_positions=rope_positions(cfg, mt),
        torch_dtype=_first(cfg, "torch_dtype", "dtype"), quant=quant, multimodal=bool(cfg.get("_multimodal")),
        recurrent=recurrent, mtp_layers=mtp, q_gate=bool(cfg.get("attn_output_gate")),
        vision=_vision(full_config or {}),
    )  # fmt: skip


def rope_positions(cfg: dict[str, Any], mt: str) -> int:
    """Rows of the rotary cos/sin caches vLLM registers as buffers (counted in the weights).

    get_rope shares one cache per distinct rope; its length is max_position_embeddings, times the
    factor for linear/dynamic scaling, original_max_position x factor for YaRN, and long + short
    rows for LongRoPE (vllm/model_executor/layers/rotary_embedding/__init__.py@v0.19.0:140-320,
    linear_scaling_rope.py:85-92, yarn_scaling_rope.py:76-79). Gemma 3 adds a local rope without
    scaling (models/gemma3.py@v0.19.0:166-185)."""
    max_pos = int(cfg.get("max_position_embeddings") or 0)
    params = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    ropes: list[dict[str, Any]] = []
    if isinstance(params, dict) and params and all(isinstance(v, dict) for v in params.values()):
        ropes = [dict(v) for v in params.values()]  # per layer type (transformers 5)
    elif isinstance(params, dict):
        ropes = [params]
        if mt.startswith("gemma3") and cfg.get("rope_local_base_freq"):
            ropes.append({"rope_type": "default", "rope_theta": cfg["rope_local_base_freq"]})
    total, seen = 0, []
    for rope in ropes:
        if rope in seen:
            continue
        seen.append(rope)
        kind = str(rope.get("rope_type") or rope.get("type") or "default")
        factor = float(rope.get("factor") or 1.0)
        original = int(rope.get("original_max_position_embeddings") or max_pos)
        if kind in ("linear", "dynamic"):
            total += int(max_pos * factor)
        elif kind in ("yarn", "deepseek_yarn"):
            total += int(original * factor)
        elif kind in ("longrope", "su"):
            total += max_pos + original
        else:
            total += max_pos
    return total


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
        padded = round_up(arch.vocab, VOCAB_PADDING)
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


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def pp_layer_ranges(layers: int, pp: int) -> list[range]:
    """Contiguous layer slices per PP rank; the remainder goes to the later ranks (as vLLM does).

    Ranks beyond the layer count would hold nothing and are not listed: such a PP is refused by
    `parallelism_problems`, and listing them would let a typo'd PP of 10**9 exhaust memory."""
    pp = max(1, min(pp, layers))
    base, rem = divmod(layers, pp)
    sizes = [base + (1 if i >= pp - rem else 0) for i in range(pp)]
    out: list[range] = []
    start = 0
    for size in sizes:
        out.append(range(start, start + size))
        start += size
    return out
