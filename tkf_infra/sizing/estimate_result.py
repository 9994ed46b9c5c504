"""What an estimate answers: the figures vLLM should print per GPU rank, the bound, the verdict and its reasons.

Apart from `estimate.py`, which computes it, because both the GPU path there and the CPU profile (`cpu.py`,
which `estimate.py` calls) build one: a type one floor below both, so neither imports the other back.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, computed_field

from tkf_infra.sizing.startup import Doubt

#: The fit check's three answers. *fits*: every start-up check passes on the conservative bound. *tight*: they pass
#: on the estimate (what vLLM should print) but not on the bound, so the model deploys with a warning naming the
#: margin, the doubt and what would remove it (a `strict` stack or the policy pack may refuse it). *refuses*: a
#: check fails on the estimate itself, or a rule vLLM enforces whatever the memory (docs/sizing.md).
Verdict = Literal["fits", "tight", "refuses"]
VERDICTS: tuple[Verdict, ...] = ("fits", "tight", "refuses")



class Estimate(BaseModel):
    """Per-rank prediction in the units vLLM prints (GiB), plus the bound, the verdict and the way out."""

    model: str
    gpu: str
    vllm_profile: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    total_gib: float
    requested_gib: float
    weights_gib: float
    activation_gib: float
    non_torch_gib: float
    cuda_graph_gib: float
    cuda_graph_reserved: bool
    available_kv_gib: float
    kv_bytes_per_token: float
    num_blocks: int
    kv_cache_tokens: int
    need_per_request_gib: float
    max_concurrency: float
    available_kv_gib_bound: float = 0.0
    kv_cache_tokens_bound: int = 0
    max_concurrency_bound: float = 0.0
    doubts: list[Doubt] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)
    """Why it is refused: a check failed on the estimate, or a rule vLLM enforces whatever the memory."""
    tight: list[str] = Field(default_factory=list)
    """Why it is tight: each check the estimate passes and the bound does not, with its margin and the doubt."""
    warnings: list[str] = Field(default_factory=list)
    max_fitting_model_len: int | None = None
    cpu: bool = False
    lora_gib: float = 0.0
    """What LoRA reserves on the limiting rank: adapter slots, Punica metadata and its workspace
    (tkf_infra/sizing/lora.py); 0 without `lora`. On the CPU profile: the slots in host memory."""
    lora_host_gib: float = 0.0
    """Host memory of the adapters vLLM keeps loaded on the CPU (`max_cpu_loras`, at most their full size)."""

    @property
    def bound_gap_gib(self) -> float:
        return max(self.available_kv_gib - self.available_kv_gib_bound, 0.0)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def verdict(self) -> Verdict:
        return "refuses" if self.problems else "tight" if self.tight else "fits"

    @computed_field  # type: ignore[prop-decorator]
    @property
    def fits(self) -> bool:
        """Whether it deploys by default: it fits, or it is tight (the estimate fits, the bound does not)."""
        return not self.problems
