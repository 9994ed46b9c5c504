"""A model's architecture as sizing needs it, normalised from ``config.json``.

Why normalise: configs spell the same fact many ways (``n_head_kv``, ``num_kv_heads``,
``multi_query_group_num``…), nest the language model inside multimodal configs and leave fields
implicit; every later step (weights, KV cache, activation) reads one `Arch` instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tkf_infra.sizing.config_fields import MAX_DIM, MAX_LAYERS, MAX_POSITIONS, MAX_VOCAB, ConfigFieldError, Fields
from tkf_infra.sizing.kv_v4 import compressed_shape, unmodelled_v4
from tkf_infra.sizing.lengths import derive_max_len, rope_positions
from tkf_infra.sizing.params import SizingError
from tkf_infra.sizing.recurrent import Recurrent, recurrent_shape
from tkf_infra.sizing.vision import vision_shape

#: Attention heads beyond any real model (the largest have a few hundred).
MAX_HEADS = 65_536

_MLA_MODEL_TYPES = frozenset({
    "deepseek_v2", "deepseek_v3", "deepseek_v32", "deepseek_mtp", "kimi_k2", "kimi_linear",
    "longcat_flash", "pangu_ultra_moe", "pangu_ultra_moe_mtp", "kimi_vl",
})
# Models whose config leaves num_key_value_heads implicit use these aliases.
_KV_HEAD_KEYS = ("num_key_value_heads", "n_head_kv", "num_kv_heads", "multi_query_group_num")
_NON_GATED = frozenset({"phi", "mixformer-sequential", "gpt2", "gpt_neox", "falcon", "starcoder2", "gpt_bigcode",
                        "opt", "bloom"})


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
    layer_heads: tuple[int, ...] = ()
    """Query heads per layer when the config lists them and they vary (``num_attention_heads_per_layer``,
    Laguna); ``heads`` is then the largest (activation terms). KV heads and head size stay uniform."""
    layer_intermediate: tuple[int, ...] = ()
    """Dense MLP width per layer when ``intermediate_size`` is a per-layer list that varies (``intermediate``
    is then the widest, for the activation terms); empty when every layer has ``intermediate``."""
    indexer: dict[str, int] = field(default_factory=dict)
    """The sparse-attention indexer of DeepSeek V3.2-style MLA (GLM-5): its heads and head size (empty: none)."""
    indexer_layers: tuple[bool, ...] = ()
    """Which layers build an indexer (all, unless `index_topk_freq` / `index_topk_pattern` skip some)."""
    compress_ratios: tuple[int, ...] = ()
    """DeepSeek V4's compressed attention: each decoder layer's ratio (1: sliding window only, 4 or 128), empty for
    every other model; its KV cache is laid out by `kv_v4`."""
    v4: dict[str, int] = field(default_factory=dict)
    """DeepSeek V4's other shapes (`kv_v4.compressed_shape`): window, index_head_dim, index_heads, q_lora, o_lora,
    o_groups, hc_mult."""

    def heads_at(self, idx: int) -> int:
        return self.layer_heads[idx] if idx < len(self.layer_heads) else self.heads

    def mlp_width(self, idx: int) -> int | None:
        return self.layer_intermediate[idx] if idx < len(self.layer_intermediate) else self.intermediate

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0


def _layer_kinds(f: Fields, mt: str, layers: int, mla: bool, recurrent: Recurrent | None) -> list[LayerKind]:
    cfg = f.cfg
    # A sliding_window of false/0 means none (some configs write it so).
    window = None if cfg.get("sliding_window") is False else f.integer("sliding_window", hi=MAX_POSITIONS)
    use_sw = cfg.get("use_sliding_window", True)
    chunk = f.integer("attention_chunk_size", hi=MAX_POSITIONS)
    types_key = "layer_types" if cfg.get("layer_types") else "layers_block_type"
    types = f.str_list(types_key)
    if mla:
        return [LayerKind("mla")] * layers
    if types and len(types) != layers and any(t.lower() not in ("full_attention", "attention", "full") for t in types):
        raise ConfigFieldError(f"config.json field {f.name(types_key)} lists {len(types)} layer types but the model "
                               f"has {layers} layers, so which layers are {sorted(set(types))} is unknown; correct "
                               "the lock entry's config")
    if types and len(types) == layers:
        out = []
        for lt in (t.lower() for t in types):
            if "linear" in lt or "mamba" in lt:
                out.append(LayerKind("linear"))
            elif ("sliding" in lt or "local" in lt) and window:
                out.append(LayerKind("sliding", int(window)))
            else:
                out.append(LayerKind("full"))
        return out
    every = f.integer("full_attention_interval", lo=0, hi=MAX_LAYERS)
    if recurrent is not None and every:
        return [LayerKind("full") if (i + 1) % every == 0 else LayerKind("linear") for i in range(layers)]
    if chunk and mt.startswith("llama4"):
        # Llama 4: every 4th layer (no RoPE) attends globally, the others in chunks.
        step = f.integer("no_rope_layer_interval", hi=MAX_LAYERS) or 4
        return [LayerKind("full") if (i + 1) % step == 0 else LayerKind("chunked", int(chunk)) for i in range(layers)]
    if window and use_sw is not False and mt in ("gemma2", "gemma3", "gemma3_text"):
        pattern = f.integer("sliding_window_pattern", hi=MAX_LAYERS) or (6 if mt.startswith("gemma3") else 2)
        return [LayerKind("full") if (i + 1) % pattern == 0 else LayerKind("sliding", int(window))
                for i in range(layers)]
    if (window and use_sw is not False and mt in ("mistral", "mixtral", "phi3", "starcoder2", "qwen2")
            and (mt != "qwen2" or cfg.get("use_sliding_window"))):
        # Qwen2 only slides when use_sliding_window is true; Mistral-style configs slide every layer.
        return [LayerKind("sliding", int(window))] * layers
    return [LayerKind("full")] * layers


@dataclass(frozen=True)
class _Attention:
    """The attention shape: query heads (per layer where they vary), KV heads, head size."""

    heads: int
    kv_heads: int
    head_dim: int
    layer_heads: tuple[int, ...]


@dataclass(frozen=True)
class _Moe:
    """The MoE terms: routed experts, top-k, expert width, shared-expert width, which layers are MoE."""

    num_experts: int
    topk: int
    moe_inter: int | None
    shared: int
    moe_layers: tuple[bool, ...]


def _shape(f: Fields) -> tuple[int, int, int, tuple[int, ...], str | None]:
    """(layers, hidden, heads, per-layer heads, their key): one refusal naming every missing field.

    Query heads may vary by layer (Laguna: `num_attention_heads_per_layer`; or `num_attention_heads` as a list)."""
    missing: list[str] = []

    def need(*keys: str, hi: int) -> int:
        val = f.integer(*keys, lo=1, hi=hi)
        if val is None:
            missing.append(f.name(keys[0]))
            return 0
        return val

    layers = need("num_hidden_layers", "n_layer", "num_layers", hi=MAX_LAYERS)
    hidden = need("hidden_size", "n_embd", "d_model", hi=MAX_DIM)
    heads_list_key = next((k for k in ("num_attention_heads_per_layer", "num_attention_heads")
                           if isinstance(f.cfg.get(k), list)), None)
    layer_heads: tuple[int, ...] = ()
    if heads_list_key is not None and layers:
        per_layer_heads = f.int_list(heads_list_key, layers, lo=1, hi=MAX_HEADS)
        heads = max(per_layer_heads)
        layer_heads = tuple(per_layer_heads) if len(set(per_layer_heads)) > 1 else ()
    else:
        heads = need("num_attention_heads", "n_head", "num_heads", hi=MAX_HEADS)
    if missing:
        raise SizingError("config.json lacks " + ", ".join(missing))
    return layers, hidden, heads, layer_heads, heads_list_key


def _attention(f: Fields, layers: int, hidden: int, heads: int, layer_heads: tuple[int, ...],
               heads_list_key: str | None) -> _Attention:
    """KV heads (an alias, or 1 for multi-query, else the query heads) and the head size."""
    if layer_heads and f.present("head_dim") is None:
        raise ConfigFieldError(f"config.json field {f.name(heads_list_key or '')} varies by layer but head_dim is not "
                               "given, so each layer's head size (and KV cache) would differ; add head_dim to the "
                               "lock entry's config")
    kv_heads = f.integer(*_KV_HEAD_KEYS, lo=1, hi=MAX_HEADS, per_layer=layers)
    if kv_heads is None:
        kv_heads = 1 if f.flag("multi_query") else heads
    head_dim = f.integer("head_dim", "hidden_size_per_head", hi=MAX_DIM, per_layer=layers) or hidden // heads
    if head_dim < 1:
        raise ConfigFieldError(f"config.json gives no head_dim and {f.name('hidden_size')} {hidden} is smaller than "
                               f"the {heads} attention heads; add head_dim to the lock entry's config")
    return _Attention(heads, kv_heads, head_dim, layer_heads)


def _mla(f: Fields, mt: str) -> dict[str, int] | None:
    """Multi-head latent attention's ranks (DeepSeek V2/V3 and kin), None for other attention."""
    kv_lora = f.integer("kv_lora_rank")
    if not (kv_lora and (mt in _MLA_MODEL_TYPES or "qk_rope_head_dim" in f.cfg)):
        return None
    return {
        "kv_lora_rank": kv_lora,
        "qk_rope_head_dim": f.integer("qk_rope_head_dim") or 64,
        "qk_nope_head_dim": f.integer("qk_nope_head_dim") or 128,
        "v_head_dim": f.integer("v_head_dim") or 128,
        "q_lora_rank": f.integer("q_lora_rank") or 0,
    }


