"""The share of each tensor class a quantized checkpoint leaves unquantized (compressed-tensors' `ignore` list,
ModelOpt's `exclude_modules`).

Why it matters: vLLM loads every linear layer whose name matches an `ignore` entry with the
unquantized method, in the activation dtype (`should_ignore_layer`,
vllm/model_executor/layers/quantization/compressed_tensors/utils.py@v0.32.0:53-70; an entry is the
exact layer name or `re:` + a regex applied with `re.match`, config_utils.py@v0.32.0:392-412). A
W4A16 checkpoint that keeps its attention (or its first and last layers) in 16 bits is four times
heavier there than its config groups say: sizing it at 4 bits would say "fits" for a model that does
not.

How: each decoder layer's modules are named the way Hugging Face checkpoints name them (the names the
`ignore` list is written against), under every prefix vLLM's models use; a layer's class counts as
unquantized when any of its projections matches (fused q/k/v and gate/up must share a scheme, vLLM
refuses a mix, utils.py:65-69, so one match stands for the fused module). Counting by layer never
undercounts: a partly ignored layer is counted whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatch

# Decoder-layer prefixes of the models vLLM serves (plain, multimodal wrappers, GPT-style).
_PREFIXES = ("model.layers.{i}.", "model.language_model.layers.{i}.", "language_model.model.layers.{i}.",
             "transformer.h.{i}.", "model.decoder.layers.{i}.")
_ATTN = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "self_attn.qkv_proj",
         "attn.c_attn", "attn.c_proj", "self_attn.kv_a_proj_with_mqa", "self_attn.kv_b_proj", "self_attn.q_a_proj",
         "self_attn.q_b_proj")
_MLP = ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "mlp.gate_up_proj", "mlp.c_fc", "mlp.c_proj",
        "mlp.shared_experts.gate_proj", "mlp.shared_experts.down_proj", "mlp.shared_expert.gate_proj",
        "mlp.shared_expert.down_proj", "feed_forward.gate_proj", "feed_forward.down_proj")
_EXPERT = ("mlp.experts.0.gate_proj", "mlp.experts.0.up_proj", "mlp.experts.0.down_proj",
           "block_sparse_moe.experts.0.w1", "block_sparse_moe.experts.0.w2", "block_sparse_moe.experts.0.w3",
           "feed_forward.experts.0.gate_proj", "feed_forward.experts.0.down_proj")


@dataclass(frozen=True)
class Ignored:
    """Fractions (0..1) of the decoder layers whose attention, dense MLP and experts stay unquantized."""

    attention: float = 0.0
    mlp: float = 0.0
    experts: float = 0.0

    def blend(self, quantized: float, unquantized: float, part: str) -> float:
        """Bytes per element of a class: its ignored share at the activation dtype, the rest quantized."""
        f: float = getattr(self, part)
        return f * unquantized + (1 - f) * quantized


class _Patterns:
    """vLLM's `is_equal_or_regex_match` without `check_contains` (the ignore-list call site), with the
    exact names in a set: lists that name every layer's router run to hundreds of entries."""

    def __init__(self, ignore: list[str]) -> None:
        self.exact = {p for p in ignore if isinstance(p, str) and p and not p.startswith("re:")}
        self.regexes = []
        for p in ignore:
            if isinstance(p, str) and p.startswith("re:"):
                try:
                    self.regexes.append(re.compile(p[3:]))
                except re.error:
                    continue  # vLLM fails the same pattern at load; the config reader is not the place
        self.any = bool(self.exact or self.regexes)

    def match(self, name: str) -> bool:
        return name in self.exact or any(r.match(name) for r in self.regexes)


class _Wildcards:
    """ModelOpt's `exclude_modules` as vLLM matches them (`is_layer_excluded`,
    vllm/model_executor/layers/quantization/modelopt.py@v0.32.0:187-221): the exact name, a name the entry is
    a substring of, or an `fnmatch` wildcard (`model.layers.*.self_attn*`)."""

    def __init__(self, exclude: list[str]) -> None:
        self.entries = [p for p in exclude if isinstance(p, str) and p]
        self.any = bool(self.entries)

    def match(self, name: str) -> bool:
        return any(p == name or p in name or fnmatch(name, p) for p in self.entries)


def ignored_share(ignore: list[str], layers: int) -> Ignored:
    """Which share of `layers` decoder layers each class of the `ignore` list leaves unquantized.

    `layers` of 0 (unknown) counts any matching class as wholly unquantized, the safe side."""
    return _share(_Patterns(ignore), layers)


def excluded_share(exclude: list[str], layers: int) -> Ignored:
    """The same for a ModelOpt `exclude_modules` list (wildcards)."""
    return _share(_Wildcards(exclude), layers)


def _share(patterns: _Patterns | _Wildcards, layers: int) -> Ignored:
    if not patterns.any:
        return Ignored()
    n = max(layers, 1)

    def share(modules: tuple[str, ...]) -> float:
        hit = sum(1 for i in range(n)
                  if any(patterns.match(prefix.format(i=i) + m) for prefix in _PREFIXES for m in modules))
        return 1.0 if layers <= 0 and hit else hit / n

    return Ignored(share(_ATTN), share(_MLP), share(_EXPERT))
