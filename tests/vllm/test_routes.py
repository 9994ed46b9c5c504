"""What the runtime key guards on the pinned vLLM, route by route, and who can reach the rest.

vLLM 0.32.0's key guards only the path prefixes ``/v1``, ``/v2``, ``/inference`` and ``/cohere``
(``vllm/entrypoints/serve/middleware/authenticate.py``); every other route answers without it,
``/invocations`` (a full chat completion) and ``/tokenize`` included. So the key cannot be what keeps
inference private: the NetworkPolicy is. These tests, on the running pods of the tier (chat on both
backends, and the embedding model), establish:

1. every route the server exposes — vLLM's own listing of the app (tests/vllm/routes.py), checked
   against the live ``openapi.json`` — and which answer without a key, probed without running a
   handler (a method the route does not take: the key check comes first, so 401 = guarded, 405 =
   reached the route keyless). The open set is pinned per serving mode: a new open route fails here
   until someone has looked at it;
2. port 8000 (every route) admits only the gateway namespace, and the monitoring namespace only the
   metrics sidecar's port (the rendered NetworkPolicy);
3. on that port, the sidecar run from the rendered pod answers GET /metrics and nothing else: no
   route of vLLM's, open or guarded, with any of its methods.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.vllm.conftest import TOOL_MODEL, PodServers, RunningPod
from tests.vllm.pod import load_manifests
from tests.vllm.server import NO_TELEMETRY_ENV
from tests.vllm.stacks import EMBEDDING_MODEL
from tkf_infra import names

ROOT = Path(__file__).resolve().parents[2]
PODS = {"kserve": ("kserve", TOOL_MODEL), "vllm": ("vllm", TOOL_MODEL), "embedding": ("vllm", EMBEDDING_MODEL)}
GATEWAY_NS, MONITORING_NS = "llm-gateway", "monitoring"  # the dev stack's namespaces

#: What the server answers without a key, per kind of server (its supported tasks include "generate",
#: or it is a pooling server: embedding here), with what the route does. Probes and read-only facts
#: are harmless; the rest is inference or control of the engine, which only the NetworkPolicy keeps
#: to the gateway. Measured on vLLM 0.32.0 (docs/operations.md has the table).
DOCS = {(m, p): "FastAPI's API docs" for p in ("/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc")
        for m in ("GET", "HEAD")}
COMMON = {
    **DOCS,
    ("GET", "/health"): "probe",
    ("GET", "/ping"): "probe (SageMaker)",
    ("POST", "/ping"): "probe (SageMaker)",
    ("GET", "/load"): "server load figure",
    ("GET", "/version"): "vLLM version",
    ("GET", "/metrics"): "Prometheus metrics",
    ("*", "/metrics"): "Prometheus metrics (the mount: any method)",
    ("GET", "/kv_event_sources"): "KV-cache event endpoints",
    ("POST", "/tokenize"): "INFERENCE: runs the tokenizer and chat template",
    ("POST", "/detokenize"): "INFERENCE: runs the tokenizer",
    ("POST", "/invocations"): "INFERENCE: SageMaker's entry: the same requests as /v1",
}
OPEN: dict[str, dict[tuple[str, str], str]] = {
    "generate": {
        **COMMON,
        ("POST", "/generative_scoring"): "INFERENCE: scores completions",
        ("POST", "/scale_elastic_ep"): "CONTROL: rescales expert parallelism",
        ("POST", "/is_scaling_elastic_ep"): "CONTROL: scaling state",
    },
    "pooling": {
        **COMMON,
        ("POST", "/pooling"): "INFERENCE: runs the pooling model",
        ("POST", "/score"): "INFERENCE: scores text pairs",
        ("POST", "/rerank"): "INFERENCE: reranks documents",
    },
}
HARMLESS = {"probe", "probe (SageMaker)", "server load figure", "vLLM version", "Prometheus metrics",
            "Prometheus metrics (the mount: any method)", "KV-cache event endpoints", "FastAPI's API docs"}


@pytest.fixture(params=list(PODS))
def pod(request: pytest.FixtureRequest, pods: PodServers) -> RunningPod:
    backend, model = PODS[request.param]
    return pods.get(backend, model)


def _tasks(pod: RunningPod) -> list[str]:
    """The tasks the running server supports, as it logged them at start."""
    # The API server's own line (vllm/entrypoints/launchers/api_server/entry.py), not a pooler's message.
    m = re.search(r"\[entry\.py:\d+\] Supported tasks: [\[(]([^\])]*)[\])]", pod.server.log.read_text(errors="replace"))
    assert m, "vLLM did not log its supported tasks"
    return [t.strip(" '\"") for t in m.group(1).split(",") if t.strip()]


def _cmdline(pod: RunningPod) -> list[str]:
    """The running vLLM's own argv (KServe's preset has exec'd it): ``<venv python> <venv>/bin/vllm serve ...``."""
    argv = [w.decode() for w in Path(f"/proc/{pod.server.process.pid}/cmdline").read_bytes().split(b"\0")[:-1]]
    assert Path(argv[1]).name == "vllm" and argv[2] == "serve", argv[:3]
    return argv


