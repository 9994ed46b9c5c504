"""What a run cut short leaves: which models an interrupt stopped, and the state's pending operations.

Why apart from `tkf_infra.ops.summary`: both are read after the run, from the preview's plan and from the
state the engine saved (`pulumi stack export`), not from the run's events; they name models the same way
(`models_of`), through the summary's helpers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tkf_infra.names import WEIGHT_CACHE_MODELS_OUTPUT, WEIGHT_CACHE_TYPE
from tkf_infra.ops.summary import failed_models, models_of, urn_type_and_name


def mark_interrupted(final: dict[str, Any], preview: dict[str, Any] | None, signal: str, operation: str) -> None:
    """An interrupted run's summary: each model whose planned changes were not all made is `interrupted`."""
    final["interrupted"] = signal
    final["ok"] = False
    final["errors"].append(f"{operation} interrupted by {signal}: the engine stopped after the operations in "
                           f"flight and saved the state; run `python -m tkf_infra {operation} --stack "
                           f"{final['stack']}` again to finish")
    if preview is None:
        return
    for name, planned in preview["models"].items():
        want = {k: v for k, v in planned["changes"].items() if k != "same"}
        if not want or planned["status"] in {"rejected", "failed"}:
            continue
        done = final["models"].setdefault(name, {"status": "unchanged", "changes": {}})
        # Failed only because the interrupt cancelled its operations: "context canceled" from the
        # provider's client, and the engine's bare "create failed" for those same operations.
        cut_short = done["status"] == "failed" and all(
            "cancel" in r.lower() or r in _BARE_OP_FAILURES for r in done.get("reasons", []))
        if cut_short:  # the provider's own words for an operation the interrupt cancelled
            del done["reasons"]
        if cut_short or (done["status"] != "failed" and any(done["changes"].get(k, 0) < v for k, v in want.items())):
            done["status"] = "interrupted"
    final["failedModels"] = failed_models(final["models"])


_BARE_OP_FAILURES = {f"{op} failed" for op in ("create", "update", "delete", "replace", "read", "refresh",
                                               "create-replacement", "delete-replaced")}
_PENDING_KIND = {"creating": "create", "updating": "update", "deleting": "delete", "reading": "read",
                 "importing": "import"}


def clear_pending_command(stack_name: str) -> str:
    return f"python -m tkf_infra refresh --stack {stack_name} --clear-pending-creates"


def pending_report(deployment: Mapping[str, Any]) -> tuple[dict[str, list[str]], list[str]]:
    """Pending operations recorded in a state (`pulumi stack export`'s deployment), per model.

    The engine writes one for each operation in flight and keeps interrupted creates until they are
    cleared (`pkg/backend/snapshot.go`: "we don't want to clear pending CREATE operations"); each reads
    `create of Job weights-…-download interrupted: the object may exist`. Returns (per model, the rest).
    """
    parents: dict[str, str] = {}
    cache_models: dict[str, list[str]] = {}
    for res in deployment.get("resources") or []:
        if res.get("parent"):
            parents[res["urn"]] = res["parent"]
        cached = (res.get("outputs") or {}).get(WEIGHT_CACHE_MODELS_OUTPUT)
        if res.get("type") == WEIGHT_CACHE_TYPE and isinstance(cached, list):
            cache_models[res["urn"]] = [str(m) for m in cached]
    per_model: dict[str, list[str]] = {}
    stack_level: list[str] = []
    for op in deployment.get("pending_operations") or []:
        res = op.get("resource") or {}
        urn = str(res.get("urn", ""))
        if res.get("parent"):
            parents.setdefault(urn, res["parent"])
        rtype, name = urn_type_and_name(urn)
        kind = _PENDING_KIND.get(str(op.get("type", "")), str(op.get("type", "")))
        line = f"{kind} of {rtype.rsplit(':', 1)[-1]} {name} interrupted: the object may or may not exist"
        models = models_of(urn, parents, cache_models)
        for model in models:
            per_model.setdefault(model, []).append(line)
        if not models:
            stack_level.append(line)
    return per_model, stack_level


def add_pending(summary: dict[str, Any], deployment: Mapping[str, Any]) -> None:
    """Put the state's pending operations into a summary: per model, and how to clear them."""
    per_model, stack_level = pending_report(deployment)
    count = sum(map(len, per_model.values())) + len(stack_level)
    if not count:
        return
    for model, lines in per_model.items():
        entry = summary["models"].setdefault(model, {"status": "unchanged", "changes": {}})
        entry["pending"] = lines
    summary["pendingOperations"] = {
        "count": count, "stack": stack_level, "clear": clear_pending_command(summary["stack"]),
        "note": "a run was killed mid-apply; `up` re-applies these objects by name (no duplicates), then clear "
                "the stale records with the command above",
    }
