"""`platform.dashboards` under mocks: the dashboards' ConfigMaps with Grafana's sidecar label, the alert rules as
a PrometheusRule and a plain rule file, the fleet facts the sidecars serve, and the queries built from the
metric names where they are defined. The queries against a real vLLM: tests/vllm/test_observability.py; the
rules under promtool: tests/prom/test_alert_rules.py; the PrometheusRule against its CRD:
tests/test_crd_schemas.py.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from components import alert_rules, fleet_dashboard, fleet_queries, metrics_proxy
from components.fleet_facts import fleet_facts
from components.observability import RULE_FILE_KEY, VLLM_DASHBOARDS, VLLM_DASHBOARDS_DIR
from tests.mocks import CPU, SINGLE_GPU, TP4, program, stack_doc
from tkf_infra import gateway_metrics, names, vllm_metrics
from tkf_infra.config import SettingsError, validate_catalog

DASHBOARDS = Path(VLLM_DASHBOARDS_DIR).parent


def objects(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    h = program(doc, api_key="k")
    assert h.error is None, h.error
    return {(str(r.inputs.get("kind")), str(r.metadata.get("name"))): r.inputs for r in h.resources
            if "kind" in r.inputs}


def with_dashboards(settings: dict[str, Any], *models: dict[str, Any]) -> dict[str, Any]:
    doc = stack_doc(*(models or (SINGLE_GPU,)))
    doc["platform"] = {**doc["platform"], "dashboards": settings}
    return doc


def test_the_vendored_dashboards_are_vllms_files_as_recorded() -> None:
    listed = {}
    for line in (DASHBOARDS / "SHA256SUMS").read_text().splitlines():
        digest, path = line.split(maxsplit=1)
        listed[path.removeprefix("./")] = digest
    present = {str(p.relative_to(DASHBOARDS)) for p in DASHBOARDS.rglob("*") if p.is_file()}
    assert present - {"SHA256SUMS", "SOURCES.md"} == set(listed)
    for path, digest in listed.items():
        assert hashlib.sha256((DASHBOARDS / path).read_bytes()).hexdigest() == digest, path
    assert set(VLLM_DASHBOARDS.values()) == {p.rsplit("/", 1)[1] for p in listed if p.endswith(".json")}


def test_no_dashboards_unless_asked() -> None:
    kinds = objects(stack_doc(SINGLE_GPU))
    assert not [k for k in kinds if k[0] == "PrometheusRule" or k[1].startswith(names.DASHBOARD_PREFIX)]


def test_dashboards_and_rules_as_kube_prometheus_stack_picks_them_up() -> None:
    objs = objects(with_dashboards({}))
    maps = {name: o for (kind, name), o in objs.items()
            if kind == "ConfigMap" and name.startswith(names.DASHBOARD_PREFIX)}
    assert set(maps) == {f"{names.DASHBOARD_PREFIX}{k}" for k in ("fleet", *VLLM_DASHBOARDS)}
    for name, cm in maps.items():
        assert cm["metadata"]["namespace"] == "monitoring"
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        (key, text), = cm["data"].items()
        assert key.endswith(".json") and json.loads(text)["panels"], name
    vllm = json.loads(maps[f"{names.DASHBOARD_PREFIX}vllm-overview"]["data"]["vllm-overview.json"])
    assert vllm == json.loads((VLLM_DASHBOARDS_DIR / "grafana.json").read_text()), "vendored unedited"
    rule = objs[("PrometheusRule", names.ALERT_RULES)]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["metadata"]["namespace"] == "monitoring"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["spec"]["groups"] == alert_rules.rule_groups("llm-serving")
    plain = yaml.safe_load(objs[("ConfigMap", names.ALERT_RULES)]["data"][RULE_FILE_KEY])
    assert plain == {"groups": rule["spec"]["groups"]}


def test_dashboard_settings_namespace_label_and_no_operator() -> None:
    objs = objects(with_dashboards({"namespace": "grafana", "grafanaLabel": "dash", "grafanaLabelValue": "yes",
                                    "vllmDashboards": False, "prometheusRule": False}))
    maps = [o for (kind, name), o in objs.items() if name.startswith(names.DASHBOARD_PREFIX)]
    assert [m["metadata"]["name"] for m in maps] == [f"{names.DASHBOARD_PREFIX}fleet"]
    assert maps[0]["metadata"]["namespace"] == "grafana" and maps[0]["metadata"]["labels"]["dash"] == "yes"
    assert not [k for k in objs if k[0] == "PrometheusRule"]
    assert objs[("ConfigMap", names.ALERT_RULES)]["metadata"]["namespace"] == "grafana", "the rule file stays"


def test_bad_dashboard_settings_are_named_with_the_fix() -> None:
    doc = with_dashboards({"grafanaLabel": "not a label", "ruleLabels": {"release": "a b"}})
    with pytest.raises(SettingsError) as err:
        validate_catalog(doc)
    text = err.value.render()
    assert "grafanaLabel" in text and "'not a label' is not a valid key" in text
    assert "ruleLabels" in text and "'a b' is not a valid value" in text


def test_the_fleet_dashboard_holds_every_panel_query_once() -> None:
    doc = fleet_dashboard.dashboard()
    got = fleet_dashboard.panel_queries(doc)
    want = [(p.title, query.expr) for p in fleet_queries.PANELS for query in p.queries]
    assert sorted(got) == sorted(want)
    panels = [p for p in doc["panels"] if p["type"] != "row"]
    assert all(p["datasource"]["uid"] == "${datasource}" for p in panels)
    assert len({p["id"] for p in panels}) == len(panels)
    titles = {p["title"] for p in panels}
    for figure in ("Phase", "Replicas against min / max", "Queue (requests waiting)", "Running requests",
                   "KV-cache use", "KV tokens: fit check's prediction vs vLLM's", "TTFT p95", "Inter-token latency p95",
                   "Tokens / s", "Pool GPUs: held against the plan"):
        assert figure in titles


def _defined_names() -> set[str]:
    """Every metric name a module of ours defines (vLLM's, the sidecar's, the gateway's, kube-state-metrics')."""
    values = [*vars(vllm_metrics).values(), *vars(metrics_proxy).values(), *vars(gateway_metrics).values(),
              fleet_queries.KSM_JOB_FAILED]
    return {v for v in values if isinstance(v, str) and re.fullmatch(r"[a-z_]+:?[a-z_]+", v)}


def test_every_query_uses_only_metric_names_defined_elsewhere() -> None:
    """The queries are built from the constants (a metric is spelled once): every name in a query or a rule is
    one of them, so renaming a constant renames every panel and alert with it."""
    exprs = [q.expr for p in fleet_queries.PANELS for q in p.queries]
    exprs += [a.condition for a in alert_rules.alerts("llm-serving")]
    used = {m for e in exprs for m in re.findall(r"\b(?:vllm|tkf):[a-z_]+|\b(?:kube|litellm)_[a-z_]+", e)}
    assert used and used <= _defined_names(), used - _defined_names()


def test_every_alert_fires_on_its_signal_and_has_a_runbook() -> None:
    rules = alert_rules.alerts("llm-serving")
    assert {a.name for a in rules} == {"TkfModelNotReady", "TkfKvCacheSaturated", "TkfQueueGrowing",
                                       "TkfKvPredictionDrift", "TkfAutoscalerAtMaximum", "TkfPoolHeadroomExhausted",
                                       "TkfWeightDownloadFailed", "TkfRuntimeApiKeyRejected"}
    for a in rules:
        assert a.signal in a.condition, a.name
        assert len(a.runbook) > 60 and a.severity in {"warning", "critical"}, a.name
    drift = next(a for a in rules if a.name == "TkfKvPredictionDrift")
    assert drift.condition.endswith("> 0.05"), "the same ±5 % as `status` (KV_DEVIATION_LIMIT)"


def test_fleet_facts_are_the_plans_figures() -> None:
    from tkf_infra.hub.lock import load_lock
    from tkf_infra.plan import plan_fleet
    from tkf_infra.plan.headroom import pool_headroom

    doc = stack_doc(SINGLE_GPU, TP4, CPU)
    plan = plan_fleet(validate_catalog(doc), lock=load_lock())
    facts = fleet_facts(plan)
    assert set(facts["models"]) == {m.entry.name for m in plan.models}
    for m in plan.models:
        mine = facts["models"][m.entry.name]
        assert mine[metrics_proxy.FACT_SERVED_NAME] == m.entry.served_name
        assert mine[metrics_proxy.FACT_PREDICTED_KV_TOKENS] == m.fit.kv_cache_tokens > 0
        assert mine[metrics_proxy.FACT_REPLICA_GPUS] == (0 if m.entry.is_cpu else m.entry.gpus)
    h100 = pool_headroom(plan)["h100"]
    assert facts["pools"]["h100"] == {metrics_proxy.FACT_POOL_GPUS: h100["gpus"],
                                      metrics_proxy.FACT_RESERVED_AT_MINIMUM: h100["atMinimum"]["gpus"],
                                      metrics_proxy.FACT_RESERVED_AT_MAXIMUM: h100["atMaximum"]["gpus"]}


def test_every_serving_pod_reads_the_one_facts_configmap() -> None:
    objs = objects(stack_doc(SINGLE_GPU, CPU, backend="vllm"))
    facts = objs[("ConfigMap", names.FLEET_FACTS_CONFIGMAP)]
    served = json.loads(facts["data"]["facts.json"])
    deployments = [o for (kind, _), o in objs.items() if kind == "Deployment"]
    assert deployments
    for d in deployments:
        pod = d["spec"]["template"]["spec"]
        (volume,) = [v for v in pod["volumes"] if v["name"] == "fleet-facts"]
        assert volume["configMap"] == {"name": names.FLEET_FACTS_CONFIGMAP, "defaultMode": 0o444, "optional": True}
        (sidecar,) = [c for c in pod["containers"] if c["name"] == "metrics"]
        model = sidecar["command"][sidecar["command"].index("--model") + 1]
        assert model in served["models"]


def test_the_docs_table_is_the_dashboards_queries_and_the_alerts() -> None:
    """docs/observability.md's panel → PromQL → source table and alert table say what the code does."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "observability.md").read_text()
    for p in fleet_queries.PANELS:
        for query in p.queries:
            assert f"| {p.title} | `{query.legend}` | `{query.expr}` | {query.source} |" in doc, (p.title, query.expr)
    for a in alert_rules.alerts("llm-serving"):
        assert f"| `{a.name}` |" in doc and f"| {a.for_} | {a.severity} | {a.source}" in doc, a.name
