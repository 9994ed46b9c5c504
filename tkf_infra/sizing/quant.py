"""Quantization: bytes per weight element once vLLM has loaded (and repacked) a checkpoint.

Why per tensor class: quantized checkpoints keep embeddings, the LM head, norms and routers in 16
bits, and mixed schemes quantize attention and MLP differently (compressed-tensors config groups,
modelopt mixed precision). Marlin repacking (GPTQ/AWQ/compressed-tensors WNA16 on any GPU, FP8 and
MXFP4 weight-only on pre-Hopper parts) changes the layout, not the size: the repacked tensors replace
the loaded ones and the kernel's workspace is one int32 per thread block
(vllm/model_executor/layers/quantization/utils/marlin_utils.py@v0.32.0:408-415), so it costs nothing here.

Which `--quantization` names a release accepts, and the compute capability each method needs, are
read from vLLM's source (`vllm/model_executor/layers/quantization/__init__.py` and each method's
`get_min_capability`, at the tags below).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from tkf_infra.sizing.config_fields import ConfigFieldError, Fields
from tkf_infra.sizing.ct_ignore import Ignored, excluded_share, ignored_share
from tkf_infra.sizing.params import SizingError

# Releases whose QuantizationMethods list names each method (read at every tag from 0.7.1 to 0.32.0;
# vllm/model_executor/layers/quantization/__init__.py). Methods accepted throughout are not listed.
ACCEPTED_BY: dict[str, tuple[tuple[int, int], tuple[int, int], str]] = {
    "gguf": ((0, 5), (0, 23), "later releases dropped the GGUF loader"),
    # From 0.15 the INC method's override rewrites the flag to `inc` for AutoRound-format checkpoints
    # (vllm/config/model.py@v0.22.0:1046-1066, quantization/inc.py@v0.22.0:510-517).
    "auto-round": ((0, 9), (0, 99), ""),
    "inc": ((0, 10), (0, 99), ""),
    "bitsandbytes": ((0, 5), (0, 27), "later releases dropped bitsandbytes"),
    "mxfp4": ((0, 10), (0, 99), "gpt-oss MXFP4 arrived in 0.10"),
    "modelopt_fp4": ((0, 9), (0, 99), ""),
    "auto_gptq": ((0, 22), (0, 99), ""),
    "auto_awq": ((0, 24), (0, 99), ""),
}
# get_min_capability at v0.32.0 (mxfp4.py:71-72 80, fp8.py 75, modelopt.py 80 (MXFP8 through Marlin: 1198-1201),
# fbgemm_fp8.py 80).
MIN_CAPABILITY: dict[str, tuple[int, int]] = {
    "mxfp4": (8, 0), "fp8": (7, 5), "modelopt": (8, 0), "modelopt_fp4": (8, 0), "nvfp4": (8, 0), "mxfp8": (8, 0),
    "modelopt_mxfp8": (8, 0),
    "fbgemm_fp8": (8, 0), "compressed-tensors-fp8": (7, 5), "awq": (7, 5), "gptq": (6, 0),
}

# ggml block layouts (ggml-common.h): bytes per block / weights per block.
GGML_BITS: dict[str, float] = {
    "F32": 32, "F16": 16, "BF16": 16, "Q8_0": 8.5, "Q8_1": 9.0, "Q6_K": 6.5625, "Q5_0": 5.5, "Q5_1": 6.0,
    "Q5_K": 5.5, "Q4_0": 4.5, "Q4_1": 5.0, "Q4_K": 4.5, "Q3_K": 3.4375, "Q2_K": 2.625, "IQ4_XS": 4.25,
    "IQ4_NL": 4.5, "IQ3_S": 3.4375, "IQ3_XXS": 3.0625, "IQ2_XS": 2.3125, "IQ2_XXS": 2.0625, "IQ1_S": 1.5625,
}
# llama.cpp file types that mix block types: the larger type's bits are used for the whole file
# (the mix keeps some tensors, e.g. attn_v/ffn_down, at the larger type), which never undercounts.
GGML_MIX_UPPER = {"Q4_K_M": "Q6_K", "Q4_K_S": "Q5_K", "Q5_K_M": "Q6_K", "Q5_K_S": "Q6_K", "Q3_K_M": "Q5_K",
                  "Q3_K_L": "Q5_K", "Q3_K_S": "Q4_K", "Q2_K_S": "Q4_K", "Q6_K_L": "Q8_0", "Q4_K_L": "Q8_0"}
GGML_MIX_BASE = {"Q4_K_M": "Q4_K", "Q4_K_S": "Q4_K", "Q5_K_M": "Q5_K", "Q5_K_S": "Q5_K", "Q3_K_M": "Q3_K",
                 "Q3_K_L": "Q3_K", "Q3_K_S": "Q3_K", "Q2_K_S": "Q2_K", "Q6_K_L": "Q6_K", "Q4_K_L": "Q4_K"}


@dataclass(frozen=True)
class QuantScheme:
    """Bytes per element for each tensor class once vLLM has loaded the model."""

    name: str
    linear: float  # attention projections (and dense MLP unless `mlp` says otherwise)
    expert: float  # MoE experts
    other: float  # embeddings, lm_head, norms, routers (kept in the activation dtype)
    expert_pad: int = 1  # experts' intermediate size per rank is padded to this multiple
    mlp: float | None = None  # dense MLP when a mixed scheme quantizes it differently
    embed: float | None = None  # embeddings/lm_head when the method quantizes them (GGUF)
    upper: float = 0.0
    """Relative extra a conservative reading allows (mixed GGUF files, assumed bit widths)."""
    note: str = ""
    loaded_upper: float = 0.0
    """The part of `upper` that remains when the checkpoint's bytes are read from its headers: what the
    loaded layout adds beyond the stored bytes (MXFP4 MoE backends)."""
    headers_needed: str = ""
    """Why config.json alone cannot price the weights (the bytes are then priced at the activation dtype, the
    most they can be, for the terms that only need an upper figure); the weights themselves need the
    checkpoint's safetensors headers from the lock (`checkpoint_weights.py`), else this refusal."""


