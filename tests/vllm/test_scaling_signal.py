"""The signals the autoscalers read exist on a running vLLM, under the names and labels the rendered
ScaledObject's query selects (components/autoscaling.py): a metric renamed on either side fails here."""

from __future__ import annotations

import re

import httpx
import pytest

from components.autoscaling import METRIC_SERIES, signal_query
from tests.vllm.conftest import TOOL_MODEL, PodServers
from tests.vllm.metrics import parse_metrics, sample
from tkf_infra import vllm_metrics as vm
from tkf_infra.config import validate_catalog
from tkf_infra.config.scaling import ScalingMetric


@pytest.mark.parametrize("metric", list(ScalingMetric))
def test_every_scaling_signal_is_served_under_the_name_the_query_selects(pods: PodServers,
                                                                        metric: ScalingMetric) -> None:
    pod = pods.get("vllm", TOOL_MODEL)
    served = pod.endpoint["servedName"]
    # The query as rendered for an entry of this served name: its series and its model_name selector.
    doc = {"serving": {"allowCpu": True}, "models": [{
        "name": "m", "repo": "a/b", "revision": "0" * 40, "servedName": served, "gpusPerNode": 0,
        "maxModelLen": 512, "scaling": {"maxReplicas": 2, "metric": metric.value}}]}
    (entry,) = validate_catalog(doc).models
    query = signal_query(entry, "ns")
    found = re.fullmatch(r'sum\(([^{]+)\{namespace="ns",' + vm.MODEL_LABEL + r'="([^"]+)"\}\)', query)
    assert found, query
    series, selected = found.groups()
    assert series == METRIC_SERIES[metric] and selected == served
    # What Prometheus scrapes: the metrics sidecar's page (the monitoring namespace's only port).
    metrics = parse_metrics(httpx.get(f"{pod.metrics.url}/metrics", timeout=10).text)
    value = sample(metrics, series, **{vm.MODEL_LABEL: served})
    assert value >= 0 and (metric != ScalingMetric.KV_CACHE_USAGE or value <= 1)
