"""Which part of the model each checkpoint tensor belongs to, read from its name: what `lock` records.

Why by kind: vLLM splits the parts differently across GPUs — experts across TP x DP ranks (or whole
experts per rank with expert parallelism), attention and dense MLP by TP, the vocabulary by TP, norms
and routers replicated, the vision tower beside the decoder, multi-token-prediction layers only when
MTP drafting is on — and quantized checkpoints store each part in its own dtypes (FP4 experts beside
FP8 attention beside BF16 embeddings). The lock keeps the exact bytes of each kind per safetensors
dtype (`ModelFacts.tensor_bytes`), read from the headers' data offsets, so sizing weighs the
checkpoint itself instead of guessing bytes per element from config.json
(`tkf_infra/sizing/checkpoint_weights.py` splits them per GPU rank).

Names follow the Hugging Face checkpoints vLLM loads (`model.layers.{i}.self_attn.q_proj.weight`,
`model.language_model.layers…`, `transformer.h.{i}.attn…`, `visual.blocks…`). A name no rule knows is
counted under ``norms`` (replicated on every rank): the safe side, since a replicated tensor is never
undercounted on a rank.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: The kinds, in the order the lock lists them.
TENSOR_KINDS = ("attention", "mlp", "experts", "embeddings", "norms", "vision", "mtp")

#: Storage dtypes vLLM converts to the model's dtype at load (`--dtype`); the others (FP8, FP4, packed
#: integers, E8M0 scales) are kept as stored.
FLOAT_DTYPES = frozenset({"F64", "F32", "F16", "BF16"})

_LAYER = re.compile(r"(?:^|\.)(?:layers|h|blocks|block|layer)\.(\d+)\.")
#: Name parts that put a tensor in a multimodal encoder or its projector (vision and audio towers).
_ENCODER = re.compile(r"^(?:vision|visual|image|audio|mm_|multi_modal|vpm|resampler|siglip|vit|patch_embed|"
                      r"img_|video|speech|sound)", re.IGNORECASE)
_EMBED = re.compile(r"^(?:embed_tokens|embed_in|embed_out|lm_head|wte|wpe|word_embeddings|tok_embeddings|"
                    r"embeddings|output|shared_head|head)$")
_ATTENTION = frozenset({"self_attn", "attn", "attention", "self_attention", "linear_attn", "mixer", "mamba",
                        "cross_attn", "mla", "temporal_block", "conv"})
_MLP = frozenset({"mlp", "feed_forward", "ffn", "block_sparse_moe", "moe", "mlp_block", "intermediate", "output"})
_ROUTER = frozenset({"gate", "router", "shared_expert_gate", "e_score_correction_bias"})


def _is_norm(part: str) -> bool:
    return "norm" in part.lower() or part.startswith("ln")


def _layer_kind(parts: list[str]) -> str:
    """The kind of a tensor inside decoder layer `parts` (the name after `layers.{i}.`)."""
    if "experts" in parts:
        return "experts"
    if any(_is_norm(p) for p in parts[:-1]) or (len(parts) == 2 and _is_norm(parts[0])):
        return "norms"
    if any(p in _ROUTER for p in parts[1:-1]) or (len(parts) >= 2 and parts[-2] in _ROUTER):
        return "norms"  # the MoE router (`mlp.gate.weight`, its score bias): replicated
    if parts[-1] == "bias":
        return "norms"  # biases, as config.json's count keeps them: beside the norms
    head = parts[0]
    if head in _ATTENTION or head.endswith(("attn", "attention")):
        return "attention"
    if head in _MLP or head.startswith(("shared_expert", "mlp")):
        return "mlp"
    return "norms"


def tensor_kind(name: str, layers: int) -> str:
    """The kind of tensor `name` in a checkpoint whose decoder has `layers` layers (0: unknown).

    A decoder layer at an index past the config's `num_hidden_layers` (DeepSeek V3, GLM) or under an
    `mtp` module (Qwen3-Next, MiMo) is a multi-token-prediction layer: vLLM's main model skips it."""
    parts = name.split(".")
    if any(p == "mtp" or p.startswith("mtp_") for p in parts):
        return "mtp"
    if any(_ENCODER.match(p) for p in parts[:3]):
        return "vision"
    found = _LAYER.search(name)
    if found is not None:
        if layers and int(found.group(1)) >= layers:
            return "mtp"
        inner = name[found.end():].split(".")
        return _layer_kind(inner)
    if any(_EMBED.match(p) for p in parts[-2:-1]) or parts[-1] in ("lm_head", "wte", "wpe"):
        return "embeddings"
    return "norms"


def tally(tensors: Iterable[tuple[str, str, int]], layers: int) -> dict[str, dict[str, int]]:
    """Bytes per kind, then per storage dtype, of `(name, dtype, bytes)` tensors (kinds and dtypes sorted)."""
    out: dict[str, dict[str, int]] = {}
    for name, dtype, nbytes in tensors:
        per = out.setdefault(tensor_kind(name, layers), {})
        per[dtype.upper()] = per.get(dtype.upper(), 0) + int(nbytes)
    return {k: dict(sorted(out[k].items())) for k in TENSOR_KINDS if k in out}
