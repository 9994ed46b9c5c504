"""`Observability`: the fleet's Grafana dashboards and alert rules, as the monitoring stack picks them up
(`platform.dashboards`, docs/observability.md).

- Each dashboard — vLLM's own three, vendored from its source distribution at the pinned release
  (`components/data/dashboards/`), and the fleet dashboard built from `components/fleet_queries.py` — is a
  ConfigMap carrying the label Grafana's dashboard sidecar selects (kube-prometheus-stack's
  `grafana_dashboard: "1"` by default), one JSON key each.
- The alert rules (`components/alert_rules.py`) as a `PrometheusRule` (prometheus-operator's CRD,
  `monitoring.coreos.com/v1`, validated against v0.94.1's schema by tests/test_crd_schemas.py) labelled for the
  Prometheus' ruleSelector, and always as a plain rule file in a ConfigMap, for a Prometheus without the
  operator (mount it and list it under `rule_files:`).

Nothing is installed: Grafana, its sidecar and Prometheus are the cluster's. The series the fleet dashboard
and the rules read beyond vLLM's are served by each model's metrics sidecar (components/metrics_proxy.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from tkf_infra import names
from tkf_infra.config.platform import DashboardsSettings

#: vLLM's dashboards at the pinned release (components/data/dashboards/SOURCES.md): ConfigMap suffix → file.
VLLM_DASHBOARDS_DIR = Path(__file__).parent / "data" / "dashboards" / "vllm-v0.32.0"
VLLM_DASHBOARDS = {"vllm-performance": "performance_statistics.json", "vllm-queries": "query_statistics.json",
                   "vllm-overview": "grafana.json"}
FLEET_DASHBOARD = "fleet"
RULE_FILE_KEY = "tkf-alert-rules.yaml"
PROMETHEUS_RULE_API = "monitoring.coreos.com/v1"


def dashboards(settings: DashboardsSettings) -> dict[str, str]:
    """ConfigMap suffix → dashboard JSON text: the fleet's, and vLLM's unless left out."""
    from components.fleet_dashboard import dashboard

    out = {FLEET_DASHBOARD: json.dumps(dashboard(), indent=1, sort_keys=True)}
    if settings.vllm_dashboards:
        out |= {key: (VLLM_DASHBOARDS_DIR / file).read_text() for key, file in VLLM_DASHBOARDS.items()}
    return out


@dataclass(frozen=True)
class ObservabilityArgs:
    settings: DashboardsSettings
    namespace: str
    """Where the ConfigMaps and the rule go (`settings.namespace`, else `namespaces.monitoring`)."""
    serving_namespace: str
    """The fleet's namespace: the weight-download alert watches its Jobs."""


class Observability(pulumi.ComponentResource):
    def __init__(self, name: str, args: ObservabilityArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(names.OBSERVABILITY_TYPE, name, None, opts)
        from components.alert_rules import rule_file, rule_groups

        s = args.settings
        child = pulumi.ResourceOptions(parent=self)
        part_of = {names.PART_OF_LABEL: names.PART_OF}
        self.dashboards: dict[str, k8s.core.v1.ConfigMap] = {}
        for key, text in dashboards(s).items():
            self.dashboards[key] = k8s.core.v1.ConfigMap(
                f"dashboard-{key}",
                metadata=k8s.meta.v1.ObjectMetaArgs(name=f"{names.DASHBOARD_PREFIX}{key}", namespace=args.namespace,
                                                    labels={**part_of, s.grafana_label: s.grafana_label_value}),
                data={f"{key}.json": text}, opts=child)
        self.rule_file = k8s.core.v1.ConfigMap(
            "alert-rule-file",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=names.ALERT_RULES, namespace=args.namespace, labels=part_of),
            data={RULE_FILE_KEY: rule_file(args.serving_namespace)}, opts=child)
        self.prometheus_rule: k8s.apiextensions.CustomResource | None = None
        if s.prometheus_rule:
            self.prometheus_rule = k8s.apiextensions.CustomResource(
                "alert-rules", api_version=PROMETHEUS_RULE_API, kind="PrometheusRule",
                metadata=k8s.meta.v1.ObjectMetaArgs(name=names.ALERT_RULES, namespace=args.namespace,
                                                    labels={**part_of, **s.rule_labels}),
                spec={"groups": rule_groups(args.serving_namespace)}, opts=child)
        outputs: dict[str, Any] = {"dashboards": sorted(self.dashboards)}
        self.register_outputs(outputs)
