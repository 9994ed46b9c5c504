"""The rendered pods' own command lines run a real vLLM: probes, auth, served name, tool calling, KV cache.

Each test runs against both backends: the ``vllm`` backend's Deployment and the pod KServe would
make of the ``kserve`` backend's LLMInferenceService (its preset's command + our args). The pod
spec is the program's output, unchanged but for the model path and the port (tests/vllm/pod.py).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.vllm.conftest import TOOL_MODEL, PodServers, RunningPod
from tests.vllm.metrics import parse_metrics, sample
from tests.vllm.tiny_model import KV_BYTES_PER_TOKEN

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(params=["kserve", "vllm"])
def pod(request: pytest.FixtureRequest, pods: PodServers) -> RunningPod:
    return pods.get(request.param, TOOL_MODEL)


def _chat(pod: RunningPod, **body: Any) -> httpx.Response:
    payload = {"model": pod.endpoint["servedName"], "messages": [{"role": "user", "content": "Weather in Paris?"}],
               "max_tokens": 8, **body}
    return httpx.post(f"{pod.server.url}/v1/chat/completions", json=payload, headers=pod.server.headers(), timeout=120)


def test_probe_paths_and_metrics_answer_without_the_key(pod: RunningPod) -> None:
    """Probes on vLLM's port; metrics as the monitoring namespace gets them: from the sidecar's port."""
    assert set(pod.command.probes) == {"startupProbe", "livenessProbe", "readinessProbe"}
    for kind, probe in pod.command.probes.items():
        response = httpx.get(f"{pod.server.url}{probe['path']}", timeout=10)
        assert response.status_code == 200, (kind, probe, response.text)
    metrics = httpx.get(f"{pod.metrics.url}/metrics", timeout=10)
    assert metrics.status_code == 200
    running = sample(parse_metrics(metrics.text), "vllm:num_requests_running", model_name=pod.endpoint["servedName"])
    assert running == 0


def test_openai_api_needs_the_rendered_secrets_key(pod: RunningPod) -> None:
    key = pod.command.env.get("VLLM_API_KEY")
    assert key, "the pod does not set VLLM_API_KEY (it should come from the rendered Secret)"
    models = f"{pod.server.url}/v1/models"
    assert httpx.get(models, timeout=10).status_code == 401
    assert httpx.get(models, headers={"Authorization": "Bearer not-the-key"}, timeout=10).status_code == 401
    assert httpx.get(models, headers={"Authorization": f"Bearer {key}"}, timeout=10).status_code == 200
    assert httpx.post(f"{pod.server.url}/v1/chat/completions", json={}, timeout=10).status_code == 401


def test_served_name_is_the_one_in_the_stack_outputs(pod: RunningPod) -> None:
    served = pod.endpoint["servedName"]
    listed = httpx.get(f"{pod.server.url}/v1/models", headers=pod.server.headers(), timeout=10).json()
    ids = [m["id"] for m in listed["data"]]
    assert ids[0] == served
    if pod.backend == "kserve":  # KServe's preset adds its publisher alias after the model's name
        assert ids == [served, f"publishers/{pod.endpoint['namespace']}/models/{served}"]
    ok = _chat(pod)
    assert ok.status_code == 200, ok.text
    assert ok.json()["model"] == served
    assert _chat(pod, model="not-" + served).status_code == 404


def test_tool_calling_is_accepted_where_the_catalog_enables_it(pod: RunningPod) -> None:
    before = _parser_calls(pod)
    auto = _chat(pod, tools=[WEATHER_TOOL], tool_choice="auto")
    assert auto.status_code == 200, auto.text
    assert _parser_calls(pod) == before + 1, "the hermes tool-call parser did not see the reply"
    forced = _chat(pod, tools=[WEATHER_TOOL], tool_choice={"type": "function", "function": {"name": "get_weather"}},
                   max_tokens=64)
    assert forced.status_code == 200, forced.text
    (call,) = forced.json()["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"


def _parser_calls(pod: RunningPod) -> float:
    metrics = parse_metrics(httpx.get(f"{pod.server.url}/metrics", timeout=10).text)
    return sum(value for labels, value in metrics.get("vllm:tool_call_parser_invocations_total", [])
               if labels.get("model_name") == pod.endpoint["servedName"])


def test_cpu_kv_cache_is_the_size_the_pod_asks_for(pod: RunningPod) -> None:
    """``VLLM_CPU_KVCACHE_SPACE`` (GiB) from the pod env is what vLLM allocated: blocks x block size x
    bytes per token of the tiny model (the catalog's dtype is bfloat16, kvCacheDtype auto)."""
    gib = int(pod.command.env["VLLM_CPU_KVCACHE_SPACE"])
    metrics = parse_metrics(httpx.get(f"{pod.server.url}/metrics", timeout=10).text)
    ((info, _),) = metrics["vllm:cache_config_info"]
    assert int(info["num_gpu_blocks"]) * int(info["block_size"]) * KV_BYTES_PER_TOKEN == gib * 2**30