def _indexer(f: Fields, layers: int, mla: dict[str, int] | None) -> tuple[dict[str, int], tuple[bool, ...]]:
    """DeepSeek V3.2's lightning indexer: built where the config has `index_topk`, on every layer unless
    `index_topk_freq` (from `index_skip_topk_offset`, default 2) or an `index_topk_pattern` of "S" skips it
    (vllm/model_executor/models/deepseek_v2.py@v0.32.0:1138-1190)."""
    if mla is None or "index_topk" not in f.cfg or not mla["q_lora_rank"]:
        return {}, ()
    heads = f.integer("index_n_heads", lo=1, hi=MAX_HEADS) or 64
    head_dim = f.integer("index_head_dim", lo=1, hi=MAX_DIM) or 128
    freq = f.integer("index_topk_freq", lo=1, hi=MAX_LAYERS) or 1
    offset = f.integer("index_skip_topk_offset", hi=MAX_LAYERS)
    pattern = f.str_list("index_topk_pattern")
    skip_offset = 2 if offset is None else offset
    built = tuple((pattern[i] != "S") if pattern is not None and i < len(pattern)
                  else max(i - skip_offset + 1, 0) % freq == 0 for i in range(layers))
    return {"heads": heads, "head_dim": head_dim}, built


def _intermediate(f: Fields, layers: int, hidden: int) -> tuple[int | None, tuple[int, ...]]:
    """The dense MLP width, and its per-layer widths where `intermediate_size` is a list that varies (Gemma 3n-style
    configs: modelled layer by layer); GPT-style configs' null `n_inner` means 4 x `n_embd`. An MoE config that
    names its dense layers' width apart (`dense_intermediate_size`, MiniMax M3 and Cohere2 MoE, whose
    `intermediate_size` is the experts') is read first: vLLM builds the dense MLPs from it
    (vllm/models/minimax_m3/nvidia/model.py@v0.32.0:750, experts :255)."""
    cfg = f.cfg
    keys = ("dense_intermediate_size", "intermediate_size", "ffn_hidden_size", "n_inner", "intermediate_size_mlp")
    inter_key = f.present(*keys)
    per_layer_inter: tuple[int, ...] = ()
    intermediate: int | None
    if inter_key is not None and isinstance(cfg[inter_key], list):
        widths = f.int_list(inter_key, layers, lo=0)
        intermediate = max(widths) or None
        per_layer_inter = tuple(widths) if len(set(widths)) > 1 else ()
    else:
        intermediate = f.integer(*keys)
    if intermediate is None and "n_inner" in cfg and hidden:
        intermediate = 4 * hidden
    return intermediate, per_layer_inter


