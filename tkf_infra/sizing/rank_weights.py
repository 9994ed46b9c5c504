"""Each GPU rank's weights for one deployment: the checkpoint's own bytes where the lock has them.

Why: config.json gives the shapes, not how each tensor is stored — an FP8 config whose experts are FP4,
a compressed-tensors config that names no weight scheme, a GPTQ config without its bit width. The
lock's safetensors facts (`ModelFacts.tensor_bytes`: exact bytes per layer kind and dtype, read from the
headers) say it. Which rank holds which share of each kind is still vLLM's sharding, counted from
config.json (`weights.py` `rank_elements`: linears split by TP — `ColumnParallelLinear` /
`RowParallelLinear`, vllm/model_executor/layers/linear.py@v0.32.0:433,1626 — KV projections replicated
below one KV head per rank, `QKVParallelLinear` linear.py@v0.32.0:1050-1058, MLA's `q_a_proj` /
`kv_a_proj_with_mqa` and the routers replicated, models/deepseek_v2.py@v0.32.0:321,494,518,
models/qwen3_moe.py@v0.32.0:170-183, the vocabulary padded to 64 and split by TP,
vocab_parallel_embedding.py@v0.32.0:36,206,578, experts across TP x DP ranks,
fused_moe/config.py@v0.32.0:1128-1240): each class's measured bytes are spread over the ranks in
proportion to the elements each rank holds of that class.

As loaded, not as stored: unquantized weights are created in the model's dtype
(`UnquantizedLinearMethod.create_weights`, linear.py@v0.32.0:177-200) and the checkpoint's tensor is
copied into them (`default_weight_loader`, model_loader/weight_utils.py@v0.32.0:1476-1490), so a
float32 or float16 tensor weighs what `--dtype` says; quantized storage (FP8, FP4 packed in U8, int4
packed in I32, E8M0 scales) is kept as stored, and float32 tensors beside it are its scales, kept in
float32 (`create_fp8_scale_parameter`, quantization/utils/fp8_utils.py@v0.32.0:1398-1420). A checkpoint
quantized at load (`--quantization fp8` on a 16-bit checkpoint) is priced by the scheme for the
classes the method quantizes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tkf_infra.sizing.arch import Arch
from tkf_infra.sizing.config_fields import ConfigFieldError
from tkf_infra.sizing.facts import DTYPE_BYTES, ModelFacts
from tkf_infra.sizing.parallelism import pp_layer_ranges
from tkf_infra.sizing.params import GIB, SizingError, SizingParams, activation_bytes
from tkf_infra.sizing.quant import QuantScheme, quant_scheme
from tkf_infra.sizing.startup import Doubt
from tkf_infra.sizing.tensor_kinds import FLOAT_DTYPES
from tkf_infra.sizing.weights import (
    Elements,
    Sharding,
    checkpoint_bytes,
    rank_elements,
    rotary_bytes,
    vision_bytes,
    weights_bytes_per_rank,
)

#: The tensor class (`Elements` field) each layer kind of the lock is priced as.
CLASS_OF_KIND = {"attention": "linear", "mlp": "mlp", "experts": "expert", "embeddings": "embed", "norms": "other"}
#: Classes a method quantizing at load (no quantization_config in the checkpoint) prices itself.
_QUANTIZED_AT_LOAD = ("linear", "mlp", "expert")


@dataclass(frozen=True)
class DeploymentWeights:
    """What each rank loads: per PP stage (bytes), the vision tower on the first stage (GiB), the doubts left."""

    stages: list[float]
    extra_gib: float
    doubts: list[Doubt]
    warnings: list[str]
    source: str
    """"checkpoint headers" or "config.json": where the bytes per element came from."""


def loaded_bytes(per_dtype: dict[str, int], act_bytes: float) -> float:
    """Bytes of one kind once loaded: float weights in the model's dtype, quantized storage and its float32
    scales as stored."""
    quantized = any(dtype not in FLOAT_DTYPES for dtype in per_dtype)
    total = 0.0
    for dtype, n in per_dtype.items():
        if dtype in FLOAT_DTYPES and not (quantized and dtype == "F32"):
            total += n / DTYPE_BYTES[dtype] * act_bytes
        else:
            total += n
    return total


def _class_bytes(tensor_bytes: dict[str, dict[str, int]], act_bytes: float) -> dict[str, float]:
    out = dict.fromkeys(CLASS_OF_KIND.values(), 0.0)
    for kind, cls in CLASS_OF_KIND.items():
        out[cls] += loaded_bytes(tensor_bytes.get(kind, {}), act_bytes)
    return out


def _declared(arch: Arch) -> bool:
    return bool((arch.quant or {}).get("quant_method"))


def measured_stages(arch: Arch, sh: Sharding, q: QuantScheme, act_bytes: float,
                    tensor_bytes: dict[str, dict[str, int]], quantized_at_load: bool) -> list[float]:
    """Bytes each PP stage's rank holds: each class's measured bytes x the share of its elements the rank holds.

    A class the config does not count (no elements) but the checkpoint stores is held whole by every rank."""
    measured = _class_bytes(tensor_bytes, act_bytes)
    whole = Elements()
    for e in rank_elements(arch, Sharding(), expert_pad=1, vocab_pad=1):  # the checkpoint's own shapes: no padding
        whole += e
    price: dict[str, float] = {}
    replicated = 0.0
    for cls in measured:
        count = getattr(whole, cls)
        if quantized_at_load and cls in _QUANTIZED_AT_LOAD:
            price[cls] = getattr(q, cls) if cls != "mlp" or q.mlp is not None else q.linear
        elif count > 0:
            price[cls] = measured[cls] / count
        else:
            price[cls], replicated = 0.0, replicated + measured[cls]
    priced = replace(q, linear=price["linear"], mlp=price["mlp"], expert=price["expert"], other=price["other"],
                     embed=price["embed"])
    rotary = rotary_bytes(arch, act_bytes)
    return [e.bytes(priced) + rotary + replicated for e in rank_elements(arch, sh, q.expert_pad)]


def split_by_kind(arch: Arch, sh: Sharding, tensor_bytes: dict[str, dict[str, int]], act_bytes: float) -> list[float]:
    """When config.json is too thin to count elements: each kind split as vLLM splits it at its coarsest — layers by
    PP (the largest stage), experts by TP x DP, attention, MLP and the vocabulary by TP — norms and anything
    unclassified whole on every rank, the embeddings on the first stage and lm_head on the last (both on each)."""
    largest = max(len(r) for r in pp_layer_ranges(arch.layers, sh.pp)) / max(arch.layers, 1)
    kinds = {k: loaded_bytes(tensor_bytes.get(k, {}), act_bytes) for k in CLASS_OF_KIND}
    each = (kinds["experts"] / sh.moe_ranks + (kinds["attention"] + kinds["mlp"]) / sh.tp + kinds["norms"]) * largest
    return [each + kinds["embeddings"] / sh.tp] * sh.pp


def _vision(arch: Arch, facts: ModelFacts | dict[str, Any], act_bytes: float, tp: int, doubts: list[Doubt],
            warnings: list[str]) -> float:
    """The tower on each rank (GiB): divided by TP, a doubt covering its sharding (and, counted from config.json,
    its approximate shape)."""
    headers = facts.tensor_bytes if isinstance(facts, ModelFacts) else None
    if headers is not None:
        vb = loaded_bytes(headers.get("vision", {}), act_bytes) / GIB
    elif arch.vision:
        vb = vision_bytes(arch, act_bytes) / GIB
        doubts.append(Doubt(term="vision tower weights (approximate shape)", gib=0.3 * vb,
                            pin="a start-up log (\"Model loading took\") pins the weights"))
    else:
        if arch.multimodal:
            warnings.append("multimodal model without a vision_config shape: the vision tower is not counted")
            doubts.append(Doubt(term="vision tower weights (no vision_config)", gib=1.0,
                                pin="a config.json with vision_config"))
        return 0.0
    if tp > 1 and vb:
        doubts.append(Doubt(term="vision tower sharding across TP", gib=vb * (1 - 1 / tp),
                            pin="a start-up log pins it"))
    return vb / tp


def deployment_weights(facts: ModelFacts | dict[str, Any], arch: Arch, params: SizingParams) -> DeploymentWeights:
    """Per-stage weights, the vision tower, their doubts and warnings: from the checkpoint's headers when the lock
    has them, else counted from config.json (the config's own price per class, `quant.py`)."""
    act_bytes = activation_bytes(params)
    sh = Sharding(params.tensor_parallel_size, params.pipeline_parallel_size, params.data_parallel_size,
                  params.enable_expert_parallel)
    q = quant_scheme(arch.quant, params.quantization, act_bytes, arch.layers)
    if arch.vocab is None:
        raise SizingError("config.json lacks vocab_size (needed for the embedding, lm_head and the sampler)")
    headers = facts.tensor_bytes if isinstance(facts, ModelFacts) else None
    doubts: list[Doubt] = []
    warnings: list[str] = []
    if headers is not None:
        stages = _header_stages(arch, sh, q, act_bytes, headers, params, doubts, warnings)
        upper, source = q.loaded_upper, "checkpoint headers"
    else:
        stages = _config_stages(facts, arch, sh, q, act_bytes, params, doubts, warnings)
        upper, source = q.upper, "config.json"
    extra = _vision(arch, facts, act_bytes, sh.tp, doubts, warnings)
    if upper:
        doubts.append(Doubt(term=f"quantized weight size ({q.note or q.name})", gib=max(stages) / GIB * upper,
                            pin="a checkpoint whose quantization_config states its format exactly"))
    return DeploymentWeights(stages, extra, doubts, warnings, source)


def _header_stages(arch: Arch, sh: Sharding, q: QuantScheme, act_bytes: float, headers: dict[str, dict[str, int]],
                   params: SizingParams, doubts: list[Doubt], warnings: list[str]) -> list[float]:
    """From the lock's safetensors facts; a config too thin to count elements splits the kinds at their coarsest."""
    try:
        return measured_stages(arch, sh, q, act_bytes, headers, bool(params.quantization) and not _declared(arch))
    except SizingError:
        stages = split_by_kind(arch, sh, headers, act_bytes)
        warnings.append("weights split by layer kind from the checkpoint headers (config.json incomplete)")
        doubts.append(Doubt(term="weights split by layer kind (config.json incomplete)",
                            gib=0.05 * max(stages) / GIB, pin="a lock entry with the full config.json"))
        return stages


def _config_stages(facts: ModelFacts | dict[str, Any], arch: Arch, sh: Sharding, q: QuantScheme, act_bytes: float,
                   params: SizingParams, doubts: list[Doubt], warnings: list[str]) -> list[float]:
    """Counted from config.json; a config too thin for that splits the checkpoint's size evenly."""
    try:
        return weights_bytes_per_rank(arch, sh, q, act_bytes)
    except ConfigFieldError:
        raise
    except SizingError:
        if not isinstance(facts, ModelFacts) or not (facts.weight_bytes or facts.param_counts):
            raise
        each = checkpoint_bytes(facts, act_bytes, params.quantization) / (sh.tp * sh.pp)
        warnings.append("weights estimated from the checkpoint size split evenly (config.json incomplete)")
        doubts.append(Doubt(term="weights from the checkpoint size (config.json incomplete)", gib=0.05 * each / GIB,
                            pin="a lock entry with the full config.json"))
        return [each] * sh.pp
