"""Per-model reports of an engine run: what happened to each catalog entry, and why.

Why per model: CI and the gateway's owners think in models, not URNs. A run's summary says, for each
entry, whether it was created, updated, left unchanged, failed (and why) or left out (rejected, with
the stage that refused it) — so one broken model is named alone and the others visibly went through.

Where each fact comes from, so nothing is decided twice:
- deployed models: the engine's events, attributed to a model by URN (its ModelServing, or a per-model FitCheck
  left in a state written before the stack had one FitCheck;
  a WeightCache's resources to every model it serves, from the component's `models` output, so a
  failed weight download fails exactly those models);
- left-out models: the program's own `rejected` output (`tkf_infra.plan.Exclusion`), read from the
  stack resource's outputs in the event stream — the same list the gateway's deploy reads;
- stack problems: the `problems` output plus engine errors no model explains;
- interrupted runs and pending operations (a run killed mid-apply): `tkf_infra.ops.interrupted`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pulumi.automation import events

from tkf_infra.names import (
    FIT_CHECK_SUFFIX,
    MODEL_SERVING_TYPE,
    STACK_TYPE,
    WEIGHT_CACHE_MODELS_OUTPUT,
    WEIGHT_CACHE_TYPE,
)
from tkf_infra.outputs import DEPLOYED_OUTPUT, ENDPOINTS_OUTPUT, PROBLEMS_OUTPUT, REJECTED_OUTPUT
from tkf_infra.plan import Exclusion, Stage, verdict
from tkf_infra.sizing.estimate_result import VERDICTS
from tkf_infra.sizing.startup import TIGHT_PREFIX

#: The Kubernetes provider's message for an await cut short by a cancel (SIGINT/SIGTERM to the engine).
CANCELLED_MARKER = "Resource operation was cancelled"


@dataclass
class ModelReport:
    name: str
    ops: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)
    excluded: Exclusion | None = None
    failed_urns: set[str] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    """Operations a killed run left pending on this model's resources (from the state)."""
    interrupted: bool = False
    """The run was interrupted before this model's planned changes were all made."""

    @property
    def status(self) -> str:
        if self.excluded is not None:
            return "rejected"
        if self.errors:
            return "failed"
        if self.interrupted:
            return "interrupted"
        for op, label in (("replace", "replaced"), ("create", "created"), ("update", "updated"),
                          ("delete", "deleted")):
            if self.ops.get(op):
                return label
        return "unchanged"

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "changes": dict(sorted(self.ops.items()))}
        if self.excluded is not None:
            out["stage"] = self.excluded.stage.value
            out["refusals"] = [r.as_output() for r in self.excluded.refusals]
            if self.excluded.kept:
                out["kept"] = True
        reasons = (list(self.excluded.reasons) if self.excluded else []) + self.errors
        if reasons:
            out["reasons"] = reasons
        if self.warnings:
            out["warnings"] = self.warnings
        if self.drift:
            out["drift"] = self.drift
        if self.pending:
            out["pending"] = self.pending
        return out


_OP_KIND = {
    "create": "create", "create-replacement": "replace", "replace": "replace", "delete-replaced": "replace",
    "update": "update", "delete": "delete", "same": "same", "read": "same", "refresh": "refresh",
}


def urn_type_and_name(urn: str) -> tuple[str, str]:
    # urn:pulumi:<stack>::<project>::<parent-type$...$type>::<name>
    parts = urn.split("::")
    if len(parts) < 4:
        return "", urn
    types = parts[2].split("$")
    return types[-1], "::".join(parts[3:])


def models_of(urn: str | None, parents: Mapping[str, str], cache_models: Mapping[str, list[str]]) -> list[str]:
    """The catalog models a resource belongs to: its ModelServing's or FitCheck's, or every model its
    WeightCache serves; [] for shared and stack-level resources."""
    seen = 0
    while urn and seen < 64:
        rtype, name = urn_type_and_name(urn)
        if rtype == MODEL_SERVING_TYPE:
            return [name]
        # A per-model FitCheck (states written before the stack's one FitCheck, `names.FIT_CHECK`, which
        # holds every model and so belongs to none).
        dynamic = rtype.endswith(":FitCheck") or rtype.startswith("pulumi-python:dynamic")
        if dynamic and name.endswith(FIT_CHECK_SUFFIX):
            return [name.removesuffix(FIT_CHECK_SUFFIX)]
        if rtype == WEIGHT_CACHE_TYPE:
            return list(cache_models.get(urn, []))
        urn = parents.get(urn)
        seen += 1
    return []