def _moe(f: Fields, mt: str, layers: int, hidden: int) -> tuple[_Moe, int | None, tuple[int, ...]]:
    """The MoE terms, with the dense MLP width read between them (the order config errors are reported in)."""
    num_experts = f.integer("num_experts", "n_routed_experts", "num_local_experts", hi=1_000_000) or 0
    topk = f.integer("num_experts_per_tok", "experts_per_token", "moe_topk", hi=1_000_000) or 0
    moe_inter = f.integer("moe_intermediate_size", "intermediate_size_moe", per_layer=layers)
    intermediate, per_layer_inter = _intermediate(f, layers, hidden)
    if num_experts and moe_inter is None:  # the experts' width is intermediate_size, the dense one's may differ
        separate = f.present("dense_intermediate_size") and not isinstance(f.cfg.get("intermediate_size"), list)
        moe_inter = f.integer("intermediate_size") if separate else intermediate
    shared = f.integer("shared_expert_intermediate_size") or 0
    n_shared = f.integer("n_shared_experts", hi=100_000)
    if not shared and n_shared and moe_inter:
        shared = n_shared * moe_inter
    if not shared and num_experts and mt.startswith("llama4"):
        shared = moe_inter or 0  # every Llama 4 MoE layer adds one shared expert of the routed size
    moe_layers = _moe_layers(f, layers) if num_experts else [False] * layers
    return _Moe(num_experts, topk, moe_inter, shared, tuple(moe_layers)), intermediate, per_layer_inter


