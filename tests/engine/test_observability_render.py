"""`platform.dashboards` on the dev stack, rendered by the real provider in render mode (as `make up` writes it):
the dashboards' ConfigMaps with Grafana's sidecar label, the PrometheusRule (a kind render mode must place with no
cluster to ask, its CRD not in the program) and the plain rule file, in the monitoring namespace; and the fleet
facts ConfigMap every serving pod mounts. A second run changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from components.alert_rules import rule_groups
from components.observability import RULE_FILE_KEY, VLLM_DASHBOARDS
from tests.engine.test_platform_charts import keyed, read_rendered
from tests.engine_fixtures import EngineStack
from tkf_infra import names

pytestmark = pytest.mark.engine


def test_the_dev_stack_renders_dashboards_and_rules_when_enabled(make_stack: Callable[..., EngineStack]) -> None:
    es = make_stack()

    def enable(config: dict[str, Any]) -> None:
        config["tkf-infra:platform"]["dashboards"] = {}

    es.edit_config(enable)
    assert es.stack.up(color="never").summary.result == "succeeded"
    objs = keyed(read_rendered(es.render_dir))
    dashboards = {name for kind, name in objs if kind == "ConfigMap" and names.DASHBOARD_PREFIX in name}
    assert dashboards == {f"monitoring/{names.DASHBOARD_PREFIX}{k}" for k in ("fleet", *VLLM_DASHBOARDS)}
    for name in dashboards:
        cm = objs[("ConfigMap", name)]
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert all(json.loads(text)["panels"] for text in cm["data"].values())
    rule = objs[("PrometheusRule", f"monitoring/{names.ALERT_RULES}")]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["spec"]["groups"] == rule_groups("llm-serving")
    plain = yaml.safe_load(objs[("ConfigMap", f"monitoring/{names.ALERT_RULES}")]["data"][RULE_FILE_KEY])
    assert plain["groups"] == rule["spec"]["groups"]
    facts = json.loads(objs[("ConfigMap", f"llm-serving/{names.FLEET_FACTS_CONFIGMAP}")]["data"]["facts.json"])
    assert set(facts["models"]) == {"qwen-0-5b", "qwen-coder-0-5b"}
    second = es.stack.preview(color="never")
    assert {str(k): v for k, v in second.change_summary.items() if str(k) != "same"} == {}
