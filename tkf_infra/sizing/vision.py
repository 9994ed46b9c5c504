"""A vision tower's shape, read from the checkpoint's ``vision_config``.

Why apart from the decoder (`arch.py`): the tower is its own network beside the language model, which
vLLM builds from `vision_config`, and configs describe it in their own vocabulary (`depth`, `embed_dim`,
`width`, image and patch sizes as [height, width]).
`weights.py` `vision_bytes` weighs it; `overheads.py` sizes its encoder profile from the same shape.
"""

from __future__ import annotations

from typing import Any

from tkf_infra.sizing.config_fields import MAX_LAYERS, Fields

#: A SiLU vision tower has a gated MLP (gate, up and down projections), as the text models do: vLLM's
#: `PixtralHFMLP` (Pixtral/Mistral3/LightOnOCR) and `Qwen2_5_VisionMLP` build `gate_up_proj` + `down_proj`
#: (vllm/model_executor/models/pixtral.py, qwen2_5_vl.py @v0.32.0). GELU towers (SigLIP, CLIP, Llama 4,
#: Qwen3-VL/3.5) have two projections.
_GATED_VISION_ACTS = frozenset({"silu", "swish"})


def _side(v: Fields, key: str) -> int | None:
    """An image/patch size: one number, or [height, width] (the larger side counts)."""
    value = v.cfg.get(key)
    if isinstance(value, list) and 1 <= len(value) <= 3:
        return max(v.int_list(key, None, lo=1, hi=100_000))
    return v.integer(key, hi=100_000)


def vision_shape(config: dict[str, Any]) -> dict[str, int]:
    """The tower's shape from the checkpoint's `vision_config` (empty when it has none, or too little to size)."""
    if not isinstance(config.get("vision_config"), dict):
        return {}
    v = Fields(config["vision_config"], "vision_config.")
    layers = v.integer("num_hidden_layers", "depth", "num_layers", "n_layers", per_layer=None, hi=MAX_LAYERS)
    hidden = v.integer("hidden_size", "embed_dim", "width")
    if not layers or not hidden:
        return {}
    inter = v.integer("intermediate_size", "mlp_dim") or 4 * hidden
    act = v.cfg.get("hidden_act")
    return {"layers": layers, "hidden": hidden, "intermediate": inter,
            "gated": int(isinstance(act, str) and act in _GATED_VISION_ACTS),
            "patch": _side(v, "patch_size") or 14, "channels": v.integer("num_channels", hi=64) or 3,
            "image": _side(v, "image_size") or 0,
            "out": v.integer("out_hidden_size", "projection_dim", "vision_output_dim") or 0}
