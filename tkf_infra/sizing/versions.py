"""Which vLLM release runs, and how that release budgets GPU memory at start-up: one table.

Each row is a range of releases that profile memory the same way, read from vLLM's own source at
the release tags (wheels from PyPI, `vllm/...` paths; line numbers are at the named tag). The image
tag selects the row. A version we cannot read, or one outside every row, selects the row that leaves
the least KV cache for the model at hand, and the estimate says so (`VersionChoice.warning`).

What differs between rows (see docs/sizing.md for the whole accounting):
- the engine (V0 `worker.py` vs V1 `gpu_worker.py`) and how the KV budget is measured;
- the sampler warm-up inside the profile run, which sets most of the activation peak;
- whether the CUDA-graph memory estimate is taken out of the KV budget (default since 0.20);
- how hybrid layers are grouped and how "GPU KV cache size: N tokens" is computed;
- the batch defaults (max_num_seqs, max_num_batched_tokens) by GPU size.

The table is a changelog, one chain per engine (V0 and V1): each row is the previous row of its engine plus
what its releases changed, so a row says only what is new. What each field of a row means is in `release_row.py`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from tkf_infra.sizing.params import FLOAT32_DTYPES
from tkf_infra.sizing.release_row import Version, VersionRow

#: Non-torch growth at TP 2 on H100 NVLink on 0.11, before the all-reduce fusion: 0.55 GiB (2.15 from 0.17).
_MULTI_NO_FUSION = 0.55
#: Profiled bytes per logits element of the sort-based top-k/top-p warm-up from 0.11: the llm-d H100 runs on
#: 0.11 measured 38.4-38.9 B (the 0.11-0.16 row's calibration); every later V1 row keeps the figure.
_SORT_BYTES = 38.6
#: The same on the Triton top-k/top-p path (topk_topp_sampler.py@v0.17.0:245-256, @v0.30.0:368-375): fitted on
#: the 29 H100 start-ups of 0.19.0 (the 0.17-0.19 row's calibration); every later row keeps the figure.
_FAST_BYTES = 14.45
#: vLLM's default gpu_memory_utilization (vllm/config.py@v0.8.5:1308; CacheConfig, the same in every release read):
#: what an engine alone on its GPU leaves outside its budget.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
#: GPUs with at least this much memory get 16384 batched tokens by default (arg_utils.py@v0.28.0:2582-2590).
_XL_GIB = 160.0

# The table as a changelog: one chain per engine, each row the previous one (`_then`) plus what its releases changed
# (the keyword arguments), its own range, the source lines it was read from and what calibrated it.


def _then(previous: VersionRow, name: str, first: Version, last: Version, *, sources: tuple[str, ...],
          calibration: str, **changes: Any) -> VersionRow:
    """`previous` with what the releases `first`..`last` changed: the row of a later range of the same engine."""
    return replace(previous, name=name, first=first, last=last, sources=sources, calibration=calibration,
                   **changes)


#: The V0 engine (`vllm/worker/worker.py`) on 0.5-0.6: KV is the drop in free memory during the profile, torch's
#: cached blocks included; the driver alone warms the sampler (40 B per logits element, as measured on 0.7-0.10).
_V0_5 = VersionRow(
    "v0.5-0.6 (V0, free-memory drop)", (0, 5, 0), (0, 6, 99), "v0",
    sources=("vllm/worker/worker.py@v0.6.3:205-255 (determine_num_available_blocks)",
             "vllm/worker/model_runner.py@v0.6.3:1203 (profile_run: max_num_seqs prompts, mnbt tokens)",
             "vllm/engine/arg_utils.py@v0.6.3:115 (max_num_seqs 256)"),
    sampler_sort_bytes=40.0, activation_base_gib=0.05, sampler_all_ranks=False, non_torch_tp1_gib=0.05,
    non_torch_multi_gib=2.1, non_torch_multi_nvswitch_gib=7.35, reserve_includes_fragmentation=True,
    hybrid_group_ratio=1.0,
    defaults_exclude_a100=False, activation_uncertainty=0.4, non_torch_uncertainty_gib=0.5,
    calibration="V0 sampler as measured for 0.7-0.10; at TP > 1 on Hopper NVSwitch boards one 0.5.3 start-up (8 x "
                "H100, Llama-3.1-405B FP8: 57.75 GiB of weights, 4962 KV blocks) left 8.75 GiB for the rest")

#: 0.7: `memory_profiling` (weights + torch peak + non-torch) replaces the free-memory drop; V0 MLA keeps absorbed
#: copies of the attention matrices beside the weights.
_V0_7 = _then(
    _V0_5, "v0.7 (V0, memory_profiling, MLA absorption)", (0, 7, 0), (0, 7, 99),
    sources=("vllm/worker/worker.py@v0.7.1:204-271 (determine_num_available_blocks)",
             "vllm/attention/backends/mla/utils.py@v0.7.1:313-395 (absorbed MLA matrices, default on)",
             "vllm/envs.py@v0.7.3:546-547 (VLLM_MLA_PERFORM_MATRIX_ABSORPTION default 1)",
             "vllm/utils.py@v0.7.1:2011-2060 (memory_profiling: weights + torch peak + non-torch)",
             "vllm/worker/worker.py@v0.7.1:141-166 (baseline snapshot before NCCL init)",
             "vllm/worker/model_runner.py@v0.8.5:1233-1333 (profile_run / _dummy_run)",
             "vllm/config.py@v0.8.5:1967-1984 (mnbt = max(max_model_len, 2048) without chunked prefill)",
             "vllm/engine/arg_utils.py@v0.8.5:1504-1563 (chunked prefill above 32K; max_num_seqs 256)"),
    reserve_includes_fragmentation=False, mla_absorbed_weights=True, activation_uncertainty=0.3,
    non_torch_uncertainty_gib=0.3,
    calibration="8x A100 40GB TP8 start-up (0.7.1, MLA): non-torch 2.10 GiB at TP8; weights within 0.3 % with the "
                "absorbed copies")

#: 0.8-0.10 on V0 (the V1 oracle's fallbacks, or VLLM_USE_V1=0): as 0.7 without the MLA absorption.
_V0_8 = _then(
    _V0_7, "v0.8-0.10 (V0, memory_profiling)", (0, 8, 0), (0, 10, 99),
    sources=("vllm/worker/worker.py@v0.8.5:225-292 (determine_num_available_blocks)",
             "vllm/utils.py@v0.8.5:2176-2252 (memory_profiling: weights + torch peak + non-torch)",
             "vllm/worker/worker.py@v0.8.5:162-185 (baseline snapshot before NCCL init)",
             "vllm/worker/model_runner.py@v0.8.5:1233-1333 (profile_run / _dummy_run)",
             "vllm/config.py@v0.8.5:1967-1984 (mnbt = max(max_model_len, 2048) without chunked prefill)",
             "vllm/engine/arg_utils.py@v0.8.5:1504-1563 (chunked prefill above 32K; max_num_seqs 256)"),
    mla_absorbed_weights=False,
    calibration="V0 start-ups (0.8.x) on RTX 2060 12GB, RTX 4070 Laptop (GGUF), RTX 3090 (w4a16 MoE): activation "
                "within 0.1 GiB, non-torch 0.02-0.06 GiB")

#: The V1 engine (`vllm/v1/worker/gpu_worker.py`) on 0.8.0-0.9.0: no start-up snapshot, so the budget counts every byte
#: in use on the device, the CUDA context and other processes' memory included; FlashInfer sampler.
_V1_8 = VersionRow(
    "v0.8-0.9.0 (V1)", (0, 8, 0), (0, 9, 0), "v1",
    sources=("vllm/v1/worker/gpu_worker.py@v0.8.5:165-212 (determine_available_memory: non-torch = total - free - "
             "torch's allocation, after the profile)",
             "vllm/v1/worker/gpu_worker.py@v0.9.0.1:167-212 (the same)",
             "vllm/v1/worker/gpu_worker.py@v0.8.5:130-137 (free memory read before NCCL init, only for an assert)",
             "vllm/v1/worker/gpu_model_runner.py@v0.8.5:1584-1659 (profile_run, _dummy_sampler_run)",
             "vllm/config.py@v0.8.5:1308 (gpu_memory_utilization default 0.9)",
             "vllm/engine/arg_utils.py@v0.8.5:1292-1400 (V0 fallback: cc < 8.0, gguf, fp32, fp8 KV)",
             "vllm/engine/arg_utils.py@v0.9.0.1:1492-1501 (1024 seqs / 8192 tokens on >= 70 GiB, not A100)"),
    sampler_sort_bytes=32.0, non_torch_tp1_gib=0.15, non_torch_multi_gib=2.1, hybrid_group_ratio=1.0,
    budget_counts_device=True, v0_fallback=("cc<8.0", "gguf", "float32", "fp8-kv-pre-hopper"),
    activation_uncertainty=0.3,
    calibration="as 0.9.1 (one V1 start-up, 0.9.1 dev, H100, EAGLE: available KV within 1%) plus the CUDA context, "
                "which this release's budget counts; one 0.8.5 failure (Qwen3-8B on an A800 at utilization 0.4)")

#: 0.9.1: `memory_profiling`'s snapshot before NCCL init (growth since it is non-torch; other processes' memory is not).
_V1_9 = _then(
    _V1_8, "v0.9.1-0.10 (V1)", (0, 9, 1), (0, 10, 99),
    sources=("vllm/v1/worker/gpu_worker.py@v0.9.1:183-232 (determine_available_memory)",
             "vllm/utils.py@v0.9.1:2342-2415 (memory_profiling)",
             "vllm/v1/worker/gpu_worker.py@v0.9.1:135-153 (snapshot taken before NCCL init)",
             "vllm/v1/worker/gpu_model_runner.py@v0.9.1:1866,1942 (_dummy_sampler_run, profile_run)",
             "vllm/v1/sample/ops/topk_topp_sampler.py@v0.9.1:20-60 (FlashInfer sampler by default)",
             "vllm/engine/arg_utils.py@v0.8.5:1292-1400 (V0 fallback: cc < 8.0, gguf, fp32, fp8 KV)",
             "vllm/engine/arg_utils.py@v0.9.1:1551-1566 (1024 seqs / 8192 tokens on >= 70 GiB, not A100)"),
    budget_counts_device=False,
    calibration="one V1 start-up (0.9.1 dev, H100, EAGLE): available KV within 1%")

#: 0.11: the snapshot after NCCL init, the sort-based top-k/top-p warm-up (llm-d's H100 figures), hybrid group
#: ratio 1.25; no V0 engine to fall back to.
_V1_11 = _then(
    _V1_9, "v0.11-0.16", (0, 11, 0), (0, 16, 99),
    sources=("vllm/v1/worker/gpu_worker.py@v0.11.0:222-303 (determine_available_memory)",
             "vllm/utils/__init__.py@v0.11.0:2783-2859 (memory_profiling)",
             "vllm/v1/worker/gpu_worker.py@v0.11.0:169-182 (snapshot after NCCL init)",
             "vllm/v1/sample/ops/topk_topp_sampler.py@v0.16.0:243-283 (sort-based top-k/top-p)",
             "vllm/v1/core/kv_cache_utils.py@v0.13.0:1015-1023 (group size: max when max < 1.25 x min)",
             "vllm/engine/arg_utils.py@v0.16.0:1874-1895 (batch defaults)"),
    sampler_sort_bytes=_SORT_BYTES, activation_base_gib=0.0, non_torch_tp1_gib=0.13,
    non_torch_multi_gib=_MULTI_NO_FUSION, non_torch_multi_pcie_gib=0.13, hybrid_group_ratio=1.25,
    mamba2_all_mode=True, v0_fallback=(), activation_uncertainty=0.2, sampler_uncertainty=0.04,
    calibration="llm-d H100 runs on 0.11 (activation 38.4-38.9 B per logits element, non-torch 0.13/0.55 GiB) and an "
                "L40S 0.11 start-up (KV tokens within 1%); sampler-dominated 0.11 peaks in cases-public-logs.json "
                "printed -0.5 % to +2.5 % of the sampler term (Qwen3 0.6B 5.56/5.59, Qwen3-32B 5.64/5.59, "
                "gpt-oss-120b 7.38/7.40, Llama-3.3-70B FP8 4.84/4.72 GiB)")

#: 0.17: the Triton top-k/top-p path (>= 8 rows), the all-reduce + RMSNorm fusion on cc 9.0 / 10.x (its workspace
#: in non-torch; `pcie_ceiling_no_fusion_gib`), group ratio 1.5; calibrated on 29 H100 start-ups of 0.19.
_V1_17 = _then(
    _V1_11, "v0.17-0.19", (0, 17, 0), (0, 19, 99),
    sources=("vllm/v1/worker/gpu_worker.py@v0.19.0:332-483 (determine_available_memory; graph estimate computed, not "
             "applied)",
             "vllm/envs.py@v0.19.0:1654-1655 (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default 0)",
             "vllm/utils/mem_utils.py@v0.19.0:197-279 (memory_profiling)",
             "vllm/v1/sample/ops/topk_topp_sampler.py@v0.17.0:245-256 (Triton top-k/top-p for >= 8 rows)",
             "vllm/v1/core/kv_cache_utils.py@v0.19.0:1040-1050 (group size: max when max < 1.5 x min)",
             "vllm/v1/core/kv_cache_utils.py@v0.19.0:1290-1310 (tokens = blocks // groups x block)"),
    sampler_fast_bytes=_FAST_BYTES, activation_base_gib=0.123, non_torch_tp1_gib=0.25, non_torch_multi_gib=2.15,
    non_torch_multi_pcie_gib=0.25, pcie_ceiling_no_fusion_gib=_MULTI_NO_FUSION, hybrid_group_ratio=1.5,
    activation_uncertainty=0.08, sampler_uncertainty=None, non_torch_uncertainty_gib=0.1,
    calibration="29 H100 start-ups of 0.19.0 (llm-d-planner PR 205): KV tokens median 0.02%")

#: 0.20: the CUDA-graph estimate comes out of the KV budget by default.
_V1_20 = _then(
    _V1_17, "v0.20", (0, 20, 0), (0, 20, 99),
    sources=("vllm/envs.py@v0.20.0:1724-1725 (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default 1)",
             "vllm/v1/worker/gpu_worker.py@v0.20.0:379-424 (available = requested - non-KV - graph estimate)",
             "vllm/utils/mem_utils.py@v0.20.0:191-273 (memory_profiling)"),
    graphs_reserved=True, activation_uncertainty=0.25, non_torch_uncertainty_gib=0.3,
    calibration="accounting as 0.19 plus the graph estimate (no 0.20 start-up in the case files)")

#: 0.21: "GPU KV cache size" is int(concurrency x max_model_len).
_V1_21 = _then(
    _V1_20, "v0.21-0.25", (0, 21, 0), (0, 25, 99),
    sources=("vllm/v1/worker/gpu_worker.py@v0.24.0:400-553 (determine_available_memory)",
             "vllm/v1/core/kv_cache_utils.py@v0.21.0:1700-1712 (tokens = int(concurrency x max_model_len))",
             "vllm/v1/worker/gpu_model_runner.py@v0.21.0:5702 (sampler warmed twice; same peak)",
             "vllm/utils/mem_utils.py@v0.24.0:229-311 (memory_profiling)",
             "vllm/config/model.py@v0.25.0:1883-1888 (no prefix caching by default for hybrid models)",
             "vllm/v1/kv_cache_interface.py@v0.22.0:582-591 (mamba state blocks: align 2 + spec, none 1 + spec)"),
    tokens_from_concurrency=True,
    calibration="accounting as 0.20 (one 0.22 start-up without its memory lines: RTX 3090 TP2 hybrid MTP)")

#: 0.26: model runner V2 by default for dense decoders: no CUDA-graph reservation, a parameterless sampler profile;
#: Mamba2 leaves 'all' mode.
_V1_26 = _then(
    _V1_21, "v0.26", (0, 26, 0), (0, 26, 99),
    sources=("vllm/v1/worker/gpu_worker.py@v0.26.0:448-608 (determine_available_memory)",
             "vllm/engine/arg_utils.py@v0.26.0:2518-2522 (hybrid models: prefix caching opt-in by default; "
             "config/model.py@v0.26.0:1895-1897 only says they support it)",
             "vllm/v1/kv_cache_interface.py@v0.26.0:710-720 (align mode: 2 + spec state blocks per request)",
             "vllm/config/vllm.py@v0.26.0:550-621 (model runner V2 by default for dense decoders)",
             "vllm/v1/worker/gpu/model_runner.py@v0.26.0:705-707 (V2: no CUDA-graph memory estimate)"),
    mamba2_all_mode=False, profile_sampler_plain=True, runner_v2="dense", v2_graph_estimate=False,
    calibration="accounting as 0.21 (no 0.26 start-up in the case files)")

#: 0.27: non-KV is the drop in free memory since the snapshot (V2's penalty bins and receive buffers count).
_V1_27 = _then(
    _V1_26, "v0.27", (0, 27, 0), (0, 27, 99),
    sources=("vllm/utils/mem_utils.py@v0.27.0:234-326 (non-KV = drop in free memory + transient peak)",
             "vllm/v1/worker/gpu_worker.py@v0.27.0:460-612 (determine_available_memory)",
             "vllm/config/vllm.py@v0.27.1:578-658 (model runner V2 by default for dense decoders)",
             "vllm/v1/worker/gpu/model_runner.py@v0.27.1:329 ('Model loading took', the V2 runner's log line)",
             "vllm/v1/worker/gpu/model_runner.py@v0.27.1:749-751 (V2: no CUDA-graph memory estimate)",
             "vllm/v1/worker/gpu/model_runner.py@v0.27.1:350-360 (sampler built after the weights are measured)",
             "vllm/v1/worker/gpu/sample/penalties.py@v0.27.1:32-42 (output_bin_counts: seqs x vocab int32)",
             "vllm/engine/arg_utils.py@v0.27.1:2515-2562 (70 GiB tier only: no 16384-token tier yet)",
             "vllm/engine/arg_utils.py@v0.27.1:2602-2606 (hybrid models: prefix caching still opt-in)"),
    non_kv_free_memory_drop=True,
    calibration="three 0.27.1 start-ups (Qwen3-32B, RTX PRO 6000, utilization 0.426: TP 1, TP 2, PP 2), all on model "
                "runner V2")

#: 0.28: the 16384-token tier on >= 160 GiB; prefix caching on by default for hybrid models.
_V1_28 = _then(
    _V1_27, "v0.28", (0, 28, 0), (0, 28, 99),
    sources=("vllm/v1/worker/gpu_worker.py@v0.28.0:475-559 (determine_available_memory)",
             "vllm/engine/arg_utils.py@v0.28.0:2582-2590 (16384 batched tokens on >= 160 GiB)",
             "vllm/config/vllm.py@v0.28.0:615-712 (model runner V2 by default for dense decoders)",
             "vllm/v1/worker/gpu/model_runner.py@v0.28.0:843-845 (V2: no CUDA-graph memory estimate)",
             "vllm/v1/worker/gpu/sample/penalties.py@v0.28.0:32-42 (output_bin_counts)",
             "vllm/engine/arg_utils.py@v0.28.0:2650 (prefix caching on by default, hybrid models included)"),
    hybrid_prefix_caching=True, defaults_xl_gib=_XL_GIB,
    calibration="accounting as 0.27 (no 0.28 start-up in the case files)")

#: 0.29: model runner V2 for every model, and it estimates its CUDA graphs again.
_V1_29 = _then(
    _V1_28, "v0.29", (0, 29, 0), (0, 29, 99),
    sources=("vllm/utils/mem_utils.py@v0.29.0:234-326 (non-KV = drop in free memory + transient peak)",
             "vllm/config/vllm.py@v0.29.0:645-677 (model runner V2 by default for every model)",
             "vllm/v1/worker/gpu/model_runner.py@v0.29.0:896-898 (V2 profiles CUDA-graph memory)",
             "vllm/v1/worker/gpu/sample/penalties.py@v0.29.0:32-42 (output_bin_counts)",
             "vllm/engine/arg_utils.py@v0.28.0:2582-2590 (16384 batched tokens on >= 160 GiB)"),
    runner_v2="all", v2_graph_estimate=True,
    calibration="accounting as 0.27 with V2's graph estimate (no 0.29 start-up in the case files)")

#: 0.30: the Triton top-k/top-p path at any batch size.
_V1_30 = _then(
    _V1_29, "v0.30-0.31", (0, 30, 0), (0, 31, 99),
    sources=("vllm/v1/worker/gpu_worker.py@v0.30.0:528-689 (determine_available_memory)",
             "vllm/v1/sample/ops/topk_topp_sampler.py@v0.30.0:368-375 (Triton top-k/top-p at any batch)",
             "vllm/v1/kv_cache_interface.py@v0.30.0:1034-1044 (align mode: 2 + spec state blocks per request)",
             "vllm/config/vllm.py@v0.30.0:675-723 (model runner V2 by default; @v0.31.0:701-761)",
             "vllm/v1/worker/gpu/sample/penalties.py@v0.30.0:40 (V2 output_bin_counts; @v0.31.0:45)"),
    sampler_fast_min_rows=0,
    calibration="accounting as 0.32 (no 0.30/0.31 start-up in the case files)")

#: 0.32: Mamba2's prefill checkpoint block in 'align' mode.
_V1_32 = _then(
    _V1_30, "v0.32", (0, 32, 0), (0, 32, 99),
    sources=("vllm/v1/worker/gpu_worker.py@v0.32.0:634-808 (determine_available_memory)",
             "vllm/utils/mem_utils.py@v0.32.0:230-321 (non-KV = total consumed + transient peak headroom)",
             "vllm/v1/worker/gpu_worker.py@v0.32.0:700-744 (graph estimate applied by default)",
             "vllm/v1/worker/gpu_model_runner.py@v0.32.0:6133 (profile_run), 5927-5990 (_dummy_sampler_run)",
             "vllm/config/vllm.py@v0.32.0:703-739 (model runner V2 by default, vllm/v1/worker/gpu/)",
             "vllm/v1/worker/gpu/model_runner.py@v0.32.0:972-983 (V2 _dummy_sampler_run: one pass without sampling "
             "parameters; 'the sampler may skip top_k, top_p, and logprobs')",
             "vllm/v1/worker/gpu_worker.py@v0.32.0:952-957 (warmup_kernels after the KV cache is sized)",
             "vllm/v1/worker/gpu/warmup.py@v0.32.0:218-324 (warmup_kernels: SamplingParams.for_sampler_warmup, every "
             "sampling feature on)",
             "vllm/v1/sample/ops/topk_topp_sampler.py@v0.32.0:460-470 (Triton top-k/top-p at any batch)",
             "vllm/v1/core/kv_cache_utils.py@v0.32.0:1195-1228,2300-2309 (concurrency and token capacity)",
             "vllm/engine/arg_utils.py@v0.32.0:2920-2951 (batch defaults: 160 GiB / 70 GiB tiers)",
             "vllm/config/model.py@v0.32.0:2259-2261 (hybrid models: prefix caching on by default)",
             "vllm/v1/kv_cache_interface.py@v0.32.0:1076-1082 (align: 2 + spec + prefill-checkpoint blocks)",
             "vllm/model_executor/layers/mamba/mamba_mixer2.py@v0.32.0:1098-1108 (Mamba2: one checkpoint block)",
             "vllm/v1/worker/gpu/sample/penalties.py@v0.32.0:45 (V2 output_bin_counts)"),
    mamba2_checkpoint_block=True,
    calibration="accounting read from 0.32.0; constants as 0.19 (no pinned 0.30-0.32 start-up in the files)")

#: 0.33: V2's profile adds the full sampler pass; GB10 (cc 12.1) stays on the small batch tier.
_V1_33 = _then(
    _V1_32, "v0.33", (0, 33, 0), (0, 33, 99),
    sources=("vllm/v1/worker/gpu_worker.py@v0.33.0:641-820 (determine_available_memory, as 0.32)",
             "vllm/v1/worker/gpu_worker.py@v0.33.0:519-529 (cuBLAS handles created before the start-up snapshot: "
             "baseline, not non-torch)",
             "vllm/utils/mem_utils.py@v0.33.0:230-321 (memory_profiling, unchanged from 0.32.0)",
             "vllm/config/vllm.py@v0.33.0:731-767 (model runner V2 by default)",
             "vllm/v1/worker/gpu/model_runner.py@v0.33.0:993-1014 (_dummy_sampler_run: plain pass, then "
             "SamplingParams.for_sampler_warmup, so the profiled peak covers warmup_kernels)",
             "vllm/v1/worker/gpu/warmup.py@v0.33.0:218-335 (warmup_kernels after the KV cache is sized)",
             "vllm/v1/core/kv_cache_utils.py@v0.33.0:1061-1128 (concurrency and token capacity, as 0.32)",
             "vllm/v1/core/kv_cache_utils.py@v0.33.0:1470 (group size: max when max < 1.5 x min)",
             "vllm/v1/core/kv_cache_planning.py@v0.33.0:1533-1560 (the max-length check, moved here: per worker, one "
             "block off first)",
             "vllm/engine/arg_utils.py@v0.33.0:2958-2996 (batch defaults; GB10, cc 12.1, on the small tier)",
             "vllm/envs.py@v0.33.0:2219-2220 (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default 1)",
             "vllm/config/model.py@v0.33.0:2276-2278 (hybrid models support prefix caching)"),
    defaults_exclude_cc=((12, 1),), profile_sampler_plain=False,
    calibration="accounting read from 0.33.0 (PyPI wheel); V2's penalty bins taken as in 0.32 (not re-read at 0.33); "
                "constants as 0.32 (no 0.33 start-up in the files; the full sampling pipeline's bytes per logits "
                "element in the profile are not measured)")

ROWS: tuple[VersionRow, ...] = (_V0_5, _V0_7, _V0_8, _V1_8, _V1_9, _V1_11, _V1_17, _V1_20, _V1_21, _V1_26, _V1_27,
                                _V1_28, _V1_29, _V1_30, _V1_32, _V1_33)


@dataclass(frozen=True)
class VersionChoice:
    """The release to size for: one row, or every candidate row when the version is unknown."""

    text: str
    version: Version | None
    rows: tuple[VersionRow, ...]
    warning: str | None = None
    engine: str | None = None
    """An engine the deployment forces (VLLM_USE_V1=0/1 on 0.8-0.10), written as a `-v0`/`-v1` suffix."""



#: ``unknown``, ``unknown-v1``, or with a cap, ``unknown-v1<=0.18.0``: a release no newer than the cap (a build of
#: a known day, a start-up log dated before a release existed), so only rows that begin by then are candidates.
_UNKNOWN_ENGINE = re.compile(r"^unknown(?:[-_ ](v0|v1))?(?:\s*<=\s*(\S+))?$", re.IGNORECASE)
_FORCED_ENGINE = re.compile(r"^(.+)[-_ ](v0|v1)$", re.IGNORECASE)


def parse_vllm_version(text: str) -> Version | None:
    """``0.11.0``, ``v0.11.0`` or an image ref such as ``vllm/vllm-openai:v0.11.0``; None if unreadable."""
    tag = text.rsplit(":", 1)[-1] if ":" in text else text
    match = re.search(r"(?<![\d.])v?(\d+)\.(\d+)(?:\.(\d+))?", tag)
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def rows_for_version(version: Version) -> tuple[VersionRow, ...]:
    return tuple(r for r in ROWS if r.first <= version <= r.last)


def choose_version(text: str) -> VersionChoice:
    """The rows that describe `text`. Unknown or unsupported versions get every candidate row."""
    hint = _UNKNOWN_ENGINE.match(text.strip())
    if hint:
        engine = (hint.group(1) or "").lower()
        rows = tuple(r for r in ROWS if not engine or r.engine == engine)
        what = f"an unknown {engine.upper()} release" if engine else "an unknown release"
        cap = parse_vllm_version(hint.group(2)) if hint.group(2) else None
        capped = tuple(r for r in rows if cap is not None and r.first <= cap)
        if capped:
            rows, what = capped, f"{what} no newer than {'.'.join(map(str, cap or ()))}"
        elif hint.group(2):
            what += f" (the cap {hint.group(2)!r} after '<=' names no release the table describes, so it is ignored)"
        return VersionChoice(text, None, rows, _warn(what))
    forced = _FORCED_ENGINE.match(text.strip())
    engine = forced.group(2).lower() if forced else None
    version = parse_vllm_version(forced.group(1) if forced else text)
    if version is None:
        return VersionChoice(text, None, ROWS, _warn(f"{text!r}, which names no release"))
    rows = tuple(r for r in rows_for_version(version) if engine is None or r.engine == engine)
    if not rows and engine:  # the release has no such engine: the suffix does not apply
        rows, engine = rows_for_version(version), None
    if not rows:
        newest = max(r.last for r in ROWS)
        where = "newer than" if version > newest else "older than"
        return VersionChoice(text, version, ROWS, _warn(f"vLLM {'.'.join(map(str, version))}, {where} every "
                                                        "release the table describes"))
    return VersionChoice(text, version, rows, engine=engine)


def _warn(what: str) -> str:
    return (f"vLLM version: the image runs {what}, so the estimate uses the most conservative release profile "
            "for this model; pin serving.vllmImage to a release tag (e.g. vllm/vllm-openai:v0.32.0) for an exact "
            "profile")


def engine_rows(choice: VersionChoice, *, cc: tuple[int, int] | None, quantization: str | None,
                dtype: str, kv_cache_dtype: str) -> tuple[VersionRow, ...]:
    """The rows that can run this deployment: 0.8-0.10 pick V0 or V1 by the V1 oracle's conditions."""
    if choice.engine:
        return choice.rows
    reasons = set()
    if cc is not None and cc < (8, 0):
        reasons.add("cc<8.0")
    if (quantization or "").lower() == "gguf":
        reasons.add("gguf")
    if dtype.lower() in FLOAT32_DTYPES:
        reasons.add("float32")
    if kv_cache_dtype.startswith("fp8") and cc is not None and cc < (9, 0):
        reasons.add("fp8-kv-pre-hopper")
    v1_rows = [r for r in choice.rows if r.engine == "v1" and r.v0_fallback]
    falls_back = any(reasons & set(r.v0_fallback) for r in v1_rows)
    keep = []
    for r in choice.rows:
        if r.engine == "v1" and r.v0_fallback and reasons & set(r.v0_fallback):
            continue  # this release would start the V0 engine instead
        if (r.engine == "v0" and v1_rows and not falls_back and choice.version is not None
                and any(v.first <= choice.version <= v.last for v in v1_rows)):
            continue  # a V1 release that does not fall back
        keep.append(r)
    return tuple(keep) or choice.rows
