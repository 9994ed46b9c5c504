"""vLLM's own command-line checks as the oracle for every flag the program renders (tests/vllm/oracle.py).

Which command lines: every model of ``Pulumi.dev.yaml`` and ``Pulumi.prod.yaml``, and a matrix of
catalog options — per profile (CPU, single GPU, tensor-parallel, multi-node), each value of the
enumerated fields one at a time — through every pod that would run it: the vllm backend's container
(``vllm serve ...``, or the LeaderWorkerSet's ``sh -c``) and KServe's (its preset's bash script, our
pipeline-parallel preset for multi-node, with our args). The shells really run, with a stand-in
``vllm`` on PATH that records its argv, so quoting and ``$@``/``${LWS_*}`` expansion are the shell's.

What must hold (GPU flags are judged without a GPU):
- every committed stack's command lines pass vLLM's checks;
- a matrix value the program accepts, vLLM accepts; a value vLLM refuses, the program refuses at
  validation, naming the same catalog field;
- the program's lists of allowed values are subsets of what vLLM allows, and its tool-call parser
  list is exactly vLLM's (an upgrade that adds or drops one fails here, naming the difference).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic import ValidationError

from components.argv_layers import encode
from components.pod_meta import MODEL_MOUNT
from components.prerequisites import PIPELINE_PARALLEL_PRESET_FILE
from components.vllm_args import kserve_args, kserve_path, lws_command, serve_command
from tests.vllm.argv import run_recorded, vllm_version
from tests.vllm.pod import kserve_command, kserve_preset, llmisvc_doc
from tkf_infra.config import flags
from tkf_infra.config.base import problems_from
from tkf_infra.config.catalog import ModelEntry
from tkf_infra.config.reader import read_stack_file
from tkf_infra.config.validate import validate_catalog
from tkf_infra.names import workload
from tkf_infra.sizing.quant import QuantScheme, quant_problems

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "llm-serving"
LWS_ENV = {"LWS_LEADER_ADDRESS": "leader.lws.invalid", "LWS_GROUP_SIZE": "2"}

PROFILES: dict[str, dict[str, Any]] = {
    "cpu": {"gpusPerNode": 0},
    "single-gpu": {"gpusPerNode": 1},
    "tensor-parallel": {"gpusPerNode": 8, "tensorParallelSize": 8},
    "multi-node": {"nodeCount": 2, "gpusPerNode": 8, "tensorParallelSize": 8, "pipelineParallelSize": 2},
}
#: Tool-call parser names people write that vLLM does not have (case, dashes, model names, old names).
WRONG_PARSERS = ("Hermes", "hermes2", "llama3", "llama-3-json", "qwen", "qwen2_5", "deepseek", "gpt-oss")
#: Quantization names vLLM 0.32 refuses as `--quantization` values (the first two the program knows and
#: refuses for this release, the others it never accepts).
WRONG_QUANTIZATION = ("bitsandbytes", "gguf", "bnb", "int4", "fp16")
#: Where the program knowingly accepts what vLLM's flag checks refuse, and why.
KNOWN_DISAGREEMENTS = {
    ("quantization", "auto-round"): "vLLM 0.32 takes it only for an AutoRound-format checkpoint, whose config "
                                    "INC's override rewrites to `inc` (quantization/inc/inc.py); the oracle sees no "
                                    "checkpoint",
}


def _enum(field: str) -> list[Any]:
    """The values the program's field allows (its Literal, None excluded)."""
    annotation = flags.ServingSpec.model_fields[field].annotation
    values = [a for a in get_args(annotation) if a is not type(None)]
    return [v for a in values for v in (get_args(a) or [a])]


def _base(profile: str) -> dict[str, Any]:
    return {"name": "m", "repo": "org/model", "revision": "0" * 40, "servedName": "org/model-served",
            "maxModelLen": 4096, **PROFILES[profile]}


def matrix(allowed: dict[str, list[str]]) -> Iterator[tuple[str, str, Any, dict[str, Any]]]:
    """(profile, catalog key, value, raw entry): one field varied at a time on each profile's base."""
    for profile in PROFILES:
        yield profile, "", None, _base(profile)
        for key, field in (("quantization", "quantization"), ("kvCacheDtype", "kv_cache_dtype"),
                           ("dtype", "dtype"), ("blockSize", "block_size")):
            for value in _enum(field):
                yield profile, key, value, {**_base(profile), key: value}
        for value in WRONG_QUANTIZATION:
            yield profile, "quantization", value, {**_base(profile), "quantization": value}
        for value in [*allowed["toolCallParser"], *WRONG_PARSERS]:
            yield profile, "toolCallParser", value, {**_base(profile), "enableAutoToolChoice": True,
                                                     "toolCallParser": value}
        for mode in ("chat", "embedding", "rerank"):
            yield profile, "mode", mode, {**_base(profile), "mode": mode}


def release_problems(quantization: str | None, version: tuple[int, int, int]) -> list[str]:
    """The fit check's release rule for ``quantization`` at the oracle's vLLM release. Only the name
    matters to it: the scheme's bytes need a checkpoint and the capability rule a GPU (cc None)."""
    if quantization is None:
        return []
    return quant_problems(QuantScheme(quantization, 2.0, 2.0, 2.0), quantization, version, None, "")


def oracle_version() -> tuple[int, int, int]:
    major, minor, patch = (int(p) for p in vllm_version().split("."))
    return major, minor, patch


