"""The KV cache as vLLM's cache manager lays it out: pages per layer group, blocks, tokens, concurrency.

Full, sliding-window, chunked and MLA layers differ in bytes per token and in how many blocks one
request holds; recurrent layers (gated delta net, Mamba2) keep a fixed state per request, padded to
the attention page, and raise the attention block size until a page holds it. Hybrid models share one
block pool across groups of layers (vllm/v1/core/kv_cache_utils.py; group sizes per release in
`versions`). The V0 engine had none of this: one block spans every layer at full length.
"""

from __future__ import annotations

from dataclasses import dataclass

from tkf_infra.sizing.arch import Arch, LayerKind
from tkf_infra.sizing.kv_v4 import V4_BLOCK, PackedLayout, packed_layout
from tkf_infra.sizing.params import FLOAT32_DTYPES, SizingError

#: vllm/model_executor/models/config.py@v0.16.0:429 — FlashAttention block sizes are multiples of 16.
KERNEL_BLOCK_ALIGNMENT = 16


def kv_elem_bytes(kv_cache_dtype: str, act_bytes: float) -> float:
    if kv_cache_dtype.startswith("fp8"):
        return 1.0
    if kv_cache_dtype in ("auto", "", "bfloat16", "float16", "half"):
        return act_bytes
    raise SizingError(f"kvCacheDtype {kv_cache_dtype!r} is not known: use auto, fp8, fp8_e4m3 or fp8_e5m2")


def recurrent_state_bytes(arch: Arch, tp: int, act_bytes: float, spec_tokens: int) -> float:
    """Bytes of one request's state in one recurrent layer (conv state + SSM/temporal state).

    vllm/model_executor/layers/mamba/mamba_utils.py@v0.16.0:174-197 (gated delta net); the SSM
    state's dtype follows the config's mamba_ssm_dtype (vllm/model_executor/models/config.py@v0.17.0:630-645),
    looked up in `STR_DTYPE_TO_TORCH_DTYPE` (mamba_utils.py@v0.32.0:108, 143), where "float" is float32 too
    (utils/torch_utils.py@v0.32.0:33-38)."""
    r = arch.recurrent
    if r is None:
        return 0.0
    ssm_bytes = 4.0 if (r.ssm_dtype or "").lower() in FLOAT32_DTYPES else act_bytes
    conv = (r.conv_kernel - 1 + spec_tokens) * r.conv_dim / tp * act_bytes
    ssm = r.heads / tp * r.head_dim * r.state_dim * ssm_bytes
    return conv + ssm


