"""The serving pod's metrics sidecar: serves GET /metrics from vLLM on a port of its own, and nothing else.

Why: vLLM 0.32 serves /metrics on its API port, and its API key guards only the ``/v1``, ``/v2``,
``/inference`` and ``/cohere`` prefixes (``vllm/entrypoints/serve/middleware/authenticate.py``,
``GUARDED_PREFIX``): ``/invocations``, ``/tokenize``, ``/scale_elastic_ep`` and more answer without
a key. Whoever may scrape port 8000 may therefore run inference. With this sidecar the
NetworkPolicy admits the monitoring namespace to the metrics port only, and port 8000 to the
gateway only. vLLM has no option to serve metrics elsewhere (its Prometheus app is mounted on the
API app, ``vllm/entrypoints/serve/instrumentator/metrics.py``).

How: the pod runs this file with the image's own ``python3``, mounted from one ConfigMap per stack
(``components/pod_meta.py``, ``metrics_proxy_configmap``). Standard library only, so the vLLM image
serves as is and there is no second image to build, scan or mirror. Every request for anything but
GET/HEAD ``/metrics`` is answered here (404/405) and never forwarded; the upstream URL is fixed, so no
path, query or header from the caller reaches vLLM but ``Accept`` (content negotiation). The sidecar has
no probes: a metrics hiccup must never take the pod out of its Service.

What it adds (docs/observability.md): the series below, after vLLM's, in the format vLLM answered in.
- ``tkf:vllm_up`` 1 when vLLM answered, else 0 — and then the sidecar still answers 200 with its own series,
  so Prometheus tells a replica whose vLLM is loading or hung (its facts, ``tkf:vllm_up 0``) from one that is
  gone (no target). The upstream timeout is below Prometheus' default 10 s scrape timeout for that reason.
- The plan's facts about this pod's model and pool, read at every scrape from ``--facts`` (a JSON file the
  program renders into the stack's fleet-facts ConfigMap, mounted so an edited plan reaches running pods
  without restarting them): the fit check's predicted KV tokens, min/max replicas, the whole GPUs a replica
  holds, the longest its start-up may take (the startup probe's budget), and its pool's GPUs and what the
  plan reserves at min and max.
- ``tkf:vllm_kv_cache_tokens``: the KV tokens vLLM reports, as a number. vLLM reports them only as a *label*
  of ``vllm:cache_config_info`` and PromQL cannot read a label as a number, so without this no alert could
  hold the prediction against them. Read as ``tkf_infra/vllm_metrics.py`` ``KvObservation.tokens``
  reads them (``kv_cache_size_tokens``, else ``num_gpu_blocks`` × ``block_size``; tests/test_metrics_proxy.py
  holds the two to the same answers).
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PATH = "/metrics"
#: Below Prometheus' default scrape timeout (10 s), so a hung vLLM reads as `tkf:vllm_up 0`, not a failed scrape.
UPSTREAM_TIMEOUT_S = 5
#: Request headers passed on to vLLM (content negotiation only). Not Accept-Encoding: the sidecar appends to
#: the body, so it asks vLLM for it uncompressed and compresses the whole itself when the caller accepts gzip.
FORWARDED_REQUEST_HEADERS = ("Accept",)
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS = "application/openmetrics-text"

# The series this sidecar adds (components/fleet_queries.py builds the dashboards' and alerts' PromQL on them).
VLLM_UP = "tkf:vllm_up"
PREDICTED_KV_TOKENS = "tkf:fit_kv_cache_tokens"
REPORTED_KV_TOKENS = "tkf:vllm_kv_cache_tokens"
MIN_REPLICAS = "tkf:model_min_replicas"
MAX_REPLICAS = "tkf:model_max_replicas"
REPLICA_GPUS = "tkf:replica_gpus"
READY_WITHIN_SECONDS = "tkf:model_ready_within_seconds"
START_TIME = "tkf:metrics_proxy_start_time_seconds"
POOL_GPUS = "tkf:pool_gpus"
POOL_RESERVED_GPUS = "tkf:pool_reserved_gpus"
#: Labels: vLLM's own model label (v0.32.0 loggers.py labelnames ["model_name", "engine"]; test_metrics_proxy.py
#: holds it to tkf_infra/vllm_metrics.py's), the node pool, and which end of the autoscalers' range.
MODEL_NAME_LABEL = "model_name"
ENGINE_LABEL = "engine"
POOL_LABEL = "pool"
AT_LABEL = "at"
AT_MINIMUM, AT_MAXIMUM = "minimum", "maximum"

# The facts file (written by components/fleet_facts.py): {"models": {name: {...}}, "pools": {pool: {...}}}.
FACT_MODELS, FACT_POOLS = "models", "pools"
FACT_SERVED_NAME = "servedName"
FACT_POOL = "pool"
FACT_PREDICTED_KV_TOKENS = "predictedKvTokens"
FACT_MIN_REPLICAS = "minReplicas"
FACT_MAX_REPLICAS = "maxReplicas"
FACT_REPLICA_GPUS = "replicaGpus"
FACT_READY_WITHIN_SECONDS = "readyWithinSeconds"
FACT_POOL_GPUS = "gpus"
FACT_RESERVED_AT_MINIMUM = "reservedAtMinimum"
FACT_RESERVED_AT_MAXIMUM = "reservedAtMaximum"

#: vLLM's KV cache info gauge and the labels read from it (tkf_infra/vllm_metrics.py cites the source).
CACHE_CONFIG_INFO = "vllm:cache_config_info"
KV_CACHE_SIZE_TOKENS, NUM_GPU_BLOCKS, BLOCK_SIZE = "kv_cache_size_tokens", "num_gpu_blocks", "block_size"
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_MODEL_NAME = re.compile(r'\b' + MODEL_NAME_LABEL + r'="((?:[^"\\]|\\.)*)"')


def _int(value: str | None) -> int | None:
    """vLLM writes str(None) for a value it did not know when it set the gauge."""
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def kv_tokens(labels: dict[str, str]) -> int | None:
    """One engine's KV tokens from its cache_config_info labels (as `KvObservation.tokens` reads them)."""
    reported = _int(labels.get(KV_CACHE_SIZE_TOKENS))
    if reported is not None:
        return reported
    blocks, size = _int(labels.get(NUM_GPU_BLOCKS)), _int(labels.get(BLOCK_SIZE))
    return blocks * size if blocks is not None and size is not None else None


