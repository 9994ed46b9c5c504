"""The KV cache as vLLM's cache manager lays it out: pages per layer group, blocks, tokens, concurrency.

Full, sliding-window and MLA layers differ in bytes per token and in how many blocks one request
holds; hybrid models share one block table across groups of layers.
"""

from __future__ import annotations

from dataclasses import dataclass

from tkf_infra.sizing.arch import Arch, LayerKind
from tkf_infra.sizing.params import SizingError


def kv_elem_bytes(kv_cache_dtype: str, act_bytes: float) -> float:
    if kv_cache_dtype.startswith("fp8"):
        return 1.0
    if kv_cache_dtype in ("auto", "", "bfloat16", "float16", "half"):
        return act_bytes
    raise SizingError(f"kvCacheDtype {kv_cache_dtype!r} is not known: use auto, fp8, fp8_e4m3 or fp8_e5m2")


@dataclass(frozen=True)
class KvLayout:
    """KV layout of one PP rank: per-layer page bytes grouped as vLLM's KV cache manager does."""

    block_size: int
    page_bytes: float  # bytes of one block of one layer
    kinds: tuple[LayerKind, ...]
    group_size: int  # layers sharing one tensor (hybrid) or 1 for uniform
    groups: tuple[LayerKind, ...]  # one entry per group (hybrid) / per layer (uniform)
    hybrid: bool

    @property
    def bytes_per_block_all_layers(self) -> float:
        return self.page_bytes * self.group_size * len(self.groups)

    def blocks_for(self, kind: LayerKind, max_len: int, mnbt: int) -> int:
        if kind.kind == "sliding" and kind.window:
            tokens = min(kind.window - 1 + mnbt, max_len)
            return -(-tokens // self.block_size) + 1
        return -(-max_len // self.block_size)

    def need_per_request(self, max_len: int, mnbt: int) -> float:
        """Bytes one max-length request needs on this rank (vLLM's start-up check)."""
        return sum(self.blocks_for(k, max_len, mnbt) for k in self.groups) * self.page_bytes * self.group_size

    def num_blocks(self, available: float) -> int:
        if available <= 0:
            return 0
        return int(
            available // (self.page_bytes * self.group_size * (len(self.groups) if not self.hybrid else 1))
        )

    def tokens(self, num_blocks: int) -> int:
        if self.hybrid:
            return (num_blocks // len(self.groups)) * self.block_size
        return num_blocks * self.block_size

    def concurrency(self, num_blocks: int, max_len: int, mnbt: int) -> float:
        if self.hybrid:
            per_req = sum(self.blocks_for(k, max_len, mnbt) for k in self.groups)
        else:
            per_req = self.blocks_for(self.groups[0], max_len, mnbt) if self.groups else 0
        return num_blocks / per_req if per_req else 0.0


def kv_layout(arch: Arch, layer_range: range, tp: int, kv_bytes: float, block_size: int) -> KvLayout:
    kinds = tuple(arch.layer_kinds[i] for i in layer_range)
    if arch.mla:
        m = arch.mla
        page = (
            block_size * (m["kv_lora_rank"] + m["qk_rope_head_dim"]) * kv_bytes
        )  # latent, no x2, replicated
    else:
        page = 2 * block_size * max(1, arch.kv_heads // tp) * arch.head_dim * kv_bytes
    types: dict[LayerKind, int] = {}
    for k in kinds:
        types[k] = types.get(k, 0) + 1
    if len(types) <= 1:
        return KvLayout(block_size, page, kinds, 1, kinds, hybrid=False)
    counts = list(types.values())
    g = min(counts)
    if max(counts) < 1.5 * min(counts):
        g = max(counts)
    groups: list[LayerKind] = []
    for kind, count in types.items():
        groups.extend([kind] * -(-count // g))
    return KvLayout(block_size, page, kinds, g, tuple(groups), hybrid=True)


def largest_fitting_len(layout: KvLayout, available: float, mnbt: int, block: int, limit: int) -> int:
    """Largest max_model_len (a multiple of the block size, <= limit) whose request fits."""
    lo, hi = 0, limit // block
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if layout.need_per_request(mid * block, mnbt) <= available:
            lo = mid
        else:
            hi = mid - 1
    return lo * block