_QC = "quantization_config."


def _bits_group(qc: dict[str, Any]) -> tuple[int, int, bool]:
    f = Fields(qc, _QC)
    bits = f.integer("bits", "w_bit", "num_bits", hi=32) or 4
    group = f.integer("group_size", "q_group_size", lo=-1, hi=1 << 20) or 128
    sym = f.flag("sym", not f.flag("zero_point", False)) if "sym" in qc else not f.flag("zero_point", False)
    return bits, group, sym


def _int_bytes(bits: int, group: int, sym: bool) -> float:
    """Packed integers + one fp16 scale per group (+ packed zero points when asymmetric)."""
    g = group if group > 0 else 4096
    return bits / 8 + 2 / g + (0.0 if sym else bits / 8 / g)


def _ct_weights(w: Fields, act_bytes: float) -> float:
    nbits = w.integer("num_bits", hi=32) or 8
    kind = w.text("type") or "int"
    group = w.integer("group_size", lo=-1, hi=1 << 20) or 0
    if kind == "float" and nbits == 4:
        return 0.5 + 1 / (group or 16)  # NVFP4: fp4 values + one fp8 scale per 16 (+ a global scale)
    if kind == "float" and nbits == 8 and group == 32:
        return MXFP8_BYTES  # MXFP8: fp8 values + one E8M0 scale per 32
    if kind == "float":
        return 1.0  # FP8 (per-tensor/channel scales are negligible)
    if nbits >= 16:
        return act_bytes
    if group <= 0:  # channel-wise: one scale per output row
        return nbits / 8
    return _int_bytes(nbits, group, w.flag("symmetric", True))


