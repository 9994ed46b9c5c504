"""`python -m tkf_infra calibrate`: every running deployment becomes a calibration case for the sizing engine.

The sizing engine is fitted and scored against real vLLM start-ups (`bench/sizing_accuracy.py --cases`,
format described in the shared calibration README: one JSON list of cases, `config_file` paths relative
to the case file's folder). A deployed model is such a start-up: its vLLM reports the KV cache it
allocated in `vllm:cache_config_info`. Writing those observations in the same format lets each real
deployment add ground truth on its own GPUs and vLLM version.

Honesty rules of the format, kept here: a figure vLLM did not report stays null (weights, activation
peak, CUDA-graph and non-torch memory are in its log, not its metrics); a value taken from the stack
(the flag tkf-infra passed, the pool's GPU, the image tag) is filled and named in `inferred_fields`;
`kv_cache_tokens` computed as blocks × block size (releases without `kv_cache_size_tokens`) says so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tkf_infra import vllm_metrics as vm
from tkf_infra.config import Catalog
from tkf_infra.config.flags import rows
from tkf_infra.exit_codes import ExitCode
from tkf_infra.hub.lock import Lock
from tkf_infra.live.kv_cache import KvObservation, observations_for, read_kv_observations
from tkf_infra.live.model_status import KvCheck, predicted_kv_tokens
from tkf_infra.live.prometheus import PrometheusClient, PrometheusQueryError
from tkf_infra.sizing.gpus import lookup_gpu

# The case format's keys in the order of the shared case files (cases.json, cases-diverse.json).
CASE_KEYS = (
    "case_id", "status", "fail_kind", "model", "model_revision", "dtype", "quantization", "kv_cache_dtype",
    "gpu", "gpu_memory_nominal", "gpu_total_memory_gib_printed", "num_gpus", "tensor_parallel_size",
    "pipeline_parallel_size", "gpu_memory_utilization", "max_model_len", "max_num_seqs", "max_num_batched_tokens",
    "enforce_eager", "block_size", "vllm_version", "engine", "weights_gib", "weights_unit_as_printed",
    "available_kv_cache_gib", "kv_cache_tokens", "gpu_blocks", "max_concurrency", "max_concurrency_for_tokens",
    "activation_peak_gib", "non_torch_gib", "cuda_graph_gib", "peak_torch_memory_gib_v0", "error_max_tokens_in_kv",
    "error_kv_needed_gib", "error_kv_available_gib", "error_estimated_max_model_len", "fail_message",
    "other_printed", "inferred_fields", "notes", "derived", "model_facts", "source", "log_quote",
)

# Inline model facts the shared cases carry beside config_file (bench/sizing_accuracy.py reads either).
_FACT_KEYS = ("num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_size",
              "max_position_embeddings", "vocab_size", "torch_dtype", "sliding_window")
_NOT_IN_METRICS = ("weights_gib", "available_kv_cache_gib", "activation_peak_gib", "non_torch_gib", "cuda_graph_gib",
                   "gpu_total_memory_gib_printed")
CONFIGS_DIR = "configs"


@dataclass(frozen=True)
class ServedInputs:
    """What tkf-infra told one model's vLLM: its pool's GPU, the sized release, and its flags."""

    gpu: str | None
    vllm_version: str
    flags: Mapping[str, Any]
    """Case key → the value tkf-infra passed, for every serving-flag table row that is a case field and
    applies to the model's profile (None: the flag is not passed and vLLM's default holds)."""


def served_inputs(catalog: Catalog) -> dict[str, ServedInputs]:
    """Per catalog name, the serving inputs a case records (the stack is the only place they live)."""
    case_rows = [r for r in rows() if r.field in CASE_KEYS]
    out: dict[str, ServedInputs] = {}
    for m in catalog.models:
        pool = catalog.pool(m.node_pool)
        out[m.name] = ServedInputs(
            gpu="CPU" if m.is_cpu else (pool.gpu_product if pool else None),
            vllm_version=catalog.settings.serving.version,
            flags={r.field: getattr(m, r.field) for r in case_rows if r.applies_to(m.is_cpu)},
        )
    return out


def _config_path(repo: str, revision: str) -> str:
    return f"{CONFIGS_DIR}/{repo.replace('/', '__')}@{revision[:12]}.json"


def _model_facts(repo: str, revision: str, lock: Lock, configs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    facts = lock.get(repo, revision)
    key = f"{repo}@{revision}"
    if facts is None or not facts.config:
        why = "is not in models.lock.json" if facts is None else "has no config in models.lock.json"
        return {"config_file": None, "facts_for_model": repo, "facts_match": None,
                "facts_source": f"{key} {why}; run `python -m tkf_infra lock {key}`"}
    path = _config_path(repo, revision)
    configs[path] = facts.config
    text = facts.text_config()
    inline = {k: text.get(k) for k in _FACT_KEYS}
    return {**inline, "config_file": path, "facts_for_model": repo, "facts_match": "direct (config_file)",
            "facts_source": f"models.lock.json entry {key}: the facts tkf-infra sized this deployment with"}


def build_case(endpoint: Mapping[str, Any], group: Sequence[KvObservation], inputs: ServedInputs | None,
               lock: Lock, configs: dict[str, dict[str, Any]], *, stack: str, prometheus_url: str,
               observed_at: str) -> dict[str, Any]:
    """One case from the engines of one model that reported the same KV cache."""
    first = group[0]
    name = str(endpoint.get("name", ""))
    repo, _, revision = str(endpoint.get("model", "")).partition("@")
    inferred: list[str] = []
    notes: list[str] = [
        f"Observed on running deployment '{name}' of stack '{stack}' through Prometheus "
        f"({vm.CACHE_CONFIG_INFO}), not from a start-up log: " + ", ".join(_NOT_IN_METRICS)
        + " are only in vLLM's log and stay null."
    ]

    def configured(field: str, value: Any, why: str = "the flag tkf-infra passed, from the stack's catalog") -> Any:
        if value is not None:
            inferred.append(f"{field} {value} ({why}; not read back from vLLM)")
        return value

    gpu = inputs.gpu if inputs else None
    spec = None
    if gpu and gpu != "CPU":
        try:
            spec = lookup_gpu(gpu)
        except KeyError:
            notes.append(f"GPU {gpu!r} is not in tkf-infra's GPU table; gpu_memory_nominal left null.")
    check = KvCheck(predicted_kv_tokens(endpoint), (first,))
    if first.tokens_source == vm.SOURCE_BLOCKS:
        inferred.append(f"kv_cache_tokens = {vm.NUM_GPU_BLOCKS} × {vm.BLOCK_SIZE} (this vLLM exports no "
                        f"{vm.KV_CACHE_SIZE_TOKENS}; exact for one KV-cache group, an overstatement for hybrid "
                        "sliding-window/Mamba models)")
    if len(group) > 1:
        notes.append(f"{len(group)} engines reported identical figures: {', '.join(o.where for o in group)}.")
    # What vLLM itself reports wins over the flag tkf-infra passed (they agree unless something overrode it).
    observed = {"gpu_memory_utilization": first.gpu_memory_utilization, "block_size": first.block_size,
                "kv_cache_dtype": first.cache_dtype}
    flags = dict(inputs.flags) if inputs else {"max_model_len": endpoint.get("maxContext")}
    max_model_len = flags.get("max_model_len")
    case: dict[str, Any] = dict.fromkeys(CASE_KEYS)
    for key in dict.fromkeys((*flags, *observed)):
        case[key] = observed[key] if observed.get(key) is not None else configured(key, flags.get(key))
    case.update({
        "case_id": f"live-{stack}-{name}-{first.where.replace(' ', '-')}",
        "status": "ok",
        "model": repo or None,
        "model_revision": revision or None,
        "gpu": configured("gpu", gpu, "the node pool's gpuProduct in the stack, not read from the device"),
        "gpu_memory_nominal": configured("gpu_memory_nominal", f"{spec.nominal_gib:g}GB" if spec else None,
                                         "tkf-infra's GPU table for that product"),
        "num_gpus": configured("num_gpus", endpoint.get("gpus"), "the stack outputs' gpus per replica"),
        "vllm_version": configured("vllm_version", inputs.vllm_version if inputs else None,
                                   "the release the stack sizes for: serving.vllmVersion or the vllmImage tag"),
        "engine": "v1" if first.engine is not None else None,
        "kv_cache_tokens": first.tokens,
        "gpu_blocks": first.num_gpu_blocks,
        "max_concurrency": first.max_concurrency,
        "max_concurrency_for_tokens": max_model_len if first.max_concurrency is not None else None,
        "other_printed": {"cache_config_info": first.exposition_labels()},
        "inferred_fields": inferred,
        "derived": {
            "kv_cache_tokens_source": first.tokens_source,
            "predicted_kv_cache_tokens": check.predicted,
            "kv_cache_tokens_deviation_pct": round((check.deviation(first) or 0.0) * 100, 2)
            if check.deviation(first) is not None else None,
            "note": "predicted_kv_cache_tokens is the fit check's estimate in the stack outputs at observation time",
        },
        "model_facts": _model_facts(repo, revision, lock, configs) if repo and revision else None,
        "source": {"type": "prometheus", "stack": stack, "prometheus_url": prometheus_url,
                   "query": vm.CACHE_CONFIG_QUERY, "instances": [o.where for o in group],
                   "observed_at": observed_at, "tool": "python -m tkf_infra calibrate"},
        "log_quote": [first.exposition()],
    })
    if first.engine is None:
        notes.append("engine left null: this vLLM's cache_config_info has no `engine` label (V0, or V1 before 0.9).")
    case["notes"] = " ".join(notes)
    return case


@dataclass
class CalibrationResult:
    cases: list[dict[str, Any]]
    configs: dict[str, dict[str, Any]]
    warnings: list[str]
    reachable: bool = True


def collect_cases(endpoints: Sequence[Mapping[str, Any]], prometheus_url: str, *, stack: str,
                  inputs: Mapping[str, ServedInputs], lock: Lock, timeout_s: float = 5) -> CalibrationResult:
    """Observe every endpoint's engines; engines with identical figures make one case. Never raises."""
    result = CalibrationResult(cases=[], configs={}, warnings=[])
    try:
        with PrometheusClient(prometheus_url, timeout_s) as client:
            observations = read_kv_observations(client)
    except PrometheusQueryError as exc:
        result.reachable = False
        result.warnings.append(f"Prometheus at {prometheus_url} is unavailable: {exc}; nothing was observed.")
        return result
    observed_at = datetime.now(UTC).replace(microsecond=0).isoformat()
    for ep in endpoints:
        name = str(ep.get("name", ""))
        served = str(ep.get("servedName") or name)
        found = observations_for(observations, served, str(ep.get("namespace", "")))
        measured = [o for o in found if o.tokens is not None]
        if not measured:
            why = (f'its {vm.CACHE_CONFIG_INFO} has {vm.NUM_GPU_BLOCKS}="None" (vLLM 0.8-era V1 front ends '
                   "export the label before the engine reports its blocks)" if found
                   else f'Prometheus has no {vm.CACHE_CONFIG_INFO} joined to model_name="{served}" (not running, '
                   "or not scraped)")
            result.warnings.append(f"model '{name}': no case written — {why}.")
            continue
        groups: dict[tuple[Any, ...], list[KvObservation]] = {}
        for o in measured:
            groups.setdefault(tuple(sorted(o.exposition_labels().items() - {(vm.ENGINE, o.engine or "")})),
                              []).append(o)
        for group in groups.values():
            result.cases.append(build_case(ep, group, inputs.get(name), lock, result.configs, stack=stack,
                                           prometheus_url=prometheus_url, observed_at=observed_at))
    return result


