"""What the sizing engine is asked: how one model is served, in the units vLLM uses.

Why a model of its own and not the catalog entry: the engine also sizes calibration cases, the
`size` command's what-ifs and suggestions, where a field left out means "vLLM's default" rather
than the catalog's default. Its serving fields are exactly the catalog fields the serving-flag
table marks `sized` (`tkf_infra.config.flags.sized_fields`; a test keeps the two equal), plus
what the engine must know about the deployment (the vLLM release).

Pydantic in lax mode also undoes the Pulumi wire's habit of turning integers into doubles
(8192.0 → 8192), so nothing has to guess types back.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

GIB = 2**30
MIB = 2**20
#: The dtype spellings vLLM serves in float32: the only ones that widen activations past 16 bits, and one of
#: the V1 oracle's reasons to fall back to V0 on 0.8-0.10 (`versions.engine_rows`).
FLOAT32_DTYPES = ("float32", "fp32", "float")
#: vLLM's KV block size in tokens when the entry leaves blockSize unset (GPU and CPU profiles alike).
DEFAULT_BLOCK_SIZE = 16


class SizingError(ValueError):
    """The facts are not enough to size the model (the message names the missing field)."""


class LoraSlots(BaseModel):
    """What the fit check sizes LoRA with: the catalog's `lora` block as vLLM reads it.

    `from_attributes`: the plan hands the catalog's `LoraSpec` itself (tkf_infra/plan/fleet.py
    `sizing_params`); what they reserve: tkf_infra/sizing/lora.py; only these three of its fields size anything."""

    model_config = ConfigDict(frozen=True, extra="ignore", from_attributes=True)

    max_adapters: int = Field(ge=1)
    """vLLM's `max_loras`: GPU slots."""
    max_rank: int = Field(ge=1)
    """vLLM's `max_lora_rank`: each slot's rank."""
    max_cpu_adapters: int | None = Field(None, ge=1)
    """vLLM's `max_cpu_loras` (default `max_loras`): adapters kept in host memory."""

    @property
    def cpu_adapters(self) -> int:
        return self.max_cpu_adapters if self.max_cpu_adapters is not None else self.max_adapters


class SizingParams(BaseModel):
    """How one model is served (the entry's sized vLLM flags). ``None`` means vLLM's default."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tensor_parallel_size: int = Field(1, ge=1)
    pipeline_parallel_size: int = Field(1, ge=1)
    data_parallel_size: int = Field(1, ge=1)
    """Engine replicas inside one deployment; with expert parallelism they share the experts."""
    enable_expert_parallel: bool = False
    """MoE experts are split across the TP x DP ranks instead of each expert being TP-sharded."""
    decode_context_parallel_size: int = Field(1, ge=1)
    """vLLM's --decode-context-parallel-size: the TP group's ranks each keep 1/dcp of a request's KV tokens."""
    max_model_len: int | None = Field(None, ge=1)
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    """vLLM accepts (0, 1] (vllm/config/cache.py: `gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)`)."""
    max_num_seqs: int | None = Field(None, ge=1)
    max_num_batched_tokens: int | None = Field(None, ge=1)
    dtype: str = "auto"
    quantization: str | None = None
    kv_cache_dtype: str = "auto"
    block_size: int | None = Field(None, ge=1)
    enforce_eager: bool = False
    enable_prefix_caching: bool | None = None
    """vLLM's --enable-prefix-caching / --no-enable-prefix-caching (None: the release's default; the bound
    then assumes on). It changes only hybrid models' recurrent state blocks per request."""
    speculative_config: dict[str, Any] | None = None
    """vLLM's --speculative-config: method (mtp, eagle, eagle3, ngram, draft_model), num_speculative_tokens."""
    kv_cache_memory_bytes: int | None = Field(None, ge=1)
    """vLLM's --kv-cache-memory-bytes: the KV cache per GPU is exactly this (from 0.10.2); the rest of the
    budget must still hold weights, activations and graphs."""
    lora: LoraSlots | None = None
    """vLLM's --enable-lora with --max-loras / --max-lora-rank / --max-cpu-loras (None: LoRA off)."""
    cpu_kv_cache_gib: float | None = None
    """KV space of the CPU profile (VLLM_CPU_KVCACHE_SPACE); None on GPUs."""
    vllm_version: str
    """The vLLM release that will run (an image tag or a version string); it selects the overhead physics."""


def activation_bytes(params: SizingParams) -> float:
    """vLLM's dtype resolution: fp32 checkpoints are downcast to 16 bits under ``auto``."""
    return 4.0 if params.dtype.lower() in FLOAT32_DTYPES else 2.0