def _compressed_tensors(qc: dict[str, Any], act_bytes: float, layers: int) -> QuantScheme:
    """compressed-tensors: the scheme lives in config_groups (w4a16, w8a8 int/fp8, fp8 dynamic, nvfp4),
    less what its `ignore` list keeps in the activation dtype (tkf_infra/sizing/ct_ignore.py)."""
    root = Fields(qc, _QC)
    cg = root.sub("config_groups")
    groups: list[tuple[Fields, Fields]] = []
    for name in (cg.cfg if cg else {}):
        group = cg.sub(name) if cg else None
        weights = group.sub("weights") if group else None
        if group is not None and weights is not None:
            groups.append((group, weights))
    if not groups:
        fmt = root.text("format")
        return QuantScheme("compressed-tensors", act_bytes, act_bytes, act_bytes, headers_needed=(
            "compressed-tensors checkpoint without config_groups[].weights in quantization_config"
            + (f" (format {fmt!r})" if fmt else "") + ": config.json does not say the weights' bit width and "
            "grouping, and the lock entry has no safetensors headers to weigh them from; run `python -m tkf_infra "
            "lock REPO@REVISION` on a machine with Hub access (it records each tensor's bytes without downloading "
            "the weights) and commit models.lock.json"))
    attn, mlp = None, None
    for g, w in groups:
        per = _ct_weights(w, act_bytes)
        targets = " ".join(g.str_list("targets") or ["Linear"])
        if re.search(r"mlp|expert|ffn", targets):
            mlp = per if mlp is None else max(mlp, per)
        if re.search(r"attn|Linear", targets) or not re.search(r"mlp|expert|ffn", targets):
            attn = per if attn is None else max(attn, per)
    linear = attn if attn is not None else mlp
    assert linear is not None
    names = [f"w{w.cfg.get('num_bits')}{'f' if w.cfg.get('type') == 'float' else ''}" for _, w in groups]
    kept = ignored_share(root.str_list("ignore") or [], layers)
    dense = mlp if mlp is not None else linear
    note = (f"ignore list keeps {kept.attention:.0%} of attention, {kept.mlp:.0%} of MLP and {kept.experts:.0%} of "
            "expert layers unquantized" if kept != Ignored() else "")
    return QuantScheme("compressed-tensors " + "+".join(names), kept.blend(linear, act_bytes, "attention"),
                       kept.blend(dense, act_bytes, "experts"), act_bytes,
                       mlp=kept.blend(dense, act_bytes, "mlp") if mlp is not None or kept != Ignored() else None,
                       note=note)


def _gguf(qc: dict[str, Any], act_bytes: float) -> QuantScheme:
    ftype = (Fields(qc, _QC).text("ggml_type", "file_type") or "").upper()
    if not ftype:
        raise SizingError("GGUF checkpoint without its file type (Q8_0, Q4_K_M, ...): name the .gguf file so "
                          "its type can be read")
    base = GGML_MIX_BASE.get(ftype, ftype)
    if base not in GGML_BITS:
        raise SizingError(f"GGUF file type {ftype!r} is not known: use one of {', '.join(sorted(GGML_BITS))} or a "
                          f"llama.cpp mix ({', '.join(sorted(GGML_MIX_BASE))})")
    per = GGML_BITS[base] / 8
    upper = GGML_BITS[GGML_MIX_UPPER[ftype]] / GGML_BITS[base] - 1 if ftype in GGML_MIX_UPPER else 0.0
    return QuantScheme(f"gguf {ftype}", per, per, act_bytes, embed=per, upper=upper,
                       note=f"GGUF {ftype} mixes block types; counted at {base}, up to "
                            f"{GGML_MIX_UPPER[ftype]} in the bound" if upper else "")


