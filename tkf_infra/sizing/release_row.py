"""What one row of the vLLM release table holds: how a range of releases budgets GPU memory at start-up.

Apart from the table (`versions.py`, the rows and the choice of row for an image) because every sizing
term reads these fields while only the estimate chooses rows: `overheads.py` and `row_run.py` need the
row's shape, not the table. Each field's docstring says what vLLM does that the field records.
"""

from __future__ import annotations

from dataclasses import dataclass

Version = tuple[int, int, int]


@dataclass(frozen=True)
class VersionRow:
    """How one range of vLLM releases sizes its KV cache. Memory figures are GiB per GPU rank."""

    name: str
    first: Version
    last: Version
    """Inclusive: the last release of the range (patch 99 covers every patch release)."""
    engine: str
    """"v0" (`vllm/worker/worker.py`) or "v1" (`vllm/v1/worker/gpu_worker.py`)."""
    sources: tuple[str, ...]
    """The source lines this row follows, as path@tag:lines."""
    sampler_sort_bytes: float
    """Profiled bytes per logits element when the sampler warm-up sorts (PyTorch top-k/top-p)."""
    sampler_fast_bytes: float | None = None
    """Bytes per element on the sort-free path (Triton top-k/top-p), when this release has it."""
    sampler_fast_min_rows: int = 8
    activation_base_gib: float = 0.123
    sampler_all_ranks: bool = True
    """V1 samples on every rank of the last PP stage; V0 only on the driver (TP rank 0)."""
    non_torch_tp1_gib: float = 0.25
    non_torch_multi_gib: float = 2.15
    """Non-torch growth at TP > 1 on NVLink boards (NCCL/NVLS, custom all-reduce buffers)."""
    non_torch_multi_pcie_gib: float = 0.6
    """The same on PCIe boards: no NVLS and no NVLink all-reduce buffers. From 0.11 the TP 1 figure: Ada start-ups
    that print their KV cache at TP 2 had none beyond it (L40S on 0.11.2, L4 on 0.28.0; docs/sizing.md). The bound
    keeps the NVLink ceiling less what the GPU never builds (`pcie_ceiling_no_fusion_gib`)."""
    non_torch_multi_nvswitch_gib: float | None = None
    """The NVLink figure on Hopper NVSwitch boards (cc 9.0) where it was measured apart (None: `non_torch_multi_gib`).
    V0 on 0.5-0.6 counts everything NCCL sets up in its budget (the drop in free memory since before NCCL init,
    vllm/worker/worker.py@v0.5.3:126-134, 187-195), and an 8 x H100 start-up of Llama-3.1-405B FP8 on 0.5.3 left
    8.75 GiB beyond its 57.75 GiB of weights at TP 8 where its profile (512 batched tokens) took about 1.3: far
    more than the 2.10 GiB an 8 x A100 start-up showed on 0.7.1 (no NVLink SHARP on an A100's NVSwitch)."""
    pcie_ceiling_no_fusion_gib: float | None = None
    """The NVLink figure less FlashInfer's all-reduce + RMSNorm workspace, built in the profile's compile
    (compilation/passes/fusion/allreduce_rms_fusion.py@v0.24.0:966-994) only at TP > 1 on cc 9.0 or 10.x
    (config/vllm.py@v0.17.0:113-133, @v0.24.0:131-151, @v0.29.0:161-185, @v0.31.0:178-202, @v0.32.0:171-195,
    @v0.33.0:179-203; off @v0.16.0:118-194): the PCIe bound's ceiling on other GPUs, 0.17 to 0.33. The PCIe IPC
    all-reduce 0.30 added is opt-in (VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC, default 0: envs.py@v0.30.0:1866-1868,
    @v0.32.0:1976-1978, @v0.33.0:1967-1969) and built with the communicator in `init_worker_distributed_environment`,
    before the start-up snapshot (cuda_communicator.py@v0.32.0:139-147, gpu_worker.py@v0.32.0:505-534), so it adds
    no non-torch memory by default. None: the NVLink figure."""
    context_single_gib: float = 0.51
    context_multi_gib: float = 1.55
    """Memory in use before vLLM's start-up snapshot (CUDA context, NCCL): must fit outside the budget. Measured on
    NVLink H100s ('Free memory on device (77.66/79.19 GiB)' at TP 2 on 0.19, 0.51 GiB at TP 1)."""
    context_multi_pcie_gib: float = 0.76
    """The same over PCIe, where NCCL sets up no NVLink SHARP (NVLS) or NVSwitch buffers: the TP 1 context and
    0.25 GiB for NCCL's ring buffers and the custom all-reduce. Not measured (no PCIe start-up prints its free
    memory); two L4 start-ups at TP 2 and PP 2 on 0.28 that warmed up after allocating their KV cache rule out the
    NVLink figure there (docs/sizing.md, 'The warm-up check')."""
    graphs_reserved: bool = False
    """The CUDA-graph memory estimate is subtracted from the KV budget."""
    reserve_includes_fragmentation: bool = False
    """V0 <= 0.6 measured the drop in free memory without emptying torch's cache after profiling."""
    hybrid_group_ratio: float = 1.5
    """Layer groups take the largest type's count when max < ratio x min (1.0: always the smallest)."""
    tokens_from_concurrency: bool = False
    """"GPU KV cache size" = int(concurrency x max_model_len) instead of blocks // groups x block."""
    hybrid_prefix_caching: bool = False
    """Prefix caching is on by default for hybrid (recurrent) models, so their state is cached in
    mamba 'align' mode: 2 + speculative blocks per request and recurrent layer instead of 1 + speculative."""
    mamba2_checkpoint_block: bool = False
    """Mamba2 layers hold one more block per request in 'align' mode (prefill checkpoint)."""
    mla_absorbed_weights: bool = False
    """V0 MLA keeps absorbed copies of the attention matrices beside the weights (0.7.x)."""
    mamba2_all_mode: bool = False
    """Prefix caching puts Mamba2 layers in 'all' mode: one state per block of the sequence
    (vllm/model_executor/models/config.py@v0.19.0:436-445; from 0.26 'align' for every model)."""
    defaults_xl_gib: float | None = None
    """GPUs with at least this much memory get 16384 batched tokens by default."""
    defaults_exclude_a100: bool = True
    defaults_exclude_cc: tuple[tuple[int, int], ...] = ()
    """Compute capabilities kept on the small batch tier whatever their memory (GB10, cc 12.1, from 0.33)."""
    profile_sampler_plain: bool = False
    """Model runner V2's profile samples without sampling parameters (`_dummy_sampler_run`,
    gpu/model_runner.py@v0.26.0:654-665 to @v0.32.0:972-983), so the profile holds the logits and not the full
    sampler (`overheads.logits_gib`), and the post-allocation warm-up (`warmup_kernels`, gpu/warmup.py@v0.26.0:155-231,
    `SamplingParams.for_sampler_warmup`, every feature on) finds only that peak freed inside the budget: the rest
    of the sampler must come from what the budget leaves outside. Applies where V2 runs (`runner_v2`); 0.33's
    profile adds the full pass (False)."""
    runner_v2: str = ""
    """Which models run model runner V2 (`vllm/v1/worker/gpu/`) by default: "" none, "dense" generative
    decoders that are neither MoE nor hybrid (config/vllm.py `_is_default_v2_model_runner_model`,
    @v0.26.0:550-621, @v0.27.1:578-658, @v0.28.0:615-712), "all" every model (@v0.29.0:645-677). V2's sampler
    holds `output_bin_counts` (max_num_seqs x vocab int32) and `prompt_bin_mask` on every last-stage rank,
    allocated after the weights are measured, so vLLM counts them as non-KV memory
    (v1/worker/gpu/sample/penalties.py@v0.27.1:32-42, @v0.32.0:45; gpu/model_runner.py@v0.27.1:350-360)."""
    v2_graph_estimate: bool = True
    """V2 estimates CUDA-graph memory for the KV budget. False on 0.26-0.28: its `profile_cudagraph_memory`
    returns 0 (gpu/model_runner.py@v0.26.0:705-707, @v0.27.1:749-751, @v0.28.0:843-845), so
    `determine_available_memory` takes nothing out for graphs (gpu_worker.py@v0.27.1:517-547); from 0.29 it
    profiles them (@v0.29.0:896-898)."""
    non_kv_free_memory_drop: bool = False
    """vLLM's non-KV memory is the drop in free memory since the start-up snapshot plus the transient peak
    (utils/mem_utils.py@v0.27.1:317-326, `total_consumed + transient_peak_headroom`), so what the runner allocates
    after the weights are measured and before the profile counts (model runner V2's penalty bins and pipeline
    receive buffers). Before 0.27 it was weights + the profile's torch peak increase + non-torch growth
    (@v0.24.0:308-313, @v0.26.0:308-313), which leaves such buffers out."""
    budget_counts_device: bool = False
    """The budget's non-torch term is everything in use on the device after the profile, less torch's own allocation
    (`total - free - torch current`, vllm/v1/worker/gpu_worker.py@v0.8.5:194-210, @v0.9.0.1:196-212), not the
    growth since a start-up snapshot: the CUDA context counts against the KV cache, and so does whatever other
    processes hold on the GPU. V1 on 0.8.0-0.9.0; 0.9.1 takes `memory_profiling`'s snapshot (@v0.9.1:183-232), as V0
    did all along (vllm/worker/worker.py@v0.8.5:181, 246)."""
    v0_fallback: tuple[str, ...] = ()
    """Conditions under which these releases run the V0 engine instead (`_is_v1_supported_oracle`)."""
    calibration: str = ""
    activation_uncertainty: float = 0.25
    """Relative uncertainty of the activation peak outside the calibrated range."""
    sampler_uncertainty: float | None = None
    """Relative uncertainty of the sampler warm-up term alone, where this row's bytes per logits element
    were measured (None: as `activation_uncertainty`). The warm-up allocates rows x vocabulary x a fixed
    number of bytes set by the sampler's code path, so once that number is measured on a release the term
    is known far better than the forward pass, whose live tensors depend on the model's kernels."""
    non_torch_uncertainty_gib: float = 0.3
