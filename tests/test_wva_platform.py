"""llm-d's Workload Variant Autoscaler as a platform piece (`platform.wva`): opt-in, its vendored chart, the
values tkf-infra sets on it, the settings' checks, the plan and the platform contract.

Mocks echo a Chart's inputs without rendering it (no Helm here); the objects the provider renders are
in tests/engine/test_wva_render.py. What these tests pin is what a user would notice: the image is the
pinned release (the tag's chart still says v0.5.1), the controller watches every namespace, it reads
the stack's Prometheus, and the demo objects and the ServiceMonitor are not applied.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.helm_drop_kinds import drop_kinds
from components.platform_charts import UPSTREAM, VENDORED
from components.prerequisites import ServingPrerequisites, ServingPrerequisitesArgs
from components.wva import DROP_KINDS, KSERVE_POOL_GROUP, WVA_CHART
from tests.mocks import SINGLE_GPU, run, stack_doc
from tests.test_admission import SERVED, h100_pool, kube, live, planned, refused
from tkf_infra import platform_contract
from tkf_infra.config import Backend, Namespaces, Platform, SettingsError, validate_catalog
from tkf_infra.config.charts import WVA_NAMESPACE
from tkf_infra.plan.admission import ClusterState
from tkf_infra.plan.scaling import KEDA_API, WVA_API

ROOT = Path(__file__).resolve().parents[1]
CHART = VENDORED / "wva-v0.7.0" / "workload-variant-autoscaler"
PROM = "https://prometheus.monitoring.svc:9091"
WITH_WVA = Platform.model_validate({"wva": {"version": "v0.7.0"}})


def prereqs(platform: Platform, **kw: Any) -> Any:
    kw.setdefault("wva_prometheus_url", PROM)
    return run(lambda: ServingPrerequisites("prereq", ServingPrerequisitesArgs(platform, Namespaces(), **kw)))


def wva_chart(h: Any) -> Any:
    charts = [r for r in h.resources if r.name == "prereq-wva"]
    assert len(charts) <= 1
    return charts[0] if charts else None


# -- the default: not installed ----------------------------------------------------------------


def test_wva_is_not_installed_unless_set() -> None:
    """The dev stack (and every stack that does not set platform.wva) registers exactly what it did."""
    assert Platform().wva is None and "wva" not in Platform().pieces()
    dev = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"]["tkf-infra:platform"]
    assert "wva" not in dev
    for backend in Backend:
        h = prereqs(Platform(), backend=backend, source="vendored")
        assert wva_chart(h) is None and not any(WVA_NAMESPACE in r.name for r in h.resources)
    assert validate_catalog({}).settings.platform.wva is None
    # The vllm backend never uses it, set or not (KServe's scaling path is its only client).
    assert wva_chart(prereqs(WITH_WVA, backend=Backend.VLLM, source="vendored")) is None


# -- installed: the vendored chart, with our values ----------------------------------------------


def test_wva_set_installs_the_vendored_chart_in_its_namespace_and_model_serving_waits_on_it() -> None:
    h = prereqs(WITH_WVA, source="vendored", render=True)
    chart = wva_chart(h)
    assert chart is not None and chart.type == "kubernetes:helm.sh/v4:Chart"
    assert chart.inputs["chart"] == str(CHART) and chart.inputs["name"] == WVA_CHART
    assert chart.inputs["namespace"] == WVA_NAMESPACE == "workload-variant-autoscaler-system"
    assert any(r.type == "kubernetes:core/v1:Namespace" and r.inputs["metadata"]["name"] == WVA_NAMESPACE
               for r in h.resources)
    assert h.result.charts["wva"] in h.result.dependencies


def test_the_values_pin_v0_7_0_watch_every_namespace_read_the_stacks_prometheus_and_drop_the_demo() -> None:
    values = wva_chart(prereqs(WITH_WVA, source="vendored")).inputs["values"]
    chart_values = yaml.safe_load((CHART / "values.yaml").read_text())
    # The tag's chart is still v0.5.1's: without our pin the pods would run the older controller.
    assert chart_values["wva"]["image"]["tag"] == "v0.5.1"
    assert yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"] == "v0.5.1"
    assert values["wva"]["image"] == {"tag": "v0.7.0"} and values["wva"]["imagePullPolicy"] == "IfNotPresent"
    # KServe writes each VariantAutoscaling in its model's namespace: a namespace-scoped controller misses it.
    assert chart_values["wva"]["namespaceScoped"] is True and values["wva"]["namespaceScoped"] is False
    prom = values["wva"]["prometheus"]
    assert chart_values["wva"]["prometheus"]["baseURL"].startswith("https://thanos-querier.openshift-monitoring")
    assert prom["baseURL"] == PROM and prom["monitoringNamespace"] == Namespaces().monitoring == "monitoring"
    assert prom["serviceAccountName"] == "kube-prometheus-stack-prometheus"
    assert values["wva"]["poolGroup"] == KSERVE_POOL_GROUP == "inference.networking.k8s.io"
    assert {k: values[k] for k in ("va", "hpa", "vllmService")} == {k: {"enabled": False}
                                                                    for k in ("va", "hpa", "vllmService")}
    # Each switch we set is one the templates read (a renamed value would leave the demo objects on).
    templates = {p.name: p.read_text() for p in (CHART / "templates").rglob("*.yaml")}
    assert templates["variantautoscaling.yaml"].startswith("{{- if .Values.va.enabled }}")
    assert templates["hpa.yaml"].startswith("{{- if .Values.hpa.enabled }}")
    for demo in ("vllm-service.yaml", "vllm-servicemonitor.yaml"):
        assert templates[demo].startswith("{{- if .Values.vllmService.enabled }}")
    assert "{{- if .Values.wva.namespaceScoped }}\n          - --watch-namespace" in \
        templates["wva-deployment-controller-manager.yaml"]
    assert "POOL_GROUP" in templates["wva-deployment-controller-manager.yaml"]


def test_the_always_rendered_service_monitor_is_dropped_by_a_post_renderer() -> None:
    chart = wva_chart(prereqs(WITH_WVA, source="vendored"))
    post = chart.inputs["postRenderer"]
    assert post == {"command": sys.executable, "args": [str(DROP_KINDS), "ServiceMonitor"]}
    # The chart renders it unless the whole controller is off: no value turns it off alone.
    monitor = (CHART / "templates/manager/wva-servicemonitor.yaml").read_text()
    assert monitor.startswith("{{- if .Values.controller.enabled }}") and "kind: ServiceMonitor" in monitor
    manifests = ("apiVersion: v1\nkind: Service\nmetadata: {name: m}\n---\n# Source: x\n"
                 "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: mon}\n---\n"
                 "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n")
    # As Helm runs it: the manifests on stdin, what stays on stdout.
    out = subprocess.run([post["command"], *post["args"]], input=manifests, capture_output=True, text=True,
                         check=True).stdout
    assert [(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(out)] == [("Service", "m"),
                                                                                    ("Deployment", "d")]
    # The objects kept are the chart's text, unchanged (no YAML re-dump re-typing a value).
    odd = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {when: 2026-01-01, mode: 0644}\n"
    assert drop_kinds(odd + "---\n" + manifests, ["ServiceMonitor"]).startswith("---\n" + odd)
    assert drop_kinds(manifests, []).count("kind:") == 3


def test_upstream_is_the_release_jobs_oci_chart_and_a_chart_path_is_used_as_given() -> None:
    chart = wva_chart(prereqs(WITH_WVA, source="upstream"))
    assert UPSTREAM[WVA_CHART] == ("oci://ghcr.io/llm-d/workload-variant-autoscaler", None)
    assert (chart.inputs["chart"], chart.inputs["version"]) == ("oci://ghcr.io/llm-d/workload-variant-autoscaler",
                                                                "v0.7.0")
    own = Platform.model_validate({"wva": {"version": "v0.7.0", "chartPath": str(CHART)}})
    assert wva_chart(prereqs(own, source="upstream")).inputs["chart"] == str(CHART)
    assert wva_chart(prereqs(Platform.model_validate({"wva": {"alreadyInstalled": True}}))) is None


def test_the_vendored_crd_is_the_one_kserve_writes_against() -> None:
    crd = (CHART / "crds/llmd.ai_variantautoscalings.yaml").read_text()
    assert crd == (ROOT / "tests/data/crds/llmd.ai_variantautoscalings-v0.7.0.yaml").read_text()
    doc = yaml.safe_load(crd)
    assert [f"{doc['spec']['group']}/{v['name']}" for v in doc["spec"]["versions"] if v["served"]] == [WVA_API]


# -- the settings' checks ----------------------------------------------------------------------


def problems(doc: dict[str, Any]) -> str:
    with pytest.raises(SettingsError) as err:
        validate_catalog(doc)
    return err.value.render()


def test_wva_settings_are_checked_at_load() -> None:
    """WVA v0.7.0 exits at start without an https Prometheus: said at load, by name, not by a crash-looping pod."""
    text = problems({"platform": {"wva": {"version": "v0.7.0"}}})
    assert "platform.wva is set" in text and "the stack sets no prometheusUrl" in text
    text = problems({"platform": {"wva": {}}, "prometheusUrl": "http://prometheus.monitoring.svc:9090"})
    assert "prometheusUrl 'http://prometheus.monitoring.svc:9090' is not https" in text
    assert "HTTPS is required" in text
    ok = validate_catalog({"platform": {"wva": {}}, "prometheusUrl": PROM}).settings.platform.wva
    assert ok is not None and ok.pinned == "v0.7.0"  # `wva: {}` installs the default release
    # Not installed by tkf-infra (vllm backend, or alreadyInstalled): no Prometheus demanded for it.
    assert validate_catalog({"platform": {"wva": {}}, "serving": {"backend": "vllm"}}).settings.platform.wva
    assert validate_catalog({"platform": {"wva": {"alreadyInstalled": True}}}).settings.platform.wva
    text = problems({"platform": {"wva": {"version": "v0.6.0"}}, "prometheusUrl": PROM})
    assert "platform.wva.version is 'v0.6.0' but the vendored chart is v0.7.0" in text
    assert "version 'main' is not pinned" in problems({"platform": {"wva": {"version": "main"}},
                                                        "prometheusUrl": PROM})


# -- the plan: what tkf-infra installs is served -----------------------------------------------


def kserve_doc(platform: dict[str, Any]) -> dict[str, Any]:
    doc = stack_doc(dict(SINGLE_GPU, scaling={"minReplicas": 1, "maxReplicas": 2}), cluster=kube(),
                    nodePools=[h100_pool(1)], prometheusUrl=PROM)
    doc["platform"].update(platform)
    return doc


def test_a_scaled_kserve_model_is_planned_when_tkf_infra_installs_wva_and_keda() -> None:
    bare = ClusterState("the test cluster", (live("n1"),), api_versions=SERVED)
    both = {"keda": {"version": "v2.18.0"}, "wva": {"version": "v0.7.0"}}
    assert planned(kserve_doc(both), bare).deployed == {"qwen3-8b"}
    # KEDA alone: WVA is still missing, and the refusal names the setting that installs it.
    reason = refused(planned(kserve_doc({"keda": both["keda"]}), bare))["qwen3-8b"][1]
    assert f"needs {WVA_API} on the cluster" in reason and KEDA_API not in reason.split("(")[0]
    assert "set platform.wva (tkf-infra then installs llm-d's Workload Variant Autoscaler" in reason
    # WVA alone: KEDA is missing.
    reason = refused(planned(kserve_doc({"wva": both["wva"]}), bare))["qwen3-8b"][1]
    assert f"needs {KEDA_API} on the cluster" in reason and WVA_API not in reason.split("(")[0]
    # A WVA of the cluster's own counts too.
    served = ClusterState("c", (live("n1"),), api_versions=SERVED | {WVA_API})
    assert planned(kserve_doc({"keda": both["keda"], "wva": {"alreadyInstalled": True}}), served).deployed == \
        {"qwen3-8b"}


def test_the_platform_contract_carries_wva_to_the_fleet_and_keeps_its_crd_while_a_fleet_uses_it() -> None:
    both = {"keda": {"version": "v2.18.0"}, "wva": {"version": "v0.7.0"}}
    contract = platform_contract.publish(validate_catalog(kserve_doc(both)), "env")
    assert contract["pieces"]["wva"] == {"version": "v0.7.0", "installedBy": "tkf-infra"}
    assert contract["apis"]["VariantAutoscaling"] == WVA_API
    fleet = platform_contract.fleet_settings({}, platform_contract.read(contract, "env-platform"))
    assert fleet["platform"]["wva"] == {"alreadyInstalled": True, "version": "v0.7.0"}
    without = platform_contract.publish(validate_catalog(kserve_doc({"keda": both["keda"]})), "env")
    assert "wva" not in without["pieces"] and "VariantAutoscaling" not in without["apis"]
    problems = platform_contract.crd_removal_problems(contract, without, {"fleet": {"VariantAutoscaling": 2.0}})
    assert len(problems) == 1 and "platform.wva: this run would delete wva's CRDs (wva is now no longer set)" \
        in problems[0] and "fleet stack fleet has 2 VariantAutoscaling" in problems[0]
    plan = planned(kserve_doc(both), ClusterState("c", (live("n1"),), api_versions=SERVED))
    assert platform_contract.platform_use(plan)["VariantAutoscaling"] == 1