class RunTracker:
    """Collects engine events of one operation and attributes each to a catalog model."""

    def __init__(self, operation: str = "preview") -> None:
        self.operation = operation
        self.parents: dict[str, str] = {}
        self.cache_models: dict[str, list[str]] = {}
        """WeightCache URN → the models it serves (the component's `models` output)."""
        self.models: dict[str, ModelReport] = {}
        self.diagnostics: list[str] = []
        """Error diagnostics no model's URN explains (program messages, engine errors)."""
        self.outputs: dict[str, Any] = {}
        """The stack's outputs as the run registered them."""
        self._failures: list[tuple[str, str, bool]] = []
        """(URN, message, is a diagnostic) of failed resources, attributed once the run is over: a
        WeightCache's `models` output may be learned after its Job's failure arrives."""

    def model_of(self, urn: str | None) -> str | None:
        found = self.models_of(urn)
        return found[0] if len(found) == 1 else None

    def models_of(self, urn: str | None) -> list[str]:
        return models_of(urn, self.parents, self.cache_models)

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
            op = event.res_op_failed_event.metadata.op
            self._failures.append((event.res_op_failed_event.metadata.urn, f"{getattr(op, 'value', op)} failed", False))
        if event.diagnostic_event and event.diagnostic_event.severity in ("error", "warning"):
            self._diagnostic(event.diagnostic_event)

    def attribute(self) -> None:
        """Give each failure seen so far to its models (or to the stack); idempotent."""
        failures, self._failures = self._failures, []
        for urn, message, is_diagnostic in failures:
            models = self.models_of(urn)
            if CANCELLED_MARKER in message:  # an interrupt cancelled the wait: not this model's fault
                for model in models:
                    self.report(model).interrupted = True
                continue
            if not models:
                if is_diagnostic and message and not message.startswith("update failed") \
                        and message not in self.diagnostics:
                    self.diagnostics.append(message)
                continue
            if f"{WEIGHT_CACHE_TYPE}$" in urn:
                if not is_diagnostic:
                    continue  # "create failed": the diagnostic below says why
                message = weight_cache_failure(urn, message)
            for model in models:
                report = self.report(model)
                report.errors.append(message)
                if is_diagnostic:
                    report.failed_urns.add(urn)

    def _step(self, meta: events.StepEventMetadata, *, outputs_event: bool) -> None:
        state = meta.new or meta.old
        if state is not None and state.parent:
            self.parents[meta.urn] = state.parent
        rtype, _ = urn_type_and_name(meta.urn)
        if rtype == STACK_TYPE and meta.new is not None and meta.new.outputs:
            self.outputs.update(meta.new.outputs)
        cached = (state.outputs or {}).get(WEIGHT_CACHE_MODELS_OUTPUT) if state is not None else None
        if rtype == WEIGHT_CACHE_TYPE and isinstance(cached, list):
            self.cache_models[meta.urn] = [str(m) for m in cached]
        if outputs_event:  # a shared weight cache's change counts for every model it serves
            for model in self.models_of(meta.urn):
                self._count(self.report(model), meta)

    def _count(self, report: ModelReport, meta: events.StepEventMetadata) -> None:
        op = meta.op.value if hasattr(meta.op, "value") else str(meta.op)
        kind = _OP_KIND.get(op, op)
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
        if diag.severity == "warning":
            for model in self.models_of(diag.urn):
                self.report(model).warnings.append(message)
            return
        self._failures.append((diag.urn or "", message, True))


def weight_cache_failure(urn: str, message: str) -> str:
    """A failed weight download, for each model it serves: the Job's own reason and the way out.

    The engine wraps the provider's reasons as "N errors occurred: * resource "urn…" was … created,
    but … failed to initialize * [BackoffLimitExceeded] Job has reached the specified backoff limit";
    the bracketed reason is the Job's condition, which is what the operator needs.
    """
    rtype, name = urn_type_and_name(urn)
    bullets = [ln.strip().removeprefix("* ") for ln in message.splitlines() if ln.strip().startswith("* ")]
    reasons = [b for b in bullets if not b.startswith('resource "urn:')] or [message]
    kind = rtype.rsplit(":", 1)[-1].rsplit("/", 1)[-1]
    what = f"weight download Job {name}" if kind == "Job" else f"weight cache {kind} {name}"
    return (f"{what} failed: {'; '.join(reasons)}. The weight cache is kept; fix the cause (does the revision "
            "still exist on the Hub? is the hfTokenSecret's token valid?), then run `up` again: the failed Job is "
            "replaced and the download resumes")


