"""EC2 instance-type lookup against moto's DescribeInstanceTypes."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from tkf_infra.sizing.ec2 import describe_gpu_instances


@pytest.fixture()
def ec2(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "testing")
    with mock_aws():
        yield boto3.client("ec2", region_name="us-east-1")


def test_gpu_instances_map_to_gpu_table(ec2: object) -> None:
    info = describe_gpu_instances(["g5.xlarge", "p4d.24xlarge", "g6.12xlarge", "m5.large"], client=ec2)
    assert info["g5.xlarge"].count == 1
    assert info["g5.xlarge"].gpu is not None and info["g5.xlarge"].gpu.name == "A10G"
    assert info["p4d.24xlarge"].count == 8
    assert info["p4d.24xlarge"].gpu is not None and info["p4d.24xlarge"].gpu.name == "A100-40GB"
    assert info["g6.12xlarge"].count == 4
    assert info["g6.12xlarge"].gpu is not None and info["g6.12xlarge"].gpu.name == "L4"
    assert info["m5.large"].count == 0 and info["m5.large"].gpu is None


def test_unknown_instance_type_is_named(ec2: object) -> None:
    with pytest.raises(ValueError, match="nodePools"):
        describe_gpu_instances(["g99.huge"], client=ec2)
