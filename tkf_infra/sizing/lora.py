"""What vLLM 0.32 reserves for LoRA at start-up, per GPU rank and in host memory.

Why sized at all: vLLM allocates a slot for `max_loras` adapters at `max_lora_rank` on every layer it
can wrap, while it loads the model and before it measures what is left for the KV cache, so a base
that fits alone can fail with adapters — and the reservation does not depend on which adapters are
served, only on `maxAdapters`, `maxRank` and the base's shape. Read at vLLM v0.32.0 (the installed
wheel's source, `vllm/...@v0.32.0:line`):

- which layers get a slot: with no `--lora-target-modules` every module vLLM supports is wrapped
  (vllm/lora/model_manager.py:467-612 `_create_lora_modules`): every `LinearBase` of the model plus
  the names in its `embedding_modules` (vllm/lora/utils.py:232-246 `get_supported_lora_modules`);
- each linear slot is `lora_a (max_loras, 1, rank, input)` + `lora_b (max_loras, 1, output, rank)` per
  slice, in the model's dtype (vllm/lora/layers/base_linear.py:104-155; lora_dtype auto = model dtype,
  vllm/config/lora.py:137-139). Column-parallel layers (qkv_proj, gate_up_proj) keep the whole input
  and their rank's share of the output; packed layers have one A and one B per packed part
  (vllm/lora/layers/column_parallel_linear.py:184-245 merged gate_up, 453-497 merged qkv with the
  KV heads' shard `num_kv_heads`, replicated when TP exceeds them). Row-parallel layers (o_proj,
  down_proj) keep their rank's share of the input and the whole output
  (vllm/lora/layers/row_parallel_linear.py:22-30). `fully_sharded_loras` would shard further; the
  platform does not let `extraArgs` turn it on (tkf_infra/config/extra_args.py);
- an `embed_tokens` slot is `(max_loras, vocab, rank)` + `(max_loras, 1, hidden, rank)`, unsharded
  (vllm/lora/layers/vocab_parallel_embedding.py:25-49), on the first PP rank; an `lm_head` slot is
  `(max_loras, 1, rank, hidden)` + `(max_loras, 1, vocab, rank)`, unsharded, on the last
  (vllm/lora/layers/logits_processor.py:84-111, which also refuses a vocabulary above 258048);
- these are allocated inside the model-loading memory profile (vllm/v1/worker/gpu_model_runner.py:
  5050-5071 `load_model` → `load_lora_model`), so vLLM counts them as weights;
- the Punica metadata: four `max_num_batched_tokens` int64 index tensors and three `max_num_seqs` ones
  (vllm/lora/punica_wrapper/punica_base.py:126-156), two kernel metadata sets of two int32 token tensors
  and three `max_loras`-long int32 ones (punica_gpu.py:39-70, vllm/lora/ops/triton_ops/
  lora_kernel_metadata.py:48-78);
- the transient workspace: each wrapped layer's shrink buffer `(slices, tokens, rank)` in float32
  (punica_gpu.py:247-253), at most three slices of `max_num_batched_tokens` in the profile run;
- host memory: up to `max_cpu_loras` adapters are kept loaded on the CPU (vllm/lora/worker_manager.py:
  106-145 loads each to `device="cpu"`; the LRU holds `max_cpu_loras`, vllm/lora/model_manager.py:
  110-113, 333-336), each at most the full, unsharded slot of one adapter.

Only the architectures below are sized: their module sets were read from their model classes. Any
other refuses a `lora` block by name rather than guessing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tkf_infra.sizing.arch import Arch
from tkf_infra.sizing.facts import ModelFacts
from tkf_infra.sizing.parallelism import pp_layer_ranges
from tkf_infra.sizing.params import GIB, LoraSlots, SizingError, SizingParams

#: vLLM refuses LoRA on an output layer with a larger vocabulary (vllm/lora/layers/logits_processor.py@v0.32.0:90-92).
MAX_LORA_VOCAB = 258048
#: The linear modules, as adapters name them (PEFT's names), of the decoders sized here.
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class LoraArch:
    """What vLLM wraps for LoRA in one model class: its linear modules and its embedding modules."""

    embedding_modules: tuple[str, ...]
    source: str

    @property
    def target_modules(self) -> tuple[str, ...]:
        """Every module name an adapter may target (the packed parts: vllm/lora/worker_manager.py@v0.32.0:109-117)."""
        return (*ATTENTION, *MLP, *self.embedding_modules)


#: Model classes whose LoRA layers are sized: each has `packed_modules_mapping` {qkv_proj: [q, k, v],
#: gate_up_proj: [gate, up]} and the `embedding_modules` listed (vllm/model_executor/models/...@v0.32.0).
LORA_ARCHITECTURES: dict[str, LoraArch] = {
    "Qwen2ForCausalLM": LoraArch((), "qwen2.py:458-465 (no embedding_modules)"),
    "Qwen3ForCausalLM": LoraArch(("embed_tokens", "lm_head"), "qwen3.py:280-291"),
    "LlamaForCausalLM": LoraArch(("embed_tokens", "lm_head"), "llama.py:464-482"),
    "MistralForCausalLM": LoraArch((), "mistral.py:236-238 (LlamaForCausalLM with embedding_modules {})"),
    "Gemma2ForCausalLM": LoraArch((), "gemma2.py:316-330 (no embedding_modules)"),
}


@dataclass(frozen=True)
class LoraReserve:
    """LoRA's memory on one GPU rank (bytes) and in the pod's host memory."""

    slots: tuple[float, ...]
    """Adapter slots per PP rank."""
    metadata: float
    """Punica's index tensors (every rank)."""
    workspace: float
    """The shrink buffer at the profile run's token count (transient: part of the activation peak)."""
    host: float
    """`max_cpu_loras` adapters at full size, unsharded."""

    def per_stage_gib(self, stage: int) -> float:
        """What stage `stage`'s rank holds for LoRA beside the activation peak."""
        return (self.slots[stage] + self.metadata) / GIB


