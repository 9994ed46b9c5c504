"""A stand-in for a model's alias Service while its pods roll, and a steady stream of gateway traffic.

``RollingService`` routes each request to one of its current endpoints (round robin, one request at a
time per connection, as kube-proxy's per-connection choice does for fresh connections); a rolling
update adds the new pod as an endpoint once it is ready, then takes the old one out and waits until
its requests in flight are done (the graceful termination a pod gets) before the pod is stopped.
It is a plain HTTP relay: it never touches the Authorization header, so the key the gateway sends is
the key the pod judges. With no endpoint it answers 503, as a Service without ready pods does.

``Traffic`` sends chat completions through a gateway, one after another, and keeps every outcome:
the rotation test requires each of them to be a 200.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "host",
              "proxy-connection", "te", "trailer", "upgrade"}


class RollingService:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._endpoints: dict[str, str] = {}
        self._next = 0
        self.served: Counter[str] = Counter()
        self.in_flight: Counter[str] = Counter()
        self.statuses: Counter[tuple[str, int]] = Counter()
        self._client = httpx.Client(timeout=120)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def add(self, name: str, url: str) -> None:
        with self._lock:
            self._endpoints[name] = url

    def remove(self, name: str, drain_s: float = 120) -> None:
        """Take ``name`` out of the endpoints, then wait for its requests in flight to finish."""
        with self._lock:
            del self._endpoints[name]
        deadline = time.monotonic() + drain_s
        while self.in_flight[name] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not self.in_flight[name], f"{name} still had requests in flight after {drain_s} s"

    def _pick(self) -> tuple[str, str] | None:
        with self._lock:
            if not self._endpoints:
                return None
            names = sorted(self._endpoints)
            name = names[self._next % len(names)]
            self._next += 1
            self.in_flight[name] += 1
            return name, self._endpoints[name]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        service = self

        class Relay(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _relay(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                picked = service._pick()
                if picked is None:
                    self._send(503, {}, b"no ready endpoint\n")
                    return
                name, base = picked
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                    r = service._client.request(self.command, base + self.path, headers=headers, content=body)
                    service.served[name] += 1
                    service.statuses[(name, r.status_code)] += 1
                    self._send(r.status_code, dict(r.headers), r.content)
                except httpx.HTTPError as err:
                    service.statuses[(name, 502)] += 1
                    self._send(502, {}, f"{name}: {err}\n".encode())
                finally:
                    with service._lock:
                        service.in_flight[name] -= 1

            def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
                self.send_response(status)
                for k, v in headers.items():
                    if k.lower() not in HOP_BY_HOP:
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _relay

            def log_message(self, format: str, *args: object) -> None:
                pass

        return Relay

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._client.close()


@dataclass
class Outcome:
    at: float
    gateway: str
    status: int
    detail: str


@dataclass
class Traffic:
    """Chat completions through ``gateway`` (switchable) until stopped; every outcome kept."""

    gateway: tuple[str, str, str]  # (name, base URL, master key)
    model: str
    pause_s: float = 0.2
    outcomes: list[Outcome] = field(default_factory=list)
    in_flight: Counter[str] = field(default_factory=Counter)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Traffic:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        body = {"model": self.model, "max_tokens": 4, "messages": [{"role": "user", "content": "Say hi"}]}
        with httpx.Client(timeout=120) as client:
            while not self._stop.is_set():
                name, url, key = self.gateway
                self.in_flight[name] += 1
                try:
                    r = client.post(f"{url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"})
                    ok = r.status_code == 200 and bool(r.json().get("choices"))
                    self.outcomes.append(Outcome(time.monotonic(), name, r.status_code if ok else -r.status_code,
                                                 "" if ok else r.text[:300]))
                except httpx.HTTPError as err:
                    self.outcomes.append(Outcome(time.monotonic(), name, 0, repr(err)))
                finally:
                    self.in_flight[name] -= 1
                self._stop.wait(self.pause_s)

    def switch(self, name: str, url: str, key: str, drain_s: float = 120) -> str:
        """Send from now on through another gateway; wait until the old one has no request in flight."""
        old = self.gateway[0]
        self.gateway = (name, url, key)
        deadline = time.monotonic() + drain_s
        while self.in_flight[old] and time.monotonic() < deadline:
            time.sleep(0.05)
        return old

    def wait_until(self, done: Callable[[], bool], what: str, timeout_s: float = 300) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            assert time.monotonic() < deadline, f"timed out waiting for {what}; last outcomes: {self.outcomes[-3:]}"
            assert self._thread is not None and self._thread.is_alive(), "the traffic thread died"
            time.sleep(0.1)

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=180)

    def failures(self) -> list[Any]:
        return [o for o in self.outcomes if o.status != 200]
