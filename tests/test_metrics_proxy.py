"""The metrics sidecar: where it runs (under mocks) and what it answers (run as the pod runs it, against a
stand-in vLLM that records every request it gets).

The real-vLLM tier runs the same rendered command next to a real vLLM and has Prometheus scrape it
(tests/vllm/test_routes.py, tests/vllm/test_status.py).
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from components import metrics_proxy, pod_meta
from components import vllm_args as va
from tests.mocks import CPU, MULTI_NODE, SINGLE_GPU, program, stack_doc
from tests.vllm.pod import localize_sidecar, project_config_maps, sidecar_command
from tests.vllm.server import start_service
from tkf_infra import vllm_metrics as vm
from tkf_infra.live.kv_cache import KvObservation
from tkf_infra.names import FLEET_FACTS_CONFIGMAP, METRICS_PORT, SERVING_PORT

PROBES = ("startupProbe", "livenessProbe", "readinessProbe")


@functools.cache
def rendered(backend: str) -> dict[tuple[str, str], dict[str, Any]]:
    """(kind, name) -> inputs of every object the program registers for a single-GPU, a CPU and a
    multi-node model, as its render would write them (built once; not to be edited)."""
    h = program(stack_doc(SINGLE_GPU, CPU, MULTI_NODE, backend=backend), api_key="k")
    assert h.error is None, h.error
    return {(str(r.inputs["kind"]), str(r.metadata.get("name"))): r.inputs for r in h.resources if "kind" in r.inputs}


def pods(backend: str) -> dict[tuple[str, str], dict[str, Any]]:
    """(model, role) -> pod spec."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for (kind, name), r in rendered(backend).items():
        spec = r.get("spec") or {}
        if kind == "LLMInferenceService":
            out[(name, "leader")] = spec["template"]
            if "worker" in spec:
                out[(name, "worker")] = spec["worker"]
        elif kind == "Deployment":
            out[(name, "leader")] = spec["template"]["spec"]
        elif kind == "LeaderWorkerSet":
            out[(name, "leader")] = spec["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
            out[(name, "worker")] = spec["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    return out


@pytest.mark.parametrize("backend", ["kserve", "vllm"])
def test_every_api_serving_pod_runs_the_sidecar_from_its_own_image(backend: str) -> None:
    found = pods(backend)
    assert {role for _, role in found} == {"leader", "worker"}
    configmaps = {name: r for (kind, name), r in rendered(backend).items() if kind == "ConfigMap"}
    for (model, role), pod in found.items():
        by_name = {c["name"]: c for c in pod["containers"]}
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        if role == "worker":  # headless ranks serve no API and no metrics
            assert set(by_name) == {"main"}, model
            assert pod_meta.METRICS_PROXY_VOLUME not in volumes, model
            continue
        assert set(by_name) == {"main", "metrics"}, model
        main, sidecar = by_name["main"], by_name["metrics"]
        assert sidecar["image"] == main["image"]
        script = f"{pod_meta.METRICS_PROXY_DIR}/{pod_meta.METRICS_PROXY_FILE}"
        facts = f"{pod_meta.FLEET_FACTS_DIR}/{pod_meta.FLEET_FACTS_FILE}"
        assert sidecar["command"] == ["python3", script, "--listen", f"0.0.0.0:{METRICS_PORT}",
                                      "--upstream", f"http://127.0.0.1:{SERVING_PORT}/metrics",
                                      "--facts", facts, "--model", model]
        # The script is this repository's file, from one immutable ConfigMap of the stack, read-only; the plan's
        # facts from the stack's one mutable ConfigMap (optional: a pod never waits for it).
        assert sidecar["volumeMounts"] == [{"name": pod_meta.METRICS_PROXY_VOLUME,
                                            "mountPath": pod_meta.METRICS_PROXY_DIR, "readOnly": True},
                                           {"name": pod_meta.FLEET_FACTS_VOLUME,
                                            "mountPath": pod_meta.FLEET_FACTS_DIR, "readOnly": True}]
        assert volumes[pod_meta.FLEET_FACTS_VOLUME]["configMap"]["optional"] is True
        cm = configmaps[volumes[pod_meta.METRICS_PROXY_VOLUME]["configMap"]["name"]]
        assert cm["data"] == {pod_meta.METRICS_PROXY_FILE: Path(metrics_proxy.__file__).read_text()}
        assert cm["immutable"] is True and cm["metadata"]["namespace"] == "llm-serving"
        assert sidecar["ports"] == [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}]
        # No probes: a metrics hiccup must never take the model out of its Service.
        assert not any(p in sidecar for p in PROBES)
        assert sidecar["securityContext"] == main["securityContext"]
        assert sidecar["resources"]["limits"] == {"memory": "64Mi"}
        # The serving container's probes are untouched: /health on 8000.
        assert {main[p]["httpGet"]["port"] for p in PROBES} == {SERVING_PORT}
    sources = [n for n in configmaps if n.startswith("tkf-metrics-proxy-")]
    assert len(sources) == 1, "one sidecar source per stack, not one per model"
    assert set(configmaps) == {*sources, FLEET_FACTS_CONFIGMAP}, "and one facts file"


def test_an_edited_sidecar_source_is_a_new_configmap_so_its_pods_roll(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ConfigMap is immutable and named by its content: pods mount it by name, so an edit changes every
    API-serving pod template (the pods roll, as they did when the source was inline) instead of leaving
    running pods on a source nobody can see any more."""
    def mounted(source: str) -> set[str]:
        monkeypatch.setattr(va, "metrics_proxy_source", lambda: source)
        h = program(stack_doc(SINGLE_GPU, CPU, backend="vllm"), api_key="k")
        assert h.error is None, h.error
        (cm,) = [r.inputs for r in h.resources if r.inputs.get("kind") == "ConfigMap"
                 and r.metadata["name"] != FLEET_FACTS_CONFIGMAP]
        assert cm["data"] == {pod_meta.METRICS_PROXY_FILE: source}
        names = {v["configMap"]["name"] for r in h.resources if r.inputs.get("kind") == "Deployment"
                 for v in r.inputs["spec"]["template"]["spec"]["volumes"] if "configMap" in v} - {FLEET_FACTS_CONFIGMAP}
        assert names == {cm["metadata"]["name"]}
        return names

    assert mounted("print('a')\n") != mounted("print('b')\n")


class _Upstream(BaseHTTPRequestHandler):
    """A stand-in vLLM: /metrics answers, anything else would be an inference route; every request is kept."""

    seen: ClassVar[list[tuple[str, str, dict[str, str]]]] = []

    def _any(self) -> None:
        self.seen.append((self.command, self.path, dict(self.headers)))
        body = b"vllm:num_requests_running 0\n" if self.path == "/metrics" else b"inference!"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _any

    def log_message(self, format: str, *args: object) -> None:
        pass


def _serve_upstream() -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def upstream() -> Iterator[ThreadingHTTPServer]:
    server = _serve_upstream()
    yield server
    server.shutdown()
    server.server_close()


def _run_sidecar(upstream_port: int, workdir: Path) -> Any:
    """The rendered sidecar, as tests/vllm/pod.py starts it (its ConfigMap projected under ``workdir``), with
    this host's python, port 0 to listen on and the upstream's port substituted (nothing else)."""
    manifests = rendered("vllm")
    workload = next(name for kind, name in manifests if kind == "Deployment")
    files = project_config_maps(manifests, workload, workdir / "volumes")
    argv = localize_sidecar(sidecar_command(manifests, workload), port=0, upstream_port=upstream_port, files=files)
    assert argv[0] == "python3" and Path(argv[1]).read_text() == Path(metrics_proxy.__file__).read_text()
    return start_service("metrics", [sys.executable, *argv[1:]], {}, port=None, health_path="/metrics",
                         workdir=workdir, check_shm=False)


def test_the_sidecar_forwards_get_metrics_and_nothing_else(upstream: ThreadingHTTPServer, tmp_path: Path) -> None:
    sidecar = _run_sidecar(upstream.server_address[1], tmp_path)
    try:
        _Upstream.seen.clear()
        got = httpx.get(f"{sidecar.url}/metrics", headers={"Accept": "text/plain", "Authorization": "Bearer x"})
        assert got.status_code == 200 and got.text.startswith("vllm:num_requests_running 0\n")
        assert got.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert _samples(got.text)[metrics_proxy.VLLM_UP][0][1] == 1.0, "vLLM's page, then the sidecar's series"
        (method, path, headers), = _Upstream.seen
        assert (method, path) == ("GET", "/metrics") and headers.get("Accept") == "text/plain"
        assert "Authorization" not in headers, "nothing but content negotiation is passed on"
        zipped = httpx.get(f"{sidecar.url}/metrics", headers={"Accept-Encoding": "gzip"})
        assert zipped.headers["content-encoding"] == "gzip" and zipped.text == got.text
        assert "gzip" not in _Upstream.seen[-1][2].get("Accept-Encoding", ""), "vLLM's page is read plain, then zipped"
        assert httpx.head(f"{sidecar.url}/metrics").status_code == 200
        _Upstream.seen.clear()
        for path in ("/invocations", "/tokenize", "/v1/chat/completions", "/health", "/metrics/../invocations",
                     "/metricsx", "/"):
            for method in ("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
                status = httpx.request(method, f"{sidecar.url}{path}", content=b"{}").status_code
                assert status == 404, (method, path, status)
        for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
            assert httpx.request(method, f"{sidecar.url}/metrics").status_code == 405
        assert _Upstream.seen == [], "a request other than GET /metrics reached vLLM"
        got = httpx.get(f"{sidecar.url}/metrics?name[]=vllm:x")
        assert got.status_code == 200 and _Upstream.seen[-1][1] == "/metrics", "the query is not passed on"
    finally:
        sidecar.stop()


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    from tests.vllm.metrics import parse_metrics

    return parse_metrics(text)


def test_the_sidecar_serves_its_own_series_while_vllm_is_down(upstream: ThreadingHTTPServer, tmp_path: Path) -> None:
    """vLLM gone (restarting, or not up yet): 200 with `tkf:vllm_up 0` and the plan's facts, so Prometheus
    tells a replica that is loading from one that is gone."""
    sidecar = _run_sidecar(upstream.server_address[1], tmp_path)
    try:
        upstream.shutdown()
        upstream.server_close()
        got = httpx.get(f"{sidecar.url}/metrics", timeout=30)
        assert got.status_code == 200, got.text
        samples = _samples(got.text)
        served = [lbl["model_name"] for lbl, _ in samples[metrics_proxy.VLLM_UP]]
        assert samples[metrics_proxy.VLLM_UP] == [({"model_name": served[0]}, 0.0)]
        assert samples[metrics_proxy.PREDICTED_KV_TOKENS][0][1] > 0
        assert metrics_proxy.REPORTED_KV_TOKENS not in samples, "no vLLM, no reported tokens"
    finally:
        sidecar.stop()


CACHE_INFO = ('vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",gpu_memory_utilization="0.9",'
              'kv_cache_size_tokens="%s",num_gpu_blocks="%s"} 1.0')


@pytest.mark.parametrize(("tokens", "blocks"), [("8736", "546"), ("None", "546"), ("None", "None")])
def test_the_sidecar_reads_vllms_kv_tokens_as_status_does(tokens: str, blocks: str) -> None:
    """The sidecar (standard library, in the pod) and `status` (tkf_infra/live/kv_cache.py) read the same
    label set to the same number: vLLM's own figure, else blocks × block size, else none."""
    line = CACHE_INFO % (tokens, blocks)
    (labels,) = metrics_proxy.cache_config_labels(f"# TYPE vllm:cache_config_info gauge\n{line}\n")
    observation = KvObservation(model_name="m", namespace="", instance="", engine="0", labels=labels)
    assert metrics_proxy.kv_tokens(labels) == observation.tokens
    assert metrics_proxy.MODEL_NAME_LABEL == vm.MODEL_LABEL and metrics_proxy.ENGINE_LABEL == vm.ENGINE


def test_the_sidecar_adds_its_series_inside_an_openmetrics_page() -> None:
    """Prometheus asks for OpenMetrics first; a page must end with `# EOF`, so our series go before it."""
    page = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 0.0\n" + \
           (CACHE_INFO % ("8736", "546")) + "\n# EOF\n"
    facts = {metrics_proxy.FACT_SERVED_NAME: "m", metrics_proxy.FACT_PREDICTED_KV_TOKENS: 9000,
             metrics_proxy.FACT_POOL: "cpu"}
    out = metrics_proxy.combined(page, "application/openmetrics-text; version=1.0.0; charset=utf-8",
                                 metrics_proxy.own_series(page, facts, {metrics_proxy.FACT_POOL_GPUS: 0}, 0.0))
    assert out.endswith("# EOF\n") and out.count("# EOF") == 1
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    families = {f.name: f for f in text_string_to_metric_families(out)}  # type: ignore[no-untyped-call]
    assert families["tkf:vllm_kv_cache_tokens"].samples[0].value == 8736
    assert families["tkf:fit_kv_cache_tokens"].samples[0].labels == {"model_name": "m"}
    assert families["tkf:pool_gpus"].samples[0].labels == {"pool": "cpu"}


def test_the_sidecar_needs_only_the_images_python() -> None:
    """Standard library only, and no syntax newer than Python 3.10 (the vLLM images ship 3.12)."""
    source = Path(metrics_proxy.__file__).read_text()
    imported = {line.split()[1].split(".")[0] for line in source.splitlines()
                if line.startswith(("import ", "from ")) and "__future__" not in line}
    assert imported <= set(sys.stdlib_module_names), imported
    ast.parse(source, feature_version=(3, 10))
    subprocess.run([sys.executable, "-c", source, "--help"], check=True, capture_output=True)


def test_the_sidecars_start_time_keeps_every_second() -> None:
    (_, lines), = [s for s in metrics_proxy.own_series(None, {}, {}, 1765070123.25) if s[0] == metrics_proxy.START_TIME]
    assert lines == [f"{metrics_proxy.START_TIME} 1765070123.25"]
