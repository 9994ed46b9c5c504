"""`size` and `lock`: the commands about a model's facts and fit, offline from the lock or against the Hub.

Registered on `app` (tkf_infra/ops/cli_common.py) when tkf_infra/ops/cli.py imports this one; kept apart so the CLI's
modules stay readable (the stack operations in cli.py, the live view in cli_live.py).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from tkf_infra.names import PROJECT_ROOT
from tkf_infra.ops.cli_common import JsonOpt, StackOpt, app, fail


@app.command()
def size(
    ctx: typer.Context,
    model: Annotated[str, typer.Argument(help="REPO@REVISION, e.g. Qwen/Qwen3-8B@<40-hex sha>.")],
    gpu: Annotated[str, typer.Option(help="GPU, e.g. H100-80GB or a GPU Operator product label.")] = "H100-80GB",
    tp: Annotated[int, typer.Option("--tp", help="tensorParallelSize")] = 1,
    pp: Annotated[int, typer.Option("--pp", help="pipelineParallelSize")] = 1,
    dp: Annotated[int, typer.Option("--dp", help="dataParallelSize")] = 1,
    expert_parallel: Annotated[bool, typer.Option(help="enableExpertParallel (MoE)")] = False,
    dcp: Annotated[int, typer.Option("--dcp", help="decodeContextParallelSize (MLA models)")] = 1,
    enforce_eager: Annotated[bool, typer.Option(help="enforceEager (no CUDA graphs)")] = False,
    speculative_config: Annotated[str | None, typer.Option(help="speculativeConfig as JSON")] = None,
    max_model_len: Annotated[int | None, typer.Option(help="maxModelLen (default: the model's)")] = None,
    gpu_memory_utilization: Annotated[float, typer.Option()] = 0.9,
    kv_cache_dtype: Annotated[str, typer.Option()] = "auto",
    quantization: Annotated[str | None, typer.Option()] = None,
    max_num_seqs: Annotated[int | None, typer.Option()] = None,
    vllm_version: Annotated[str | None, typer.Option(help="vLLM release (default: the pinned image's).")] = None,
    time_slices: Annotated[int, typer.Option(help="Also size k of N time-slicing replicas (gpuShare slice:k).")] = 0,
    max_adapters: Annotated[int | None, typer.Option(help="lora.maxAdapters: size vLLM's LoRA slots.")] = None,
    max_rank: Annotated[int, typer.Option(help="lora.maxRank (with --max-adapters).")] = 16,
    max_cpu_adapters: Annotated[int | None, typer.Option(help="lora.maxCpuAdapters (with --max-adapters).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Predict what vLLM will print at start-up, offline from the lock, and suggest what fits.

    On a MIG-capable GPU (single GPU, TP 1) it also sizes every MIG profile and names the smallest
    that fits (gpuShare mig:<profile> / auto); with --time-slices N, each k of N time-sliced replicas."""
    from pydantic import ValidationError

    from tkf_infra.config import Serving
    from tkf_infra.ops.size import size_command
    from tkf_infra.sizing.params import LoraSlots, SizingParams

    try:
        lora = (LoraSlots(max_adapters=max_adapters, max_rank=max_rank, max_cpu_adapters=max_cpu_adapters)
                if max_adapters is not None else None)
        params = SizingParams(lora=lora,
            tensor_parallel_size=tp, pipeline_parallel_size=pp, data_parallel_size=dp,
            enable_expert_parallel=expert_parallel, decode_context_parallel_size=dcp, enforce_eager=enforce_eager,
            speculative_config=json.loads(speculative_config) if speculative_config else None,
            max_model_len=max_model_len, gpu_memory_utilization=gpu_memory_utilization,
            kv_cache_dtype=kv_cache_dtype, quantization=quantization,
            max_num_seqs=max_num_seqs, vllm_version=vllm_version or Serving().version)
    except ValidationError as err:
        # The option each field came from (as passed above), spelled as the command declares it.
        option = {"tensor_parallel_size": "tp", "pipeline_parallel_size": "pp", "data_parallel_size": "dp",
                  "decode_context_parallel_size": "dcp"}
        opts = {p.name: p.opts[0] for p in ctx.command.params}
        flags = [opts.get(option.get(str(e["loc"][0]), str(e["loc"][0])), str(e["loc"][0])) for e in err.errors()]
        raise fail("; ".join(f"{flag} {e['input']!r}: {e['msg'].lower()}" for flag, e in zip(flags, err.errors(),
                                                                                            strict=True))) from None
    except json.JSONDecodeError as err:
        raise fail(f"--speculative-config is not JSON ({err}); e.g. '{{\"method\": \"ngram\", "
                    f"\"num_speculative_tokens\": 4}}'") from None
    text, code = size_command(model, gpu, params, as_json=as_json, time_slices=time_slices)
    print(text)
    raise typer.Exit(code)


@app.command()
def lock(
    models: Annotated[list[str] | None, typer.Argument(help="REPO@REVISION (default: the stack's catalog).")] = None,
    stack: StackOpt = "dev",
    endpoint: Annotated[str | None, typer.Option(help="Hub URL (default: HF_ENDPOINT or huggingface.co).")] = None,
    token_env: Annotated[str, typer.Option(help="Env var holding a Hub token for gated repos.")] = "HF_TOKEN",
    adapter: Annotated[list[str] | None, typer.Option(help="LoRA adapter REPO@REVISION to lock (repeatable).")] = None,
) -> None:
    """Refresh models.lock.json from the Hub for the given models or the stack's catalog (with its LoRA adapters)."""
    import os

    from tkf_infra.config import SettingsError, read_stack_file, validate_catalog
    from tkf_infra.hub.lock import lock_command, parse_repo_revision

    pairs: list[tuple[str, str]] = []
    adapters: list[tuple[str, str]] = []
    if models or adapter:
        try:
            pairs = [parse_repo_revision(m) for m in models or []]
            adapters = [parse_repo_revision(a) for a in adapter or []]
        except ValueError as err:
            raise fail(str(err)) from None
    else:
        stack_file = PROJECT_ROOT / f"Pulumi.{stack}.yaml"
        if not stack_file.exists():
            raise fail(f"no stack file {stack_file.name}; give REPO@REVISION arguments or an existing --stack")
        try:
            catalog = validate_catalog(read_stack_file(stack_file))
        except SettingsError as err:
            raise fail(err.render()) from None
        pairs = sorted({(m.repo, m.revision) for m in catalog.models})
        adapters = sorted({(a.repo, a.revision) for m in catalog.models if m.lora for a in m.lora.adapters})
    text, code = lock_command(pairs, None, endpoint, os.environ.get(token_env), adapters)
    print(text)
    raise typer.Exit(code)
