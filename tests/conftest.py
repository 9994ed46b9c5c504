"""Shared fixtures: the real-engine helpers (tests/engine_fixtures.py) and the Hub-compatible server
(tests/hub_server.py) are available to every tier, and moto's EC2 (`ec2`) to every test that plans EKS pools."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from tests.aws import AWS_ENV, REGION

pytest_plugins = ["tests.engine_fixtures", "tests.kube.apiserver", "tests.hub_server"]


@pytest.fixture()
def ec2(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """moto's EC2 in this process (its DescribeInstanceTypes answers from AWS's own catalog), fake credentials set."""
    for key, value in AWS_ENV.items():
        monkeypatch.setenv(key, value)
    with mock_aws():
        yield boto3.client("ec2", region_name=REGION)
