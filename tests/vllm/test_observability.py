"""Every dashboard query and alert signal against a real Prometheus scraping a real vLLM, and three alerts
induced for real and seen firing and resolving in that Prometheus.

The pod is the tier's vllm-backend pod of the dev stack's tool-calling model (no extra vLLM start); beside it
runs a second copy of its metrics sidecar from the rendered command, with the rendered facts ConfigMap
projected into a directory this test owns (the kubelet's projection, rewritten here as a run that changes the
plan would have the kubelet rewrite it), and the real LiteLLM proxy from `gateway-config` holding a wrong key.
Prometheus loads the rule file `platform.dashboards` ships (components/alert_rules.py).

- Queries: each panel of the fleet dashboard and of vLLM's three vendored dashboards (Grafana's variables set
  as Grafana would), and each alert's signal whose source runs here (vLLM, the sidecar, the gateway), must
  return at least one series: a metric renamed upstream fails here instead of blanking a panel. The one
  signal whose source is not run here (kube-state-metrics' Job gauge) is named, so nothing else slips out.
- Drift: the rendered prediction is for Qwen2.5-0.5B, the tier serves a tiny Qwen2, so vLLM's KV tokens are
  far off: TkfKvPredictionDrift fires; the facts rewritten with vLLM's own figure resolve it.
- Key: the gateway's calls are refused with 401: TkfRuntimeApiKeyRejected fires.
- Not ready: vLLM stopped (SIGSTOP: it takes connections and answers nothing, as a hung server does) past its
  start-up bound (the facts' bound set to 0, not to wait the dev model's minutes): TkfModelNotReady fires after
  its `for`; vLLM continued, it resolves, and vLLM serves again for the tests after this one.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from components import alert_rules, fleet_dashboard, fleet_queries
from components import metrics_proxy as mp
from components.observability import VLLM_DASHBOARDS, VLLM_DASHBOARDS_DIR
from tests.prom.conftest import run_prometheus
from tests.vllm.conftest import TOOL_MODEL, PodServers, RunningPod
from tests.vllm.gateway import run_gateway
from tests.vllm.pod import load_manifests, localize_sidecar, project_config_maps, sidecar_command
from tests.vllm.server import Service, start_service
from tkf_infra import names

#: The scrape timeout (one less) is above the sidecar's upstream timeout (5 s): a stopped vLLM must read as
#: `tkf:vllm_up 0`, not a failed scrape.
SCRAPE_S = 8
HTTP = httpx.Client(timeout=httpx.Timeout(30, read=300), limits=httpx.Limits(max_keepalive_connections=0))
#: Grafana's values for its built-in variables here (a few scrapes; the last 5 minutes).
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "5m"}


def _start_sidecar(pod: RunningPod, workdir: Path, venv: Path) -> tuple[Service, Path]:
    """The pod's rendered sidecar, a second copy on this pod's vLLM; returns it and its facts file."""
    manifests = load_manifests(pod.stack.render_dir)
    workload = names.workload(pod.model)
    files = project_config_maps(manifests, workload, workdir / "volumes")
    argv = localize_sidecar(sidecar_command(manifests, workload), port=0, upstream_port=pod.server.port,
                            files=files)
    facts = Path(argv[argv.index("--facts") + 1])
    assert facts.exists(), "the rendered facts ConfigMap is what the sidecar reads"
    service = start_service("metrics-observability", argv, {}, port=None, health_path="/metrics", workdir=workdir,
                            path=f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin", check_shm=False)  # the image's python3
    return service, facts


def _start_prometheus(workdir: Path, sidecar: Service, gateway: Any, namespace: str) -> Service:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "rules.yaml").write_text(alert_rules.rule_file(namespace))
    (workdir / "prometheus.yml").write_text(f"""
global: {{scrape_interval: {SCRAPE_S}s, scrape_timeout: {SCRAPE_S - 1}s, evaluation_interval: 1s}}
rule_files: ['{workdir / "rules.yaml"}']
scrape_configs:
  - job_name: vllm
    static_configs:
      - targets: ['127.0.0.1:{sidecar.port}']
        labels: {{namespace: '{namespace}'}}
  - job_name: gateway
    scrape_interval: 2s
    scrape_timeout: 2s
    metrics_path: /metrics/
    authorization: {{credentials: '{gateway.master_key}'}}
    static_configs:
      - targets: ['127.0.0.1:{gateway.service.port}']
        labels: {{namespace: 'llm-gateway'}}
