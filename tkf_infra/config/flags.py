"""The serving-flag table: every catalog field that reaches vLLM, declared once, with its flag.

Why one table: a catalog field, the vLLM flag it becomes, its allowed values, whether the fit check
sizes with it and how each backend passes it used to live in four to six files, and they drifted —
a flag the fit check used could be overridden from `extraArgs`. Here each row is one annotated field
of `ServingSpec`: its type and constraints (pydantic), its description (the schema docs) and its
`Flag` (the vLLM side). Everything else derives from the rows:

- the command line both backends render (`components/vllm_args.py`);
- the sizing parameters the fit check sees (`tkf_infra.plan`);
- the `extraArgs` rule: a flag a row owns, or one the fit check depends on, cannot be passed there.

Adding a vLLM flag = one annotated field here plus its test.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from tkf_infra.config.base import SettingsModel
from tkf_infra.config.identity import HF_REPO_RE
from tkf_infra.config.lora import LoraSpec, lora_argv
from tkf_infra.config.quantity import gib_number


class Applies(StrEnum):
    """Which profiles a flag is passed on."""

    ALL = "all"
    GPU = "gpu"
    CPU = "cpu"


class KServe(StrEnum):
    """How the KServe backend delivers a flag (the vllm backend always puts it on the command line)."""

    ARGS = "args"
    """Appended to the `main` container's args, after the preset's `vllm serve` line."""
    SPEC = "spec"
    """Rendered by KServe's preset from the LLMInferenceService spec (parallelism, model name)."""
    SPEC_MULTI_NODE = "spec-multi-node"
    """Rendered by the multi-node preset only; a single-node pod needs it in args."""


@dataclass(frozen=True)
class Flag:
    """How one catalog field reaches vLLM. Attach it to a `ServingSpec` field with `Annotated`."""

    flag: str = ""
    """The command-line flag; empty when the value travels as `env` instead."""
    sized: bool = False
    """The fit check sizes with this value: it must never be set any other way."""
    applies: Applies = Applies.ALL
    kserve: KServe = KServe.ARGS
    aliases: tuple[str, ...] = ()
    env: str | None = None
    """Delivered as this environment variable instead of a command-line flag."""
    fmt: Callable[[Any], str] | None = None
    words: Mapping[str, tuple[str, ...]] | None = None
    """For an enumerated field: the argv words each value becomes (the flag names included)."""
    argv: Callable[[Any], tuple[str, ...]] | None = None
    """For a structured field that becomes several flags (`lora`): its argv words, the flag names included;
    `flag` and `aliases` name every flag it sets, so `extraArgs` can set none of them."""
    """How the value is written (default: str(); floats as %g)."""


@dataclass(frozen=True)
class Row:
    """One row of the table, as code outside this module sees it."""

    field: str
    """Attribute name on the catalog entry (snake_case)."""
    key: str
    """Key in the stack file (camelCase)."""
    flag: Flag

    def applies_to(self, cpu: bool) -> bool:
        return self.flag.applies == Applies.ALL or (self.flag.applies == Applies.CPU) == cpu

    def render(self, value: Any) -> list[str]:
        """The argv words for `value`: none for None/False, the bare flag for True."""
        if value is None or self.flag.env:
            return []
        if self.flag.words is not None:  # before False: a tri-state switch says "off" in words of its own
            return list(self.flag.words[str(value)])
        if value is False:
            return []
        if self.flag.argv is not None:
            return list(self.flag.argv(value))
        if value is True:
            return [self.flag.flag]
        return [self.flag.flag, self.text(value)]

    def text(self, value: Any) -> str:
        if self.flag.fmt is not None:
            return self.flag.fmt(value)
        if isinstance(value, dict):  # vLLM's JSON-valued flags (--speculative-config)
            return json.dumps(value, separators=(",", ":"), sort_keys=True)
        return f"{value:g}" if isinstance(value, float) else str(value)


class Mode(StrEnum):
    """The API a model serves; each mode is one vLLM runner (chat generates, the others pool)."""

    CHAT = "chat"
    EMBEDDING = "embedding"
    RERANK = "rerank"


