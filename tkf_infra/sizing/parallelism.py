"""vLLM's parallelism rules over a parsed architecture: what TP and PP may divide, and each PP rank's layers.

Apart from `arch.py` because these are vLLM's rules about a deployment (the TP and PP it is given), not
facts read from the model's config: the weights, KV and LoRA terms share the layer split, the fit check
the divisibility refusals.
"""

from __future__ import annotations

from tkf_infra.sizing.arch import Arch

VOCAB_PADDING = 64  # vLLM pads the vocabulary to a multiple of 64 before splitting it across TP ranks


def parallelism_problems(arch: Arch, tp: int, pp: int) -> list[str]:
    """vLLM's divisibility rules; each message names the value and what is allowed."""
    problems: list[str] = []
    if tp < 1 or pp < 1:
        return [f"tensorParallelSize ({tp}) and pipelineParallelSize ({pp}) must be at least 1"]
    for n in sorted(set(arch.layer_heads or (arch.heads,))):
        if n % tp:
            ok = [d for d in range(1, min(n, 16) + 1) if all(h % d == 0 for h in set(arch.layer_heads or (n,)))]
            problems.append(
                f"tensorParallelSize {tp} does not divide the {n} attention heads "
                f"(vLLM refuses it); use one of {ok}"
            )
            break
    if arch.mla is None and arch.kv_heads:
        kv = arch.kv_heads
        if (kv >= tp and kv % tp) or (kv < tp and tp % kv):
            problems.append(
                f"tensorParallelSize {tp} does not split the {kv} KV heads evenly (needs {kv} % tp == 0 "
                f"or tp % {kv} == 0)"
            )
    if arch.vocab:
        padded = round_up(arch.vocab, VOCAB_PADDING)
        if padded % tp:
            problems.append(
                f"tensorParallelSize {tp} does not divide the padded vocabulary ({padded}); vLLM stops "
                f"with 'AssertionError: {padded} is not divisible by {tp}'"
            )
    if arch.is_moe and arch.moe_intermediate and arch.moe_intermediate % tp:
        problems.append(
            f"tensorParallelSize {tp} does not divide the expert intermediate size {arch.moe_intermediate}"
        )
    if pp > arch.layers:
        problems.append(f"pipelineParallelSize {pp} exceeds the {arch.layers} layers")
    return problems


#: The first release read with `--decode-context-parallel-size` (config/parallel.py@v0.11.0:198,
#: v1/core/kv_cache_utils.py@v0.11.0:1081-1085).
DCP_SINCE = (0, 11, 0)


def dcp_problems(arch: Arch, dcp: int, tp: int, version: tuple[int, int, int] | None) -> list[str]:
    """Decode context parallelism: vLLM splits each TP group into tp/dcp groups whose ranks share a request's KV tokens
    (config/parallel.py@v0.19.1:385-396: "tp_size needs to be divisible by dcp_size"). It is sized for MLA, whose
    latent every TP rank keeps whole, so each rank holds 1/dcp of the tokens; GQA's heads split by TP are not modelled
    with it, and sliding-window layers are refused by vLLM itself (kv_cache_interface.py@v0.19.1:252-254)."""
    if dcp <= 1:
        return []
    if version is not None and version < DCP_SINCE:
        return [f"decodeContextParallelSize {dcp}: vLLM {'.'.join(map(str, version))} has no "
                f"--decode-context-parallel-size (read from {'.'.join(map(str, DCP_SINCE))}); pin a later "
                "serving.vllmImage or drop decodeContextParallelSize"]
    if tp % dcp:
        return [f"decodeContextParallelSize {dcp} does not divide tensorParallelSize {tp} (vLLM: 'tp_size={tp} must "
                f"be divisible by dcp_size={dcp}'); use a divisor of {tp}"]
    if arch.mla is None:
        return [f"decodeContextParallelSize {dcp} is sized for multi-head latent attention models only (DeepSeek "
                f"V2/V3, Kimi K2), whose latent every TP rank keeps whole; {arch.model_type or 'this model'} splits "
                "its KV heads by TP, which is not modelled with decode context parallelism: drop "
                "decodeContextParallelSize"]
    return []


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def pp_layer_ranges(layers: int, pp: int) -> list[range]:
    """Contiguous layer slices per PP rank; the remainder goes to the later ranks (as vLLM does).

    Ranks beyond the layer count would hold nothing and are not listed: such a PP is refused by
    `parallelism_problems`, and listing them would let a typo'd PP of 10**9 exhaust memory."""
    pp = max(1, min(pp, layers))
    base, rem = divmod(layers, pp)
    sizes = [base + (1 if i >= pp - rem else 0) for i in range(pp)]
    out: list[range] = []
    start = 0
    for size in sizes:
        out.append(range(start, start + size))
        start += size
    return out
