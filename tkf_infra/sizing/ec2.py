"""EC2 instance type → GPU model, count and memory, via DescribeInstanceTypes.

An EKS node pool names an instance type, not a GPU; the fit check needs the GPU. AWS reports the
GPU by short name (``H100``, ``A10G``) and memory in MiB, which we map onto the GPU table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tkf_infra.sizing.gpus import GPUS, GpuSpec, lookup_gpu


@dataclass(frozen=True)
class InstanceGpus:
    instance_type: str
    gpu_name: str
    manufacturer: str
    count: int
    memory_mib: int  # per GPU
    gpu: GpuSpec | None  # None when the part is not in our table


def _match(name: str, memory_mib: int) -> GpuSpec | None:
    """Pick the table entry with this AWS name whose nominal size is nearest the reported MiB."""
    candidates = [g for g in GPUS if g.name.split("-")[0].lower() == name.lower()]
    if not candidates:
        try:
            return lookup_gpu(name)
        except KeyError:
            return None
    return min(candidates, key=lambda g: abs(g.nominal_gib * 1024 - memory_mib))


def describe_gpu_instances(instance_types: list[str], client: Any = None, region: str | None = None) -> dict[
    str, InstanceGpus
]:  # fmt: skip
    """GPU facts per instance type; instance types without GPUs are reported with count 0.

    Raises ``ValueError`` naming unknown instance types (AWS answers InvalidInstanceType).
    """
    if client is None:
        import boto3

        client = boto3.client("ec2", region_name=region)
    from botocore.exceptions import ClientError

    out: dict[str, InstanceGpus] = {}
    try:
        pages = client.get_paginator("describe_instance_types").paginate(InstanceTypes=instance_types)
        for page in pages:
            for item in page.get("InstanceTypes", []):
                itype = item["InstanceType"]
                gpus = (item.get("GpuInfo") or {}).get("Gpus") or []
                if not gpus:
                    out[itype] = InstanceGpus(itype, "", "", 0, 0, None)
                    continue
                g = gpus[0]
                mem = int((g.get("MemoryInfo") or {}).get("SizeInMiB") or 0)
                out[itype] = InstanceGpus(
                    itype, str(g.get("Name")), str(g.get("Manufacturer")), int(g.get("Count") or 0), mem,
                    _match(str(g.get("Name")), mem),
                )  # fmt: skip
    except ClientError as exc:
        raise ValueError(
            f"EC2 does not know instance type(s) {instance_types}: {exc}; check nodePools[].instanceType"
        ) from exc
    return out