def _rotary_dim(f: Fields, head_dim: int, mla: dict[str, int] | None) -> int:
    """Rotary width: the head size, scaled by `partial_rotary_factor`, or `rotary_dim`; MLA's rope part."""
    rotary_dim = head_dim
    partial = f.number("partial_rotary_factor", hi=1.0)
    if partial:
        rotary_dim = int(head_dim * partial)
    explicit_rotary = f.integer("rotary_dim", hi=MAX_DIM)
    if explicit_rotary:
        rotary_dim = explicit_rotary
    if mla:
        rotary_dim = mla["qk_rope_head_dim"]
    return rotary_dim


def _tied(f: Fields, mt: str) -> bool:
    """Whether lm_head shares the embedding (Gemma by default; an explicit null means untied)."""
    tie_default = mt in ("gemma", "gemma2", "gemma3", "gemma3_text")
    cfg = f.cfg
    return False if "tie_word_embeddings" in cfg and cfg["tie_word_embeddings"] is None else \
        f.flag("tie_word_embeddings", tie_default)


def _quant(cfg: dict[str, Any]) -> dict[str, Any] | None:
    """The checkpoint's quantization_config, with the config's top-level `expert_dtype` folded in: experts stored
    in a dtype of their own (DeepSeek V4's FP4 experts beside FP8 linears) are part of how the weights are
    stored, and the quantization scheme prices them (`quant.py` `_expert_dtype`)."""
    quant = cfg.get("quantization_config") if isinstance(cfg.get("quantization_config"), dict) else None
    expert_dtype = cfg.get("expert_dtype")
    if isinstance(expert_dtype, str) and expert_dtype:
        return {**(quant or {}), "expert_dtype": expert_dtype}
    return quant


def parse_arch(config: dict[str, Any], full_config: dict[str, Any] | None = None) -> Arch:
    """Normalise a text config. Raises SizingError naming any field sizing cannot do without, and
    `ConfigFieldError` naming any field of a type or range it cannot use (`config_fields`).

    `full_config` is the checkpoint's whole config when `config` is its text part (vision tower)."""
    if not isinstance(config, dict):
        raise ConfigFieldError(f"config.json is {type(config).__name__}, not an object")
    cfg = config
    f = Fields(cfg, str(cfg.get("_where") or ""))
    mt = f.text("model_type") or ""
    _unmodelled(f, mt)
    layers, hidden, heads, layer_heads, heads_list_key = _shape(f)
    att = _attention(f, layers, hidden, heads, layer_heads, heads_list_key)
    mla = _mla(f, mt)
    indexer, indexer_layers = _indexer(f, layers, mla)
    recurrent = recurrent_shape(f, hidden)
    kinds = _layer_kinds(f, mt, layers, mla is not None, recurrent)
    moe, intermediate, per_layer_inter = _moe(f, mt, layers, hidden)
    rotary_dim = _rotary_dim(f, att.head_dim, mla)
    vocab = f.integer("vocab_size", "padded_vocab_size", hi=MAX_VOCAB)
    tied = _tied(f, mt)
    quant = _quant(cfg)
    mtp = f.integer("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers", hi=MAX_LAYERS) or 0
    ratios, v4 = compressed_shape(f, layers)
    dtype = cfg.get("torch_dtype") if cfg.get("torch_dtype") is not None else cfg.get("dtype")
    return Arch(
        model_type=mt, layers=layers, hidden=hidden, heads=att.heads, kv_heads=att.kv_heads, head_dim=att.head_dim,
        intermediate=intermediate or None, vocab=vocab or None, tied=tied,
        layer_kinds=tuple(kinds), gated_mlp=mt not in _NON_GATED,
        qkv_bias=f.flag("attention_bias") or mt in ("qwen2", "qwen2_moe", "gpt_oss"),
        all_bias=mt in _NON_GATED,
        norms_per_layer=4 if mt.startswith("gemma2") or mt.startswith("gemma3") else 2,
        qk_norm=mt.startswith(("qwen3", "gemma3")), num_experts=moe.num_experts, experts_per_tok=moe.topk,
        moe_intermediate=moe.moe_inter or None, shared_intermediate=moe.shared,
        moe_layers=moe.moe_layers, mla=mla, max_len=derive_max_len(cfg), rotary_dim=rotary_dim,
        rope_positions=rope_positions(cfg, mt),
        torch_dtype=dtype if isinstance(dtype, str) else None, quant=quant, multimodal=bool(cfg.get("_multimodal")),
        recurrent=recurrent, mtp_layers=mtp, q_gate=f.flag("attn_output_gate"),
        vision=vision_shape(full_config or {}), layer_heads=att.layer_heads, layer_intermediate=per_layer_inter,
        indexer=indexer, indexer_layers=indexer_layers, compress_ratios=ratios, v4=v4,
    )


