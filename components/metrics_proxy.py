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
path, query or header from the caller reaches vLLM but ``Accept`` and ``Accept-Encoding`` (content
negotiation). The sidecar has no probes: a metrics hiccup must never take the pod out of its Service.
"""

from __future__ import annotations

import argparse
import sys
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PATH = "/metrics"
UPSTREAM_TIMEOUT_S = 10
#: Request headers passed on to vLLM (content negotiation only); response headers passed back.
FORWARDED_REQUEST_HEADERS = ("Accept", "Accept-Encoding")
FORWARDED_RESPONSE_HEADERS = ("Content-Type", "Content-Encoding")


def make_handler(upstream: str) -> type[BaseHTTPRequestHandler]:
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

        def do_GET(self) -> None:
            if self._path() != PATH:
                self._reply(404, f"this port serves only GET {PATH}\n".encode())
                return
            request = urllib.request.Request(upstream, headers={
                h: v for h in FORWARDED_REQUEST_HEADERS if (v := self.headers.get(h)) is not None})
            try:
                with urllib.request.urlopen(request, timeout=UPSTREAM_TIMEOUT_S) as response:
                    body, status, got = response.read(), response.status, response.headers
            except urllib.error.HTTPError as err:
                body, status, got = err.read(), err.code, err.headers
            except (OSError, ValueError) as err:  # vLLM not up yet, or gone
                self._reply(503, f"vLLM's {PATH} did not answer: {err}\n".encode())
                return
            self._reply(status, body, {h: v for h in FORWARDED_RESPONSE_HEADERS if (v := got.get(h)) is not None})

        do_HEAD = do_GET

        def _refuse(self) -> None:
            if self._path() == PATH:
                self._reply(405, f"only GET {PATH}\n".encode(), {"Allow": "GET, HEAD",
                                                               "Content-Type": "text/plain; charset=utf-8"})
            else:
                self._reply(404, f"this port serves only GET {PATH}\n".encode())

        do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _refuse

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: Prometheus scrapes every few seconds; failures are in the status codes it records."""

    return MetricsOnly


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description="Serve only GET /metrics from vLLM on a port of its own.")
    parser.add_argument("--listen", required=True, help="HOST:PORT to listen on")
    parser.add_argument("--upstream", required=True, help="vLLM's metrics URL, e.g. http://127.0.0.1:8000/metrics")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    server = ThreadingHTTPServer((host, int(port)), make_handler(args.upstream))
    server.daemon_threads = True
    server.serve_forever()  # until SIGTERM (the kubelet's stop), whose default action ends the process


if __name__ == "__main__":  # `python3 -c <this source> --listen … --upstream …` (the pod) or `python -m`
    main(sys.argv[1:])
