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


def _host(item: dict[str, Any]) -> tuple[int, int, int, int]:
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


def describe_gpu_instances(instance_types: list[str], client: Any = None, region: str | None = None) -> dict[
    str, InstanceGpus
]:  # fmt: skip
    """GPU facts per instance type; instance types without GPUs are reported with count 0.

    Raises ``ValueError`` with the whole reason and its fix: an unknown instance type (AWS answers
    InvalidInstanceType), or EC2 not reachable from this machine (no region or credentials configured,
    no network, the call refused).
    """
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

    asked = ", ".join(instance_types)
    out: dict[str, InstanceGpus] = {}
    try:
        if client is None:
            import boto3

            client = boto3.client("ec2", region_name=region)
        pages = client.get_paginator("describe_instance_types").paginate(InstanceTypes=instance_types)
        for page in pages:
            for item in page.get("InstanceTypes", []):
                itype = item["InstanceType"]
                host = _host(item)
                gpus = (item.get("GpuInfo") or {}).get("Gpus") or []
                if not gpus:
                    out[itype] = InstanceGpus(itype, "", "", 0, 0, None, *host)
                    continue
                g = gpus[0]
                mem = int((g.get("MemoryInfo") or {}).get("SizeInMiB") or 0)
                out[itype] = InstanceGpus(
                    itype, str(g.get("Name")), str(g.get("Manufacturer")), int(g.get("Count") or 0), mem,
                    _match(str(g.get("Name")), mem), *host,
                )  # fmt: skip
    except NoRegionError:
        raise ValueError(f"instance type {asked} cannot be looked up: no AWS region is configured on this machine; "
                         "set AWS_REGION (e.g. export AWS_REGION=us-east-1) or `region` in ~/.aws/config, "
                         "or run where the AWS CLI works") from None
    except NoCredentialsError:
        raise ValueError(f"instance type {asked} cannot be looked up: no AWS credentials are configured on this "
                         "machine; set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (`aws sts "
                         "get-caller-identity` must work)") from None
    except BotoCoreError as exc:
        raise ValueError(f"instance type {asked} cannot be looked up: EC2 did not answer ({exc}); check the "
                         "network and AWS_REGION") from None
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code.startswith("InvalidInstanceType") or code == "InvalidParameterValue":
            raise ValueError(f"instance type {asked} is not an EC2 instance type (EC2: {exc}); check "
                             "nodePools[].instanceType and use one such as p5.48xlarge or g6e.xlarge") from None
        raise ValueError(f"instance type {asked} cannot be looked up: EC2 refused DescribeInstanceTypes ({exc}); "
                         "the credentials need ec2:DescribeInstanceTypes in the pool's region") from None
    return out
