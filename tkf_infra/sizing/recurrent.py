"""Recurrent-state layers (Qwen3-Next/3.5 gated delta net, Mamba2), read from config.json.

Why apart from `arch.py`: these layers keep a fixed-size state per request instead of a KV cache, and
their configs name the state's shapes in a vocabulary of their own (`linear_num_value_heads`,
`mamba_d_state`, `mamba_expand`); `kv.py` sizes the state and `weights.py` the mixers from this shape.
"""

from __future__ import annotations

from dataclasses import dataclass

from tkf_infra.sizing.config_fields import ConfigFieldError, Fields


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


def recurrent_shape(f: Fields, hidden: int) -> Recurrent | None:
    """The recurrent layers' shapes: gated delta net where `linear_num_value_heads` is set, Mamba2 where the
    `mamba_*` fields are; None for a model without recurrent layers."""
    ssm_dtype = f.text("mamba_ssm_dtype")
    if f.integer("linear_num_value_heads"):
        def need(key: str) -> int:
            val = f.integer(key, lo=1)
            if val is None:
                raise ConfigFieldError(f"config.json lacks {f.name(key)} (a gated-delta-net model: "
                                       "linear_num_value_heads is set)")
            return val
        k_heads, v_heads = need("linear_num_key_heads"), need("linear_num_value_heads")
        k_dim, v_dim = need("linear_key_head_dim"), need("linear_value_head_dim")
        return Recurrent("gdn", v_heads, v_dim, k_dim, conv_dim=2 * k_heads * k_dim + v_heads * v_dim,
                         conv_kernel=f.integer("linear_conv_kernel_dim", lo=0, hi=1024) or 4, k_heads=k_heads,
                         ssm_dtype=ssm_dtype or None)
    if f.integer("mamba_n_heads") or f.integer("mamba_d_state"):
        heads = f.integer("mamba_n_heads", default=0) or 0
        head_dim = f.integer("mamba_d_head", "mamba_head_dim", lo=0) or 64
        expand = f.number("mamba_expand", hi=1e3, default=2.0)
        inter = int((2.0 if expand is None else expand) * hidden) if not heads else heads * head_dim
        heads = heads or inter // head_dim
        groups, d_state = f.integer("mamba_n_groups") or 1, f.integer("mamba_d_state") or 128
        return Recurrent("mamba2", heads, head_dim, d_state, conv_dim=inter + 2 * groups * d_state,
                         conv_kernel=f.integer("mamba_d_conv", hi=1024) or 4, groups=groups, intermediate=inter,
                         ssm_dtype=ssm_dtype or None)
    return None