#: NVFP4: 4-bit values + one FP8 E4M3 scale per 16 (+ a per-tensor float32 global scale, negligible);
#: vllm/model_executor/layers/quantization/modelopt.py@v0.32.0:725-760 (group_size 16).
NVFP4_BYTES = 0.5 + 1 / 16
#: MXFP4: 4-bit values + one E8M0 scale per 32 (OCP microscaling).
MXFP4_BYTES = 0.5 + 1 / 32
#: MXFP8: FP8 E4M3 values + one E8M0 scale per 32 (`MXFP8_BLOCK_SIZE`,
#: quantization/utils/mxfp8_utils.py@v0.32.0:11; modelopt.py@v0.32.0:1300-1350 allocates both per expert).
MXFP8_BYTES = 1 + 1 / 32


def _modelopt(qc: dict[str, Any], act_bytes: float, layers: int) -> QuantScheme:
    """ModelOpt FP8 / NVFP4 / MXFP8 / mixed, less the layers its `exclude_modules` keep unquantized (wildcards,
    as vLLM matches them: modelopt.py@v0.32.0:187-221). MiniMax-style checkpoints tag `quant_method: mxfp8`
    with `ignored_layers` and vLLM reads them as ModelOpt MXFP8 (modelopt.py@v0.32.0:1214-1228)."""
    f = Fields(qc, _QC)
    inner = f.sub("quantization")
    algo = (f.text("quant_algo") or (inner.text("quant_algo") if inner else None) or "").upper()
    if not algo and (f.text("quant_method") or "").lower() == "mxfp8":
        algo = "MXFP8"
    excluded = (inner.str_list("exclude_modules") if inner else None) or f.str_list("exclude_modules") or \
        f.str_list("ignore") or f.str_list("ignored_layers") or []
    if "MXFP8" in algo:
        scheme = QuantScheme("modelopt mxfp8", MXFP8_BYTES, MXFP8_BYTES, act_bytes)
    elif "FP4" in algo or "NVFP4" in algo:
        scheme = QuantScheme("modelopt nvfp4", NVFP4_BYTES, NVFP4_BYTES, act_bytes)
    elif "MIXED" in algo:
        # Per-layer algorithms: attention FP8 and MLP NVFP4 is the common split (Qwen3.6 NVFP4).
        quantized = f.sub("quantized_layers")
        algos = {str(v.get("quant_algo", "")).upper() for v in (quantized.cfg if quantized else {}).values()
                 if isinstance(v, dict)}
        mlp = NVFP4_BYTES if any("FP4" in a for a in algos) else 1.0
        scheme = QuantScheme("modelopt mixed", 1.0, mlp, act_bytes, mlp=mlp)
    else:
        scheme = QuantScheme("modelopt fp8", 1.0, 1.0, act_bytes)
    return _less_excluded(scheme, excluded_share(excluded, layers), act_bytes)


def _less_excluded(scheme: QuantScheme, kept: Ignored, act_bytes: float) -> QuantScheme:
    """The scheme with the layers an exclusion list keeps unquantized priced at the activation dtype."""
    if kept == Ignored():
        return scheme
    mlp = scheme.mlp if scheme.mlp is not None else scheme.linear
    return replace(scheme, linear=kept.blend(scheme.linear, act_bytes, "attention"),
                   expert=kept.blend(scheme.expert, act_bytes, "experts"), mlp=kept.blend(mlp, act_bytes, "mlp"),
                   note=f"exclusion list keeps {kept.attention:.0%} of attention, {kept.mlp:.0%} of MLP and "
                        f"{kept.experts:.0%} of expert layers unquantized")