def lora_arch(architecture: str) -> LoraArch:
    """The sized LoRA layout of a model class, or a refusal naming it and what is sized."""
    found = LORA_ARCHITECTURES.get(architecture)
    if found is None:
        raise SizingError(f"LoRA on {architecture or 'this architecture'} is not sized by the fit check (it sizes "
                          f"{', '.join(sorted(LORA_ARCHITECTURES))}); remove `lora` or serve the adapters on one "
                          "of those bases")
    return found


def _layer_bytes(arch: Arch, tp: int, rank: int, elem: float) -> float:
    """One decoder layer's slots for ONE adapter at `rank` on one TP rank (multiply by max_loras)."""
    h, d = arch.hidden, arch.head_dim
    inter = arch.intermediate or 0
    q_out = arch.heads * d // tp
    kv_out = max(1, arch.kv_heads // tp) * d
    qkv = 3 * rank * h + (q_out + 2 * kv_out) * rank           # merged qkv_proj: three A, three B
    o = rank * (arch.heads * d // tp) + h * rank               # row-parallel o_proj
    gate_up = 2 * rank * h + 2 * (inter // tp) * rank          # merged gate_up_proj
    down = rank * (inter // tp) + h * rank                     # row-parallel down_proj
    return (qkv + o + gate_up + down) * elem


def _embedding_bytes(arch: Arch, la: LoraArch, rank: int, elem: float) -> tuple[float, float]:
    """(embed_tokens on the first PP rank, lm_head on the last) for one adapter, unsharded."""
    vocab = arch.vocab or 0
    embed = (vocab * rank + arch.hidden * rank) * elem if "embed_tokens" in la.embedding_modules else 0.0
    head = (rank * arch.hidden + vocab * rank) * elem if "lm_head" in la.embedding_modules else 0.0
    return embed, head


def lora_problems(arch: Arch, architecture: str) -> list[str]:
    """Why vLLM 0.32 would refuse LoRA on this base at start-up (empty when it would not)."""
    problems = []
    if arch.is_moe or arch.mla is not None or arch.recurrent is not None or arch.intermediate is None:
        problems.append("LoRA slots are sized for dense attention decoders only; this base is not one (MoE, MLA or "
                        "recurrent layers); remove `lora`")
    la = LORA_ARCHITECTURES.get(architecture)
    if la is not None and "lm_head" in la.embedding_modules and (arch.vocab or 0) > MAX_LORA_VOCAB:
        problems.append(f"vLLM refuses LoRA on a vocabulary of {arch.vocab} (at most {MAX_LORA_VOCAB} with an lm_head "
                        "slot); remove `lora`")
    return problems


def reserve(arch: Arch, architecture: str, slots: LoraSlots, tp: int, pp: int, max_num_seqs: int,
            max_num_batched_tokens: int, elem_bytes: float) -> LoraReserve:
    """LoRA's memory for `slots` on this base at TP `tp` x PP `pp` (see the module docstring for each term)."""
    la = lora_arch(architecture)
    n, r = slots.max_adapters, slots.max_rank
    ranges = pp_layer_ranges(arch.layers, pp)
    embed, head = _embedding_bytes(arch, la, r, elem_bytes)
    per_stage = []
    for i, rng in enumerate(ranges):
        b = len(rng) * _layer_bytes(arch, tp, r, elem_bytes)
        b += embed if i == 0 else 0.0
        b += head if i == len(ranges) - 1 else 0.0
        per_stage.append(n * b)
    tokens, seqs = max_num_batched_tokens, max_num_seqs
    metadata = 4 * tokens * 8 + 3 * seqs * 8 + 2 * (2 * tokens * 4 + (2 * (n + 1) + (n + 2)) * 4)
    workspace = 3 * tokens * r * 4
    one_adapter = arch.layers * _layer_bytes(arch, 1, r, elem_bytes) + embed + head
    return LoraReserve(tuple(per_stage), float(metadata), float(workspace), slots.cpu_adapters * one_adapter)


def architecture_of(facts: ModelFacts | dict[str, Any]) -> str:
    """The model class vLLM instantiates (config.json `architectures[0]`), which decides its LoRA layers."""
    config = facts.config if isinstance(facts, ModelFacts) else facts
    names = config.get("architectures") if isinstance(config, dict) else None
    return str(names[0]) if isinstance(names, list) and names else ""


def lora_reserve(arch: Arch, architecture: str, params: SizingParams, max_num_seqs: int, max_num_batched_tokens: int,
                 elem_bytes: float) -> LoraReserve | None:
    """What `params.lora` reserves at this batch (None without `lora`): the estimate's one entry point."""
    if params.lora is None:
        return None
    return reserve(arch, architecture, params.lora, params.tensor_parallel_size, params.pipeline_parallel_size,
                   max_num_seqs, max_num_batched_tokens, elem_bytes)