def _routes(pod: RunningPod) -> list[dict[str, Any]]:
    """vLLM's listing of the app the running server built (same argv, same tasks, same Python)."""
    python, _, *args = _cmdline(pod)
    request = json.dumps({"argv": ["vllm", *args], "tasks": _tasks(pod)})
    env = {"PATH": "/usr/bin:/bin", "HOME": str(pod.server.log.parent / "home"), **NO_TELEMETRY_ENV}
    proc = subprocess.run([python, "-m", "tests.vllm.routes"], input=request, capture_output=True, text=True,
                          cwd=ROOT, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    routes: list[dict[str, Any]] = json.loads(proc.stdout)
    return routes


def _url_path(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "x", path)


def _probe(pod: RunningPod, route: dict[str, Any]) -> int:
    """Status without a key, for a method the route does not take (the handler never runs); a mount
    takes any method, so it gets a GET."""
    methods = set(route["methods"])
    method = next(m for m in ("PATCH", "PUT", "DELETE", "POST") if m not in methods) if methods else "GET"
    return httpx.request(method, f"{pod.server.url}{_url_path(route['path'])}", timeout=30).status_code


def test_every_route_is_guarded_by_the_key_or_open_only_to_the_gateway(pod: RunningPod) -> None:
    routes = [r for r in _routes(pod) if r["path"]]
    live = httpx.get(f"{pod.server.url}/openapi.json", timeout=30).json()["paths"]
    schema = {(m, r["path"]) for r in routes if r["schema"] for m in r["methods"]}
    assert schema == {(m.upper(), p) for p, ops in live.items() for m in ops}, "the listing is not the live app's"
    open_routes: dict[tuple[str, str], int] = {}
    guarded: set[str] = set()
    mounts = {r["path"] for r in routes if not r["methods"]}  # a mount answers any method (/metrics)
    for route in routes:
        status = _probe(pod, route)
        assert status in (401, 405) or route["path"] in mounts, (route, status)
        if status == 401:
            guarded.add(route["path"])
        else:
            for m in route["methods"] or ["*"]:
                open_routes[(m, route["path"])] = status
    assert all(p.startswith(("/v1", "/v2", "/inference", "/cohere")) for p in guarded), sorted(guarded)
    tasks = _tasks(pod)
    kind = "generate" if "generate" in tasks else "pooling"
    expected = OPEN[kind]
    assert set(open_routes) == set(expected), (
        f"routes open without a key changed: new {sorted(set(open_routes) - set(expected))}, "
        f"gone {sorted(set(expected) - set(open_routes))}")
    # The open inference routes really answer keyless (as measured when this was written).
    served = pod.endpoint["servedName"]
    tokenize = httpx.post(f"{pod.server.url}/tokenize", json={"model": served, "prompt": "hi"}, timeout=60)
    assert tokenize.status_code == 200 and tokenize.json()["tokens"], tokenize.text
    if kind == "generate":
        chat = httpx.post(f"{pod.server.url}/invocations", timeout=120, json={
            "model": served, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
        assert chat.status_code == 200 and chat.json()["choices"], chat.text
    inference = sorted(k for k, why in expected.items() if why not in HARMLESS)
    assert inference, "nothing open to guard: the NetworkPolicy checks below would prove nothing"
    _only_the_gateway_reaches_the_api_port(pod)
    _the_metrics_port_answers_only_metrics(pod, routes)


def _only_the_gateway_reaches_the_api_port(pod: RunningPod) -> None:
    policy = load_manifests(pod.stack.render_dir)[("NetworkPolicy", names.network_policy(pod.model))]["spec"]
    assert policy["podSelector"] == {"matchLabels": {"tkf.io/model": pod.model}}
    assert policy["policyTypes"] == ["Ingress"]
    admitted = {}
    for rule in policy["ingress"]:
        (source,) = rule["from"]
        ns = source["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
        admitted[ns] = [(p["protocol"], p["port"]) for p in rule["ports"]]
    assert admitted == {GATEWAY_NS: [("TCP", names.SERVING_PORT)], MONITORING_NS: [("TCP", names.METRICS_PORT)]}
    assert pod.command.port == names.SERVING_PORT  # the probes' port: vLLM's API port


def _the_metrics_port_answers_only_metrics(pod: RunningPod, routes: list[dict[str, Any]]) -> None:
    got = httpx.get(f"{pod.metrics.url}/metrics", timeout=30)
    assert got.status_code == 200 and "vllm:num_requests_running" in got.text
    reached = []
    for route in routes:
        for method in route["methods"] or ["GET", "POST"]:
            if (method, route["path"]) in {("GET", "/metrics"), ("HEAD", "/metrics")}:
                continue
            status = httpx.request(method, f"{pod.metrics.url}{_url_path(route['path'])}", timeout=30).status_code
            if status not in (404, 405):
                reached.append((method, route["path"], status))
    assert not reached, f"the metrics port answered routes other than GET /metrics: {reached}"
