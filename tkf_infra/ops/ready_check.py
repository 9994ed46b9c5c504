"""After an `up` on a cluster: each model the run created, updated or replaced is confirmed Ready on it
(tkf_infra/live/ready_wait.py says why the engine's own wait can end early), and one that is not is named as
failed in the summary, with the phase and reason `status` would show, so `up` exits 1 instead of 0.

Only for stacks that deploy to a cluster and wait (`cluster.mode: kubeconfig`, no `cluster.skipAwait`); a model
the engine already failed or the plan refused is not read again. The result is the summary's `readiness` key:
which models were read, how long it took, and why the cluster could not be read when it could not (a warning:
the engine's own wait already passed, so an unreadable cluster does not fail the run).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from tkf_infra.config import Catalog
from tkf_infra.live.cluster import KubeconfigError, client_from_kubeconfig
from tkf_infra.live.ready_wait import wait_ready
from tkf_infra.ops.summary import failed_models, status_counts
from tkf_infra.outputs import ENDPOINTS_OUTPUT

#: Summary statuses of models whose objects this run wrote.
CHANGED = frozenset({"created", "updated", "replaced"})
#: The summary's key for this check's result (pinned by tests/test_ready_wait.py).
READINESS_KEY = "readiness"


def changed_models(summary: dict[str, Any]) -> list[str]:
    return sorted(n for n, m in summary["models"].items() if m.get("status") in CHANGED)


def confirm_ready(summary: dict[str, Any], catalog: Callable[[], Catalog | None],
                  outputs: Callable[[], dict[str, Any]], progress: Callable[[str], None], *,
                  connect: Callable[[str, str | None], httpx.Client] = client_from_kubeconfig,
                  **wait: Any) -> None:
    """Wait for the changed models (see the module docstring) and record the result in ``summary``. The stack's
    catalog and outputs are read only when some model changed (each read is an engine command)."""
    watch = set(changed_models(summary))
    if not watch:
        return
    found = catalog()
    cluster = found.settings.cluster if found is not None else None
    if cluster is None or cluster.mode != "kubeconfig" or not cluster.kubeconfig or cluster.skip_await:
        return
    endpoints = [ep for ep in (outputs().get(ENDPOINTS_OUTPUT) or {}).values()
                 if isinstance(ep, dict) and ep.get("name") in watch]
    if not endpoints:
        return
    progress(f"confirming {len(endpoints)} changed model(s) Ready on the cluster")
    record: dict[str, Any] = {"models": sorted(str(ep["name"]) for ep in endpoints)}
    summary[READINESS_KEY] = record
    try:
        with connect(cluster.kubeconfig, cluster.context) as client:
            outcome = wait_ready(client, endpoints, progress=progress, **wait)
    except KubeconfigError as exc:
        record["unreadable"] = f"{exc}; fix cluster.kubeconfig / cluster.context"
        return
    except KeyboardInterrupt:  # the engine is done and its state saved: only this wait is cut short
        record["interrupted"] = True
        summary["ok"] = False
        summary["errors"].append("the readiness check after the engine was interrupted: every change is applied "
                                 f"and saved; `python -m tkf_infra status --stack {summary['stack']}` shows each "
                                 "model's phase")
        return
    except httpx.HTTPError as exc:
        record["unreadable"] = (f"the cluster of {cluster.kubeconfig} did not answer as expected "
                                f"({type(exc).__name__}: {exc}); `status --stack {summary['stack']}` reads it again")
        return
    record["seconds"] = round(outcome.seconds, 1)
    for name, (row, bound) in sorted(outcome.not_ready.items()):
        model = summary["models"][name]
        model["status"] = "failed"
        when = "not Ready" if row.phase.value == "Failed" else f"not Ready {bound} s after the engine's wait"
        model.setdefault("reasons", []).append(
            f"{when}: {row.phase.value}, {row.reason} (`python -m tkf_infra status --stack {summary['stack']}` "
            "shows it live; the next `up` waits for it again)")
    if outcome.not_ready:
        record["notReady"] = sorted(outcome.not_ready)
        summary["ok"] = False
        summary["failedModels"] = failed_models(summary["models"])
        summary["counts"] = status_counts(summary["models"])