def cache_config_labels(body: str) -> list[dict[str, str]]:
    """The label sets of every `vllm:cache_config_info` sample on vLLM's page (one per engine)."""
    prefix = CACHE_CONFIG_INFO + "{"
    return [dict(_LABEL.findall(line[len(prefix):line.rfind("}")])) for line in body.splitlines()
            if line.startswith(prefix)]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _sample(name: str, labels: dict[str, str], value: float) -> str:
    text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    number = repr(float(value))  # every digit: a start time in `:g` would lose minutes
    return f"{name}{{{text}}} {number}" if text else f"{name} {number}"


def read_facts(path: str | None, model: str | None) -> tuple[dict[str, object], dict[str, object]]:
    """(this model's facts, its pool's facts); empty when there is no file yet or it does not name them."""
    if not path or not model:
        return {}, {}
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return {}, {}
    models = doc.get(FACT_MODELS) if isinstance(doc, dict) else None
    mine = models.get(model) if isinstance(models, dict) else None
    pools = doc.get(FACT_POOLS) if isinstance(doc, dict) and isinstance(mine, dict) else None
    pool = pools.get(mine.get(FACT_POOL)) if isinstance(pools, dict) and isinstance(mine, dict) else None
    return (mine if isinstance(mine, dict) else {}), (pool if isinstance(pool, dict) else {})


def _number(facts: dict[str, object], key: str) -> float | None:
    value = facts.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def own_series(body: str | None, facts: dict[str, object], pool: dict[str, object], started: float
               ) -> list[tuple[str, list[str]]]:
    """(metric name, its sample lines) of everything this sidecar adds; `body`: vLLM's page (None: no answer)."""
    served = facts.get(FACT_SERVED_NAME)
    if not isinstance(served, str):
        found = _MODEL_NAME.search(body or "")
        served = found.group(1) if found else None
    model = {MODEL_NAME_LABEL: served} if served else {}
    out: list[tuple[str, list[str]]] = [(VLLM_UP, [_sample(VLLM_UP, model, 0 if body is None else 1)]),
                                        (START_TIME, [_sample(START_TIME, model, round(started, 3))])]
    for name, key in ((PREDICTED_KV_TOKENS, FACT_PREDICTED_KV_TOKENS), (MIN_REPLICAS, FACT_MIN_REPLICAS),
                      (MAX_REPLICAS, FACT_MAX_REPLICAS), (READY_WITHIN_SECONDS, FACT_READY_WITHIN_SECONDS)):
        value = _number(facts, key)
        if value is not None and model:
            out.append((name, [_sample(name, model, value)]))
    pool_name = facts.get(FACT_POOL)
    where = {POOL_LABEL: pool_name} if isinstance(pool_name, str) else {}
    gpus = _number(facts, FACT_REPLICA_GPUS)
    if gpus is not None and model and where:
        out.append((REPLICA_GPUS, [_sample(REPLICA_GPUS, {**model, **where}, gpus)]))
    total = _number(pool, FACT_POOL_GPUS)
    if total is not None and where:
        out.append((POOL_GPUS, [_sample(POOL_GPUS, where, total)]))
    reserved = [_sample(POOL_RESERVED_GPUS, {**where, AT_LABEL: at}, v) for at, key in
                ((AT_MINIMUM, FACT_RESERVED_AT_MINIMUM), (AT_MAXIMUM, FACT_RESERVED_AT_MAXIMUM))
                if (v := _number(pool, key)) is not None]
    if reserved and where:
        out.append((POOL_RESERVED_GPUS, reserved))
    engines = [_sample(REPORTED_KV_TOKENS, {**model, **({ENGINE_LABEL: lbl[ENGINE_LABEL]} if ENGINE_LABEL in lbl
                                                        else {})}, tokens)
               for lbl in cache_config_labels(body or "") if (tokens := kv_tokens(lbl)) is not None]
    if engines and model:
        out.append((REPORTED_KV_TOKENS, engines))
    return out


