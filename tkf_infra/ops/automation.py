"""Run an operation on a stack through the Automation API and report it per model.

Why the CLI previews before `up`: CI wants the plan in the log, and a model the platform owner's
policy pack refuses at preview (`policy/`) is excluded from the `up` that follows, with its
dependents, so it fails alone. Models the program itself refuses never reach the engine: the
program leaves them out (`tkf_infra.plan`), and `up` runs with continue-on-error so a model that
fails to apply fails alone too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulumi import automation as auto

from tkf_infra.ops import policy_report
from tkf_infra.ops.stacks import UsageError, engine_error, last_error_line, stack_outputs
from tkf_infra.ops.summary import RunTracker, summarize
from tkf_infra.program import POLICY_REFUSALS_ENV
from tkf_infra.targeted import TARGET_ENV

if TYPE_CHECKING:
    from tkf_infra.ops.targets import Targeting


@dataclass
class RunResult:
    summary: dict[str, Any]
    """The `--json` summary (see `tkf_infra.ops.summary.summarize`)."""
    tracker: RunTracker
    """What the run saw per model; a preview's tracker steers the `up` after it."""
    policy_refusals: dict[str, list[str]] = field(default_factory=dict)
    """Models the policy pack refused (mandatory violations), with the violations."""


def run_operation(stack: auto.Stack, operation: str, *, on_output: Callable[[str], None] | None = None,
                  after: RunTracker | None = None, refused_by_policy: dict[str, list[str]] | None = None,
                  clear_pending_creates: bool = False, targeting: Targeting | None = None) -> RunResult:
    """Run preview / up / refresh / destroy with event tracking; never raises for a failed plan.

    Raises `OperatorError` when the run could not start or finish for a reason outside the plan: a
    wrong passphrase, a locked stack, an unreachable state backend (`tkf_infra.ops.stacks.engine_error`).

    `after`: the tracker of a preview run just before an `up`. Resources that failed there (a
    policy violation, a provider's check) are excluded from the up with their dependents and
    reported with the preview's reasons: a failed check would otherwise abort the whole update.
    `refused_by_policy`: the models the pack refused at that preview; the program is told, so it
    leaves them out (stage `policy` in the `rejected` output) or keeps them at their last deployed
    settings, and never publishes a route to them.
    `targeting`: a targeted preview or up (`--models`, tkf_infra/targeted.py): the engine keeps what its
    exclusions match. The preview's failed resources are then not excluded from the up (they are excluded with
    their dependents, which would keep the named models' workloads too, since they depend on the platform's
    pieces): the program leaves the policy's refusals out or at their last settings, and continue-on-error keeps
    any other failure to its model.
    """
    stack.workspace.env_vars = {**stack.workspace.env_vars, POLICY_REFUSALS_ENV: json.dumps(refused_by_policy or {}),
                                **(targeting.env if targeting else dict.fromkeys(TARGET_ENV, ""))}
    kept = targeting.excludes if targeting else None
    tracker = RunTracker(operation)
    excluded: list[str] = []
    if after is not None:
        for name, rep in after.models.items():
            if rep.failed_urns:
                excluded.extend(sorted(rep.failed_urns))
                tracker.report(name).errors.extend(rep.errors)
    # Policy pack (tkf_infra/ops/policy_report.py): run the stack's guardrails on preview and up;
    # mandatory violations fail their models in the tracker (so the up after a preview excludes them).
    policy = policy_report.PolicyCollector.for_run(stack.name, operation)
    on_event = policy_report.tee(tracker, policy)
    ok = True
    extra: dict[str, Any] = {}
    try:
        if operation == "preview":
            res = stack.preview(on_event=on_event, on_output=on_output, diff=False, exclude=kept,
                                policy_packs=policy.pack.policy_packs,
                                policy_pack_configs=policy.pack.policy_pack_configs)
            extra["changeSummary"] = {str(getattr(k, "value", k)): v for k, v in res.change_summary.items()}
        elif operation == "up":
            up = stack.up(on_event=on_event, on_output=on_output, continue_on_error=True,
                          exclude=kept or excluded or None, exclude_dependents=True if excluded and not kept else None,
                          policy_packs=policy.pack.policy_packs,
                          policy_pack_configs=policy.pack.policy_pack_configs)
            extra["changeSummary"] = dict(up.summary.resource_changes or {})
        elif operation == "refresh":
            ref = stack.refresh(on_event=tracker, on_output=on_output,
                                clear_pending_creates=clear_pending_creates or None)
            extra["changeSummary"] = dict(ref.summary.resource_changes or {})
        elif operation == "destroy":
            des = stack.destroy(on_event=tracker, on_output=on_output, continue_on_error=True)
            extra["changeSummary"] = dict(des.summary.resource_changes or {})
        else:
            raise UsageError(f"unknown operation {operation!r}")
    except auto.CommandError as err:
        known = engine_error(str(err), stack.name, stack.workspace.env_vars.get("PULUMI_BACKEND_URL", ""),
                             Path(stack.workspace.work_dir))
        if known is not None:
            raise known from None
        ok = False
        policy.record(tracker)
        if not tracker.models and not tracker.diagnostics:
            tracker.diagnostics.append(last_error_line(str(err)))
    else:
        policy.record(tracker)
    outputs: dict[str, Any] = {}
    if operation in ("up", "refresh") and not tracker.outputs:
        try:
            outputs = stack_outputs(stack)
        except auto.CommandError:
            outputs = {}
    summary = summarize(stack.name, operation, tracker, ok, outputs, extra)
    if operation in policy_report.RUNS_PACK:
        policy.annotate(summary)
    refusals = {model: [v.line() for v in found if v.mandatory] for model, found in policy.by_model().items()}
    return RunResult(summary, tracker, {m: lines for m, lines in refusals.items() if lines})
