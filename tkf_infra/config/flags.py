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
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from tkf_infra.config.base import SettingsModel
from tkf_infra.config.identity import HF_REPO_RE
from tkf_infra.config.lora import LoraSpec, lora_argv
from tkf_infra.names import SERVING_PORT


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


# Flags no catalog field owns, which the platform sets itself or which would change what the fit
# check sized without it knowing. `extraArgs` may not pass them (nor any other spelling vLLM's parser
# has for the same argument); the reason is the fix.
PLATFORM_FLAGS: dict[str, str] = {
    "--model": "set `repo` and `revision` instead",
    "--revision": "set `revision` instead",
    "--port": f"the platform serves on port {SERVING_PORT}",
    "--host": "the platform binds vLLM to all interfaces inside the pod",
    "--api-key": "the runtime API key comes from the `apiKey` secret stack setting",
    "--download-dir": "weights come from the shared weight cache",
    "--nnodes": "multi-node placement comes from `nodeCount`",
    "--node-rank": "multi-node placement comes from `nodeCount`",
    "--master-addr": "multi-node placement comes from `nodeCount`",
    "--headless": "multi-node placement comes from `nodeCount`",
    "--config": "a vLLM config file could set any flag behind the fit check's back; use catalog fields",
    "--cpu-offload-gb": "offloading changes the weights on the GPU, which the fit check sizes",
    "--num-gpu-blocks-override": "the KV-cache budget is what the fit check sizes",
    "--compilation-config": "CUDA-graph capture sizes are part of the fit check's overhead",
    "--optimization-level": "CUDA-graph capture sizes are part of the fit check's overhead",
    "--cudagraph-capture-sizes": "CUDA-graph capture sizes are part of the fit check's overhead",
    "--max-cudagraph-capture-size": "CUDA-graph capture sizes are part of the fit check's overhead",
    # vllm/config/parallel.py@v0.32.0:945-949: world size = pipeline x tensor x prefill-context parallel.
    "--prefill-context-parallel-size": "it multiplies the GPUs a replica uses beyond what its pods request and the "
                                       "fit check sizes; set tensorParallelSize / pipelineParallelSize instead",
    "--data-parallel-size-local": "data parallelism comes from `dataParallelSize`",
    "--quantization-config": "online quantization changes the weights the fit check sizes; set `quantization`",
    "--hf-overrides": "it changes the model config the fit check sizes from models.lock.json",
    # The LoRA flags a `lora` block does not set change the slots the fit check sizes (tkf_infra/sizing/lora.py).
    "--fully-sharded-loras": "the fit check sizes vLLM's default LoRA layers (A replicated across TP); use `lora`",
    "--lora-dtype": "the LoRA slots are sized in the model's dtype; use `lora`",
    "--lora-target-modules": "the fit check sizes a LoRA slot on every layer vLLM supports; use `lora`",
    "--max-lora-cls-labels": "LoRA classification heads are not sized; use `lora`",
    "--enable-tower-connector-lora": "LoRA slots on the vision tower are not sized; use `lora`",
    "--specialize-active-lora": "more CUDA graphs per LoRA count than the fit check sizes; use `lora`",
    "--default-mm-loras": "adapters come from `lora.adapters`, pinned and cached",
    "--enable-mixed-moe-lora-format": "MoE LoRA slots are not sized; use `lora` on a dense model",
    "--enable-moe-shared-loras": "MoE LoRA slots are not sized; use `lora` on a dense model",
    "--limit-mm-per-prompt": "the multimodal encoder cache is part of what the fit check sizes",
    "--load-format": "weights are loaded from the weight cache in the format the fit check sized",
    "--cpu-offload-params": "offloading changes the weights on the GPU, which the fit check sizes",
    "--kv-offloading-size": "KV-cache offloading moves KV cache to host memory the pod does not request and the "
                            "fit check does not size",
    "--kv-offloading-backend": "KV-cache offloading moves KV cache to host memory the pod does not request and "
                               "the fit check does not size",
    "--decode-context-parallel-size": "it shards the KV cache across ranks other than the fit check sized",
    "--kv-cache-dtype-skip-layers": "layers kept at full-precision KV change the KV cache the fit check sized with "
                                    "`kvCacheDtype`",
    "--mamba-cache-dtype": "the recurrent state's dtype is part of what the fit check sizes",
    "--mamba-ssm-cache-dtype": "the recurrent state's dtype is part of what the fit check sizes",
}

#: The release the option table below was generated from (tests/test_extra_args_spellings.py: = VLLM_RELEASE).
SERVE_OPTIONS_VLLM = "0.32.0"
SERVE_OPTIONS_FILE = Path(__file__).parent / "data" / f"vllm_serve_options-{SERVE_OPTIONS_VLLM}.json"


@functools.cache
def serve_options() -> Mapping[str, str]:
    """Every option string of `vllm serve`'s parser → its argparse dest, at the pinned release.

    Generated from vLLM's own parser by scripts/vllm_serve_options.py (aliases such as `-q`, `-tp`,
    `-sc`, `-cc`, the `--no-` forms of boolean flags); tests/vllm/test_serve_options.py regenerates it
    from the installed vLLM and fails when it differs."""
    data = json.loads(SERVE_OPTIONS_FILE.read_text())
    options: dict[str, str] = data["options"]
    return options