""")
    return run_prometheus(workdir / "prometheus.yml", workdir)


@pytest.fixture(scope="module")
def observed(pods: PodServers, tier_dir: Path, vllm_venv: Path) -> Iterator[dict[str, Any]]:
    """The second sidecar, the gateway with a wrong key, and Prometheus on both, with some traffic served."""
    vllm_pod = pods.get("vllm", TOOL_MODEL)  # the tier's vllm-backend pod (conftest.py orders its tests together)
    workdir = tier_dir / "observability"
    sidecar, facts = _start_sidecar(vllm_pod, workdir / "sidecar", vllm_venv)
    try:
        with run_gateway(vllm_pod, workdir / "gateway", api_key="not-the-key",
                         settings={"litellm_settings": {"callbacks": ["prometheus"]}}) as gateway:
            prom = _start_prometheus(workdir / "prometheus", sidecar, gateway, vllm_pod.endpoint["namespace"])
            try:
                served = vllm_pod.endpoint["servedName"]
                # One scrape first, so the traffic below is a change of the counters Prometheus sees in a rate.
                _wait(prom, mp.VLLM_UP, bool, 60, "the sidecar's first scrape")
                for _ in range(3):  # histograms and counters with something in them
                    r = HTTP.post(f"{vllm_pod.server.url}/v1/completions", headers=vllm_pod.server.headers(),
                                  json={"model": served, "prompt": "The fleet", "max_tokens": 16})
                    r.raise_for_status()
                refused = gateway.post("/v1/chat/completions",
                                       {"model": served, "messages": [{"role": "user", "content": "hi"}]})
                assert refused.status_code >= 400, refused.text  # vLLM refused the gateway's key
                yield {"prom": prom, "facts": facts, "pod": vllm_pod, "served": served}
            finally:
                prom.stop(check_shm=False)
    finally:
        sidecar.stop(check_shm=False)


def _query(prom: Service, promql: str) -> list[dict[str, Any]]:
    r = HTTP.get(f"{prom.url}/api/v1/query", params={"query": promql}, timeout=10)
    assert r.status_code == 200, f"{promql}: {r.text}"
    result: list[dict[str, Any]] = r.json()["data"]["result"]
    return result


def _grafana(expr: str, served: str) -> str:
    """A vLLM dashboard's query with Grafana's variables set: the time ranges, and the model as its pickers
    (`$model_name`, `$Deployment_id`) would choose it. A variable left over fails."""
    for var, value in {**GRAFANA_VARIABLES, "$model_name": served, "$Deployment_id": served}.items():
        expr = expr.replace(var, value)
    assert "$" not in expr, f"a Grafana variable this test does not set: {expr}"
    return expr


def _queries(served: str) -> dict[str, str]:
    """Every query a dashboard or an alert runs here: `where` → PromQL."""
    out = {f"fleet: {t}": _grafana(e, served) for t, e in fleet_dashboard.panel_queries(fleet_dashboard.dashboard())}
    for key, file in VLLM_DASHBOARDS.items():
        doc = json.loads((VLLM_DASHBOARDS_DIR / file).read_text())
        out |= {f"{key}: {t} #{n}": _grafana(e, served)
                for n, (t, e) in enumerate(fleet_dashboard.panel_queries(doc))}
    for a in alert_rules.alerts("llm-serving"):
        if a.source != fleet_queries.KSM:
            out[f"alert {a.name}"] = a.signal
    return out


def _wait(prom: Service, promql: str, ok: Any, timeout: float, what: str) -> list[dict[str, Any]]:
    deadline, last = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        last = _query(prom, promql)
        if ok(last):
            return last
        time.sleep(1)
    raise AssertionError(f"{what}: Prometheus never showed it for {promql}; last {last}")


def _alert(name: str) -> str:
    return f'ALERTS{{alertname="{name}", alertstate="firing"}}'


def test_every_panel_and_alert_signal_returns_series(observed: dict[str, Any]) -> None:
    prom, served = observed["prom"], observed["served"]
    queries = _queries(served)
    uncovered = {a.name for a in alert_rules.alerts("llm-serving") if a.source == fleet_queries.KSM}
    assert uncovered == {"TkfWeightDownloadFailed"}, "only kube-state-metrics' signal is not run in this tier"
    deadline = time.monotonic() + 120
    empty = dict(queries)
    while empty and time.monotonic() < deadline:  # a few scrapes for rates; the gateway's first failure
        empty = {where: q for where, q in empty.items() if not _query(prom, q)}
        if empty:
            time.sleep(2)
    assert not empty, "queries that return no series against a real vLLM 0.32.0:\n" + "\n".join(
        f"  {where}: {q}" for where, q in empty.items())
    assert len(queries) > 60, len(queries)
    # The traffic the fixture sent shows in the rates: a latency and a throughput, not only series of zeros.
    for expr in (fleet_queries.ttft_p95("1m"), fleet_queries.itl_p95("1m"), fleet_queries.generation_tps("1m")):
        values = [float(r["value"][1]) for r in _query(prom, expr)]
        assert any(v > 0 for v in values), (expr, values)
    if shot := os.environ.get("TKF_OBSERVABILITY_SHOT"):  # docs/observability.md's picture of the fleet's queries
        _screenshot_fleet_queries(prom, served, Path(shot))


def _screenshot_fleet_queries(prom: Service, served: str, path: Path) -> None:
    """The fleet dashboard's panels, their PromQL, source and first answer, drawn by Debian's Chromium."""
    from html import escape

    from playwright.sync_api import sync_playwright

    rows = []
    for panel in fleet_queries.PANELS:
        for query in panel.queries:
            result = _query(prom, _grafana(query.expr, served))
            labels: dict[str, str] = result[0]["metric"] if result else {}
            value = str(result[0]["value"][1]) if result else "(none)"
            who = labels.get("model_name") or labels.get("pool") or ""
            rows.append(f"<tr><td>{escape(panel.title)}</td><td><code>{escape(query.expr)}</code></td>"
                        f"<td>{escape(query.source)}</td><td>{escape(who)}</td><td>{escape(value)}</td></tr>")
    html = ("<html><body style='font-family:sans-serif;font-size:12px'><h3>tkf-infra fleet dashboard: each panel's "
            "query against Prometheus scraping vLLM 0.32.0</h3><table border=1 cellspacing=0 cellpadding=3>"
            "<tr><th>panel</th><th>PromQL</th><th>source</th><th>series</th><th>value</th></tr>"
            + "".join(rows) + "</table></body></html>")
    page_file = path.with_suffix(".html")
    page_file.write_text(html)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=os.environ.get("TKF_CHROMIUM_BIN", "/usr/bin/chromium"),
                                     args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1400, "height": 700})
        page.goto(page_file.as_uri())
        page.screenshot(path=str(path), full_page=True)
        browser.close()
    page_file.unlink()


def test_drift_and_key_alerts_fire_and_drift_resolves(observed: dict[str, Any]) -> None:
    prom, facts = observed["prom"], observed["facts"]
    firing = _wait(prom, _alert("TkfKvPredictionDrift"), bool, 90, "the drift alert firing")
    assert {f["metric"]["model_name"] for f in firing} == {observed["served"]}
    _wait(prom, _alert("TkfRuntimeApiKeyRejected"), bool, 60, "the key alert firing")
    (reported,) = _query(prom, mp.REPORTED_KV_TOKENS)
    doc = json.loads(facts.read_text())
    mine = doc[mp.FACT_MODELS][observed["pod"].model]
    assert mine[mp.FACT_PREDICTED_KV_TOKENS] != int(float(reported["value"][1]))
    mine[mp.FACT_PREDICTED_KV_TOKENS] = int(float(reported["value"][1]))  # a prediction that was right
    facts.write_text(json.dumps(doc))
    _wait(prom, _alert("TkfKvPredictionDrift"), lambda r: not r, 90, "the drift alert resolving")


def test_a_hung_vllm_fires_not_ready_and_resolves_when_it_answers(observed: dict[str, Any]) -> None:
    prom, facts, pod = observed["prom"], observed["facts"], observed["pod"]
    doc = json.loads(facts.read_text())
    doc[mp.FACT_MODELS][pod.model][mp.FACT_READY_WITHIN_SECONDS] = 0  # past its start-up bound already
    facts.write_text(json.dumps(doc))
    assert not _query(prom, _alert("TkfModelNotReady"))
    os.killpg(os.getpgid(pod.server.process.pid), signal.SIGSTOP)
    try:
        _wait(prom, mp.VLLM_UP, lambda r: r and r[0]["value"][1] == "0", 60, "tkf:vllm_up 0 for the hung vLLM")
        firing = _wait(prom, _alert("TkfModelNotReady"), bool, 180, "the not-ready alert firing")
        assert re.match(r"127\.0\.0\.1:\d+", firing[0]["metric"]["instance"])
    finally:
        os.killpg(os.getpgid(pod.server.process.pid), signal.SIGCONT)
    _wait(prom, _alert("TkfModelNotReady"), lambda r: not r, 90, "the not-ready alert resolving")
    r = HTTP.post(f"{pod.server.url}/v1/completions", headers=pod.server.headers(),
                  json={"model": observed["served"], "prompt": "Back", "max_tokens": 4})
    assert r.status_code == 200, r.text
