"""What we know about one model checkpoint (``repo@revision``), independent of how it is served.

The sizing engine must answer offline (at ``pulumi preview`` and in CI), so every fact it needs is
captured once from the Hub and committed to ``models.lock.json``. A revision is a commit SHA, so an
entry never goes stale; facts we could not source are listed in ``unknown_fields`` instead of being
guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

#: Bytes per element of each safetensors storage dtype. Packed int4 weights are stored as I32/U8,
#: so bytes must be computed per storage element, never as "parameters x bits".
DTYPE_BYTES: dict[str, float] = {
    "F64": 8, "I64": 8, "U64": 8,
    "F32": 4, "I32": 4, "U32": 4,
    "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
    "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I8": 1, "U8": 1, "BOOL": 1,
    "F4": 0.5, "F6_E2M3": 0.75, "F6_E3M2": 0.75,
}  # fmt: skip

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
    excluded). Either may be empty/None when the Hub could not be read; the engine then works from
    the config alone. Older lock files without the optional keys still load (defaults).
    """

    model_config = ConfigDict(frozen=True)

    repo: str
    revision: str
    config: dict[str, Any] = Field(default_factory=dict)
    param_counts: dict[str, int] = Field(default_factory=dict)
    weight_bytes: int | None = None
    parameter_count: int | None = None
    gated: bool | None = None
    source: str = ""
    unknown_fields: tuple[str, ...] = ()

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


def resolve_text_config(config: dict[str, Any]) -> dict[str, Any]:
    """Return the text sub-config with top-level dtype/quantization inherited when absent."""
    text: dict[str, Any] | None = None
    for key in _TEXT_CONFIG_KEYS:
        sub = config.get(key)
        if isinstance(sub, dict) and ("num_hidden_layers" in sub or "hidden_size" in sub):
            text = sub
            break
    thinker = config.get("thinker_config")
    if text is None and isinstance(thinker, dict) and isinstance(thinker.get("text_config"), dict):
        text = thinker["text_config"]
    if text is None:
        return dict(config)
    merged = dict(text)
    for key in ("torch_dtype", "dtype", "quantization_config", "tie_word_embeddings"):
        if key not in merged and key in config:
            merged[key] = config[key]
    merged.setdefault("_multimodal", True)
    return merged
