"""EC2 instance-type lookup against moto's DescribeInstanceTypes."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tkf_infra.live.ec2 import describe_instance_types
from tkf_infra.sizing.ec2 import instance_gpus


def test_gpu_instances_map_to_gpu_table(ec2: object) -> None:
    info = instance_gpus(describe_instance_types(["g5.xlarge", "p4d.24xlarge", "g6.12xlarge", "m5.large"], client=ec2))
    assert info["g5.xlarge"].count == 1
    assert info["g5.xlarge"].gpu is not None and info["g5.xlarge"].gpu.name == "A10G"
    assert info["p4d.24xlarge"].count == 8
    assert info["p4d.24xlarge"].gpu is not None and info["p4d.24xlarge"].gpu.name == "A100-40GB"
    assert info["g6.12xlarge"].count == 4
    assert info["g6.12xlarge"].gpu is not None and info["g6.12xlarge"].gpu.name == "L4"
    assert info["m5.large"].count == 0 and info["m5.large"].gpu is None


def test_unknown_instance_type_is_named(ec2: object) -> None:
    with pytest.raises(ValueError, match="nodePools"):
        describe_instance_types(["g99.huge"], client=ec2)


def test_sizing_reads_the_instance_facts_it_is_handed_without_any_aws_call() -> None:
    """The edge makes the call; sizing turns DescribeInstanceTypes' items into facts (no client, no network)."""
    items = [{"InstanceType": "g6e.xlarge", "VCpuInfo": {"DefaultVCpus": 4}, "MemoryInfo": {"SizeInMiB": 32768},
              "GpuInfo": {"Gpus": [{"Name": "L40S", "Manufacturer": "NVIDIA", "Count": 1,
                                    "MemoryInfo": {"SizeInMiB": 45776}}]},
              "NetworkInfo": {"MaximumNetworkInterfaces": 2, "Ipv4AddressesPerInterface": 15}}]
    info = instance_gpus(items)["g6e.xlarge"]
    assert (info.count, info.vcpus, info.host_memory_mib, info.default_max_enis, info.ipv4_per_eni) == (1, 4, 32768,
                                                                                                         2, 15)
    assert info.gpu is not None and info.gpu.name.startswith("L40S")


SIZING = Path(__file__).resolve().parents[1] / "tkf_infra" / "sizing"
#: Modules whose import in tkf_infra/sizing/ would mean I/O (or the engine) inside the pure package.
IO_MODULES = ("boto3", "botocore", "httpx", "urllib", "requests", "socket", "subprocess", "pulumi",
              "huggingface_hub", "yaml")


def test_the_sizing_package_imports_nothing_that_does_io() -> None:
    """docs/architecture.md: `tkf_infra/sizing/` is pure; EC2, the Hub and the cluster are read at the edge."""
    found = []
    for path in sorted(SIZING.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.name} imports {n}" for n in names if n.split(".")[0] in IO_MODULES]
    assert not found, f"tkf_infra/sizing/ must stay free of I/O; move these reads to tkf_infra/program.py: {found}"
