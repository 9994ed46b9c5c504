"""EC2 instance type → GPU model, count and memory, from DescribeInstanceTypes' answer.

An EKS node pool names an instance type, not a GPU; the fit check needs the GPU. AWS reports the
GPU by short name (``H100``, ``A10G``) and memory in MiB, which we map onto the GPU table. The call
itself is the program's edge (`tkf_infra.live.ec2.describe_instance_types`); this module only reads
its answer, so `sizing` stays free of I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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
    vcpus: int = 0
    """VCpuInfo.DefaultVCpus (0: EC2 did not say)."""
    host_memory_mib: int = 0
    """MemoryInfo.SizeInMiB of the instance (0: EC2 did not say)."""
    default_max_enis: int = 0
    """MaximumNetworkInterfaces of the default network card: with the next, the EKS AMI's max pods."""
    ipv4_per_eni: int = 0


def _match(name: str, memory_mib: int) -> GpuSpec | None:
    """Pick the table entry with this AWS name whose nominal size is nearest the reported MiB."""
    candidates = [g for g in GPUS if g.name.split("-")[0].lower() == name.lower()]
    if not candidates:
        try:
            return lookup_gpu(name)
        except KeyError:
            return None
    return min(candidates, key=lambda g: abs(g.nominal_gib * 1024 - memory_mib))


def _host(item: Mapping[str, Any]) -> tuple[int, int, int, int]:
    """vCPUs, memory MiB, ENIs of the default network card and IPv4 addresses per ENI of one instance type.

    The ENI figures are the ones the EKS AMI's nodeadm reads for max pods (amazon-eks-ami
    nodeadm/internal/util/ec2.go@v20260724, getInstanceInfoFromDescribeResponse).
    """
    net = item.get("NetworkInfo") or {}
    default_card = int(net.get("DefaultNetworkCardIndex") or 0)
    enis = next((int(c.get("MaximumNetworkInterfaces") or 0) for c in net.get("NetworkCards") or []
                 if int(c.get("NetworkCardIndex") or 0) == default_card), int(net.get("MaximumNetworkInterfaces") or 0))
    return (int((item.get("VCpuInfo") or {}).get("DefaultVCpus") or 0),
            int((item.get("MemoryInfo") or {}).get("SizeInMiB") or 0), enis,
            int(net.get("Ipv4AddressesPerInterface") or 0))


def instance_gpus(instance_types: Iterable[Mapping[str, Any]]) -> dict[str, InstanceGpus]:
    """GPU and host facts per instance type, from DescribeInstanceTypes' `InstanceTypes` items.

    Pure: the program's edge (`tkf_infra.live.ec2.describe_instance_types`) makes the AWS call and hands
    the items here, so sizing reads no network. Instance types without GPUs are reported with count 0.
    """
    out: dict[str, InstanceGpus] = {}
    for item in instance_types:
        itype = str(item["InstanceType"])
        host = _host(item)
        gpus = (item.get("GpuInfo") or {}).get("Gpus") or []
        if not gpus:
            out[itype] = InstanceGpus(itype, "", "", 0, 0, None, *host)
            continue
        g = gpus[0]
        mem = int((g.get("MemoryInfo") or {}).get("SizeInMiB") or 0)
        out[itype] = InstanceGpus(itype, str(g.get("Name")), str(g.get("Manufacturer")), int(g.get("Count") or 0),
                                  mem, _match(str(g.get("Name")), mem), *host)
    return out