#: How vLLM is told the mode. Pooling runners: `--convert` adapts a generative checkpoint to the task
#: and leaves a native embedding / cross-encoder model as it is (vllm/model_executor/models/adapters.py
#: @v0.32.0 as_embedding_model / as_seq_cls_model return pooling classes unchanged). Without these
#: flags vLLM serves a generative checkpoint as chat and /v1/embeddings answers 404.
MODE_WORDS: dict[str, tuple[str, ...]] = {
    Mode.CHAT: (),
    Mode.EMBEDDING: ("--runner", "pooling", "--convert", "embed"),
    Mode.RERANK: ("--runner", "pooling", "--convert", "classify"),
}


#: Prefix caching said either way: vLLM's BooleanOptionalAction (`--enable-prefix-caching` /
#: `--no-enable-prefix-caching`); unset leaves the release's default (vllm/config/model.py, docs/sizing.md).
PREFIX_CACHING_WORDS: dict[str, tuple[str, ...]] = {
    "True": ("--enable-prefix-caching",),
    "False": ("--no-enable-prefix-caching",),
}


def _ceil_gib(value: Any) -> str:
    return str(math.ceil(float(value)))


#: Speculative methods the fit check sizes: MTP reuses the checkpoint's own MTP layers, EAGLE/EAGLE3
#: add one draft decoder layer, ngram needs no GPU memory (vLLM's --speculative-config "method").
SPECULATIVE_METHODS = ("mtp", "eagle", "eagle3", "ngram")

#: The tool-call parsers vLLM registers (`ToolParserManager.list_registered()` at vLLM 0.32.0): vLLM
#: refuses any other `--tool-call-parser` with `--enable-auto-tool-choice`, at start-up
#: (`validate_api_server_args`), i.e. after the pod was scheduled. The `vllm` test tier checks this
#: list against the installed vLLM, so a vLLM upgrade that adds or drops one fails there.
TOOL_CALL_PARSERS_VLLM = "0.32.0"  # the release the list was read from (tests/test_vllm_pin.py: = VLLM_RELEASE)
TOOL_CALL_PARSERS: tuple[str, ...] = (
    "apertus", "cohere_command3", "cohere_command4", "deepseek_v3", "deepseek_v31", "deepseek_v32", "deepseek_v4",
    "deepseek_v41", "dots", "ernie45", "functiongemma", "gemma4", "gigachat3", "glm45", "glm47", "granite",
    "granite-20b-fc", "granite4", "hermes", "hf", "hunyuan_a13b", "hy_v3", "hy_v4", "inkling", "internlm", "jamba",
    "k2_horizon", "kimi_k2", "kimi_k3", "lfm2", "ling3", "llama3_json", "llama4_json", "llama4_pythonic", "longcat",
    "mimo", "minicpm5", "minimax_m2", "minimax_m3", "mistral", "muse_glimmer", "olmo3", "openai", "phi4_mini_json",
    "plamo3", "poolside_v1", "pythonic", "qwen3_coder", "qwen3_json", "qwen3_xml", "seed_oss", "step3", "step3p5",
    "xlam",
)


