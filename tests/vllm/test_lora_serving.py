"""A LoRA adapter for real: made locally over the tiny Qwen2, served from the rendered pod, reached by name
through the LiteLLM proxy, and answering differently from its base.

The dev stack's tool-calling model gets a `lora` block with one adapter, on each backend. The adapter is made here
(tests/vllm/tiny_lora.py, over tests/vllm/tiny_model.py's shapes) and recorded in the project copy's
models.lock.json from its own adapter_config.json, as `lock --adapter` would; its pinned revision is
the SHA-1 of its files (it has no Hub commit). It sits where the download Job puts an adapter, under
the model's directory (`tkf_infra.names.adapter_dir`), so the pod's `--lora-modules` path is the
rendered one with the model's mount localized like the model itself.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.vllm.conftest import TOOL_MODEL, PodServers, RunningPod, Stacks
from tests.vllm.gateway import run_gateway
from tests.vllm.scrape import start_prometheus
from tests.vllm.stacks import PRICES, RenderedStack, priced_catalog, render_stack
from tkf_infra import names
from tkf_infra.exit_codes import ExitCode
from tkf_infra.sizing.adapter_facts import AdapterFacts

HERE = Path(__file__).parent
ADAPTER_REPO = "tests/tiny-qwen2-lora"
ADAPTER_SERVED = "qwen2.5-0.5b-sql"
ADAPTER_PRICE = {"inputPerToken": 5e-06, "outputPerToken": 7e-06}


@pytest.fixture(scope="module")
def adapter(vllm_venv: Path, tiny_model: Path, tier_dir: Path) -> AdapterFacts:
    """The adapter, built once, placed under the tiny model as the download Job places one."""
    base = next(m for m in priced_catalog() if m["name"] == TOOL_MODEL)
    build = tier_dir / "tiny-lora-build"
    subprocess.run([str(vllm_venv / "bin" / "python"), str(HERE / "tiny_lora.py"), str(build), base["repo"]],
                   check=True, capture_output=True, cwd=HERE,
                   env={"HOME": str(tier_dir / "build-home"), "TMPDIR": str(tier_dir), "PATH": "/usr/bin:/bin"})
    digest = hashlib.sha1()
    for f in sorted(build.iterdir()):
        digest.update(f.name.encode() + f.read_bytes())
    revision = digest.hexdigest()
    dest = tiny_model / names.adapter_dir(ADAPTER_REPO, revision)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(build), dest)
    config = json.loads((dest / "adapter_config.json").read_text())
    return AdapterFacts(repo=ADAPTER_REPO, revision=revision, config=config,
                        source="made locally by tests/vllm/tiny_lora.py; revision = SHA-1 of its files")


@pytest.fixture(scope="module", params=["vllm", "kserve"])
def lora_stack(request: pytest.FixtureRequest, stacks: Stacks, adapter: AdapterFacts) -> RenderedStack:
    """The dev stack with the tool model serving the adapter, per backend (the kserve one run as KServe's
    preset runs our args: tests/vllm/pod.py `kserve_command`)."""
    backend = str(request.param)
    models = priced_catalog()
    for m in models:
        if m["name"] == TOOL_MODEL:
            m["lora"] = {"maxAdapters": 1, "maxRank": 8, "adapters": [
                {"name": "sql", "repo": adapter.repo, "revision": adapter.revision, "servedName": ADAPTER_SERVED,
                 "cost": ADAPTER_PRICE}]}
    return render_stack(backend, stacks.workdir / f"stack-{backend}-lora", models=models, adapters=[adapter])


@pytest.fixture(scope="module")
def lora_pod(pods: PodServers, lora_stack: RenderedStack) -> Iterator[RunningPod]:
    pods.close()  # one vLLM at a time on this machine
    pod = pods.start(lora_stack, TOOL_MODEL, f"pod-{lora_stack.backend}-lora")
    try:
        yield pod
    finally:
        pod.stop()


def _complete(url: str, model: str, key: str) -> str:
    body = {"model": model, "prompt": "The quick brown fox", "max_tokens": 16, "temperature": 0}
    r = httpx.post(f"{url}/v1/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=120)
    assert r.status_code == 200, r.text
    return str(r.json()["choices"][0]["text"])


def test_the_stack_publishes_the_adapter_under_its_base_and_to_the_gateway(lora_stack: RenderedStack) -> None:
    ep = lora_stack.endpoint(TOOL_MODEL)
    assert ep["adapters"] == [{"name": "sql", "servedName": ADAPTER_SERVED,
                               "model": f"{ADAPTER_REPO}@{ep['adapters'][0]['model'].split('@')[1]}"}]
    assert ep["fit"]["loraGiB"] > 0


def test_the_adapter_answers_by_its_name_through_the_gateway_and_differs_from_the_base(
        lora_pod: RunningPod, tier_dir: Path) -> None:
    key = lora_pod.command.env["VLLM_API_KEY"]
    served = lora_pod.endpoint["servedName"]
    listed = httpx.get(f"{lora_pod.server.url}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=30)
    ids = {m["id"] for m in listed.json()["data"]}
    # KServe's preset also serves the base as publishers/<namespace>/models/<servedName>; nothing else is added.
    alias = {f"publishers/{lora_pod.endpoint['namespace']}/models/{served}"} if lora_pod.backend == "kserve" else set()
    assert ids == {served, ADAPTER_SERVED} | alias
    direct_base, direct_adapter = (_complete(lora_pod.server.url, m, key) for m in (served, ADAPTER_SERVED))
    assert direct_base != direct_adapter, "the adapter's weights change the output"
    with run_gateway(lora_pod, tier_dir / f"gateway-{lora_pod.backend}-lora") as gw:
        for model, want, price in ((served, direct_base, PRICES[TOOL_MODEL]), (ADAPTER_SERVED, direct_adapter,
                                                                               ADAPTER_PRICE)):
            r = gw.post("/v1/completions", {"model": model, "prompt": "The quick brown fox", "max_tokens": 16,
                                            "temperature": 0})
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["choices"][0]["text"] == want
            usage = body["usage"]
            cost = (usage["prompt_tokens"] * price["inputPerToken"]
                    + usage["completion_tokens"] * price["outputPerToken"])
            assert float(r.headers["x-litellm-response-cost"]) == pytest.approx(cost, rel=1e-9)


def _lora_report(pod: RunningPod, prom_url: str) -> dict[str, Any]:
    """`status --json` as a user runs it, this model's `lora` block."""
    proc = pod.stack.cli("status", "--stack", "dev", "--json", "--prometheus-url", prom_url, timeout=120)
    # The exit code is the KV-cache check's (REFUSED) by construction here: the tier serves a tiny stand-in
    # under the real repo's name, so vLLM reports ~24x the tokens the fit check predicts for the real
    # checkpoint (measured: 4,194,304 against 174,752); it also carries the stack's other models (no series:
    # only this pod is scraped). tests/prom/ tests those codes; this test reads the report.
    assert proc.returncode in (ExitCode.OK, ExitCode.NO_DATA, ExitCode.REFUSED), (proc.returncode, proc.stderr)
    (model,) = [m for m in json.loads(proc.stdout)["models"] if m["name"] == TOOL_MODEL]
    lora: dict[str, Any] = model["lora"]
    return lora


