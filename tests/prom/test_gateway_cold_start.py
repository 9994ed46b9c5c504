"""A model at zero: the real LiteLLM gateway, on the program's own model list, holds the request that wakes it
until the model answers, instead of failing it.

Why real processes: what holds the request is LiteLLM's own retry of a refused connection, on the
`num_retries` the model list publishes for a scale-to-zero model (`tkf_infra.gateway_metrics
.retries_spanning` of its `coldStartSeconds`); a LiteLLM that stopped retrying refused connections, or a
backoff that changed, fails here. The model's pod is stood in for by a second LiteLLM proxy answering the
served name with LiteLLM's own `mock_response` (no vLLM in this tier: tests/vllm has the real one), started
on the model's address several seconds after the request, as a replica becoming Ready behind its Service.
Rides with the real-server tier of tests/prom (the wake signal's test runs LiteLLM too).
"""

from __future__ import annotations

import secrets
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pulumi
import pytest
import yaml

from tests.mocks import SINGLE_GPU, program, stack_doc
from tests.ports import Reservation, reserve
from tests.vllm.server import Service, start_litellm
from tkf_infra import gateway_metrics as gm

pytestmark = pytest.mark.prometheus

PROM = "http://prometheus.monitoring.svc:9090"
SERVED = "qwen3.8b"
LATE_S = 8  # the replica's address opens this long after the request (plus its own start-up)


def _proxy(name: str, config: dict[str, Any], workdir: Path, env: dict[str, str],
           port: Reservation | None = None) -> Service:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "litellm.yaml").write_text(yaml.safe_dump(config))
    return start_litellm(name, workdir / "litellm.yaml", {"HOME": str(workdir / "home"), "TMPDIR": str(workdir), **env},
                         workdir=workdir, port=port)


def test_litellms_backoff_is_the_one_the_retries_are_counted_on() -> None:
    from litellm.constants import INITIAL_RETRY_DELAY, MAX_RETRY_DELAY

    assert (gm.INITIAL_RETRY_DELAY, gm.MAX_RETRY_DELAY) == (INITIAL_RETRY_DELAY, MAX_RETRY_DELAY)


def test_the_gateway_holds_a_woken_models_first_request_until_a_replica_answers(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    exported: dict[str, Any] = {}
    monkeypatch.setattr(pulumi, "export", lambda name, value: exported.__setitem__(name, value))
    zero = dict(SINGLE_GPU, servedName=SERVED, scaling={"minReplicas": 0, "maxReplicas": 2})
    h = program(stack_doc(zero, backend="vllm", prometheusUrl=PROM), api_key="k")
    assert h.error is None, h.error
    (entry,) = exported["gatewayModelList"]
    cold = exported["endpoints"][SERVED]["scaling"]["coldStartSeconds"]
    retries = entry["litellm_params"]["num_retries"]
    assert retries == gm.retries_spanning(cold) and retries > gm.retries_spanning(cold / 2)

    # The Service, no endpoint yet: a port nobody may take before the replica starts on it (tests/ports.py).
    replica_port = reserve()
    entry["litellm_params"]["api_base"] = f"http://127.0.0.1:{replica_port.port}/v1"
    key, master = "sk-" + secrets.token_hex(8), "sk-" + secrets.token_hex(8)
    gateway = _proxy("gateway", {"model_list": [entry]}, tmp_path / "gateway",
                     {"TKF_VLLM_API_KEY": key, "LITELLM_MASTER_KEY": master})
    replica: list[Service] = []

    def become_ready() -> None:
        time.sleep(LATE_S)
        replica.append(_proxy("replica", {"model_list": [{"model_name": SERVED, "litellm_params": {
            "model": f"openai/{SERVED}", "api_key": "unused", "mock_response": "ready"}}]},
            tmp_path / "replica", {"LITELLM_MASTER_KEY": key}, replica_port))

    opener = threading.Thread(target=become_ready, daemon=True)
    try:
        asked = time.monotonic()
        opener.start()
        r = httpx.post(f"{gateway.url}/v1/chat/completions", timeout=cold + 60,
                       headers={"Authorization": f"Bearer {master}"},
                       json={"model": SERVED, "messages": [{"role": "user", "content": "hi"}]})
        waited = time.monotonic() - asked
        print(f"first request answered after {waited:.1f} s (replica's address opened after {LATE_S} s + its start)")
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == "ready"
        assert waited > LATE_S, "answered only once the replica was there"
    finally:
        opener.join(timeout=120)
        for s in (*replica, gateway):
            s.stop(check_shm=False)
        replica_port.release()
