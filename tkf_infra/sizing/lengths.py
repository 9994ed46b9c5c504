"""The sequence lengths a model's ``config.json`` implies: vLLM's default max_model_len and the rotary caches' rows.

Apart from `arch.py` because both read the same length and rope-scaling fields, in vLLM's own precedence,
and neither needs the rest of the architecture: `parse_arch` stores what they return.
"""

from __future__ import annotations

from typing import Any

from tkf_infra.sizing.config_fields import MAX_POSITIONS, Fields

_MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                 "model_max_length", "max_target_positions", "max_sequence_length")


def derive_max_len(cfg: dict[str, Any]) -> int | None:
    """vLLM's default max_model_len: the smallest length key, scaled by the rope factor."""
    # A length key of another shape, or beyond any real context (tokenizer-style 1e30), is not a length.
    lengths = [int(v) for k in _MAX_LEN_KEYS
               if isinstance(v := cfg.get(k), int | float) and not isinstance(v, bool) and 1 <= v <= MAX_POSITIONS]
    if not lengths:
        return None
    length = min(lengths)
    rope = cfg.get("rope_scaling") or {}
    if isinstance(rope, dict) and cfg.get("model_type") not in ("gemma3", "gemma3_text"):
        rf = Fields(rope, "rope_scaling.")
        rtype = str(rope.get("rope_type") or rope.get("type") or "")
        factor = rf.number("factor", hi=1e6)
        if factor and rtype not in ("llama3", "longrope", "su", "mrope", "default", ""):
            original = rf.integer("original_max_position_embeddings", hi=MAX_POSITIONS)
            if rtype == "yarn" and original:
                length = original
            length = int(length * factor)
    return length


def rope_positions(cfg: dict[str, Any], mt: str) -> int:
    """Rows of the rotary cos/sin caches vLLM registers as buffers (counted in the weights).

    get_rope shares one cache per distinct rope; its length is max_position_embeddings, times the
    factor for linear/dynamic scaling, original_max_position x factor for YaRN, and long + short
    rows for LongRoPE (vllm/model_executor/layers/rotary_embedding/__init__.py@v0.19.0:140-320,
    linear_scaling_rope.py:85-92, yarn_scaling_rope.py:76-79). Gemma 3 adds a local rope without
    scaling (models/gemma3.py@v0.19.0:166-185)."""
    max_pos = Fields(cfg, str(cfg.get("_where") or "")).integer("max_position_embeddings", hi=MAX_POSITIONS) or 0
    rope_key = "rope_scaling" if cfg.get("rope_scaling") else "rope_parameters"
    params = cfg.get(rope_key) or {}
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
        rf = Fields(rope, f"{rope_key}.")
        kind = str(rope.get("rope_type") or rope.get("type") or "default")
        factor = rf.number("factor", hi=1e6) or 1.0
        original = rf.integer("original_max_position_embeddings", hi=MAX_POSITIONS) or max_pos
        if kind in ("linear", "dynamic"):
            total += int(max_pos * factor)
        elif kind in ("yarn", "deepseek_yarn"):
            total += int(original * factor)
        elif kind in ("longrope", "su"):
            total += max_pos + original
        else:
            total += max_pos
    return total