# Fields the server changes by itself; a difference there is bookkeeping, not drift.
_VOLATILE = {"resourceVersion", "managedFields", "generation", "uid", "creationTimestamp", "status",
             "__inputs", "__initialApiVersion", "kubectl.kubernetes.io/last-applied-configuration"}


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
    tracker.attribute()
    outs = {**(outputs or {}), **tracker.outputs}
    excluded = [Exclusion.from_output(x) for x in outs.get(REJECTED_OUTPUT) or [] if isinstance(x, Mapping)]
    for x in excluded:
        tracker.report(x.label).excluded = x
    problems = [str(p) for p in outs.get(PROBLEMS_OUTPUT) or []]
    # The program's own lines for these facts (each left-out model's, then its verdict), rebuilt from the
    # exported data: the per-model rows and `problems` already say them.
    explained = {x.log_line() for x in excluded} | set(problems)
    said = verdict(excluded, problems, len(outs.get(DEPLOYED_OUTPUT) or {}))
    stack_errors = [d for d in tracker.diagnostics if d not in explained and not (said and d.endswith(said))]
    if excluded or outs.get(PROBLEMS_OUTPUT):
        # The engine's own note that the program ended non-zero: the verdict above is why.
        stack_errors = [d for d in stack_errors if "program exited with non-zero exit code" not in d]
    stack_errors = list(outs.get(PROBLEMS_OUTPUT) or []) + stack_errors
    models = {name: tracker.report(name).as_dict() for name in sorted(tracker.models)}
    add_fit_verdicts(models, outs, excluded)
    failed = failed_models(models)
    return {
        "stack": stack_name,
        "operation": operation,
        "ok": ok and not failed and not stack_errors,
        "models": models,
        "counts": status_counts(models),
        "failedModels": failed,
        "errors": stack_errors,
        **(extra or {}),
    }


#: The fit verdict a model left out at each fit stage had (docs/sizing.md: fits, tight, refuses).
_STAGE_VERDICT = {Stage.FIT: "refuses", Stage.TIGHT: "tight"}


def add_fit_verdicts(models: dict[str, dict[str, Any]], outs: Mapping[str, Any], excluded: list[Exclusion]) -> None:
    """Each model's fit verdict (`fit`): a deployed one's from its `endpoints` entry (and, when tight, the reasons
    among its warnings: the program logs them as stack warnings, which name no model), a model left out by the
    fit check from its stage."""
    endpoints = outs.get(ENDPOINTS_OUTPUT)
    for ep in endpoints.values() if isinstance(endpoints, Mapping) else ():
        fit = ep.get("fit") if isinstance(ep, Mapping) else None
        name = ep.get("name") if isinstance(ep, Mapping) else None
        if not isinstance(fit, Mapping) or name not in models or fit.get("verdict") not in VERDICTS:
            continue
        models[name]["fit"] = fit["verdict"]
        tight = [str(w) for w in fit.get("warnings") or () if str(w).startswith(TIGHT_PREFIX)]
        if tight:
            models[name]["warnings"] = list(dict.fromkeys([*models[name].get("warnings", []), *tight]))
    for x in excluded:
        if x.stage in _STAGE_VERDICT and x.label in models:
            models[x.label]["fit"] = _STAGE_VERDICT[x.stage]


#: Model statuses that make a run fail (`failedModels`, exit 1).
FAILED_STATUSES = frozenset({"failed", "rejected", "interrupted"})


def failed_models(models: Mapping[str, Mapping[str, Any]]) -> list[str]:
    return sorted(n for n, m in models.items() if m["status"] in FAILED_STATUSES)


def status_counts(models: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """The summary's `counts`: how many models ended in each status."""
    return dict(sorted(Counter(str(m["status"]) for m in models.values()).items()))
