"""A catalog string reaches vLLM byte for byte on every path, and never runs.

The layers run for real where they can: bash runs KServe v0.20.0's single-node preset script (its
``eval "exec vllm serve … $@"``), our pipeline-parallel preset and the LeaderWorkerSet's ``sh -c``,
with a stand-in ``vllm`` that records its argv. KServe's Go template and the kubelet's ``$(VAR)``
expansion are applied by ``tests/vllm/pod.py`` as written upstream; the API-server tier checks the
same values through KServe's own controller (tests/controllers/).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from components import argv_layers as al
from components import pod
from components import vllm_args as va
from components.prerequisites import PIPELINE_PARALLEL_PRESET_FILE
from tests.mocks import CPU, MULTI_NODE, SINGLE_GPU, stack_doc
from tests.vllm.argv import fake_vllm, run_recorded, vllm_version
from tests.vllm.pod import kserve_command, kserve_preset, kubelet_expand, llmisvc_doc
from tkf_infra.config import ModelEntry, Serving, validate_catalog
from tkf_infra.names import workload

LWS_ENV = {"LWS_LEADER_ADDRESS": "leader.lws.invalid", "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "0"}

#: What a copy-pasted or hostile catalog holds in a flag value; {marker} is a file that must never appear.
HOSTILE = (
    '{"temperature": 0.5, "top_p": 0.9}', "two words", "it's", '"double"', "$(touch {marker})", "`touch {marker}`",
    "x; touch {marker}", "a && touch {marker}", "line1\nline2", "tab\there", "$HOME", "${HOME}", "$(HOME)", "$$",
    "$$(HOME)", "$$$", "cost$", "$", "$)(", "{{ .ObjectMeta.Name }}", "{{`{{`}}", "{{- .Spec -}}", "}}{{", "\\",
    "\\'", "*", "?", "~", "~root",
    "!", "#comment", "ünïcødé ✓", "'", "", "a=b", "<&>", "%s%d",
)


def entry(raw: dict[str, Any], value: str) -> ModelEntry:
    cat = validate_catalog(stack_doc({**raw, "extraArgs": ["--override-generation-config", value]}))
    assert not cat.rejected, cat.rejected
    return cat.models[0]


def _inputs(e: ModelEntry, *, two_keys: bool = False) -> pod.PodInputs:
    key = pod.ApiKeyRef("keys", "apiKey", "apiKeyNext" if two_keys else None, "d")
    return pod.PodInputs(entry=e, serving=Serving(), weight_bytes=1, api_key=key)


def _env(c: Any) -> list[dict[str, Any]]:
    """The container's env as the API server stores it (values, or Secret references)."""
    out: list[dict[str, Any]] = []
    for v in c.env:
        ref = v.value_from.secret_key_ref if v.value_from else None
        out.append({"name": v.name, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}} if ref
                   else {"name": v.name, "value": v.value})
    return out


def kserve_argv(e: ModelEntry, bin_dir: Path, env: dict[str, str], *, two_keys: bool = False) -> list[str]:
    """vLLM's argv in the pod KServe writes for ``e``: our container args through KServe's template,
    the kubelet and the preset's bash."""
    main: Any = pod.container(_inputs(e, two_keys=two_keys), kserve=True)
    secret = {"stringData": {"apiKey": env.get(va.API_KEY_ENV, "k"), "apiKeyNext": env.get(va.API_KEY_EXTRA_ENV, "")}}
    ours = {"name": "main", "args": list(main.args), "env": _env(main)}
    manifests = {("LLMInferenceService", workload(e.name)): llmisvc_doc(e, ours, "llm-serving"),
                 ("Secret", "keys"): secret}
    preset = kserve_preset(PIPELINE_PARALLEL_PRESET_FILE) if e.is_multi_node else kserve_preset()
    cmd = kserve_command(manifests, workload(e.name), preset)  # the kubelet's expansion included
    return run_recorded(cmd.argv, {**LWS_ENV, **cmd.env}, bin_dir)


def vllm_backend_argv(e: ModelEntry, bin_dir: Path, env: dict[str, str], *, two_keys: bool = False) -> list[str]:
    main: Any = pod.container(_inputs(e, two_keys=two_keys), kserve=False)
    command: list[str] = main.command
    return run_recorded([kubelet_expand(a, env) for a in command], {**LWS_ENV, **env}, bin_dir)


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fake_vllm(tmp_path_factory.mktemp("bin"), vllm_version())


PATHS = {"kserve": kserve_argv, "vllm": vllm_backend_argv}
PROFILES = {"single-gpu": SINGLE_GPU, "multi-node": MULTI_NODE, "cpu": CPU}


@pytest.mark.parametrize("backend", PATHS)
@pytest.mark.parametrize("profile", PROFILES)
def test_every_hostile_value_arrives_as_written_and_runs_nothing(backend: str, profile: str, bin_dir: Path,
                                                                 tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    for template in HOSTILE:
        value = template.format(marker=marker) if "{marker}" in template else template
        e = entry(PROFILES[profile], value)
        argv = PATHS[backend](e, bin_dir, {"HOME": "/home"})
        i = argv.index("--override-generation-config")
        assert argv[i + 1] == value, f"{backend}/{profile}: {value!r} reached vLLM as {argv[i + 1]!r}"
        assert argv[i + 2:i + 3] in ([], ["--nnodes"]), f"{value!r} split: {argv[i:]}"
        assert not marker.exists(), f"{backend}/{profile}: {value!r} ran a command in the pod"


def test_a_json_flag_of_the_table_arrives_intact_on_kserve(bin_dir: Path) -> None:
    """The issue's case: KServe's eval split `--speculative-config` JSON at its spaces."""
    e = validate_catalog(stack_doc({**SINGLE_GPU, "speculativeConfig": {"method": "ngram", "num_speculative_tokens":
                                                                           3}})).models[0]
    argv = kserve_argv(e, bin_dir, {})
    assert argv[argv.index("--speculative-config") + 1] == va.kserve_args(e)[va.kserve_args(e).index(
        "--speculative-config") + 1]


@pytest.mark.parametrize("profile", ["single-gpu", "multi-node"])
@pytest.mark.parametrize("backend", PATHS)
def test_a_rotations_two_keys_arrive_as_two_words_whatever_they_hold(backend: str, profile: str, bin_dir: Path,
                                                                     tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    keys = {va.API_KEY_ENV: f"k1 $(touch {marker})", va.API_KEY_EXTRA_ENV: "k2'\"`;"}
    e = entry(PROFILES[profile], "{}")
    argv = PATHS[backend](e, bin_dir, keys, two_keys=True)
    i = argv.index("--api-key")
    assert argv[i + 1:i + 3] == [keys[va.API_KEY_ENV], keys[va.API_KEY_EXTRA_ENV]]
    assert not marker.exists()


def test_the_pod_spec_holds_references_not_keys() -> None:
    for path in al.ArgvPath:
        words = va.two_key_args(path)
        assert all(va.API_KEY_ENV in w or va.API_KEY_EXTRA_ENV in w for w in words[1:]), words


def test_plain_words_stay_readable_in_the_pod_spec() -> None:
    """Quoting only what needs it: an operator reading the LLMInferenceService sees the flags as typed."""
    e = validate_catalog(stack_doc(SINGLE_GPU)).models[0]
    main: Any = pod.container(_inputs(e), kserve=True)
    args: list[str] = main.args
    assert "--max-model-len" in args and str(e.max_model_len) in args
