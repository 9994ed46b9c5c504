"""GPU inventory from DCGM series in a real Prometheus, and the pool checks built on it."""

from __future__ import annotations

import socket
import time

import pytest

from tkf_infra.live.inventory import MIB, confirm_pool, free_memory_bytes_per_gpu, read_gpu_inventory
from tkf_infra.sizing.gpus import same_gpu, stack_name

from .conftest import PromServer
from .metrics_fixtures import DCGM_NODES

# ------------------------------------------------------------------ product names (pure)


@pytest.mark.parametrize(
    ("configured", "reported"),
    [
        ("H100-80GB", "NVIDIA H100 80GB HBM3"),  # DCGM modelName
        ("H100-80GB", "NVIDIA-H100-80GB-HBM3"),  # GPU Operator nvidia.com/gpu.product
        ("H100-80GB", "NVIDIA-H100-80GB-HBM3-SHARED"),  # ... with time-slicing
        ("h100-80gb", "NVIDIA H100 80GB HBM3"),
        ("H100-PCIe", "NVIDIA H100 PCIe"),
        ("GH200-480GB", "NVIDIA GH200 480GB"),
        ("Quadro-Z9000-48GB", "NVIDIA Quadro Z9000 48GB"),  # not in the GPU table: token fallback
        ("A100-80GB", "NVIDIA A100-SXM4-80GB"),
        ("A100-40GB", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"),
        ("T4", "Tesla T4"),
        ("L40S", "NVIDIA L40S"),
    ],
)
def test_same_gpu_in_different_spellings_matches(configured: str, reported: str) -> None:
    assert same_gpu(configured, reported)


@pytest.mark.parametrize(
    ("configured", "reported"),
    [
        ("H100-80GB", "NVIDIA H100 NVL"),  # 94 GB part, must not pass as an 80 GB one
        ("H100-80GB", "NVIDIA H100 PCIe"),  # sized as its own part in the GPU table
        ("A100", "NVIDIA A100-SXM4-80GB"),  # the table reads a bare "A100" as the 40 GB part
        ("Quadro-Z9000-48GB", "NVIDIA Quadro Z9000 24GB"),  # token fallback still compares sizes
        ("A100-80GB", "NVIDIA A100-SXM4-40GB"),
        ("L4", "NVIDIA L40S"),
        ("H100-80GB", "NVIDIA H200"),
        ("", "NVIDIA H100 80GB HBM3"),
    ],
)
def test_different_gpus_do_not_match(configured: str, reported: str) -> None:
    assert not same_gpu(configured, reported)


def test_fix_suggestions_use_names_the_stack_file_accepts() -> None:
    assert stack_name("NVIDIA A100-SXM4-40GB") == "A100-40GB"
    assert stack_name("NVIDIA-H100-80GB-HBM3-SHARED") == "H100-80GB"
    assert stack_name("NVIDIA Quadro Z9000 48GB") == "QUADRO-Z9000-48GB"


# ------------------------------------------------------------------ against Prometheus


@pytest.mark.prometheus
def test_inventory_reports_every_gpu_with_product_and_memory(prom: PromServer) -> None:
    inventory = read_gpu_inventory(prom.url)

    assert inventory.warnings == []
    expected = {(g.hostname, str(g.index)): g for gpus in DCGM_NODES.values() for g in gpus}
    assert {(r.hostname, r.gpu) for r in inventory.gpus} == set(expected)
    for record in inventory.gpus:
        fake = expected[(record.hostname, record.gpu)]
        assert record.product == fake.product
        assert record.uuid == fake.uuid
        assert (record.free_mib, record.used_mib, record.reserved_mib) == (
            fake.free_mib,
            fake.used_mib,
            fake.reserved_mib,
        )
        assert record.total_mib == fake.free_mib + fake.used_mib + fake.reserved_mib


@pytest.mark.prometheus
@pytest.mark.parametrize("spelling", ["H100-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA H100 80GB HBM3"])
def test_pool_matching_its_nodes_is_confirmed(prom: PromServer, spelling: str) -> None:
    inventory = read_gpu_inventory(prom.url)
    assert confirm_pool("h100", spelling, len(DCGM_NODES["gpu-node-a"]), ["gpu-node-a"], inventory) == []
    # Kubernetes node names may be FQDNs while DCGM reports the short hostname.
    assert confirm_pool("a100", "A100-40GB", 4, ["gpu-node-b.cluster.internal"], inventory) == []


@pytest.mark.prometheus
def test_pool_configured_with_another_product_is_refused(prom: PromServer) -> None:
    inventory = read_gpu_inventory(prom.url)
    node_b = DCGM_NODES["gpu-node-b"]

    errors = confirm_pool("big-h100", "H100-80GB", len(node_b), ["gpu-node-b"], inventory)

    assert len(errors) == 1
    message = errors[0]
    assert "'big-h100'" in message  # the pool
    assert "H100-80GB" in message  # what the stack says
    assert f"gpu-node-b reports {len(node_b)} × {node_b[0].product}" in message  # what the node says
    assert "Pulumi.<stack>.yaml" in message and "gpuProduct: A100-40GB" in message  # how to fix it
    assert prom.url in message


@pytest.mark.prometheus
def test_pool_with_more_gpus_per_node_than_the_nodes_have_is_refused(prom: PromServer) -> None:
    inventory = read_gpu_inventory(prom.url)
    have = len(DCGM_NODES["gpu-node-a"])

    errors = confirm_pool("h100", "H100-80GB", have + 6, ["gpu-node-a"], inventory)

    assert len(errors) == 1
    assert f"{have + 6} GPU(s) per node" in errors[0]
    assert f"gpu-node-a reports {have} × NVIDIA H100 80GB HBM3" in errors[0]
    assert f"set gpusPerNode: {have}" in errors[0]
    assert "gpuProduct:" not in errors[0]  # the product is right; only the count is wrong


@pytest.mark.prometheus
def test_pool_without_known_nodes_needs_some_matching_node(prom: PromServer) -> None:
    inventory = read_gpu_inventory(prom.url)

    assert confirm_pool("h100", "H100-80GB", 2, None, inventory) == []
    errors = confirm_pool("l40s", "L40S", 1, None, inventory)
    assert len(errors) == 1
    assert "no node in the cluster" in errors[0]
    assert "gpu-node-a" in errors[0] and "gpu-node-b" in errors[0]


@pytest.mark.prometheus
def test_free_memory_is_the_smallest_free_framebuffer_of_the_pool(prom: PromServer) -> None:
    inventory = read_gpu_inventory(prom.url)

    for node, gpus in DCGM_NODES.items():
        assert free_memory_bytes_per_gpu([node], inventory) == min(g.free_mib for g in gpus) * MIB
    everything = [g for gpus in DCGM_NODES.values() for g in gpus]
    assert free_memory_bytes_per_gpu(list(DCGM_NODES), inventory) == min(g.free_mib for g in everything) * MIB
    assert free_memory_bytes_per_gpu(["node-without-dcgm"], inventory) is None


@pytest.mark.prometheus
def test_prometheus_down_is_a_warning_and_configured_facts_are_used(dead_prometheus_url: str) -> None:
    started = time.monotonic()
    inventory = read_gpu_inventory(dead_prometheus_url, timeout_s=2)

    assert time.monotonic() - started < 2
    assert inventory.gpus == []
    assert len(inventory.warnings) == 1
    assert dead_prometheus_url in inventory.warnings[0]
    assert "could not connect" in inventory.warnings[0]
    assert "configured" in inventory.warnings[0]
    # With nothing measured, no pool can be refused.
    assert confirm_pool("h100", "H100-80GB", 8, ["gpu-node-a"], inventory) == []
    assert free_memory_bytes_per_gpu(["gpu-node-a"], inventory) is None


def test_prometheus_that_never_answers_times_out_with_a_warning() -> None:
    with socket.socket() as listener:  # accepts connections, never replies: a hung server
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        started = time.monotonic()
        inventory = read_gpu_inventory(url, timeout_s=0.5)

    assert time.monotonic() - started < 2
    assert inventory.gpus == []
    assert len(inventory.warnings) == 1
    assert url in inventory.warnings[0] and "no answer within 0.5 s" in inventory.warnings[0]


@pytest.mark.prometheus
def test_url_that_is_not_prometheus_is_a_warning(prom: PromServer) -> None:
    url = f"http://{prom.exporter.address}"
    inventory = read_gpu_inventory(url)

    assert inventory.gpus == []
    assert len(inventory.warnings) == 1
    assert url in inventory.warnings[0] and "HTTP 404" in inventory.warnings[0]


@pytest.mark.prometheus
def test_node_whose_exporter_is_down_is_not_held_against_its_pool(prom: PromServer) -> None:
    with prom.target_down("dcgm-gpu-node-b"):
        inventory = read_gpu_inventory(prom.url)

        assert inventory.hostnames() == ["gpu-node-a"]
        # gpu-node-b really has A100s, but nothing is measured now: no refusal on stale facts.
        assert confirm_pool("big-h100", "H100-80GB", 4, ["gpu-node-b"], inventory) == []


@pytest.mark.prometheus
def test_no_dcgm_series_at_all_is_a_warning(prom: PromServer) -> None:
    with prom.target_down(*(f"dcgm-{node}" for node in DCGM_NODES)):
        inventory = read_gpu_inventory(prom.url)

    assert inventory.gpus == []
    assert len(inventory.warnings) == 1
    assert "no DCGM_FI_DEV_FB_FREE series" in inventory.warnings[0]
    assert prom.url in inventory.warnings[0] and "configured" in inventory.warnings[0]