class ServingSpec(SettingsModel):
    """The catalog fields that become vLLM flags (the table; see the module docstring).

    Field order is the order flags appear on the command line.
    """

    served_name: Annotated[str, Flag("--served-model-name", kserve=KServe.SPEC)] = Field(
        description="Model name clients send; unique across the catalog.")
    mode: Annotated[Mode, Flag("--runner", words=MODE_WORDS, aliases=("--convert",))] = Field(
        Mode.CHAT, description="API the model serves: chat, embedding or rerank.")
    tensor_parallel_size: Annotated[int, Flag("--tensor-parallel-size", sized=True, applies=Applies.GPU,
                                              kserve=KServe.SPEC, aliases=("-tp",))] = Field(
        1, ge=1, le=64, description="GPUs one copy of the weights is split across within a node.")
    pipeline_parallel_size: Annotated[int, Flag("--pipeline-parallel-size", sized=True, applies=Applies.GPU,
                                                kserve=KServe.SPEC_MULTI_NODE, aliases=("-pp",))] = Field(
        1, ge=1, le=64, description="Layer stages; equals nodeCount for multi-node serving.")
    data_parallel_size: Annotated[int, Flag("--data-parallel-size", sized=True, applies=Applies.GPU,
                                            aliases=("-dp",))] = Field(
        1, ge=1, le=64, description="Engine replicas inside one deployment (MoE: attention replicated, experts "
                                    "split across all TP x DP GPUs). Scale dense models with `replicas` instead.")
    enable_expert_parallel: Annotated[bool, Flag("--enable-expert-parallel", sized=True, applies=Applies.GPU)] = Field(
        False, description="MoE: whole experts per GPU instead of every expert split across the GPUs.")
    decode_context_parallel_size: Annotated[int, Flag("--decode-context-parallel-size", sized=True,
                                                      applies=Applies.GPU, aliases=("-dcp",))] = Field(
        1, ge=1, le=64, description="MLA models: the tensor-parallel GPUs split each request's KV cache by tokens "
                                    "(must divide tensorParallelSize): as many times more KV tokens, same memory.")
    max_model_len: Annotated[int, Flag("--max-model-len", sized=True)] = Field(
        ge=16, le=10_485_760, description="Longest request (prompt + output tokens) the model must serve.")
    gpu_memory_utilization: Annotated[float, Flag("--gpu-memory-utilization", sized=True,
                                                  applies=Applies.GPU)] = Field(
        0.9, gt=0.05, le=0.99, description="Share of each GPU's memory vLLM may use.")
    dtype: Annotated[Literal["auto", "bfloat16", "float16", "float32"], Flag("--dtype", sized=True)] = Field(
        "auto", description="Activation/weight dtype for unquantized weights.")
    kv_cache_dtype: Annotated[Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"],
                              Flag("--kv-cache-dtype", sized=True)] = Field(
        "auto", description="fp8 halves the KV cache per token.")
    kv_cache_memory_bytes: Annotated[int | None, Flag("--kv-cache-memory-bytes", sized=True,
                                                      applies=Applies.GPU)] = Field(
        None, ge=1, description="KV cache per GPU in bytes (vLLM >= 0.10.2), instead of what gpuMemoryUtilization "
                                "leaves. Set by the platform for time-sliced shares (gpuShare slice:k); the fit "
                                "check refuses a value the budget cannot hold.")
    max_num_seqs: Annotated[int, Flag("--max-num-seqs", sized=True)] = Field(
        256, ge=1, le=4096, description="Requests batched at once; sizes the sampler's memory.")
    max_num_batched_tokens: Annotated[int | None, Flag("--max-num-batched-tokens", sized=True)] = Field(
        None, ge=16, description="Tokens per scheduler step (vLLM's default when unset); sizes activation memory.")
    quantization: Annotated[Literal["awq", "awq_marlin", "gptq", "gptq_marlin", "fp8", "compressed-tensors",
                                    "mxfp4", "bitsandbytes", "gguf", "auto-round", "inc", "modelopt",
                                    "modelopt_fp4"] | None,
                            Flag("--quantization", sized=True)] = Field(
        None, description="Weight quantization method (default: what the checkpoint declares).")
    block_size: Annotated[Literal[8, 16, 32, 64, 128] | None, Flag("--block-size", sized=True)] = Field(
        None, description="KV-cache block size in tokens (vLLM's default, 16, when unset).")
    enforce_eager: Annotated[bool, Flag("--enforce-eager", sized=True)] = Field(
        False, description="No CUDA graphs: less memory, slower decoding.")
    enable_prefix_caching: Annotated[bool | None, Flag("--enable-prefix-caching", sized=True,
                                                       words=PREFIX_CACHING_WORDS)] = Field(
        None, description="Prefix caching on (true) or off (false); unset: the vLLM release's default. A hybrid "
                          "(Mamba, GDN) model keeps more recurrent-state blocks per request with it on, which the "
                          "fit check sizes.")
    speculative_config: Annotated[dict[str, Any] | None, Flag("--speculative-config", sized=True)] = Field(
        None, description="Speculative decoding: {method: mtp|eagle|eagle3|ngram, num_speculative_tokens: N, "
                          "model: draft repo (eagle)}. The draft layers and their KV cache are sized.")
    enable_auto_tool_choice: Annotated[bool, Flag("--enable-auto-tool-choice")] = Field(
        False, description="Let the model decide to call tools (needs toolCallParser).")
    tool_call_parser: Annotated[str | None, Flag("--tool-call-parser")] = Field(
        None, description="vLLM's tool-call parser for this model family, e.g. hermes, llama3_json.")

    _gib = field_validator("cpu_kv_cache_gib", mode="before")(gib_number)

    @field_validator("tool_call_parser")
    @classmethod
    def _known_tool_call_parser(cls, v: str | None) -> str | None:
        if v is None or v in TOOL_CALL_PARSERS:
            return v
        close = difflib.get_close_matches(v.lower(), TOOL_CALL_PARSERS, n=3, cutoff=0.5)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        raise ValueError(f"toolCallParser {v!r} is not a tool-call parser vLLM {TOOL_CALL_PARSERS_VLLM} knows; {hint}"
                         f"use one of: {', '.join(TOOL_CALL_PARSERS)}")

    lora: Annotated[LoraSpec | None, Flag("--enable-lora", sized=True, argv=lora_argv,
                                          aliases=("--max-loras", "--max-lora-rank", "--max-cpu-loras",
                                                   "--lora-modules"))] = Field(
        None, description="LoRA adapters served on this base: {maxAdapters, maxRank, maxCpuAdapters?, adapters: "
                          "[{name, repo, revision, servedName, cost?}]}. The GPU slots vLLM reserves for "
                          "maxAdapters adapters at maxRank are sized.")

    cpu_kv_cache_gib: Annotated[float, Flag(sized=True, applies=Applies.CPU, env="VLLM_CPU_KVCACHE_SPACE",
                                            fmt=_ceil_gib)] = Field(
        4.0, gt=0, le=1024, alias="cpuKvCacheGiB", description="KV cache space of the CPU profile (GiB).")

    @field_validator("speculative_config")
    @classmethod
    def _spec_config(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        """vLLM's own keys only; the method must be one the fit check can size."""
        if v is None:
            return v
        method = v.get("method")
        if method not in SPECULATIVE_METHODS:
            raise ValueError(f"speculativeConfig.method {method!r} is not one the fit check sizes; use one of "
                             f"{', '.join(SPECULATIVE_METHODS)}")
        n = v.get("num_speculative_tokens", 1)
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 16:
            raise ValueError(f"speculativeConfig.num_speculative_tokens {n!r} must be an integer from 1 to 16")
        unknown = sorted(set(v) - {"method", "num_speculative_tokens", "model"})
        if unknown:
            raise ValueError(f"speculativeConfig keys {unknown} are not supported; use method, num_speculative_tokens "
                             "and (eagle, eagle3) model")
        if method in ("eagle", "eagle3") and not v.get("model"):
            raise ValueError(f"speculativeConfig.method {method} needs `model`, the draft checkpoint's repo")
        draft = v.get("model")
        if draft is not None and (not isinstance(draft, str) or not HF_REPO_RE.fullmatch(draft)):
            # vLLM would take a URL or a path for a local directory or fetch it from the Hub at start-up;
            # the fit check sizes a draft from its repo's shape, so only a repo id can be sized and cached.
            raise ValueError(f"speculativeConfig.model {draft!r} is not a Hugging Face repo id; write the draft "
                             "checkpoint as 'org/name' (e.g. yuhuili/EAGLE-LLaMA3.1-Instruct-8B), not a URL or path")
        return v


@functools.cache
def _table() -> tuple[tuple[Row, ...], dict[str, Row]]:
    """The rows, read once per process: every model's command line and sizing reads them (issue 18)."""
    table = tuple(Row(name, info.alias or name, flag) for name, info in ServingSpec.model_fields.items()
                  for flag in [next((m for m in info.metadata if isinstance(m, Flag)), None)] if flag is not None)
    return table, {r.field: r for r in table}


def rows() -> Iterator[Row]:
    """Every row of the table, in command-line order."""
    return iter(_table()[0])


def row(field: str) -> Row:
    return _table()[1][field]


@functools.cache
def sized_fields() -> tuple[str, ...]:
    """Catalog fields the fit check sizes with; `tkf_infra.sizing.SizingParams` has each of them."""
    return tuple(r.field for r in rows() if r.flag.sized)
