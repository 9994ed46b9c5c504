"""Per-model reports of an engine run: what happened to each catalog entry, and why.

Why per model: CI and the gateway's owners think in models, not URNs. A run's summary says, for each
entry, whether it was created, updated, left unchanged, failed (and why) or left out (rejected, with
the stage that refused it) — so one broken model is named alone and the others visibly went through.

Where each fact comes from, so nothing is decided twice:
- deployed models: the engine's events, attributed to a model by URN (its ModelServing and FitCheck);
- left-out models: the program's own `rejected` output (`tkf_infra.plan.Exclusion`), read from the
  stack resource's outputs in the event stream — the same list the gateway's deploy reads;
- stack problems: the `problems` output plus engine errors no model explains.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pulumi.automation import events

from tkf_infra.names import FIT_CHECK_SUFFIX
from tkf_infra.plan import Exclusion

MODEL_SERVING_TYPE = "tkf:serving:ModelServing"
STACK_TYPE = "pulumi:pulumi:Stack"


@dataclass
class ModelReport:
    name: str
    ops: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)
    excluded: Exclusion | None = None
    failed_urns: set[str] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        if self.excluded is not None:
            return "rejected"
        if self.errors:
            return "failed"
        for op, label in (("replace", "replaced"), ("create", "created"), ("update", "updated"),
                          ("delete", "deleted")):
            if self.ops.get(op):
                return label
        return "unchanged"

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "changes": dict(sorted(self.ops.items()))}
        if self.excluded is not None:
            out["stage"] = self.excluded.stage.value
            if self.excluded.kept:
                out["kept"] = True
        reasons = (list(self.excluded.reasons) if self.excluded else []) + self.errors
        if reasons:
            out["reasons"] = reasons
        if self.warnings:
            out["warnings"] = self.warnings
        if self.drift:
            out["drift"] = self.drift
        return out


_OP_KIND = {
    "create": "create", "create-replacement": "replace", "replace": "replace", "delete-replaced": "replace",
    "update": "update", "delete": "delete", "same": "same", "read": "same", "refresh": "refresh",
}  # fmt: skip


def urn_type_and_name(urn: str) -> tuple[str, str]:
    # urn:pulumi:<stack>::<project>::<parent-type$...$type>::<name>
    parts = urn.split("::")
    if len(parts) < 4:
        return "", urn
    types = parts[2].split("$")
    return types[-1], "::".join(parts[3:])


class RunTracker:
    """Collects engine events of one operation and attributes each to a catalog model."""

    def __init__(self, operation: str = "preview") -> None:
        self.operation = operation
        self.parents: dict[str, str] = {}
        self.models: dict[str, ModelReport] = {}
        self.diagnostics: list[str] = []
        """Error diagnostics no model's URN explains (program messages, engine errors)."""
        self.outputs: dict[str, Any] = {}
        """The stack's outputs as the run registered them."""

    def model_of(self, urn: str | None) -> str | None:
        seen = 0
        while urn and seen < 64:
            rtype, name = urn_type_and_name(urn)
            if rtype == MODEL_SERVING_TYPE:
                return name
            if rtype.endswith(":FitCheck") or (rtype.startswith("pulumi-python:dynamic")
                                               and name.endswith(FIT_CHECK_SUFFIX)):
                return name.removesuffix(FIT_CHECK_SUFFIX)
            urn = self.parents.get(urn)
            seen += 1
        return None

    def report(self, name: str) -> ModelReport:
        return self.models.setdefault(name, ModelReport(name))

    def __call__(self, event: events.EngineEvent) -> None:
        meta: events.StepEventMetadata | None = None
        if event.resource_pre_event:
            meta = event.resource_pre_event.metadata
        elif event.res_outputs_event:
            meta = event.res_outputs_event.metadata
        if meta is not None:
            self._step(meta, outputs_event=event.res_outputs_event is not None)
        if event.res_op_failed_event:
            model = self.model_of(event.res_op_failed_event.metadata.urn)
            if model:
                op = event.res_op_failed_event.metadata.op
                self.report(model).errors.append(f"{getattr(op, 'value', op)} failed")
        if event.diagnostic_event and event.diagnostic_event.severity in ("error", "warning"):
            self._diagnostic(event.diagnostic_event)

    def _step(self, meta: events.StepEventMetadata, *, outputs_event: bool) -> None:
        state = meta.new or meta.old
        if state is not None and state.parent:
            self.parents[meta.urn] = state.parent
        rtype, _ = urn_type_and_name(meta.urn)
        if rtype == STACK_TYPE and meta.new is not None and meta.new.outputs:
            self.outputs.update(meta.new.outputs)
        model = self.model_of(meta.urn)
        if not (model and outputs_event):
            return
        op = meta.op.value if hasattr(meta.op, "value") else str(meta.op)
        kind = _OP_KIND.get(op, op)
        report = self.report(model)
        report.ops[kind] += 1
        if self.operation == "refresh" and (kind in {"update", "delete"} or meta.diffs):
            _, res = urn_type_and_name(meta.urn)
            what = "deleted out of band" if kind == "delete" else "changed out of band"
            fields = list(meta.diffs or [])
            if not fields and kind == "update" and meta.old and meta.new:
                fields = changed_paths(meta.old.outputs or {}, meta.new.outputs or {})
            detail = f" ({', '.join(fields)})" if fields else ""
            report.drift.append(f"{res}: {what}{detail}")

    def _diagnostic(self, diag: events.DiagnosticEvent) -> None:
        message = diag.message.strip()
        model = self.model_of(diag.urn)
        if diag.severity == "warning":
            if model:
                self.report(model).warnings.append(message)
            return
        if model:
            self.report(model).errors.append(message)
            if diag.urn:
                self.report(model).failed_urns.add(diag.urn)
        elif message and not message.startswith("update failed") and message not in self.diagnostics:
            self.diagnostics.append(message)