def write_cases(path: Path, result: CalibrationResult, *, append: bool) -> int:
    """Write the case list (merged by case_id into an existing file with `append`) and its configs."""
    cases = result.cases
    if append and path.exists():
        new_ids = {c["case_id"] for c in cases}
        kept = [c for c in json.loads(path.read_text()) if c.get("case_id") not in new_ids]
        cases = kept + cases
    for rel, config in result.configs.items():
        target = path.parent / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    path.write_text(json.dumps(cases, indent=2, ensure_ascii=False) + "\n")
    return len(cases)


def calibrate_command(endpoints: Sequence[Mapping[str, Any]], prometheus_url: str, output: Path, *, stack: str,
                      catalog: Catalog | None, lock: Lock, append: bool = False,
                      timeout_s: float = 5) -> tuple[str, ExitCode]:
    """Message lines for stderr and the exit code: OK when at least one case was written."""
    if not output.parent.is_dir():
        return f"error: the folder of {output} does not exist; create it or pick another -o path", ExitCode.USAGE
    inputs = served_inputs(catalog) if catalog else {}
    result = collect_cases(endpoints, prometheus_url, stack=stack, inputs=inputs, lock=lock, timeout_s=timeout_s)
    lines = [f"warning: {w}" for w in result.warnings]
    if catalog is None:
        lines.append(f"warning: the catalog of stack {stack!r} could not be read; serving inputs are left null.")
    if not result.reachable:
        return "\n".join(lines), ExitCode.UNAVAILABLE
    if not result.cases:
        lines.append(f"no running model reported its KV cache; {output} was not written.")
        return "\n".join(lines), ExitCode.NO_DATA
    total = write_cases(output, result, append=append)
    lines.append(f"wrote {len(result.cases)} case(s) to {output} ({total} in the file); configs in "
                 f"{output.parent / CONFIGS_DIR}. Score them: python bench/sizing_accuracy.py --cases {output}")
    return "\n".join(lines), ExitCode.OK
