"""Debian's Prometheus scraping one running pod's metrics sidecar, labelled as the cluster's scrape would be.

Shared by the tier's `status` tests (tests/vllm/test_status.py, test_lora_serving.py): each starts its own
server over the pod it loads, so no test reads another's series.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.prom.conftest import run_prometheus
from tests.vllm.conftest import RunningPod
from tests.vllm.server import Service

SCRAPE_INTERVAL_S = 1


def start_prometheus(pod: RunningPod, labels: dict[str, str], workdir: Path) -> Service:
    """Prometheus scraping ``pod`` through its metrics sidecar (the only port the monitoring namespace may
    reach), every second, its target carrying ``labels`` (at least ``namespace``)."""
    target = pod.metrics.url.removeprefix("http://")
    lines = "".join(f"\n          {k}: {json.dumps(v)}" for k, v in labels.items())
    workdir.mkdir(parents=True)
    (workdir / "prometheus.yml").write_text(f"""
global: {{scrape_interval: {SCRAPE_INTERVAL_S}s, scrape_timeout: {SCRAPE_INTERVAL_S}s,
          query_log_file: {workdir / "queries.log"}}}
scrape_configs:
  - job_name: vllm
    metrics_path: /metrics
    static_configs:
      - targets: ['{target}']
        labels:{lines}
""")
    return run_prometheus(workdir / "prometheus.yml", workdir)
