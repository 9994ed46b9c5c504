"""DeepSeek V4's KV cache: compressed attention's caches, grouped and packed as vLLM lays them out.

Apart from `kv.py` because nothing else is laid out this way: every V4 layer keeps a sliding-window cache, the
compressed layers (one token in 4 or 128) a compressed MLA cache and a compressor state, the ratio-4 layers an
indexer cache and its compressor state too; vLLM groups them into layer tuples padded to an approximate GCD and
overlays the groups in one packed block slab (read at vLLM 0.27.1, the first release sized for V4):

- pages: `v1/kv_cache_interface.py`@v0.27.1:353-359 (alignment padding), 389-426 (`MLAAttentionSpec`: the
  compressed block stores block_size / ratio tokens, 584 B each in `fp8_ds_mla`), 631-662 (`SlidingWindowMLASpec`),
  887-898 (layer tuples, pages per request);
- the caches each layer registers: `models/deepseek_v4/attention.py`@v0.27.1:206-213 (ratio per layer, the MTP
  layer's 1), 277-341, 655-710, 786-797 (the FP8 indexer cache, 132 B per token); `compressor.py`@v0.27.1:155-203,
  291-300 (state: 2 x coff x head_dim float32, block 4 or 8, window coff x ratio);
  `v1/attention/backends/mla/sparse_swa.py`@v0.27.1:56-102 (SWA block 64);
- grouping and packing: `v1/core/kv_cache_utils.py`@v0.27.1:1283-1306 (block stride: the widest group),
  1592-1668 (groups by block size and window; approximate GCD), 1670-1755 (SWA groups split into tuple groups),
  1920-1937 (one request's bytes), 937-959 (concurrency: pages per request summed over groups);
- the window's in-flight tokens: `config/vllm.py`@v0.27.1:540-561, `v1/kv_cache_interface.py`@v0.27.1:587-618.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from tkf_infra.sizing.config_fields import MAX_DIM, MAX_POSITIONS, ConfigFieldError, Fields

#: Bytes per stored token in the `fp8_ds_mla` format: 448 NoPE (FP8) + 128 RoPE (bf16) + 8 scale bytes.
DS_MLA_TOKEN_BYTES = 584
#: FlashMLA's packing alignment of every V4 page in `fp8_ds_mla`.
PAGE_ALIGNMENT = 576
#: The SWA cache's block in tokens (sparse_swa.py@v0.27.1:78-83: one C4A block's 256 / 4 stored tokens).
SWA_BLOCK = 64
#: The compressed caches' block in tokens when the user sets none: the C4A block shape [256 // 4, head_dim] the SWA
#: and compressor blocks are derived from (sparse_swa.py@v0.27.1:78-83, compressor.py@v0.27.1:181-190).
V4_BLOCK = 256
#: The indexer's FP8 keys: 128 values + 128 / 128 x 4 B of float32 scale (attention.py@v0.27.1:786-790).
INDEXER_QUANT_BLOCK = 128
#: The ratios vLLM builds (sparse_swa.py@v0.27.1:43-53, compressor.py@v0.27.1:177).
RATIOS = (1, 4, 128)
#: Bytes per batched token a V4 rank's profile holds beyond the generic forward-pass term: the hyper-connections'
#: residual streams (`hc_mult` of them), the padded sparse-MLA queries, the indexer's scores over the compressed
#: tokens and the sparse-MLA scratch (models/deepseek_v4/nvidia/model.py@v0.27.1:1020-1110, eager_scratch.py,
#: sparse_mla.py@v0.27.1:150-195), not read term by term yet. MEASURED, not derived: two start-ups of
#: DeepSeek-V4-Flash-0731 on 2 x H200 at 0.27.1 with the same settings but 8192 and 65536 batched tokens printed
#: 27.14 GiB apart in available KV memory (50.51 and 23.37; their utilization cancels) where the generic terms
#: differ by 5.31 GiB: 21.83 GiB over 57,344 tokens. Charged through the origin (3.1 GiB at 8192 tokens, 1.9 GiB above
#: what the 8192-token start-up left if it ran at 0.95), at TP 2, and whole in the bound as a doubt.
V4_EXTRA_BYTES_PER_TOKEN = 21.83 * 2**30 / 57_344


def _pad(size: int) -> int:
    return -(-size // PAGE_ALIGNMENT) * PAGE_ALIGNMENT


@dataclass(frozen=True)
class _Spec:
    """One cache of one layer: its page, its block in tokens, and its window (None: it grows with the sequence)."""

    page: int
    block: int
    window: int | None


def _layer_specs(ratio: int, head_dim: int, index_head_dim: int, block: int, window: int) -> list[tuple[str, _Spec]]:
    """The caches one V4 layer registers, keyed by the cache they are (the MLA / SWA grouping's input)."""
    specs = [("swa", _Spec(_pad(SWA_BLOCK * DS_MLA_TOKEN_BYTES), SWA_BLOCK, window))]
    if ratio == 1:
        return specs
    coff = 2 if ratio == 4 else 1
    specs.append(("mla", _Spec(_pad(block // ratio * DS_MLA_TOKEN_BYTES), block, None)))
    state_block = 4 if ratio == 4 else 8
    specs.append((f"state{ratio}", _Spec(_pad(state_block * 2 * coff * head_dim * 4), state_block, coff * ratio)))
    if ratio == 4:  # the indexer: its FP8 keys and their compressor's state
        key = index_head_dim + index_head_dim // INDEXER_QUANT_BLOCK * 4
        specs.append(("mla", _Spec(_pad(block // ratio * key), block, None)))
        specs.append((f"state{ratio}", _Spec(_pad(state_block * 2 * coff * index_head_dim * 4), state_block,
                                             coff * ratio)))
    return specs


def _approximate_gcd(values: list[int], lower_bound: int) -> int:
    """The tuple count with the least padding, ties to the larger (kv_cache_utils.py@v0.27.1:1635-1667)."""
    best, best_pad = lower_bound, None
    for d in range(lower_bound, max(max(values), lower_bound) + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad is None or pad < best_pad or (pad == best_pad and d > best):
            best, best_pad = d, pad
    return best


@dataclass(frozen=True)
class PackedLayout:
    """A V4 rank's packed KV layout: what one block id costs and the pages one request holds per group."""

    block_stride: int
    """Bytes of one block id: the widest group's pages summed (groups overlay one slab)."""
    tuple_bytes: int
    """What vLLM's start-up check charges per page of a request: tuple count x one tuple's distinct page sizes."""
    groups: tuple[tuple[int, int | None], ...]
    """Per group: its block in tokens and its window (None: the compressed MLA group, which grows with the length)."""

    def pages(self, max_len: int, in_flight: int) -> int:
        """Pages one max-length request holds over every group (`max_memory_usage_pages`)."""
        total = 0
        for block, window in self.groups:
            if window is None:
                total += -(-max_len // block)
            else:
                total += -(-min(window - 1 + in_flight, max_len) // block) + 1
        return total


def packed_layout(ratios: list[int], head_dim: int, index_head_dim: int, block: int, window: int) -> PackedLayout:
    """Group and pack the caches of a rank's V4 layers (their compress ratios, 1 for plain SWA layers; `window`: the
    config's sliding_window)."""
    mla: list[int] = []
    windowed: dict[tuple[int, int | None], list[int]] = {}
    for ratio in ratios:
        for kind, spec in _layer_specs(ratio, head_dim, index_head_dim, block, window):
            if kind == "mla":
                mla.append(spec.page)
            else:
                windowed.setdefault((spec.block, spec.window), []).append(spec.page)
    if not mla:  # no compressed layer: every page is the SWA one and vLLM keeps its uniform path
        pages = windowed[(SWA_BLOCK, window)]
        return PackedLayout(sum(pages), sum(set(pages)) * len(pages), ((SWA_BLOCK, window),))
    tuples = [Counter(mla).most_common(1)[0][1]] + [Counter(p).most_common(1)[0][1] for p in windowed.values()]
    n = _approximate_gcd(tuples, lower_bound=tuples[0])
    groups: list[tuple[int, int | None]] = [(block, None)]
    widths = [sum(mla)]
    counts = [tuples[0]]
    for (blk, win), pages in windowed.items():
        by_size = Counter(pages)
        per_size = next(iter(by_size.values()))
        split = -(-per_size // n)
        for i in range(split):
            layers_here = len(range(i, per_size, split))
            widths.append(layers_here * sum(by_size))
            counts.append(layers_here)
            groups.append((blk, win))
    return PackedLayout(max(widths), max(counts) * sum(set(mla)), tuple(groups))


def compressed_shape(f: Fields, layers: int) -> tuple[tuple[int, ...], dict[str, int]]:
    """DeepSeek V4's per-layer `compress_ratios` (0 reads as 1: the MTP layers past `num_hidden_layers` are not listed
    by vLLM's index, models/deepseek_v4/attention.py@v0.27.1:206-213), its `sliding_window`, the indexer's and the
    low-rank projections' sizes and `hc_mult` (defaults: DeepSeek-V4-Flash's).
    Ratios other than 1, 4 and 128 are refused by name, as vLLM refuses them (sparse_swa.py@v0.27.1:43-53)."""
    if f.cfg.get("compress_ratios") is None:
        return (), {}
    listed = f.int_list("compress_ratios", None, lo=0, hi=1 << 20)
    if len(listed) < layers:
        raise ConfigFieldError(f"config.json field {f.name('compress_ratios')} lists {len(listed)} ratios but the "
                               f"model has {layers} layers; correct the lock entry's config")
    ratios = tuple(max(1, r) for r in listed[:layers])
    odd = sorted({r for r in ratios if r not in (1, 4, 128)})
    if odd:
        raise ConfigFieldError(f"config.json field {f.name('compress_ratios')} holds ratio {odd[0]}: vLLM builds "
                               "DeepSeek V4 layers of ratio 1, 4 and 128 only ('Unsupported DeepseekV4 "
                               "compress_ratio')")
    window = f.integer("sliding_window", lo=1, hi=MAX_POSITIONS)
    if window is None:
        raise ConfigFieldError(f"config.json lacks {f.name('sliding_window')}, the window every DeepSeek V4 layer "
                               "keeps beside its compressed cache; add it to the lock entry's config")
    return ratios, {"window": window, "index_head_dim": f.integer("index_head_dim", lo=1, hi=MAX_DIM) or 128,
                    "index_heads": f.integer("index_n_heads", lo=1, hi=MAX_DIM) or 64,
                    "q_lora": f.integer("q_lora_rank", lo=1, hi=MAX_DIM) or 1024,
                    "o_lora": f.integer("o_lora_rank", lo=1, hi=MAX_DIM) or 1024,
                    "o_groups": f.integer("o_groups", lo=1, hi=MAX_DIM) or 8,
                    "hc_mult": f.integer("hc_mult", lo=1, hi=64) or 1}


def unmodelled_v4(f: Fields) -> None:
    """DeepSeek V4's grouped low-rank output projection (`o_lora_rank`) without its `compress_ratios`: still V4's
    compressed attention (models/deepseek_v4/attention.py@v0.27.1:200-260), whose KV layout cannot be read without
    the ratios; a V3-style count of such a config overstated the printed tokens by a third."""
    if f.cfg.get("o_lora_rank") is not None and f.cfg.get("compress_ratios") is None:
        raise ConfigFieldError(f"config.json field {f.name('o_lora_rank')} projects attention outputs through grouped "
                               "low-rank matrices (DeepSeek V4's compressed attention) but the config has no "
                               "compress_ratios, so each layer's KV cache cannot be laid out; lock the checkpoint's "
                               "own config.json")


def v4_extra_gib(ratios: tuple[int, ...], tokens: int) -> float:
    """What a V4 rank's profile holds beyond the generic forward pass for `tokens` batched tokens (GiB; 0 elsewhere)."""
    return V4_EXTRA_BYTES_PER_TOKEN * tokens / 2**30 if ratios else 0.0


#: The first release read with DeepSeek V4 (models/deepseek_v4/@v0.27.1).
V4_SINCE = (0, 27, 0)


def v4_problems(version: tuple[int, int, int] | None, speculative: bool, dcp: int) -> list[str]:
    """What the V4 layout is not sized for: releases before the one read, an MTP draft (its layer registers caches of
    its own), decode context parallelism (vLLM's sliding-window specs assert it off, kv_cache_interface.py@v0.27.1:
    610-613)."""
    out = []
    if version is not None and version < V4_SINCE:
        out.append(f"DeepSeek V4's compressed attention is sized from vLLM {'.'.join(map(str, V4_SINCE))} (the release "
                   f"read); vLLM {'.'.join(map(str, version))} is not; pin serving.vllmImage to 0.27 or later")
    if speculative:
        out.append("DeepSeek V4 with speculativeConfig: the draft layer's own compressed caches are not modelled; "
                   "drop speculativeConfig")
    if dcp > 1:
        out.append(f"decodeContextParallelSize {dcp}: vLLM's sliding-window caches, which every DeepSeek V4 layer "
                   "keeps, "
                   "refuse decode context parallelism ('DCP not support sliding window'); drop it")
    return out
