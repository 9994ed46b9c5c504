"""The one Prometheus client of tkf-infra: instant queries over httpx, failures in words a user can act on.

Why not a client library: the HTTP API needed here is one endpoint (`/api/v1/query`), and a library
that retries refused connects for seconds, or hides a timeout inside a connection error, makes
"Prometheus is down" slow and vague. Here every failure becomes a PrometheusQueryError whose `kind`
tells a caller what went wrong (unreachable, timeout, a query Prometheus rejected, an HTTP error, a
URL that is not Prometheus) and whose message says it in a sentence.

Response format: https://prometheus.io/docs/prometheus/latest/querying/api/ (instant queries,
`resultType: vector`, sample values as strings, "NaN" for e.g. a rate over no traffic).
"""

from __future__ import annotations

import functools
import math
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import TracebackType
from typing import Any

import httpx

# A proxy in front of Prometheus (an ingress, kube-rbac-proxy) answers these while it restarts; one
# retry after a short pause rides that out without hiding a Prometheus that is really gone.
_GATEWAY_RETRY_STATUSES = frozenset({502, 503, 504})
_GATEWAY_RETRY_PAUSE_S = 0.2


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """httpx's default verification context, built once: loading the CA bundle costs ~50-100 ms,
    which a fresh context per client would add to every `status` call and every preview's inventory."""
    return httpx.create_ssl_context()


class FailureKind(StrEnum):
    UNREACHABLE = "unreachable"  # nothing answered: connection refused, DNS, TLS
    TIMEOUT = "timeout"  # connected (or trying) but no answer within the timeout
    BAD_QUERY = "bad_query"  # Prometheus answered 400/422: the PromQL was rejected
    HTTP = "http"  # any other non-2xx answer (404 wrong path, 401/403 auth, 5xx)
    NOT_PROMETHEUS = "not_prometheus"  # 200, but not the Prometheus API JSON
    BAD_URL = "bad_url"  # the URL itself cannot be requested


class PrometheusQueryError(Exception):
    """A query could not be answered; the message says what failed in words a user can act on."""

    def __init__(self, kind: FailureKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Sample:
    """One series of an instant-vector result. NaN (e.g. a rate over no traffic) becomes None."""

    labels: Mapping[str, str]
    value: float | None


class PrometheusClient:
    """Instant queries against one Prometheus base URL (no `/api/v1` suffix).

    `timeout_s` bounds connecting and waiting for the answer, so a hung server is reported within it;
    connects are never retried (a refused connect is final, and a CLI must say so at once).
    """

    def __init__(self, url: str, timeout_s: float = 5, *, snapshot: bool = False) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        #: With `snapshot`, every query after the first one that returns a series is evaluated at that
        #: series' instant (Prometheus' own clock, so the CLI host's clock does not matter): figures
        #: read one after another describe one moment, e.g. a queue and the requests running beside it.
        self.snapshot = snapshot
        self.at: float | None = None
        self._http = httpx.Client(timeout=httpx.Timeout(timeout_s), follow_redirects=True, verify=_tls_context())

    def __enter__(self) -> PrometheusClient:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def vector(self, promql: str) -> list[Sample]:
        """Run an instant query; raise PrometheusQueryError with a user-facing reason on any failure."""
        response = self._get(promql)
        if response.status_code in _GATEWAY_RETRY_STATUSES:
            time.sleep(_GATEWAY_RETRY_PAUSE_S)
            response = self._get(promql)
        if response.status_code in (400, 422):
            raise PrometheusQueryError(
                FailureKind.BAD_QUERY,
                f"answered HTTP {response.status_code} — query rejected: {_api_error(response) or promql}",
            )
        if not response.is_success:
            raise PrometheusQueryError(FailureKind.HTTP, f"answered HTTP {response.status_code}{_http_hint(response)}")
        samples = _parse_vector(response)
        if self.snapshot and self.at is None and samples:
            self.at = _evaluated_at(response)
        return samples

    def _get(self, promql: str) -> httpx.Response:
        params: dict[str, str | float] = {"query": promql}
        if self.at is not None:
            params["time"] = self.at
        try:
            return self._http.get(f"{self.url}/api/v1/query", params=params)
        except httpx.TimeoutException as exc:
            # Connect timeouts included: an address that swallows SYNs is as silent as a hung server.
            raise PrometheusQueryError(FailureKind.TIMEOUT, f"no answer within {self.timeout_s:g} s") from exc
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            raise PrometheusQueryError(
                FailureKind.BAD_URL, "not a valid http(s) URL (expected e.g. http://prometheus.monitoring.svc:9090)"
            ) from exc
        except httpx.ConnectError as exc:
            raise PrometheusQueryError(FailureKind.UNREACHABLE, f"could not connect ({_connect_reason(exc)})") from exc
        except httpx.HTTPError as exc:
            reason = f"request failed ({type(exc).__name__}: {exc})"
            raise PrometheusQueryError(FailureKind.UNREACHABLE, reason) from exc


def _parse_vector(response: httpx.Response) -> list[Sample]:
    not_api = PrometheusQueryError(
        FailureKind.NOT_PROMETHEUS,
        "answered, but not with the Prometheus HTTP API (is this the Prometheus base URL?)",
    )
    try:
        body: Any = response.json()
    except ValueError as exc:
        raise not_api from exc
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, dict) or body.get("status") != "success":
        raise not_api
    if data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        raise PrometheusQueryError(
            FailureKind.NOT_PROMETHEUS,
            f"answered with result type {data.get('resultType')!r} (expected an instant vector)",
        )
    samples: list[Sample] = []
    for item in data["result"]:
        try:
            labels = {str(k): str(v) for k, v in dict(item.get("metric", {})).items()}
            value = float(item["value"][1])
        except (AttributeError, KeyError, IndexError, TypeError, ValueError) as exc:
            raise PrometheusQueryError(
                FailureKind.NOT_PROMETHEUS, "answered with an unexpected result shape (not an instant vector)"
            ) from exc
        samples.append(Sample(labels=labels, value=None if math.isnan(value) else value))
    return samples


def _evaluated_at(response: httpx.Response) -> float | None:
    """The instant Prometheus evaluated an instant query at (every sample carries it)."""
    try:
        return float(response.json()["data"]["result"][0]["value"][0])
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def _api_error(response: httpx.Response) -> str:
    """Prometheus' own error text (`{"status":"error","errorType":...,"error":...}`), if it sent one."""
    try:
        body = response.json()
    except ValueError:
        return ""
    return str(body.get("error") or "") if isinstance(body, dict) else ""


def _http_hint(response: httpx.Response) -> str:
    code = response.status_code
    if code == 404:
        return " — is this the Prometheus base URL (no /api/v1 or /graph suffix)?"
    if code in (401, 403):
        return " — it wants credentials this tool does not send; use an in-cluster or port-forwarded URL"
    detail = _api_error(response)
    return f" — {detail}" if detail else ""


def _connect_reason(exc: httpx.ConnectError) -> str:
    """The OS reason ("Connection refused", "Name or service not known"), not httpx's wrapper text."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror
        cause = cause.__cause__ or cause.__context__
    text = str(exc)
    return text.split("] ", 1)[-1] if "] " in text else (text or type(exc).__name__)