def exposition(series: list[tuple[str, list[str]]]) -> str:
    """The series as text lines with their TYPE (gauges), valid in both text formats."""
    return "".join(f"# TYPE {name} gauge\n" + "".join(line + "\n" for line in lines) for name, lines in series)


def combined(body: str, content_type: str, series: list[tuple[str, list[str]]]) -> str:
    """vLLM's page with our series added where its format wants them (OpenMetrics ends with `# EOF`)."""
    ours = exposition(series)
    if content_type.startswith(OPENMETRICS):
        head, eof, tail = body.rpartition("# EOF")
        return head + ours + eof + tail if eof else body + ours
    return body + ("" if not body or body.endswith("\n") else "\n") + ours


def make_handler(upstream: str, facts_path: str | None = None, model: str | None = None,
                 timeout_s: float = UPSTREAM_TIMEOUT_S) -> type[BaseHTTPRequestHandler]:
    started = time.time()

    class MetricsOnly(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "tkf-metrics-proxy"

        def _reply(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for name, value in (headers or {"Content-Type": "text/plain; charset=utf-8"}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _path(self) -> str:
            return self.path.split("?", 1)[0]

        def _upstream(self) -> tuple[str, str] | None:
            """vLLM's page and its content type; None when it did not answer 200 in time (loading, hung, gone)."""
            request = urllib.request.Request(upstream, headers={
                h: v for h in FORWARDED_REQUEST_HEADERS if (v := self.headers.get(h)) is not None})
            try:
                with urllib.request.urlopen(request, timeout=timeout_s) as response:
                    text = response.read().decode("utf-8")
                    return text, response.headers.get("Content-Type") or TEXT_FORMAT
            except (OSError, ValueError):  # refused, timed out, an HTTP error status, a page that is not UTF-8
                return None

        def do_GET(self) -> None:
            if self._path() != PATH:
                self._reply(404, f"this port serves only GET {PATH}\n".encode())
                return
            got = self._upstream()
            mine, pool = read_facts(facts_path, model)
            series = own_series(got[0] if got else None, mine, pool, started)
            body, content_type = (combined(got[0], got[1], series), got[1]) if got else (exposition(series),
                                                                                          TEXT_FORMAT)
            data, headers = body.encode("utf-8"), {"Content-Type": content_type}
            if "gzip" in (self.headers.get("Accept-Encoding") or ""):
                data, headers["Content-Encoding"] = gzip.compress(data, compresslevel=1), "gzip"
            self._reply(200, data, headers)

        do_HEAD = do_GET

        def _refuse(self) -> None:
            if self._path() == PATH:
                self._reply(405, f"only GET {PATH}\n".encode(), {"Allow": "GET, HEAD",
                                                               "Content-Type": "text/plain; charset=utf-8"})
            else:
                self._reply(404, f"this port serves only GET {PATH}\n".encode())

        do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _refuse

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: Prometheus scrapes every few seconds; vLLM's state is in `tkf:vllm_up`."""

    return MetricsOnly


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description="Serve only GET /metrics from vLLM on a port of its own.")
    parser.add_argument("--listen", required=True, help="HOST:PORT to listen on")
    parser.add_argument("--upstream", required=True, help="vLLM's metrics URL, e.g. http://127.0.0.1:8000/metrics")
    parser.add_argument("--facts", help="the plan's facts file (JSON), read at every scrape; may not exist yet")
    parser.add_argument("--model", help="this pod's catalog entry: the facts file's key")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    server = ThreadingHTTPServer((host, int(port)), make_handler(args.upstream, args.facts, args.model))
    server.daemon_threads = True
    server.serve_forever()  # until SIGTERM (the kubelet's stop), whose default action ends the process


if __name__ == "__main__":  # `python3 -c <this source> --listen … --upstream …` (the pod) or `python -m`
    main(sys.argv[1:])
