"""What we know about one model checkpoint (``repo@revision``), independent of how it is served.

The sizing engine must answer offline (at ``pulumi preview`` and in CI), so every fact it needs is
captured once from the Hub and committed to ``models.lock.json``. A revision is a commit SHA, so an
entry never goes stale; facts we could not source are listed in ``unknown_fields`` instead of being
guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from tkf_infra.sizing.tensor_kinds import TENSOR_KINDS

#: Bytes per element of each safetensors storage dtype. Packed int4 weights are stored as I32/U8,
#: so bytes must be computed per storage element, never as "parameters x bits".
DTYPE_BYTES: dict[str, float] = {
    "F64": 8, "I64": 8, "U64": 8,
    "F32": 4, "I32": 4, "U32": 4,
    "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
    "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I8": 1, "U8": 1, "BOOL": 1,
    "F4": 0.5, "F6_E2M3": 0.75, "F6_E3M2": 0.75,
}

def bytes_of_counts(counts: Mapping[str, int]) -> int:
    """Tensor bytes of safetensors element counts by storage dtype (unknown dtypes count 2 bytes)."""
    return int(sum(DTYPE_BYTES.get(dtype.upper(), 2) * n for dtype, n in counts.items()))


# Where the language-model part of a multimodal config lives (transformers' get_text_config plus
# names seen on the Hub); the first one present wins.
_TEXT_CONFIG_KEYS = ("text_config", "llm_config", "language_config", "text_encoder", "decoder", "generator")


class ModelFacts(BaseModel):
    """Immutable facts about one checkpoint, as committed in ``models.lock.json``.

    ``config`` is the raw ``config.json``. ``param_counts`` maps safetensors storage dtype to element
    count (as ``huggingface_hub`` reports it); ``weight_bytes`` is the sum of tensor bytes (headers
    excluded); ``tensor_bytes`` the same bytes by layer kind, then dtype (`tensor_kinds.py`), which
    sizing weighs each GPU rank's weights from. Any may be empty/None when the Hub could not be read
    (or, for ``tensor_bytes``, the entry was locked before the lock recorded it); the engine then works
    from the config alone. Older lock files without the optional keys still load (defaults).
    """

    model_config = ConfigDict(frozen=True)

    repo: str
    revision: str
    config: dict[str, Any] = Field(default_factory=dict)
    param_counts: dict[str, int] = Field(default_factory=dict)
    weight_bytes: int | None = None
    tensor_bytes: dict[str, dict[str, int]] | None = None
    """Bytes of the checkpoint's tensors per layer kind, then per safetensors dtype, from the headers'
    data offsets (`python -m tkf_infra lock`); None: not read yet."""
    parameter_count: int | None = None
    gated: bool | None = None
    source: str = ""
    unknown_fields: tuple[str, ...] = ()

    @field_validator("tensor_bytes")
    @classmethod
    def _known_kinds(cls, value: dict[str, dict[str, int]] | None) -> dict[str, dict[str, int]] | None:
        """A kind this code does not know would be weighed nowhere (a rank's weights undercounted): refused."""
        if value is None:
            return None
        unknown = sorted(set(value) - set(TENSOR_KINDS))
        if unknown:
            raise ValueError(f"tensor_bytes has layer kinds {unknown} this tkf-infra does not know (it knows "
                             f"{', '.join(TENSOR_KINDS)}); re-lock the entry with this version's "
                             "`python -m tkf_infra lock`")
        bad = sorted(f"{k}.{d}" for k, per in value.items() for d, n in per.items() if n < 0)
        if bad:
            raise ValueError(f"tensor_bytes has negative byte counts at {', '.join(bad)}; re-lock the entry")
        return value

    @property
    def key(self) -> str:
        return f"{self.repo}@{self.revision}"

    @property
    def total_parameters(self) -> int | None:
        """Sum of stored elements (or the sourced total); None when neither is known."""
        return sum(self.param_counts.values()) if self.param_counts else self.parameter_count

    def text_config(self) -> dict[str, Any]:
        """The language-model config vLLM sizes the KV cache from.

        Multimodal configs nest it (``text_config`` …); nested configs often omit dtype and
        quantization, which then sit at the top level, so those are inherited.
        """
        return resolve_text_config(self.config)


#: Keys that say a (sub-)config describes the decoder itself.
_SHAPE_KEYS = ("num_hidden_layers", "hidden_size", "n_layer", "num_layers", "n_embd", "d_model")

#: transformers' defaults for text configs that store only what differs from them: llava-hf configs
#: (e.g. llava-hf/llava-1.5-7b-hf) write a `text_config` of model_type llama with neither layers nor
#: width, and transformers fills in LlamaConfig's defaults (transformers/models/llama/
#: configuration_llama.py: vocab 32000, hidden 4096, intermediate 11008, 32 layers, 32 heads, KV heads =
#: heads, 2048 positions, untied). Only model types whose defaults are listed here are completed.
TEXT_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
              "num_attention_heads": 32, "max_position_embeddings": 2048, "tie_word_embeddings": False},
}


def resolve_text_config(config: dict[str, Any]) -> dict[str, Any]:
    """Return the text sub-config with top-level dtype/quantization inherited when absent.

    A nested text config is used when it carries the decoder's shape, or when the top level does not
    (then the fields sizing needs are named under it: `text_config.num_hidden_layers`). One that stores
    only what differs from transformers' defaults is completed from `TEXT_DEFAULTS` for its model type."""
    if not isinstance(config, dict):
        return {}
    text: dict[str, Any] | None = None
    where = ""
    top_has_shape = any(config.get(k) is not None for k in _SHAPE_KEYS)
    for key in _TEXT_CONFIG_KEYS:
        sub = config.get(key)
        if isinstance(sub, dict) and any(k in sub for k in _SHAPE_KEYS):
            text, where = sub, f"{key}."
            break
    thinker = config.get("thinker_config")
    if text is None and isinstance(thinker, dict) and isinstance(thinker.get("text_config"), dict):
        text, where = thinker["text_config"], "thinker_config.text_config."
    if text is None and not top_has_shape:
        sub = config.get("text_config")
        if isinstance(sub, dict):
            text, where = sub, "text_config."
    if text is None:
        return dict(config)
    merged = dict(text)
    for key in ("torch_dtype", "dtype", "quantization_config", "tie_word_embeddings", "vocab_size"):
        if key not in merged and key in config:
            merged[key] = config[key]
    defaults = TEXT_DEFAULTS.get(str(merged.get("model_type") or ""))
    if defaults and not any(k in merged for k in _SHAPE_KEYS):
        for key, value in defaults.items():
            merged.setdefault(key, value)
    merged.setdefault("_multimodal", True)
    merged.setdefault("_where", where)
    return merged
