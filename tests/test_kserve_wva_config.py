"""KServe's scaling settings written into the inferenceservice-config our KServe install renders."""

from __future__ import annotations

import json
from typing import Any, cast

import pulumi

from components.prerequisites import KSERVE_CONFIG_MAP, WVA_CONFIG_KEY, kserve_wva_config

PROM = "http://prometheus.monitoring.svc:9090"


def transformed(type_: str, name: str, data: dict[str, str]) -> pulumi.ResourceTransformResult | None:
    args = pulumi.ResourceTransformArgs(True, type_, f"kserve-llmisvc-resources:kserve/{name}",
                                        {"metadata": {"name": name, "namespace": "kserve"}, "data": data},
                                        pulumi.ResourceOptions())
    return kserve_wva_config(PROM)(args)


def test_the_config_map_gains_the_key_kserve_reads_and_keeps_the_rest() -> None:
    deploy = '{"defaultDeploymentMode": "x"}'
    result = transformed("kubernetes:core/v1:ConfigMap", KSERVE_CONFIG_MAP, {"deploy": deploy})
    assert result is not None
    data = cast(dict[str, Any], result.props["data"])
    assert json.loads(data[WVA_CONFIG_KEY]) == {"prometheus": {"url": PROM}}
    assert data["deploy"] == deploy


def test_nothing_else_is_touched() -> None:
    assert transformed("kubernetes:core/v1:ConfigMap", "another-config", {}) is None
    assert transformed("kubernetes:core/v1:Secret", KSERVE_CONFIG_MAP, {}) is None
