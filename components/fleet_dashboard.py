"""The fleet dashboard: Grafana JSON built with grafana-foundation-sdk from the queries of
`components/fleet_queries.py` (one row of panels per figure, every model or pool a series).

Why the SDK and not hand-written JSON: Grafana's dashboard schema moves between releases and the SDK is
generated from it (the pinned build targets Grafana 11.6, kube-prometheus-stack's); a misspelt field fails at
build time here, not as a silently empty panel. Imported only when `platform.dashboards` is set.
"""

from __future__ import annotations

import json
from typing import Any

from components import fleet_queries as q

UID = "tkf-fleet"
TITLE = "tkf-infra fleet"
DATASOURCE_VARIABLE = "datasource"
#: Grafana's grid is 24 units wide; two panels a row.
WIDTH, HEIGHT = 12, 8


def _thresholds_phase() -> list[Any]:
    from grafana_foundation_sdk.models import dashboard as dm

    return [dm.ValueMap(options={"1": dm.ValueMappingResult(text="Ready", color="green"),
                                 "0": dm.ValueMappingResult(text="Not ready", color="red")}),
            dm.RangeMap(options=dm.DashboardRangeMapOptions(
                from_val=0.0001, to=0.9999, result=dm.ValueMappingResult(text="Degraded", color="orange")))]


def _panel(panel: q.Panel, index: int) -> Any:
    from grafana_foundation_sdk.builders import prometheus, stat, timeseries
    from grafana_foundation_sdk.models import dashboard as dm

    ds = dm.DataSourceRef(type_val="prometheus", uid=f"${{{DATASOURCE_VARIABLE}}}")
    builder: Any = stat.Panel().mappings(_thresholds_phase()) if panel.title == "Phase" else timeseries.Panel()
    builder = (builder.id(index + 1).title(panel.title).description(panel.description).unit(panel.unit)
               .datasource(ds).span(WIDTH).height(HEIGHT))
    for n, query in enumerate(panel.queries):
        builder = builder.with_target(prometheus.Dataquery().expr(query.expr).legend_format(query.legend)
                                      .ref_id(chr(ord("A") + n)))
    return builder


def dashboard() -> dict[str, Any]:
    """The dashboard as Grafana imports it (the sidecar loads this JSON from a ConfigMap)."""
    from grafana_foundation_sdk.builders import dashboard as db
    from grafana_foundation_sdk.cog.encoder import JSONEncoder

    builder = (db.Dashboard(TITLE).uid(UID).tags(["tkf-infra", "vllm"]).refresh("30s").time("now-1h", "now")
               .with_variable(db.DatasourceVariable(DATASOURCE_VARIABLE).label("Prometheus").type("prometheus")))
    row = ""
    for index, panel in enumerate(q.PANELS):
        if panel.per != row:
            row = panel.per
            builder = builder.with_row(db.Row("Per model" if row == "model" else "Per node pool"))
        builder = builder.with_panel(_panel(panel, index))
    built: dict[str, Any] = json.loads(json.dumps(builder.build(), cls=JSONEncoder))
    return built


def panel_queries(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of a Grafana dashboard, rows' nested panels included."""
    out: list[tuple[str, str]] = []
    stack = list(doc.get("panels") or [])
    while stack:
        panel = stack.pop(0)
        stack[:0] = panel.get("panels") or []
        out += [(str(panel.get("title")), str(t["expr"])) for t in panel.get("targets") or [] if t.get("expr")]
    return out
