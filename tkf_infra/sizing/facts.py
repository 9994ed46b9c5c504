"""What we know about one model checkpoint (``repo@revision``), independent of how it is served.

The sizing engine must answer offline (at ``pulumi preview`` and in CI), so every fact it needs is
captured once from the Hub and committed to ``models.lock.json``. A revision is a commit SHA, so an
entry never goes stale; facts we could not source are listed in ``unknown_fields`` instead of being
guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Bytes per element of each safetensors storage dtype. Packed int4 weights are stored as I32/U8,
#: so bytes must be computed per storage element, never as "parameters x bits".
DTYPE_BYTES: dict[str, float] = {
    "F64": 8, "I64": 8, "U64": 8,
    "F32": 4, "I32": 4, "U32": 4,
    "F16": 2, "BF16": 2, "I16": 2, "U16": 2,
    "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I8": 1, "U8": 1, "BOOL": 1,
    "F4": 0.5, "F6_E2M3": 0.75, "F6_E3M2": 0.75,
}  # fmt: skip

# Where the language-model part of a multimodal config lives (transformers' get_text_config plus
# names seen on the Hub); the first one present wins.
_TEXT_CONFIG_KEYS = ("text_config", "llm_config", "language_config", "text_encoder", "decoder", "generator")


@dataclass(frozen=True)
class ModelFacts:
    """Immutable facts about one checkpoint.

    ``config`` is the raw ``config.json``. ``param_counts`` maps safetensors storage dtype to element
    count (as ``huggingface_hub`` reports it); ``weight_bytes`` is the sum of tensor bytes (headers
    excluded). Either may be empty/None when the Hub could not be read; the engine then works from
    the config alone.
    """

    repo: str
    revision: str
    config: dict[str, Any] = field(default_factory=dict)
    param_counts: dict[str, int] = field(default_factory=dict)
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "repo": self.repo,
            "revision": self.revision,
            "config": self.config,
            "param_counts": dict(sorted(self.param_counts.items())),
            "weight_bytes": self.weight_bytes,
            "parameter_count": self.parameter_count,
            "gated": self.gated,
            "source": self.source,
            "unknown_fields": list(self.unknown_fields),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelFacts:
        """Inverse of ``to_dict``; tolerant of missing optional keys so older lock files still load."""
        try:
            repo = str(data["repo"])
            revision = str(data["revision"])
        except KeyError as exc:
            raise ValueError(f"model facts entry lacks the {exc.args[0]!r} key: {sorted(data)}") from exc
        weight_bytes = data.get("weight_bytes")
        gated = data.get("gated")
        pcount = data.get("parameter_count")
        return cls(
            repo=repo,
            revision=revision,
            config=dict(data.get("config") or {}),
            param_counts={str(k): int(v) for k, v in (data.get("param_counts") or {}).items()},
            weight_bytes=int(weight_bytes) if weight_bytes is not None else None,
            parameter_count=int(pcount) if pcount is not None else None,
            gated=bool(gated) if gated is not None else None,
            source=str(data.get("source") or ""),
            unknown_fields=tuple(str(x) for x in data.get("unknown_fields") or ()),
        )


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
