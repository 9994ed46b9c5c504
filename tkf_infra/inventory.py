"""Live GPU inventory from Prometheus (DCGM exporter), and the Prometheus query helper status.py shares.

The stack file *says* which GPUs a pool has; DCGM *measures* it. Reading DCGM lets a preview refuse a
pool whose nodes carry a different GPU than configured (a wrong fit verdict otherwise goes unnoticed
until vLLM runs out of memory), and lets the fit check use the framebuffer that is really free where
GPUs are time-sliced between pods.

Everything here is best-effort by design: the inventory only ever *adds* confidence to configured
facts. An unreachable or empty Prometheus becomes a warning, never an exception, so a monitoring
outage cannot block a deploy.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import requests
from prometheus_api_client.exceptions import PrometheusApiClientException
from prometheus_api_client.prometheus_connect import PrometheusConnect
from urllib3.exceptions import MaxRetryError, ReadTimeoutError
from urllib3.util.retry import Retry

from tkf_infra.sizing.gpus import lookup_gpu

MIB = 1024 * 1024

# DCGM exporter metric names (gauges, MiB). FB_TOTAL is not in DCGM's default counter set, so the
# total is derived as free + used + reserved.
DCGM_FB_FREE = "DCGM_FI_DEV_FB_FREE"
DCGM_FB_USED = "DCGM_FI_DEV_FB_USED"
DCGM_FB_RESERVED = "DCGM_FI_DEV_FB_RESERVED"

# Released dcgm-exporter tags spell the node label "Hostname"; its main branch spells it "hostname".
_HOST_LABELS = ("Hostname", "hostname")
_DCGM_GROUP_LABELS = (*_HOST_LABELS, "gpu", "UUID", "modelName", "GPU_I_PROFILE", "GPU_I_ID", "instance")


# --------------------------------------------------------------------------------------------
# Prometheus access (shared with tkf_infra.status)
# --------------------------------------------------------------------------------------------


class PrometheusQueryError(Exception):
    """A query could not be answered; the message says what failed in words a user can act on."""


@dataclass(frozen=True)
class Sample:
    """One series of an instant-vector result. NaN (e.g. a rate over no traffic) becomes None."""

    labels: Mapping[str, str]
    value: float | None


class PrometheusClient:
    """Thin wrapper over PrometheusConnect that turns every failure into PrometheusQueryError.

    The library's default retry policy sleeps for several seconds on a refused connection; a CLI
    that should say "Prometheus is down" within the user's timeout must not retry connects at all,
    so the policy is replaced: only gateway errors (a proxy in front of Prometheus) are retried, once.
    """

    def __init__(self, url: str, timeout_s: float = 5) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        retry = Retry(
            total=1,
            connect=0,
            read=0,
            status=1,
            backoff_factor=0.2,
            status_forcelist=(502, 503, 504),
            raise_on_status=False,
        )
        # The library annotates `timeout` as int, but passes it straight to requests, which takes
        # fractional seconds; going through Any keeps a 0.5 s timeout possible without a cast lie.
        connect: Any = PrometheusConnect
        self._conn: Any = connect(url=self.url, retry=retry, timeout=timeout_s)

    def vector(self, promql: str) -> list[Sample]:
        """Run an instant query; raise PrometheusQueryError with a user-facing reason on any failure."""
        try:
            raw = self._conn.custom_query(query=promql)
        except PrometheusApiClientException as exc:
            raise PrometheusQueryError(_describe_http_error(str(exc))) from exc
        except requests.exceptions.Timeout as exc:
            raise PrometheusQueryError(f"no answer within {self.timeout_s:g} s") from exc
        except (
            requests.exceptions.MissingSchema,
            requests.exceptions.InvalidSchema,
            requests.exceptions.InvalidURL,
        ) as exc:
            raise PrometheusQueryError(
                "not a valid http(s) URL (expected e.g. http://prometheus.monitoring.svc:9090)"
            ) from exc
        except requests.exceptions.ConnectionError as exc:
            if _is_timeout(exc):  # requests reports a read timeout with exhausted retries this way
                raise PrometheusQueryError(f"no answer within {self.timeout_s:g} s") from exc
            raise PrometheusQueryError(f"could not connect ({_connection_reason(exc)})") from exc
        except requests.exceptions.RequestException as exc:
            raise PrometheusQueryError(f"request failed ({type(exc).__name__})") from exc
        except (ValueError, KeyError, TypeError) as exc:
            # 200 with a body that is not the Prometheus API JSON (a login page, Grafana, ...).
            raise PrometheusQueryError(
                "answered, but not with the Prometheus HTTP API (is this the Prometheus base URL?)"
            ) from exc
        return _parse_vector(raw)

    def close(self) -> None:
        self._conn.close()


def _parse_vector(raw: object) -> list[Sample]:
    if not isinstance(raw, list):
        raise PrometheusQueryError("answered with an unexpected result type (expected an instant vector)")
    samples: list[Sample] = []
    for item in raw:
        if not isinstance(item, dict) or "value" not in item:
            raise PrometheusQueryError("answered with an unexpected result shape (not an instant vector)")
        labels = {str(k): str(v) for k, v in dict(item.get("metric", {})).items()}
        value = float(item["value"][1])
        samples.append(Sample(labels=labels, value=None if math.isnan(value) else value))
    return samples


def _describe_http_error(message: str) -> str:
    match = re.search(r"HTTP Status Code (\d+)", message)
    code = match.group(1) if match else "?"
    hint = ""
    if code == "404":
        hint = " — is this the Prometheus base URL (no /api/v1 or /graph suffix)?"
    elif code in ("401", "403"):
        hint = " — it wants credentials this tool does not send; use an in-cluster or port-forwarded URL"
    elif code == "400":
        detail = re.search(r'"error":"([^"]*)"', message)
        hint = f" — query rejected: {detail.group(1)}" if detail else ""
    return f"answered HTTP {code}{hint}"


def _is_timeout(exc: requests.exceptions.ConnectionError) -> bool:
    cause = exc.args[0] if exc.args else None
    # Only a read timeout: urllib3's NewConnectionError (refused, DNS) subclasses its connect-timeout class.
    return isinstance(cause, MaxRetryError) and isinstance(cause.reason, ReadTimeoutError)


def _connection_reason(exc: BaseException) -> str:
    match = re.search(r"\[Errno -?\d+\] ([^'\")]+)", str(exc))
    return match.group(1).strip() if match else type(exc).__name__


# --------------------------------------------------------------------------------------------
# GPU product names
# --------------------------------------------------------------------------------------------

# Tokens that do not distinguish one GPU model from another for sizing purposes (fallback only).
# fmt: off
_NOISE_TOKENS = frozenset({
    "NVIDIA", "TESLA", "GEFORCE", "SHARED", "GENERATION", "SXM", "SXM2", "SXM4", "SXM5", "PCIE",
    "HBM2", "HBM2E", "HBM3", "HBM3E", "GDDR6", "GDDR6X",
})
# fmt: on
_MEMORY_TOKEN = re.compile(r"^(\d+)GB?$")


@dataclass(frozen=True)
class ProductKey:
    """A GPU product reduced to what identifies it: model tokens plus memory size when stated."""

    model: tuple[str, ...]
    memory_gb: int | None

    def short_name(self) -> str:
        """The stack-file spelling, e.g. ("H100",), 80 -> "H100-80GB"."""
        base = "-".join(self.model)
        return f"{base}-{self.memory_gb}GB" if self.memory_gb is not None else base


def normalise_product(name: str) -> ProductKey:
    """Fallback for parts missing from the GPU table: reduce any spelling to model tokens + size.

    "NVIDIA H100 80GB HBM3" (DCGM), "NVIDIA-H100-80GB-HBM3-SHARED" (GPU Operator with time-slicing)
    and "H100-80GB" (stack file) all become (("H100",), 80). A MIG suffix ("-MIG-1g.10gb") is dropped
    because DCGM reports the parent GPU's name.
    """
    tokens = [t for t in re.split(r"[\s_\-]+", name.strip().upper()) if t]
    if "MIG" in tokens:
        tokens = tokens[: tokens.index("MIG")]
    model: list[str] = []
    memory: int | None = None
    for token in tokens:
        mem = _MEMORY_TOKEN.match(token)
        if mem:
            memory = int(mem.group(1))
        elif token not in _NOISE_TOKENS:
            model.append(token)
    return ProductKey(model=tuple(model), memory_gb=memory)


_CLUSTER_SUFFIX = re.compile(r"([\s_-]+MIG[\s_-].*|[\s_-]+SHARED)$", re.IGNORECASE)


def table_gpu_name(name: str) -> str | None:
    """The GPU table's name for any spelling of a part it knows, else None.

    The table (tkf_infra.sizing.gpus) is the authority for which parts are distinct, so the same
    names appear in fit verdicts and here. Time-slicing ("-SHARED") and MIG ("-MIG-1g.10gb")
    suffixes of GPU Operator labels are removed first: they describe sharing, not the part.
    """
    try:
        return lookup_gpu(_CLUSTER_SUFFIX.sub("", name.strip())).name
    except KeyError:
        return None


def stack_product_name(reported: str) -> str:
    """How to write a reported product in the stack file: the table name, else a short spelling."""
    return table_gpu_name(reported) or normalise_product(reported).short_name()


def products_match(configured: str, reported: str) -> bool:
    """True when both names denote the same GPU.

    Parts in the GPU table are compared by table entry, so "H100-80GB" matches DCGM's "NVIDIA H100
    80GB HBM3" but not "NVIDIA H100 PCIe" or "NVIDIA H100 NVL", which the table sizes separately.
    For parts the table lacks, model tokens must agree and memory sizes too when both name one.
    """
    a, b = table_gpu_name(configured), table_gpu_name(reported)
    if a is not None and b is not None:
        return a == b
    ka, kb = normalise_product(configured), normalise_product(reported)
    if not ka.model or ka.model != kb.model:
        return False
    return ka.memory_gb is None or kb.memory_gb is None or ka.memory_gb == kb.memory_gb


# --------------------------------------------------------------------------------------------
# Inventory
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuRecord:
    """One GPU (or MIG instance) as DCGM reports it. Memory in MiB, as DCGM exports it."""

    hostname: str
    gpu: str
    uuid: str
    product: str
    free_mib: int
    used_mib: int
    reserved_mib: int = 0
    mig_profile: str | None = None

    @property
    def total_mib(self) -> int:
        return self.free_mib + self.used_mib + self.reserved_mib

    @property
    def free_bytes(self) -> int:
        return self.free_mib * MIB

    @property
    def physical_id(self) -> str:
        """Identity of the physical GPU, so MIG instances of one GPU count once per node."""
        return self.uuid or self.gpu


@dataclass
class InventoryResult:
    """Per-GPU records plus warnings; an empty `gpus` list means "use configured facts"."""

    prometheus_url: str
    gpus: list[GpuRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def records_for(self, hostname: str) -> list[GpuRecord]:
        return [g for g in self.gpus if _same_host(g.hostname, hostname)]

    def hostnames(self) -> list[str]:
        return sorted({g.hostname for g in self.gpus})


def _same_host(a: str, b: str) -> bool:
    """Node names vs. hostnames: tolerate case and a short name against its FQDN."""
    a, b = a.lower(), b.lower()
    if a == b:
        return True
    if "." in a and "." in b:
        return False
    return a.split(".")[0] == b.split(".")[0]


def _host_of(labels: Mapping[str, str]) -> str:
    for key in _HOST_LABELS:
        if labels.get(key):
            return labels[key]
    return labels.get("instance", "").rsplit(":", 1)[0]


def _series_key(labels: Mapping[str, str]) -> tuple[str, str, str, str]:
    return (_host_of(labels), labels.get("UUID", ""), labels.get("gpu", ""), labels.get("GPU_I_ID", ""))


def read_gpu_inventory(prometheus_url: str, timeout_s: float = 5) -> InventoryResult:
    """Read every GPU's product and framebuffer use from DCGM series in Prometheus.

    Never raises: a failure is reported in `warnings` (what URL, what failed, and that configured
    facts are used instead) so callers can print it and carry on.
    """
    result = InventoryResult(prometheus_url=prometheus_url)
    fallback = "the GPU facts configured in the stack are used instead"
    by = ", ".join(_DCGM_GROUP_LABELS)
    client = PrometheusClient(prometheus_url, timeout_s)
    try:
        free = client.vector(f"max by ({by}) ({DCGM_FB_FREE})")
        if not free:
            result.warnings.append(
                f"Prometheus at {prometheus_url} has no {DCGM_FB_FREE} series (is the GPU Operator's DCGM "
                f"exporter enabled and scraped, e.g. dcgmExporter.serviceMonitor.enabled=true?); {fallback}."
            )
            return result
        used = {_series_key(s.labels): s.value for s in client.vector(f"max by ({by}) ({DCGM_FB_USED})")}
        reserved = {_series_key(s.labels): s.value for s in client.vector(f"max by ({by}) ({DCGM_FB_RESERVED})")}
    except PrometheusQueryError as exc:
        result.warnings.append(f"Prometheus at {prometheus_url}: {exc}; {fallback}.")
        return result
    finally:
        client.close()

    missing_used: list[str] = []
    records: dict[tuple[str, str, str, str], GpuRecord] = {}
    for sample in free:
        key = _series_key(sample.labels)
        labels = sample.labels
        used_mib = used.get(key)
        if used_mib is None:
            missing_used.append(f"{key[0]} GPU {labels.get('gpu', '?')}")
        records[key] = GpuRecord(
            hostname=key[0],
            gpu=labels.get("gpu", ""),
            uuid=labels.get("UUID", ""),
            product=labels.get("modelName", ""),
            free_mib=round(sample.value or 0),
            used_mib=round(used_mib or 0),
            reserved_mib=round(reserved.get(key) or 0),
            mig_profile=labels.get("GPU_I_PROFILE") or None,
        )
    result.gpus = sorted(records.values(), key=_record_sort_key)
    if missing_used:
        result.warnings.append(
            f"Prometheus at {prometheus_url}: no {DCGM_FB_USED} for {', '.join(missing_used)}; "
            "their used/total memory shows as 0 (add the counter to the DCGM exporter's metrics list)."
        )
    if any(not any(g.labels.get(k) for k in _HOST_LABELS) for g in free):
        result.warnings.append(
            f"Prometheus at {prometheus_url}: some DCGM series carry no Hostname label; their node is "
            "taken from the scrape address, which may not match Kubernetes node names."
        )
    return result


def _record_sort_key(g: GpuRecord) -> tuple[str, int, str, str]:
    index = int(g.gpu) if g.gpu.isdigit() else 1 << 30
    return (g.hostname, index, g.gpu, g.mig_profile or "")


def _describe_node(hostname: str, records: Sequence[GpuRecord]) -> str:
    counts: dict[str, int] = {}
    seen: set[tuple[str, str]] = set()
    for r in records:
        if (r.physical_id, r.product) not in seen:
            seen.add((r.physical_id, r.product))
            counts[r.product or "unknown product"] = counts.get(r.product or "unknown product", 0) + 1
    parts = ", ".join(f"{n} × {p}" for p, n in sorted(counts.items()))
    return f"{hostname} reports {parts}"


def _gpu_count(records: Iterable[GpuRecord]) -> int:
    return len({r.physical_id for r in records})


def confirm_pool(
    pool_name: str,
    configured_product: str,
    configured_gpus_per_node: int,
    node_selector_hostnames: list[str] | None,
    inventory: InventoryResult,
) -> list[str]:
    """Errors when the pool's nodes report a different GPU product or fewer GPUs than configured.

    Nodes absent from DCGM are not errors: they may not exist yet (first `up`) or DCGM may be down,
    and read_gpu_inventory has already warned about the latter. Without hostnames the pool's nodes
    are unknown, so the check only insists that *some* node in the cluster fits the description.
    """
    if not inventory.gpus:
        return []
    wanted = f"{configured_product} with {configured_gpus_per_node} GPU(s) per node"
    source = f"according to DCGM (Prometheus at {inventory.prometheus_url})"

    if node_selector_hostnames:
        nodes = [(h, inventory.records_for(h)) for h in node_selector_hostnames]
        observed = [(h, recs) for h, recs in nodes if recs]
        wrong_product = [
            (h, recs) for h, recs in observed if not all(products_match(configured_product, r.product) for r in recs)
        ]
        wrong_hosts = {h for h, _ in wrong_product}
        too_few = [
            (h, recs) for h, recs in observed if h not in wrong_hosts and _gpu_count(recs) < configured_gpus_per_node
        ]
        if not wrong_product and not too_few:
            return []
        bad = wrong_product + too_few
        reports = "; ".join(_describe_node(h, recs) for h, recs in bad)
        return [
            f"GPU pool '{pool_name}' is configured as {wanted}, but {source} {reports}. "
            + _fix_hint(pool_name, configured_product, configured_gpus_per_node, bad)
        ]

    by_host: dict[str, list[GpuRecord]] = {}
    for r in inventory.gpus:
        by_host.setdefault(r.hostname, []).append(r)
    matching = {
        h: recs for h, recs in by_host.items() if all(products_match(configured_product, r.product) for r in recs)
    }
    if any(_gpu_count(recs) >= configured_gpus_per_node for recs in matching.values()):
        return []
    bad = sorted(matching.items()) or sorted(by_host.items())
    reports = "; ".join(_describe_node(h, recs) for h, recs in bad)
    return [
        f"GPU pool '{pool_name}' is configured as {wanted}, but no node in the cluster has that; "
        f"{source} {reports}. " + _fix_hint(pool_name, configured_product, configured_gpus_per_node, bad)
    ]


def _fix_hint(pool_name: str, product: str, gpus_per_node: int, bad: Sequence[tuple[str, Sequence[GpuRecord]]]) -> str:
    """Name the stack keys (tkf_infra.settings.NodePool aliases) a user edits to resolve the mismatch."""
    reported = sorted({stack_product_name(r.product) for _, recs in bad for r in recs})
    fewest = min(_gpu_count(recs) for _, recs in bad)
    wrong_product = any(not products_match(product, p) for p in reported)
    changes: list[str] = []
    if wrong_product:
        changes.append(f"gpuProduct: {' or '.join(reported)}")
    if fewest < gpus_per_node:
        changes.append(f"gpusPerNode: {fewest}")
    return (
        f"Fix the stack file (Pulumi.<stack>.yaml), nodePools entry '{pool_name}': either set "
        f"{' and '.join(changes)} to match these nodes, or change its `nodes`/`labels` to select nodes "
        f"that really have {gpus_per_node} × {product}."
    )


def free_memory_bytes_per_gpu(pool_hostnames: list[str], inventory: InventoryResult) -> int | None:
    """Smallest free framebuffer among the pool's GPUs, in bytes; None when DCGM knows none of them.

    With time-slicing, other pods already hold memory on the GPU a new replica will share, so the
    fit check must budget against what is free, not the card's size. The minimum is used because
    the scheduler may place the replica on the fullest GPU.
    """
    frees = [r.free_bytes for h in pool_hostnames for r in inventory.records_for(h)]
    return min(frees) if frees else None