def test_status_reports_the_adapter_in_flight_then_idle(lora_pod: RunningPod, tier_dir: Path) -> None:
    """While requests for the adapter run, `status` shows it in flight on the one replica, from vLLM's own
    `vllm:lora_requests_info` as Prometheus scraped it; once they end, idle — and the base's `max_lora`."""
    key = lora_pod.command.env["VLLM_API_KEY"]
    prom = start_prometheus(lora_pod, {"namespace": lora_pod.endpoint["namespace"]},
                            tier_dir / f"prometheus-{lora_pod.backend}-lora")
    stop = threading.Event()

    def load() -> None:  # two clients back to back: the adapter always has a request in flight
        body = {"model": ADAPTER_SERVED, "prompt": "The quick brown fox", "max_tokens": 64, "ignore_eos": True}
        with httpx.Client(timeout=120, headers={"Authorization": f"Bearer {key}"}) as client:
            while not stop.is_set():
                client.post(f"{lora_pod.server.url}/v1/completions", json=body)

    threads = [threading.Thread(target=load, daemon=True) for _ in range(2)]
    try:
        for t in threads:
            t.start()
        def report() -> dict[str, Any]:
            return _lora_report(lora_pod, prom.url)

        busy = _wait_for(report, lambda r: r["adapters"][0]["inFlightReplicas"] == 1)
        assert busy == {"adapters": [{"name": "sql", "servedName": ADAPTER_SERVED, "inFlightReplicas": 1}],
                          "replicasReporting": 1, "maxLoras": 1, "unknownInFlight": []}
        stop.set()
        for t in threads:
            t.join(timeout=180)
        idle = _wait_for(report, lambda r: r["adapters"][0]["inFlightReplicas"] == 0)
        assert idle["replicasReporting"] == 1 and idle["maxLoras"] == 1
        table = lora_pod.stack.cli("status", "--stack", "dev", "--prometheus-url", prom.url, timeout=120).stdout
        assert f"adapters: {TOOL_MODEL}: {ADAPTER_SERVED} idle" in table
    finally:
        stop.set()
        prom.stop()


def _wait_for(read: Callable[[], dict[str, Any]], ok: Callable[[dict[str, Any]], bool],
              timeout: float = 180) -> dict[str, Any]:
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        last = read()
        if ok(last):
            return last
        time.sleep(1)
    raise AssertionError(f"status never showed it; last: {last}")