@dataclass(frozen=True)
class KvLayout:
    """KV layout of one PP rank: per-layer page bytes grouped as vLLM's KV cache manager does."""

    block_size: int
    page_bytes: float  # bytes of one block of one layer (recurrent pages padded to this)
    groups: tuple[LayerKind, ...]  # one kind per group (hybrid) / one per layer (uniform)
    group_size: int  # layers sharing one tensor (hybrid) or 1 for uniform
    hybrid: bool
    v0: bool = False
    recurrent_blocks: int = 1
    """Blocks one request holds in a recurrent group (1 + speculative tokens; +1 with prefix caching)."""
    recurrent_per_len: bool = False
    """Mamba 'all' cache mode: a state per block of the sequence, plus the speculative blocks."""
    side_bytes: float = 0.0
    """Bytes of one block of the rank's second per-layer caches, summed over its layers: the sparse-attention
    indexer's keys (DeepSeek V3.2, GLM-5), which share the block table of the layer's MLA cache (`indexer_page`)."""
    dcp: int = 1
    """Decode context parallelism: each of the TP group's `dcp` ranks keeps every dcp-th token of a request, so one
    request needs `cdiv(max_len, dcp)` tokens' blocks per rank (v1/kv_cache_interface.py@v0.19.1:113-121,
    @v0.27.1:266-271) and the printed cache size is dcp times the rank's (v1/core/kv_cache_utils.py@v0.19.1:1307-1316;
    from 0.21 it is concurrency x max_model_len, concurrency counted on the local length)."""

    packed: PackedLayout | None = None
    """DeepSeek V4's packed layout (`kv_v4`): every method below then follows it."""
    in_flight: int = 0
    """Tokens scheduled but not yet freed (V4's windowed caches reserve for them): batches in flight x batched
    tokens (`config/vllm.py`@v0.27.1:540-561)."""

    def _local(self, max_len: int) -> int:
        return -(-max_len // self.dcp) if self.dcp > 1 else max_len

    @property
    def bytes_per_block(self) -> float:
        """What one block id costs across the rank's layers (the divisor of the KV budget)."""
        if self.packed is not None:
            return self.packed.block_stride
        if self.hybrid:
            return self.page_bytes * self.group_size
        return self.page_bytes * len(self.groups) + self.side_bytes

    def blocks_for(self, kind: LayerKind, max_len: int, mnbt: int) -> int:
        if self.v0:
            return -(-max_len // self.block_size)
        if kind.kind == "linear":
            if self.recurrent_per_len:
                return -(-max_len // self.block_size) + self.recurrent_blocks - 1
            return self.recurrent_blocks
        if kind.kind == "sliding" and kind.window:
            tokens = min(kind.window - 1 + mnbt, max_len)
            return -(-tokens // self.block_size) + 1
        if kind.kind == "chunked" and kind.window:
            return -(-min(kind.window + mnbt, max_len) // self.block_size)
        return -(-max_len // self.block_size)

    def blocks_per_request(self, max_len: int, mnbt: int) -> int:
        if self.packed is not None:
            return self.packed.pages(max_len, self.in_flight)
        max_len = self._local(max_len)
        if self.hybrid:
            return sum(self.blocks_for(k, max_len, mnbt) for k in self.groups)
        return self.blocks_for(self.groups[0], max_len, mnbt) if self.groups else 0

    def need_per_request(self, max_len: int, mnbt: int) -> float:
        """Bytes one max-length request needs on this rank (vLLM's start-up check)."""
        if self.packed is not None:
            return self.packed.tuple_bytes * self.packed.pages(max_len, self.in_flight)
        max_len = self._local(max_len)
        if self.hybrid:
            return self.blocks_per_request(max_len, mnbt) * self.page_bytes * self.group_size
        side = -(-max_len // self.block_size) * self.side_bytes if self.side_bytes else 0.0
        return sum(self.blocks_for(k, max_len, mnbt) for k in self.groups) * self.page_bytes + side

    def num_blocks(self, available: float) -> int:
        if available <= 0 or not self.groups or self.bytes_per_block <= 0:  # no KV head on this rank: refused
            return 0
        return int(available // self.bytes_per_block)

    def tokens(self, num_blocks: int, max_len: int, mnbt: int, from_concurrency: bool) -> int:
        """vLLM's "GPU KV cache size: N tokens" for `num_blocks` blocks."""
        if (from_concurrency or self.packed is not None) and not self.v0:
            return int(self.concurrency(num_blocks, max_len, mnbt) * max_len)
        if self.hybrid:
            return (num_blocks // len(self.groups)) * self.block_size * self.dcp
        return num_blocks * self.block_size * self.dcp

    def concurrency(self, num_blocks: int, max_len: int, mnbt: int) -> float:
        if self.v0:
            return num_blocks * self.block_size / max_len if max_len else 0.0
        per_req = self.blocks_per_request(max_len, mnbt)
        return num_blocks / per_req if per_req else 0.0


def attention_page(arch: Arch, tp: int, kv_bytes: float, block_size: int) -> float:
    """Bytes of one block of one attention layer on one rank."""
    if arch.mla:
        m = arch.mla
        return block_size * (m["kv_lora_rank"] + m["qk_rope_head_dim"]) * kv_bytes  # latent, no x2, replicated
    return 2 * block_size * max(1, arch.kv_heads // tp) * arch.head_dim * kv_bytes


#: The indexer's keys are stored in FP8 with one float32 scale per this many elements (`quant_block_size`,
#: models/deepseek_v32/attention.py@v0.27.1:84, model_executor/models/deepseek_v2.py@v0.19.1:659-671).
INDEXER_QUANT_BLOCK = 128


def indexer_page(arch: Arch, block_size: int) -> float:
    """Bytes of one block of one layer's sparse-attention indexer cache (DeepSeek V3.2, GLM-5), 0 without one.

    vLLM gives each indexer layer a KV cache of its own beside the MLA latent: `DeepseekV32IndexerCache`, an
    `MLAAttentionSpec` of one head of `index_head_dim + index_head_dim // 128 * 4` uint8 elements per token (FP8 keys
    and their float32 scales), whatever `kv_cache_dtype` is (model_executor/models/deepseek_v2.py@v0.19.1:584-605,
    659-671; @v0.27.1:616, 696-697; models/deepseek_v32/attention.py@v0.27.1:82-88). Both specs are MLA, so every
    layer stays in one uniform-type group whose page is the sum of the layers' pages
    (v1/kv_cache_interface.py@v0.19.1:375-394): one block id costs the latent and the indexer keys of every layer."""
    if not arch.indexer:
        return 0.0
    head = arch.indexer["head_dim"]
    return block_size * (head + head // INDEXER_QUANT_BLOCK * 4)


def hybrid_block_size(arch: Arch, tp: int, kv_bytes: float, act_bytes: float, spec_tokens: int,
                      requested: int | None) -> int:
    """The attention block size vLLM sets so one attention page holds a recurrent state.

    vllm/model_executor/models/config.py@v0.16.0:383-503 (HybridAttentionMambaModelConfig): the
    smallest multiple of 16 tokens whose page is at least the state; a larger user value is kept."""
    state = recurrent_state_bytes(arch, tp, act_bytes, spec_tokens)
    per_token = attention_page(arch, tp, kv_bytes, 1)
    block = KERNEL_BLOCK_ALIGNMENT * -(-int(state) // int(KERNEL_BLOCK_ALIGNMENT * per_token))
    return max(block, requested or 0)


def recurrent_blocks(arch: Arch, spec_tokens: int, prefix_caching: bool, *, all_mode: bool,
                     checkpoint_block: bool) -> tuple[int, bool]:
    """Blocks one request holds per recurrent layer group, and whether they grow with its length.

    vllm/v1/kv_cache_interface.py (MambaSpec.max_memory_usage_bytes): mode 'none' (no prefix caching)
    1 + speculative; 'align' 2 + speculative (+1 prefill checkpoint for Mamba2 from 0.32); 'all'
    (Mamba2 with prefix caching in 0.16-0.25) one per block of the sequence + speculative."""
    if not prefix_caching:
        return 1 + spec_tokens, False
    mamba2 = arch.recurrent is not None and arch.recurrent.style == "mamba2"
    if all_mode and mamba2:
        return 1 + spec_tokens, True
    return 2 + spec_tokens + (1 if checkpoint_block and mamba2 else 0), False


def v4_layout(arch: Arch, layers: range, block_size: int, in_flight: int) -> KvLayout:
    """A DeepSeek V4 rank's packed layout over its decoder layers (`kv_v4`); its blocks are the compressed caches'."""
    ratios = [arch.compress_ratios[i] for i in layers]
    packed = packed_layout(ratios, arch.head_dim, arch.v4["index_head_dim"], block_size, arch.v4["window"])
    return KvLayout(block_size, 0.0, tuple(LayerKind("full") for _ in ratios), 1, hybrid=False, packed=packed,
                    in_flight=in_flight)


def v4_block(requested: int | None) -> int:
    """The compressed caches' block: the user's, else the 256 tokens V4's SWA and compressor blocks derive from."""
    return requested or V4_BLOCK


def kv_layout(arch: Arch, kinds: tuple[LayerKind, ...], tp: int, kv_bytes: float, block_size: int, *,
              group_ratio: float, v0: bool = False, recurrent_blocks: int = 1,
              recurrent_per_len: bool = False, indexer_layers: int = 0, dcp: int = 1) -> KvLayout:
    """Group the rank's layers the way the release does (`group_ratio`: see VersionRow). `indexer_layers`: how many
    of the rank's layers keep a sparse-attention indexer cache beside their MLA latent (`indexer_page`)."""
    page = attention_page(arch, tp, kv_bytes, block_size)
    attn = tuple(k for k in kinds if k.attention or k.kind == "linear")
    if v0:
        full = tuple(LayerKind("mla" if arch.mla else "full") for k in attn if k.attention)
        return KvLayout(block_size, page, full, 1, hybrid=False, v0=True)
    types: dict[LayerKind, int] = {}
    for k in attn:
        types[k] = types.get(k, 0) + 1
    if len(types) <= 1:
        return KvLayout(block_size, page, attn, 1, hybrid=False,
                        side_bytes=indexer_page(arch, block_size) * indexer_layers, dcp=dcp)
    counts = list(types.values())
    g = min(counts)
    if group_ratio > 1.0 and max(counts) < group_ratio * min(counts):
        g = max(counts)
    groups: list[LayerKind] = []
    for kind, count in types.items():
        groups.extend([kind] * -(-count // g))
    return KvLayout(block_size, page, tuple(groups), g, hybrid=True, recurrent_blocks=recurrent_blocks,
                    recurrent_per_len=recurrent_per_len)


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
