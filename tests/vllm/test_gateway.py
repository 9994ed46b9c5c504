"""The gateway for real: the LiteLLM proxy, started from the file ``gateway-config`` wrote, in front of
the real vLLM run from the rendered pod.

The one substitution: the model's ``api_base`` (a cluster DNS name) becomes the local vLLM's URL.
Everything else — the provider prefix, ``os.environ/<apiKeyEnv>`` for the key, the model name, the
prices in ``model_info`` — is the program's output, so a wrong prefix, key reference or price fails.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.vllm.conftest import TOOL_MODEL, PodServers, RunningPod
from tests.vllm.gateway import Gateway, run_gateway
from tests.vllm.metrics import parse_metrics, sample
from tests.vllm.stacks import EMBEDDING_MODEL, PRICES


@pytest.fixture(scope="module")
def gateway(pods: PodServers, tier_dir: Path) -> Iterator[Gateway]:
    with run_gateway(pods.get("vllm", TOOL_MODEL), tier_dir / "gateway-chat") as gw:
        yield gw


def _cost(model: str, usage: dict[str, int]) -> float:
    price = PRICES[model]
    return usage["prompt_tokens"] * price["inputPerToken"] + usage["completion_tokens"] * price["outputPerToken"]


def _vllm_tokens(pod: RunningPod) -> tuple[float, float]:
    metrics = parse_metrics(httpx.get(f"{pod.server.url}/metrics", timeout=10).text)
    served = pod.endpoint["servedName"]
    return (sample(metrics, "vllm:prompt_tokens_total", model_name=served),
            sample(metrics, "vllm:generation_tokens_total", model_name=served))


def test_chat_through_the_gateway_reaches_vllm_and_costs_the_catalog_price(gateway: Gateway,
                                                                           vllm_pod: RunningPod) -> None:
    served = vllm_pod.endpoint["servedName"]
    prompt_before, generated_before = _vllm_tokens(vllm_pod)
    messages = [{"role": "user", "content": "Hello there"}]
    response = gateway.post("/v1/chat/completions", {"model": served, "max_tokens": 12, "messages": messages})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == served and body["choices"][0]["message"]["role"] == "assistant"
    usage = body["usage"]
    # vLLM counted exactly the tokens LiteLLM billed: the request went to this server, once.
    want = (prompt_before + usage["prompt_tokens"], generated_before + usage["completion_tokens"])
    assert _vllm_tokens(vllm_pod) == want
    cost = float(response.headers["x-litellm-response-cost"])
    assert cost == pytest.approx(_cost(vllm_pod.model, usage), rel=1e-9)
    assert cost > 0


def test_streaming_through_the_gateway(gateway: Gateway, vllm_pod: RunningPod) -> None:
    served = vllm_pod.endpoint["servedName"]
    body = {"model": served, "max_tokens": 12, "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "Count to three"}]}
    chunks: list[dict[str, Any]] = []
    with httpx.stream("POST", f"{gateway.service.url}/v1/chat/completions", json=body, timeout=120,
                      headers={"Authorization": f"Bearer {gateway.master_key}"}) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[len("data: "):]))
    assert len(chunks) > 2 and all(c["model"] == served for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    usage = next(c["usage"] for c in reversed(chunks) if c.get("usage"))
    assert usage["completion_tokens"] > 0 and text
    # LiteLLM puts the cost it computed into the final usage chunk of a stream.
    assert usage["cost"] == pytest.approx(_cost(vllm_pod.model, usage), rel=1e-9)


def test_gateway_refuses_a_caller_without_its_key(gateway: Gateway, vllm_pod: RunningPod) -> None:
    body = {"model": vllm_pod.endpoint["servedName"], "messages": [{"role": "user", "content": "hi"}]}
    response = httpx.post(f"{gateway.service.url}/v1/chat/completions", json=body, timeout=30)
    assert response.status_code == 401


def test_embeddings_through_the_gateway_cost_the_catalog_price(pods: PodServers, tier_dir: Path) -> None:
    pod = pods.get("vllm", EMBEDDING_MODEL)
    with run_gateway(pod, tier_dir / "gateway-embed") as gw:
        response = gw.post("/v1/embeddings", {"model": pod.endpoint["servedName"], "input": ["a fleet of models"]})
    assert response.status_code == 200, response.text
    body = response.json()
    assert len(body["data"]) == 1 and len(body["data"][0]["embedding"]) > 0
    cost = float(response.headers["x-litellm-response-cost"])
    assert cost == pytest.approx(body["usage"]["prompt_tokens"] * PRICES[EMBEDDING_MODEL]["inputPerToken"], rel=1e-9)