def _owned_dests() -> dict[str, str]:
    """argparse dest → the reason `extraArgs` may not set it."""
    options = serve_options()
    out: dict[str, str] = {}
    named = [(name, why) for name, why in PLATFORM_FLAGS.items()]
    for r in rows():
        why = f"set `{r.key}` instead" + (" (the fit check sizes the model with it)" if r.flag.sized else "")
        named += [(name, why) for name in (r.flag.flag, *r.flag.aliases) if name]
    for name, why in named:
        if name in options:
            out.setdefault(options[name], why)
    return out


def owned_flags() -> dict[str, str]:
    """Every spelling `extraArgs` may not use, with the reason a user reads.

    Every option string of vLLM's parser whose dest is an owned flag's dest (so `-q`, `-tp`, `-sc`,
    `--no-enable-expert-parallel` …), plus the table's own names."""
    return dict(_owned_flags())


@functools.cache
def _owned_flags() -> dict[str, str]:
    dests = _owned_dests()
    out = {opt: dests[dest] for opt, dest in serve_options().items() if dest in dests}
    out.update({name: why for name, why in PLATFORM_FLAGS.items() if name not in out})
    for r in rows():
        why = f"set `{r.key}` instead" + (" (the fit check sizes the model with it)" if r.flag.sized else "")
        out.update({name: why for name in (r.flag.flag, *r.flag.aliases) if name and name not in out})
    return out


def _spelled(arg: str) -> str | None:
    """The option name an argv word spells after vLLM's FlexibleArgumentParser rewrote it, else None (a value).

    Read at vLLM 0.32.0, vllm/utils/argparse_utils.py `FlexibleArgumentParser.parse_args`:
    - a `--` word has underscores turned into dashes between the `--` and its first `.`, in the part
      before `=` only (lines 337-357: `--max_num_seqs=8` is `--max-num-seqs=8`);
    - a dotted `--x.y[+] v` / `--x.y=v` is folded into `--x '{"y": v}'` (lines 425-463), so its option is
      `--x` (`--speculative-config.method mtp` sets `--speculative-config`);
    - `-O3`, `-O=3`, `-Odecode` and `-O 3` become `--optimization-level` (lines 358-369).
    argparse then splits `--opt=value` / `-o=value` at the first `=`.
    """
    if not arg.startswith("-") or arg in ("-", "--") or arg.lstrip("-").replace(".", "").isdigit():
        return None
    if arg.startswith("--"):
        key = arg.split("=", 1)[0]
        return "--" + key[2:].split(".", 1)[0].replace("_", "-")
    if arg.startswith("-O"):
        return "--optimization-level"
    return arg.split("=", 1)[0]


def resolve_option(arg: str) -> tuple[str, ...]:
    """The option strings of vLLM's parser an argv word may set: none for a value or an unknown flag.

    One entry for an exact spelling; for an abbreviation every option it may expand to. argparse (with
    vLLM's `allow_abbrev` on) expands an unambiguous prefix of a long option (`--quant` is
    `--quantization`), and for a single-dash word takes an option it prefixes (`-t` is `-tp`) or, for a
    one-letter option, the rest of the word as its value (`-qawq` is `-q awq`): Lib/argparse.py
    `_parse_optional` / `_get_option_tuples` (Python 3.11-3.13)."""
    name = _spelled(arg)
    if name is None or name in ("-", "--"):
        return ()
    options = serve_options()
    if name in options:
        return (name,)
    if name.startswith("--"):
        return tuple(sorted(o for o in options if o.startswith(name) and o.startswith("--")))
    hits = {o for o in options if o.startswith(name) and not o.startswith("--")}
    if name[:2] in options:
        hits.add(name[:2])
    return tuple(sorted(hits))


def extra_args_dests(args: list[str]) -> dict[str, str]:
    """argparse dest → the option string each `extraArgs` word sets (exact spellings and unambiguous
    abbreviations only: what vLLM will really receive)."""
    options = serve_options()
    out: dict[str, str] = {}
    for arg in args:
        hits = resolve_option(arg)
        if len({options[h] for h in hits}) == 1:
            out[options[hits[0]]] = hits[0]
    return out


def extra_args_problems(args: list[str]) -> list[str]:
    """Why each `extraArgs` word may not be passed (empty when all are allowed)."""
    owned = _owned_flags()
    problems: list[str] = []
    for arg in args:
        name = _spelled(arg)
        if name is None:
            continue
        hits = resolve_option(arg)
        hit = owned.get(name)
        if hit is None and name.startswith("--no-"):  # a negation vLLM does not define is still ours to refuse
            hit = owned.get("--" + name.removeprefix("--no-"))
        if hit is None:
            ours = [h for h in hits if h in owned]
            several = len({serve_options()[h] for h in hits}) > 1
            if ours and several:  # argparse refuses it as ambiguous, at start-up: say so now, with our flag
                hit = (f"it abbreviates several options ({', '.join(hits[:4])}{' …' if len(hits) > 4 else ''}), "
                       f"among them {ours[0]} ({owned[ours[0]]})")
            elif ours:
                hit = f"vLLM's parser reads it as {ours[0]} ({owned[ours[0]]})"
        if hit is not None:
            problems.append(f"extraArgs contains {arg!r}, a flag the platform owns: {hit}; remove it")
    return problems
