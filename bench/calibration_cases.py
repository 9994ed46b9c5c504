"""A calibration case (what vLLM printed, in /work/shared/calibration's format) as product inputs.

Why here and not in the product: the case format is a research artefact. Translating a case means
choosing the same inputs a user would give the product — the GPU by name through `lookup_gpu`, the
model's config.json, the serving flags — and nothing the log printed as a result.

Config sources, in order: the case's `config_file` (relative to the case file), a config library
(`INDEX.json` beside this repo's calibration configs, mapping a model id to a sourced config),
`--lock` entries, then the inline `model_facts`. A case none of them can size is skipped with the
field that is missing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from tkf_infra.sizing.facts import resolve_text_config
from tkf_infra.sizing.gpus import GpuSpec, lookup_gpu, pre_volta_family
from tkf_infra.sizing.params import SizingError, SizingParams

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ROOT / "tests" / "data" / "calibration" / "configs"

#: Inline `model_facts` keys that describe the case, not the checkpoint (the calibration README's metadata):
#: every other key is a config.json field the source gave, passed through so the product reads what it reads
#: from a config (a field it refuses to size, DeepSeek V4's `o_lora_rank`, must reach it as well).
_FACTS_METADATA = frozenset({
    "config_file", "config_source", "config_search", "facts_for_model", "facts_match", "facts_quality",
    "facts_source", "note", "notes", "params_b_stated", "text_model_type",
})
_METADATA_SUFFIXES = ("_note", "_in_source", "_in_copy", "_derived", "_stated", "_printed_by_vllm")
#: String-valued config.json fields; any other inline string is a person's description ("attention": "MHA (…)").
_STRING_FIELDS = frozenset({"model_type", "torch_dtype", "dtype", "expert_dtype", "hidden_act"})


def _config_field(key: str, value: Any) -> bool:
    """Whether an inline fact is a config.json field of the checkpoint (not the case's metadata or prose)."""
    if value is None or key in _FACTS_METADATA or key.endswith(_METADATA_SUFFIXES) or re.search(r"_\d{4}$", key):
        return False
    return not isinstance(value, str) or key in _STRING_FIELDS
_GGUF_TYPE = re.compile(r"(?<![A-Za-z0-9])(I?Q\d_[A-Z0-9]+(?:_[SML])?|Q\d_\d|F16|BF16|F32)(?![A-Za-z0-9])",
                        re.IGNORECASE)


class CaseSkipped(Exception):
    """The case lacks an input the product needs; the message names it."""


class CaseRecord(BaseModel):
    """The fields of a case the bench reads, typed. A case file is written by people and other tools:
    a field of the wrong shape ("max_model_len": "32k") skips that case, naming the field and value,
    instead of stopping the run for every other case."""

    model_config = ConfigDict(extra="allow")

    case_id: str | None = None
    status: str | None = None
    model: str | None = None
    gpu: str | None = None
    gpu_total_memory_gib_printed: float | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    enforce_eager: bool | None = None
    dtype: str | None = None
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    engine: str | None = None
    vllm_version: str | None = None
    weights_gib: float | None = None
    activation_peak_gib: float | None = None
    non_torch_gib: float | None = None
    available_kv_cache_gib: float | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    inferred_fields: list[str] | None = None
    log_quote: list[str] | None = None
    model_facts: dict[str, Any] | None = None
    other_printed: dict[str, Any] | None = None


def read_case(case: Any) -> dict[str, Any]:
    """The case with its fields typed; CaseSkipped naming every field of the wrong shape."""
    if not isinstance(case, dict):
        raise CaseSkipped(f"a case is a JSON object, got {type(case).__name__}")
    try:
        record = CaseRecord.model_validate(case)
    except ValidationError as err:
        bad = "; ".join(f"{'.'.join(map(str, e['loc']))} {e['input']!r}: {e['msg'].lower()}" for e in err.errors())
        raise CaseSkipped(f"case field of the wrong shape: {bad}") from None
    return {**case, **record.model_dump(exclude_unset=True)}


class CaseRefused(Exception):
    """The product refuses the case outright, before sizing (a GPU vLLM's release builds cannot run on);
    the message is the product's own. Scored as a refusal, not skipped."""


@dataclass(frozen=True)
class CaseInputs:
    config: dict[str, Any]
    config_source: str
    gpu: GpuSpec
    params: SizingParams
    co_resident: bool
    prefix_caching: bool | None = None


def _library() -> dict[str, dict[str, Any]]:
    index = LIBRARY / "INDEX.json"
    if not index.exists():
        return {}
    data: dict[str, dict[str, Any]] = json.loads(index.read_text())
    return data


def lock_configs(path: Path | None) -> dict[str, dict[str, Any]]:
    if path is None or not path.exists():
        return {}
    data = json.loads(path.read_text())
    out: dict[str, dict[str, Any]] = {}
    for entry in data.get("models", []):
        if entry.get("config") and "config" not in entry.get("unknown_fields", []):
            out.setdefault(str(entry["repo"]), entry["config"])
    return out


def case_config(case: dict[str, Any], folder: Path, lock: dict[str, dict[str, Any]]) -> tuple[dict[str, Any], str]:
    """The checkpoint's full config.json (multimodal configs keep their vision part) and its source."""
    facts = case.get("model_facts") or {}
    model = str(case.get("model") or "")
    library = _library()
    own = facts.get("config_file") and (folder / facts["config_file"]).exists()
    direct = str(facts.get("facts_match") or "").startswith("direct")
    entry = library.get(model)
    if entry is not None and not (own and direct):
        # The library holds this exact checkpoint; the case's own file is a sibling's.
        return json.loads((LIBRARY / entry["file"]).read_text()), f"library: {entry['match']}"
    if own:
        return json.loads((folder / facts["config_file"]).read_text()), "config_file"
    if model in lock:
        return lock[model], "lock"
    cfg = {k: v for k, v in facts.items() if _config_field(k, v)}
    if facts.get("text_model_type"):
        cfg["model_type"] = facts["text_model_type"]
    if "kv_lora_rank" in cfg and "model_type" not in cfg:
        cfg["model_type"] = "deepseek_v2"
    return cfg, "inline model_facts"


def case_gpu(case: dict[str, Any]) -> GpuSpec:
    """The product's own GPU resolution; a printed CUDA total replaces the table's figure."""
    label = str(case.get("gpu") or "")
    if not label.strip():
        raise CaseSkipped("the case names no GPU (its source did not print one)")
    try:
        gpu = lookup_gpu(label)
    except KeyError as exc:
        if pre_volta_family(label):
            raise CaseRefused(exc.args[0]) from None
        raise CaseSkipped(f"GPU {label!r} is not in the GPU table (tkf_infra/sizing/gpus.py)") from None
    printed = case.get("gpu_total_memory_gib_printed")
    if printed is not None:
        gpu = gpu.with_memory(float(printed), "printed in the case")
    if (case.get("other_printed") or {}).get("co_resident"):
        gpu = gpu.model_copy(update={"shared": True})
    return gpu


#: Where each release logs its start-up lines ("file.py:line" -> releases), read from the PyPI wheels'
#: sources (tests/data/calibration/README.md). A log quoted without its version still names the release.
LOG_LINES = ROOT / "tests" / "data" / "calibration" / "vllm_log_lines.json"


def release_from_log(quotes: list[str]) -> str | None:
    """The release whose source lines the quoted log lines come from, when they agree on one row."""
    from tkf_infra.sizing.versions import parse_vllm_version, rows_for_version

    table: dict[str, list[str]] = json.loads(LOG_LINES.read_text())
    candidates: set[str] | None = None
    for quote in quotes:
        for file, line in re.findall(r"\[([a-z_]+\.py):(\d+)\]", quote):
            releases = table.get(f"{file}:{line}")
            if releases:
                candidates = set(releases) if candidates is None else candidates & set(releases)
    if not candidates:
        return None
    rows = {tuple(r.name for r in rows_for_version(parse_vllm_version(v) or (0, 0, 0))) for v in candidates}
    return min(candidates, key=lambda v: parse_vllm_version(v) or (0, 0, 0)) if len(rows) == 1 else None


#: When each vLLM release reached PyPI (its source and fetch day are in the file).
RELEASES = Path(__file__).with_name("vllm_releases.json")


def release_cap(day: str) -> str | None:
    """The newest release a start-up logged on `day` can have run, None when the table ends before then.

    A nightly of that day is main as of then; the first minor release published after it may have been branched
    earlier, so main's code of the day ships at the latest in the second. Patch releases come off release branches
    and do not count.
    """
    minors = [(when, v) for when, v in _minor_releases() if when > day]
    return minors[1][1] if len(minors) > 1 else None


@cache
def _minor_releases() -> tuple[tuple[str, str], ...]:
    """(day, version) of each x.y.0 release, by day: the file is read once per bench run, not once per case."""
    published: dict[str, str] = json.loads(RELEASES.read_text())["releases"]
    return tuple(sorted((when, v) for v, when in published.items() if re.fullmatch(r"\d+\.\d+\.0", v)))


def _version(case: dict[str, Any]) -> str:
    """The release (from the case, else from its log lines) and the engine the case ran (VLLM_USE_V1).

    Unknown, it is capped by the day the case's source was written (`release_cap`): a log cannot come from a release
    not yet cut, and the product then sizes with the most conservative of the rows up to the cap only.
    """
    engine = str(case.get("engine") or "").lower()
    release = case.get("vllm_version") or release_from_log([str(q) for q in case.get("log_quote") or []])
    if release:
        return f"{release}-{engine}" if engine in ("v0", "v1") else str(release)
    day = str((case.get("source") or {}).get("date") or "")
    cap = release_cap(day) if re.fullmatch(r"\d{4}-\d{2}-\d{2}", day) else None
    return (f"unknown-{engine}" if engine in ("v0", "v1") else "unknown") + (f"<={cap}" if cap else "")


def _prefix_caching(case: dict[str, Any]) -> bool | None:
    """The case's --enable-prefix-caching / --no-enable-prefix-caching, when its log shows it."""
    printed = case.get("other_printed") or {}
    for where in (printed, printed.get("non_default_args") or {}):
        if isinstance(where.get("enable_prefix_caching"), bool):
            return bool(where["enable_prefix_caching"])
    if "prefix caching on" in str(printed.get("mamba_cache_mode") or ""):
        return True
    return None


def case_params(case: dict[str, Any], config: dict[str, Any]) -> tuple[SizingParams, dict[str, Any]]:
    """Serving flags as the case passed them; GGUF file types are read from the served file's name."""
    quant = case.get("quantization")
    if quant == "gguf":
        match = _GGUF_TYPE.search(str(case.get("model") or ""))
        if not match:
            raise CaseSkipped("GGUF case without the .gguf file's type (Q8_0, Q4_K_M, ...) in its model name")
        text = resolve_text_config(config) if "text_config" in config else dict(config)
        config = {**config, **({} if "text_config" in config else text),
                  "quantization_config": {"quant_method": "gguf", "ggml_type": match.group(1).upper()}}
    spec = (case.get("other_printed") or {}).get("speculative_config")

    def given(key: str, default: Any) -> Any:  # only a missing field takes vLLM's default, not a 0
        value = case.get(key)
        return default if value is None else value

    params = SizingParams(
        tensor_parallel_size=given("tensor_parallel_size", 1),
        pipeline_parallel_size=given("pipeline_parallel_size", 1),
        max_model_len=case.get("max_model_len"),
        gpu_memory_utilization=given("gpu_memory_utilization", 0.9),
        max_num_seqs=case.get("max_num_seqs"),
        max_num_batched_tokens=case.get("max_num_batched_tokens"),
        dtype=str(case.get("dtype") or "auto"),
        quantization=quant,
        kv_cache_dtype=str(case.get("kv_cache_dtype") or "auto"),
        enforce_eager=bool(case.get("enforce_eager")),
        block_size=case.get("block_size") if not _hybrid_block(case) else None,
        speculative_config=spec if isinstance(spec, dict) else None,
        enable_expert_parallel=_printed_flag(case, "enable_expert_parallel"),
        decode_context_parallel_size=_printed_int(case, "decode_context_parallel_size") or 1,
        vllm_version=_version(case),
    )
    return params, config


def _printed_flag(case: dict[str, Any], key: str) -> bool:
    """A boolean serving flag the case gives as a field or among what its log printed (`--enable-expert-parallel`)."""
    printed = case.get("other_printed") or {}
    return any(isinstance(where.get(key), bool) and where[key] for where in (case, printed))


def _printed_int(case: dict[str, Any], key: str) -> int | None:
    """An integer serving flag the case gives as a field or among what its log printed (`--decode-context-parallel-
    size`)."""
    printed = case.get("other_printed") or {}
    value = next((where[key] for where in (case, printed) if isinstance(where.get(key), int)), None)
    return value if value is None or value >= 1 else None


def _hybrid_block(case: dict[str, Any]) -> bool:
    """A block size the case records as vLLM's own choice for a hybrid model is not a user input."""
    return any("block_size" in str(x) and "not a user flag" in str(x) for x in case.get("inferred_fields") or [])


def case_inputs(case: dict[str, Any], folder: Path, lock: dict[str, dict[str, Any]]) -> CaseInputs:
    gpu = case_gpu(case)  # first: a GPU the product refuses needs no model facts to be refused
    config, source = case_config(case, folder, lock)
    try:
        params, config = case_params(case, config)
    except SizingError as exc:
        raise CaseSkipped(str(exc)) from exc
    co = bool((case.get("other_printed") or {}).get("co_resident"))
    return CaseInputs(config, source, gpu, params, co, _prefix_caching(case))


def family(case: dict[str, Any]) -> str:
    """Model family for leave-one-family-out: the first word of the model name (llama, qwen, gemma…)."""
    name = str(case.get("model") or "").split("/")[-1].lower()
    name = re.sub(r"^meta-(?=llama)", "", name)  # Meta-Llama-3.1 is the llama family
    match = re.match(r"[a-z]+", name)
    return match.group(0) if match else name or "?"
