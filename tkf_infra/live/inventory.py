"""Live GPU inventory from DCGM (through Prometheus), and the pool checks built on it.

The stack file *says* which GPUs a pool has; DCGM *measures* it. Reading DCGM lets a preview refuse a
pool whose nodes carry a different GPU than configured (a wrong fit verdict otherwise goes unnoticed
until vLLM runs out of memory, after the weights were pulled), and lets the fit check use the
framebuffer that is really free where GPUs are time-sliced between pods. Problems are attributed to
the models they would break, so the rest of the fleet still deploys.

Everything here is best-effort by design: the inventory only ever *adds* confidence to configured
facts. An unreachable or empty Prometheus becomes a warning, never an exception, so a monitoring
outage cannot block a deploy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tkf_infra.config import Catalog, NodePool
from tkf_infra.live.prometheus import PrometheusClient, PrometheusQueryError
from tkf_infra.sizing.gpus import lookup_gpu, same_gpu, stack_name

MIB = 1024 * 1024
GIB = 2**30

# DCGM exporter metric names (gauges, MiB). FB_TOTAL is not in DCGM's default counter set, so the
# total is derived as free + used + reserved.
DCGM_FB_FREE = "DCGM_FI_DEV_FB_FREE"
DCGM_FB_USED = "DCGM_FI_DEV_FB_USED"
DCGM_FB_RESERVED = "DCGM_FI_DEV_FB_RESERVED"

# Released dcgm-exporter tags spell the node label "Hostname"; its main branch spells it "hostname".
_HOST_LABELS = ("Hostname", "hostname")
_DCGM_GROUP_LABELS = (*_HOST_LABELS, "gpu", "UUID", "modelName", "GPU_I_PROFILE", "GPU_I_ID", "instance")


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
    try:
        with PrometheusClient(prometheus_url, timeout_s) as client:
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
            (h, recs) for h, recs in observed if not all(same_gpu(configured_product, r.product) for r in recs)
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
        h: recs for h, recs in by_host.items() if all(same_gpu(configured_product, r.product) for r in recs)
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
    """Name the stack keys (tkf_infra.config.NodePool aliases) a user edits to resolve the mismatch."""
    reported = sorted({stack_name(r.product) for _, recs in bad for r in recs})
    fewest = min(_gpu_count(recs) for _, recs in bad)
    wrong_product = any(not same_gpu(product, p) for p in reported)
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


# --------------------------------------------------------------------------------------------
# The stack checked against the inventory
# --------------------------------------------------------------------------------------------


@dataclass
class LiveCheck:
    """What the inventory says about the stack: warnings, refused pools, and the models they would break."""

    warnings: list[str] = field(default_factory=list)
    pool_errors: dict[str, list[str]] = field(default_factory=dict)
    model_problems: dict[str, str] = field(default_factory=dict)


def _pool_total_bytes(pool: NodePool) -> int | None:
    if pool.gpu_memory_gib:
        return int(pool.gpu_memory_gib * GIB)
    try:
        return lookup_gpu(pool.gpu_product or "").memory_bytes
    except KeyError:
        return None


def _pool_hosts(pool: NodePool, inventory: InventoryResult) -> list[str]:
    """The pool's nodes: its `nodes` list, else every node whose GPUs match the pool's product."""
    if pool.nodes:
        return list(pool.nodes)
    return [h for h in inventory.hostnames()
            if all(same_gpu(pool.gpu_product or "", r.product) for r in inventory.records_for(h))]


def check_against_inventory(catalog: Catalog, inventory: InventoryResult) -> LiveCheck:
    """Pool facts confirmed against DCGM; shared GPUs checked against their free memory."""
    result = LiveCheck(warnings=list(inventory.warnings))
    if not inventory.gpus:
        return result
    models = catalog.models
    replicas = catalog.settings.platform.gpu_operator.time_slicing_replicas
    for pool in catalog.pools:
        if pool.gpus_per_node == 0 or not pool.gpu_product:
            continue
        errors = confirm_pool(pool.name, pool.gpu_product, pool.gpus_per_node, list(pool.nodes) or None, inventory)
        if errors:
            result.pool_errors[pool.name] = errors
            for m in models:
                if m.node_pool == pool.name and not m.is_cpu:
                    result.model_problems[m.name] = (f"model {m.name}: not deployed because its node pool is wrong: "
                                                     f"{errors[0]}")
            continue
        if replicas <= 1:
            continue
        free = free_memory_bytes_per_gpu(_pool_hosts(pool, inventory), inventory)
        total = _pool_total_bytes(pool)
        if free is None or total is None:
            continue
        for m in models:
            if m.node_pool != pool.name or m.is_cpu:
                continue
            need = m.gpu_memory_utilization * total
            if need > free:
                result.model_problems[m.name] = (
                    f"model {m.name}: the GPUs of node pool '{pool.name}' are shared (time-slicing, {replicas} "
                    f"per GPU) and the fullest has {free / GIB:.1f} GiB free according to DCGM (Prometheus at "
                    f"{inventory.prometheus_url}), but gpuMemoryUtilization {m.gpu_memory_utilization:.2f} asks "
                    f"vLLM for {need / GIB:.1f} GiB of {total / GIB:.1f} GiB, and vLLM refuses to start when less "
                    f"is free. Lower gpuMemoryUtilization to at most {int(free / total * 100) / 100:.2f}, or free "
                    "the GPUs."
                )
    return result