def _llmisvc(entry: ModelEntry) -> dict[str, Any]:
    args = encode(kserve_args(entry), kserve_path(entry))  # as components/pod.py writes them
    return llmisvc_doc(entry, {"name": "main", "args": args}, NAMESPACE)


def command_lines(entry: ModelEntry, bin_dir: Path) -> dict[str, list[str]]:
    """Every ``vllm serve`` argv the pods of this entry run, per backend and role, as the shell expands it."""
    out: dict[str, list[str]] = {}
    roles = [("leader", "0"), ("worker", "1")] if entry.is_multi_node else [("", "0")]
    manifests = {("LLMInferenceService", workload(entry.name)): _llmisvc(entry)}
    preset = kserve_preset(PIPELINE_PARALLEL_PRESET_FILE) if entry.is_multi_node else kserve_preset()
    for role, index in roles:
        env = {**LWS_ENV, "LWS_WORKER_INDEX": index} if role else {}
        if role:
            out[f"vllm-{role}"] = run_recorded(lws_command(entry, MODEL_MOUNT, leader=role == "leader"), env, bin_dir)
        else:
            out["vllm"] = serve_command(entry, MODEL_MOUNT)
        kserve = kserve_command(manifests, workload(entry.name), preset).argv
        out[f"kserve{'-' + role if role else ''}"] = run_recorded(kserve, env, bin_dir)
    return out


@pytest.fixture(scope="module")
def allowed(oracle: Any) -> dict[str, list[str]]:
    sets: dict[str, list[str]] = oracle({})["allowed"]
    return sets


def test_every_committed_stack_passes_vllms_checks(oracle: Any, fake_bin: Path) -> None:
    cases: dict[str, list[str]] = {}
    for stack in ("dev", "prod"):
        catalog = validate_catalog(read_stack_file(ROOT / f"Pulumi.{stack}.yaml"))
        assert not catalog.rejected, catalog.rejected
        for entry in catalog.models:
            for pod, argv in command_lines(entry, fake_bin).items():
                cases[f"{stack}/{entry.name}/{pod}"] = argv
    results = oracle(cases)["results"]
    refused = {case: r for case, r in results.items() if not r["ok"]}
    assert not refused, json.dumps(refused, indent=1)
    assert len(results) >= 2 * 6  # dev's two models + prod's four, on both backends


def test_program_and_vllm_agree_on_every_catalog_value(oracle: Any, fake_bin: Path,
                                                       allowed: dict[str, list[str]]) -> None:
    version = oracle_version()
    cases: dict[str, list[str]] = {}
    program: dict[str, tuple[str, Any, str, set[str]]] = {}  # id -> (key, value, profile, fields refused)
    for n, (profile, key, value, raw) in enumerate(matrix(allowed)):
        case = f"{n}:{profile}:{key}={value}"
        try:
            entry = ModelEntry.model_validate(raw)
        except ValidationError as err:
            program[case] = (key, value, profile, {p.field.split(".")[0] for p in problems_from(err, case)})
            continue
        if release_problems(entry.quantization, version):
            program[case] = (key, value, profile, {"quantization"})
            continue
        program[case] = (key, value, profile, set())
        for pod, argv in command_lines(entry, fake_bin).items():
            cases[f"{case}/{pod}"] = argv
    results = oracle(cases)["results"]
    disagreements, known_seen = [], set()
    for case, (key, value, profile, refused_fields) in program.items():
        if refused_fields:
            assert refused_fields == {key}, f"{case}: the program refused {refused_fields}, not {key!r}"
            continue
        for pod_case, r in results.items():
            if not pod_case.startswith(case + "/") or r["ok"]:
                continue
            if (key, value) in KNOWN_DISAGREEMENTS:
                known_seen.add((key, value))
            else:
                disagreements.append(f"{key}={value!r} ({profile}, {pod_case.rsplit('/', 1)[1]}): the program "
                                     f"accepts it, vLLM refuses it at {r['stage']}: {r['error'][:200]}")
    assert not disagreements, "\n".join(disagreements)
    assert known_seen == set(KNOWN_DISAGREEMENTS), "a known disagreement is gone: drop it from KNOWN_DISAGREEMENTS"
    # Every value vLLM refuses was refused by the program, naming the field (checked above); and the
    # wrong names of the matrix are among them.
    refused = {(k, v) for k, v, _, fields in program.values() if fields}
    assert {("toolCallParser", v) for v in WRONG_PARSERS} <= refused
    assert {("quantization", v) for v in WRONG_QUANTIZATION} <= refused


def test_the_programs_value_lists_match_vllms(allowed: dict[str, list[str]]) -> None:
    assert sorted(flags.TOOL_CALL_PARSERS) == allowed["toolCallParser"], (
        "vLLM's tool-call parsers changed: update tkf_infra.config.flags.TOOL_CALL_PARSERS")
    unexplained = [q for q in _enum("quantization") if q not in allowed["quantization"]
                   and not release_problems(q, oracle_version()) and ("quantization", q) not in KNOWN_DISAGREEMENTS]
    assert not unexplained, f"quantization values vLLM refuses that the program lets through: {unexplained}"
    assert set(_enum("kv_cache_dtype")) <= set(allowed["kvCacheDtype"])
    assert set(_enum("dtype")) <= set(allowed["dtype"])