# Fields the server changes by itself; a difference there is bookkeeping, not drift.
_VOLATILE = {"resourceVersion", "managedFields", "generation", "uid", "creationTimestamp", "status",
             "__inputs", "__initialApiVersion", "kubectl.kubernetes.io/last-applied-configuration"}  # fmt: skip


def changed_paths(old: Any, new: Any, prefix: str = "", limit: int = 5) -> list[str]:
    """Dotted paths where a refreshed object differs from the state (at most `limit`, first found).

    The engine's refresh events carry old and new state but no diff keys; this names what a person
    changed (e.g. `metadata.labels.team`) so the drift report says more than "changed".
    """
    out: list[str] = []
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return [] if old == new else ([prefix] if prefix else [])
    for key in sorted(set(old) | set(new)):
        if key in _VOLATILE or len(out) >= limit or old.get(key) == new.get(key):
            continue
        path = f"{prefix}.{key}" if prefix else str(key)
        a, b = old.get(key), new.get(key)
        out.extend(changed_paths(a, b, path, limit - len(out)) if isinstance(a, dict) and isinstance(b, dict)
                   else [path])
    return out[:limit]


def summarize(stack_name: str, operation: str, tracker: RunTracker, ok: bool,
              outputs: Mapping[str, Any] | None = None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The `--json` summary: per model, what happened and why; stable keys (pinned by tests).

    `outputs`: the stack's outputs when the event stream did not carry them (a failed update).
    """
    outs = {**(outputs or {}), **tracker.outputs}
    excluded = [Exclusion.from_output(x) for x in outs.get("rejected") or [] if isinstance(x, Mapping)]
    for x in excluded:
        tracker.report(x.label).excluded = x
    explained = {x.log_line() for x in excluded} | set(outs.get("problems") or [])
    stack_errors = [d for d in tracker.diagnostics
                    if d not in explained and not d.endswith("Fix the errors above and run again.")
                    and "fleet problem(s), reported above" not in d]
    if excluded or outs.get("problems"):
        # The engine's own note that the program ended non-zero: the verdict above is why.
        stack_errors = [d for d in stack_errors if "program exited with non-zero exit code" not in d]
    stack_errors = list(outs.get("problems") or []) + stack_errors
    models = {name: tracker.report(name).as_dict() for name in sorted(tracker.models)}
    counts = Counter(m["status"] for m in models.values())
    failed = sorted(n for n, m in models.items() if m["status"] in {"failed", "rejected"})
    return {
        "stack": stack_name,
        "operation": operation,
        "ok": ok and not failed and not stack_errors,
        "models": models,
        "counts": dict(sorted(counts.items())),
        "failedModels": failed,
        "errors": stack_errors,
        **(extra or {}),
    }
