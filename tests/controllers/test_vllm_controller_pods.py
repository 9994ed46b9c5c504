"""Real vLLM started from the pod the controllers wrote, on both backends (issue #25, items 3 and 4).

One `up` per backend of the dev chat model on a real API server with the platform from its charts,
its catalog entry given n-gram speculative decoding and hostile ``extraArgs`` (a chat template holding
``$(touch …)``, backticks, ``;``, quotes and ``$(HOME)``, and a JSON-valued flag). Then:

- ``kserve``: KServe's manager merges its preset, writes the Deployment, and the replicaset controller
  makes the pod; ``vllm``: our Deployment, turned into a pod by the deployment and replicaset controllers;
- that Pod is read back from the server and its ``main`` container run as the kubelet execs it
  (tests/vllm/kubelet.py: env from the server's Secrets, ``$(VAR)`` expanded, KServe's preset through the
  host's real bash) with the real vLLM of the vLLM virtualenv and the tiny model;
- vLLM answers ``/v1/models`` with the catalog's served name (behind the key from the Secret), its own
  argv (``/proc/PID/cmdline``) holds every catalog string byte for byte, no string ran (the file the
  template would ``touch`` does not exist), and it drafts: n-gram speculative decoding runs on the CPU
  build (``vllm:spec_decode_num_drafts`` grows on a repetitive prompt). Checked to fail on the bug the
  issue found: with components/argv_layers.py's ``for_shell`` made the identity, the preset's ``eval``
  creates the file (and vLLM refuses the shell-split ``--speculative-config``);
- ``kserve`` also: tests/vllm/pod.py's emulation of KServe's merge, run over the LLMInferenceService and
  the preset as the server stores them, gives the same argv and env as the pod KServe wrote — the check
  that keeps the rest of the vLLM tier (which starts the emulated pod, without a server) honest; for every
  other profile test_reconcile.py's kserve test makes it on its own `up` (tests/controllers/emulation.py).

Markers: the API-server and engine tiers' (tests/controllers) and ``vllm``; about 5 min per backend on
2 shared cores (`up` with the platform, then a vLLM start).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.controllers.emulation import assert_emulation_is_kserves, emulated_command
from tests.controllers.test_reconcile import GENERATION, HOSTILE_TEMPLATE, flag_value, pods_of, reconciled_deploys, wait
from tests.controllers.webhooks import Webhooks
from tests.engine_fixtures import EngineStack
from tests.kube.apiserver import KubeAPIServer
from tests.kube.client import KubeClient
from tests.kube.platform.test_up_against_apiserver import CPU_MODELS
from tests.vllm.install import build_tiny_model, vllm_venv_path
from tests.vllm.kubelet import pod_process, process_argv, run_pod
from tests.vllm.metrics import parse_metrics, sample
from tkf_infra import names

pytestmark = [pytest.mark.apiserver, pytest.mark.engine]

#: The catalog's n-gram speculative decoding (vLLM's own keys; prompt_lookup_* left to vLLM's default, 5).
NGRAM = {"method": "ngram", "num_speculative_tokens": 3}
#: A prompt whose last five tokens occur earlier in it: the n-gram proposer has something to draft from.
REPETITIVE_PROMPT = "one two three four five six seven eight " * 6
TIMINGS: dict[str, float] = {}
#: What `deployed` hands a test: `deploy(backend, catalog)` -> the serving namespace.
Deploy = Callable[[str, list[dict[str, Any]]], str]


@pytest.fixture(scope="module")
def vllm_venv() -> Path:
    return vllm_venv_path()


@pytest.fixture(scope="module")
def tiny_model(vllm_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    workdir = tmp_path_factory.mktemp("tiny-model")
    return build_tiny_model(vllm_venv, workdir / "tiny-qwen2", workdir)


def chat_model(marker: Path) -> dict[str, Any]:
    """The dev chat model (tool calling on) with speculative decoding and strings that must not run."""
    hostile = ["--chat-template", HOSTILE_TEMPLATE.format(marker=marker), "--override-generation-config", GENERATION]
    return {**CPU_MODELS[0], "speculativeConfig": NGRAM, "extraArgs": hostile}


@pytest.fixture
def deployed(kube_apiserver: KubeAPIServer, kube: KubeClient, webhooks: Webhooks, lean_engine_env: dict[str, str],
             make_stack: Callable[..., EngineStack], tmp_path: Path) -> Iterator[Deploy]:
    """`up` of the catalog ``models`` on one backend (the platform from its charts, every chart's webhooks
    served), LWS's manager and (kserve) KServe's started as their CRDs appear, as test_reconcile.py does."""
    with reconciled_deploys(kube_apiserver, kube, webhooks, lean_engine_env, make_stack, tmp_path) as deploy:
        yield lambda backend, models: deploy(backend, models)[0]


def owners(kube: KubeClient, namespace: str, obj: dict[str, Any]) -> list[tuple[str, str]]:
    """(kind, name) up the controller owner references: Pod → ReplicaSet → Deployment → …"""
    chain = []
    while refs := [r for r in obj["metadata"].get("ownerReferences", []) if r.get("controller")]:
        kind, name, api = refs[0]["kind"], refs[0]["name"], refs[0]["apiVersion"]
        chain.append((kind, name))
        if (found := kube.get(api, kind, name, namespace)) is None:
            break
        obj = found
    return chain


@pytest.mark.vllm
@pytest.mark.parametrize("backend", ["kserve", "vllm"])
def test_vllm_starts_from_the_pod_the_controllers_wrote(
        backend: str, kube: KubeClient, deployed: Deploy, vllm_venv: Path,
        tiny_model: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    model = chat_model(marker)
    serving = deployed(backend, [model])
    workload = names.workload(model["name"])
    pods = wait(f"the pods of {workload}", pods_of(kube, serving, model["name"]))
    pod = pods[0]
    chain = owners(kube, serving, pod)
    writer = f"{workload}-kserve" if backend == "kserve" else workload
    assert [k for k, _ in chain][:2] == ["ReplicaSet", "Deployment"] and chain[1][1] == writer, chain
    if backend == "kserve":
        assert chain[2:] == [("LLMInferenceService", workload)], chain

    cmd = pod_process(kube, serving, pod["spec"])
    if backend == "kserve":
        assert_emulation_is_kserves(emulated_command(kube, serving, workload), cmd, workload)
    t = time.monotonic()
    try:
        server = run_pod(cmd, venv=vllm_venv, model_dir=tiny_model, workdir=tmp_path / "pod")
    finally:  # also when vLLM refused to start: a string that ran is the failure to report first
        assert not marker.exists(), "a catalog string ran as a command in the pod"
    TIMINGS[f"vllm {backend} ready"] = round(time.monotonic() - t, 1)
    try:
        argv = process_argv(server.process.pid)
        assert flag_value(argv, "--chat-template") == HOSTILE_TEMPLATE.format(marker=marker)
        assert flag_value(argv, "--override-generation-config") == GENERATION
        assert json.loads(flag_value(argv, "--speculative-config")) == NGRAM
        assert flag_value(argv, "--served-model-name") == model["servedName"]

        assert httpx.get(f"{server.url}/v1/models", timeout=10).status_code == 401  # the Secret's key guards it
        listed = httpx.get(f"{server.url}/v1/models", headers=server.headers(), timeout=10)
        assert listed.status_code == 200, listed.text
        ids = [m["id"] for m in listed.json()["data"]]
        assert ids[0] == model["servedName"], ids

        served = model["servedName"]
        before = _drafts(server.url, served)
        done = httpx.post(f"{server.url}/v1/completions", headers=server.headers(), timeout=300,
                          json={"model": served, "prompt": REPETITIVE_PROMPT, "max_tokens": 24,
                                "temperature": 0, "ignore_eos": True})
        assert done.status_code == 200, done.text
        assert _drafts(server.url, served) > before, "vLLM served without drafting: speculative decoding is off"
        assert not marker.exists(), "a catalog string ran as a command in the pod"
    finally:
        server.stop()
        print(f"timings ({backend}): {json.dumps(TIMINGS)}")  # for the notes (pytest -s)


def _drafts(url: str, served: str) -> float:
    """Drafts the speculative decoder made so far (0 before vLLM has exported the counter)."""
    metrics = parse_metrics(httpx.get(f"{url}/metrics", timeout=10).text)
    if "vllm:spec_decode_num_drafts_total" not in metrics:
        return 0.0
    return sample(metrics, "vllm:spec_decode_num_drafts_total", model_name=served)