def _expert_dtype(scheme: QuantScheme, qc: dict[str, Any]) -> QuantScheme:
    """Experts stored in their own dtype, declared by the config (`expert_dtype`, DeepSeek V4): vLLM's FP8 config
    loads them as MXFP4 ("fp4"; NVFP4 when `moe_quant_algo` says so) or FP8 block ("fp8") while every linear
    stays FP8 (vllm/models/deepseek_v4/quant_config.py@v0.32.0:29-100)."""
    declared = str(qc.get("expert_dtype") or "").lower()
    if declared == "fp4":
        nvfp4 = str(qc.get("moe_quant_algo") or "").upper() == "NVFP4"
        return replace(scheme, expert=NVFP4_BYTES if nvfp4 else MXFP4_BYTES, expert_pad=1,
                       name=f"{scheme.name} + {'nvfp4' if nvfp4 else 'mxfp4'} experts")
    if declared == "fp8":
        return replace(scheme, expert=1.0, name=f"{scheme.name} + fp8 experts")
    return scheme


def _fbgemm_fp8(qc: dict[str, Any], act_bytes: float, layers: int) -> QuantScheme:
    """FBGEMM FP8 (Meta's FP8 checkpoints): every linear layer in FP8 except those `modules_to_not_convert` names,
    which load unquantized (`_is_layer_skipped` -> UnquantizedLinearMethod, quantization/fbgemm_fp8.py@v0.5.3:60-97).
    vLLM reads the list from the checkpoint's quantization_config and cannot build the method without it
    (`from_config` requires the key; without a quantization_config `quant_cls()` has no arguments,
    model_loader/weight_utils.py@v0.5.3:119-161), so neither can the fit check."""
    if "modules_to_not_convert" not in qc:
        raise ConfigFieldError(
            "fbgemm_fp8 without quantization_config.modules_to_not_convert: which layers stay in 16 bits (Meta's FP8 "
            "checkpoints keep attention there) cannot be read, and vLLM cannot load the checkpoint without it either; "
            "lock the FP8 checkpoint itself, whose config.json carries its quantization_config")
    kept = ignored_share(Fields(qc, _QC).str_list("modules_to_not_convert") or [], layers)
    note = (f"modules_to_not_convert keeps {kept.attention:.0%} of attention and {kept.mlp:.0%} of MLP layers in 16 "
            "bits" if kept != Ignored() else "")
    return QuantScheme("fbgemm_fp8", kept.blend(1.0, act_bytes, "attention"), kept.blend(1.0, act_bytes, "experts"),
                       act_bytes, mlp=kept.blend(1.0, act_bytes, "mlp"), note=note)


