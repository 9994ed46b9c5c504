"""The program's one AWS call: EC2's description of each EKS pool's instance type (GPUs, memory, CPUs).

Why at the edge and apart from `tkf_infra.sizing.ec2`: this is I/O (boto3, credentials, a region), which the
sizing module must not do; it only reads the items this returns. Each failure becomes a ``ValueError`` that
names the instance type and the fix, so one bad pool fails alone (`ec2_facts`).
"""

from __future__ import annotations

from typing import Any

from tkf_infra.config import Catalog
from tkf_infra.sizing.ec2 import InstanceGpus, instance_gpus


def describe_instance_types(instance_types: list[str], client: Any = None,
                            region: str | None = None) -> list[dict[str, Any]]:
    """EC2's DescribeInstanceTypes items for these types: the program's one AWS call (`Edge.ec2_client`).

    Raises ``ValueError`` with the whole reason and its fix: an unknown instance type (AWS answers
    InvalidInstanceType), or EC2 not reachable from this machine (no region or credentials configured,
    no network, the call refused).
    """
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError

    asked = ", ".join(instance_types)
    try:
        if client is None:
            import boto3

            client = boto3.client("ec2", region_name=region)
        pages = client.get_paginator("describe_instance_types").paginate(InstanceTypes=instance_types)
        return [item for page in pages for item in page.get("InstanceTypes", [])]
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


def ec2_facts(catalog: Catalog, client: Any = None, region: str | None = None) -> tuple[
        dict[str, InstanceGpus], dict[str, str]]:
    """GPU facts of every EKS pool's instance type (one call per type, so one bad type fails alone)."""
    found: dict[str, InstanceGpus] = {}
    errors: dict[str, str] = {}
    for itype in sorted({str(p.instance_type) for p in catalog.pools if p.kind == "eks"}):
        try:
            found.update(instance_gpus(describe_instance_types([itype], client=client, region=region)))
        except ValueError as exc:
            errors[itype] = str(exc)
    return found, errors