def _moe_layers(f: Fields, layers: int) -> list[bool]:
    """Which layers are MoE: dense first layers (DeepSeek `first_k_dense_replace`), a stride
    (`decoder_sparse_step`, `moe_layer_freq`, `interleave_moe_layer_step`) or a per-layer 0/1 list in
    `moe_layer_freq`, and dense exceptions (`mlp_only_layers`)."""
    kinds = f.str_list("mlp_layer_types")  # Laguna: "dense" / "sparse" per layer
    if kinds is not None:
        if len(kinds) != layers:
            raise ConfigFieldError(f"config.json field {f.name('mlp_layer_types')} lists {len(kinds)} layers but the "
                                   f"model has {layers}; correct the lock entry's config")
        return [k.lower() in ("sparse", "moe") for k in kinds]
    first_dense = f.integer("first_k_dense_replace", hi=MAX_LAYERS) or 0
    freq_key = f.present("decoder_sparse_step", "moe_layer_freq", "interleave_moe_layer_step")
    pattern: list[int] | None = None
    if freq_key is not None and isinstance(f.cfg[freq_key], list):
        pattern = f.int_list(freq_key, layers, lo=0, hi=1)
        step = 1
    else:
        step = f.integer("decoder_sparse_step", "moe_layer_freq", "interleave_moe_layer_step", hi=MAX_LAYERS) or 1
    only_mlp = set(f.int_list("mlp_only_layers", None, hi=MAX_LAYERS)) if f.cfg.get("mlp_only_layers") else set()
    return [i >= first_dense and (i + 1) % step == 0 and i not in only_mlp and (pattern is None or bool(pattern[i]))
            for i in range(layers)]


#: Architectures whose per-layer structure the physics does not model: refused by name rather than
#: sized as if every layer were the same (that would miss weights, and a miss is a false accept).
_UNMODELLED: tuple[tuple[str, str], ...] = (
    ("block_configs", "gives each layer its own attention and FFN shape (a NAS model such as Nemotron "
                      "Super/Ultra, DeciLM)"),
    ("vocab_size_per_layer_input", "adds per-layer input embeddings and KV sharing (Gemma 3n)"),
    ("num_transformer_layers", "scales heads and FFN width layer by layer (OpenELM)"),
)


def _unmodelled(f: Fields, mt: str) -> None:
    unmodelled_v4(f)
    for key, what in _UNMODELLED:
        if f.cfg.get(key) is not None:
            raise ConfigFieldError(f"config.json field {f.name(key)} {what}; per-layer shapes of this kind are not "
                                   f"modelled, so {mt or 'this architecture'} cannot be sized (a per-layer count "
                                   "would miss weights); serve a checkpoint of a modelled architecture")
    for key in ("num_query_heads",):
        if isinstance(f.cfg.get(key), list):
            raise ConfigFieldError(f"config.json field {f.name(key)} is a list of {len(f.cfg[key])} per-layer head "
                                   "counts; per-layer head counts are not modelled, so this architecture cannot be "
                                   "sized")