def quant_scheme(quant: dict[str, Any] | None, quantization: str | None, act_bytes: float,
                 layers: int = 0) -> QuantScheme:
    """Per-class bytes from ``--quantization`` and the checkpoint's quantization_config (`layers`: the
    decoder layers, which a compressed-tensors `ignore` list is counted against; 0 when unknown)."""
    qc = dict(quant or {})
    declared = (Fields(qc, _QC).text("quant_method") or "").lower()
    method = str(quantization or declared or "").lower().replace("_marlin", "").replace("-marlin", "")
    if method in ("auto_round", "intel/auto-round", "inc", "auto-round") or declared in ("auto-round", "auto_round"):
        method = "auto-round"
    if not method or method in ("none", "null"):
        return QuantScheme("none", act_bytes, act_bytes, act_bytes)
    if method == "compressed-tensors":
        return _compressed_tensors(qc, act_bytes, layers)
    if method == "gguf":
        return _gguf(qc, act_bytes)
    if method in ("modelopt", "modelopt_fp4", "nvfp4", "modelopt_mixed", "modelopt_mxfp8", "mxfp8"):
        if declared in ("modelopt", "mxfp8"):
            return _modelopt(qc, act_bytes, layers)
        per = MXFP8_BYTES if "mxfp8" in method else NVFP4_BYTES  # online (`--quantization mxfp8`) or by name
        return QuantScheme(method, per, per, act_bytes)
    if method == "fbgemm_fp8":
        return _fbgemm_fp8(qc, act_bytes, layers)
    if method in ("fp8", "ptpc_fp8", "fp8_per_tensor", "fp8_per_block", "fp8_per_channel", "deepseek_v4_fp8"):
        return _expert_dtype(QuantScheme(method, 1.0, 1.0, act_bytes), qc)
    if method in ("awq", "gptq", "gptq_bitblas", "auto_gptq", "auto_awq", "auto-round", "moe_wna16"):
        if declared in ("compressed-tensors",):
            return _compressed_tensors(qc, act_bytes, layers)
        bits, group, sym = _bits_group(qc)
        assumed = not (qc.get("bits") or qc.get("w_bit"))
        per = _int_bytes(bits, group, sym)
        return QuantScheme(method, per, per, act_bytes, upper=0.1 if assumed else 0.0,
                           note="bit width not in quantization_config: 4-bit assumed" if assumed else "")
    if method in ("mxfp4", "gpt_oss_mxfp4"):
        # 4-bit values + one E8M0 scale per 32; attention stays in the activation dtype. The
        # expert intermediate size is padded to a multiple of 256 for the kernels.
        # As loaded the MoE backend's layout (FlashInfer, Marlin weight-only on GPUs without native FP4,
        # Triton; chosen per release and GPU, vllm/model_executor/layers/quantization/mxfp4.py@v0.10.2:80-160)
        # adds to that, by rank: printed against counted here, gpt-oss-120b 65.97 / 64.65 GiB through Marlin on
        # an H100 (0.10.x, vllm-project/vllm#23278), 17.22 / 16.23 at TP 4 on A100s (0.10, V1), gpt-oss-20b 7.01 /
        # 6.75 at TP 2 on H100s (0.19). The largest measured excess, 6.1 %, rounded up, is the bound's doubt.
        return QuantScheme("mxfp4", act_bytes, MXFP4_BYTES, act_bytes, expert_pad=256, upper=0.07, loaded_upper=0.07,
                           note="MXFP4 as the release's MoE backend lays it out")
    if method in ("bitsandbytes", "bnb"):
        bits = 8 if qc.get("load_in_8bit") else 4
        per = 1.0 + 4 / 64 if bits == 8 else 0.5 + 1 / 64
        return QuantScheme("bitsandbytes", per, per, act_bytes)
    if method in ("experts_int8",):
        return QuantScheme(method, act_bytes, 1.0, act_bytes)
    raise SizingError(
        f"quantization {method!r} is not modelled: use one of awq, gptq, fp8, compressed-tensors, gguf, auto-round, "
        "inc, modelopt, mxfp4, mxfp8, bitsandbytes (or none)"
    )


def quant_problems(scheme: QuantScheme, quantization: str | None, version: tuple[int, int, int] | None,
                   cc: tuple[int, int] | None, gpu_name: str) -> list[str]:
    """Release and GPU rules vLLM enforces for the method (accepted name, minimum compute capability)."""
    problems = []
    name = (quantization or "").lower()
    if name in ACCEPTED_BY and version is not None:
        first, last, why = ACCEPTED_BY[name]
        if not first <= version[:2] <= last:
            span = f"{first[0]}.{first[1]}-{last[0]}.{last[1]}"
            problems.append(f"quantization {name!r} is not accepted by vLLM {'.'.join(map(str, version))} (accepted "
                            f"by {span}{'; ' + why if why else ''}); pick a method this release accepts or pin a "
                            "release that accepts it")
    key = scheme.name.split()[0] if not scheme.name.startswith("compressed-tensors") else (
        "compressed-tensors-fp8" if "f" in scheme.name.split()[-1] else "compressed-tensors")
    need = MIN_CAPABILITY.get(key)
    if need is not None and cc is not None and cc < need:
        problems.append(f"quantization {scheme.name} needs compute capability {need[0]}.{need[1]} but {gpu_name} is "
                        f"{cc[0]}.{cc[1]}: vLLM refuses it on this GPU; use an unquantized or GPTQ/AWQ checkpoint")
    return problems
