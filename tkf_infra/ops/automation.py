"""The Automation API seam: open a stack of this project and turn engine events into per-model reports.

Why per model: CI and the gateway's owners think in models, not URNs. A run's summary says, for each
catalog entry, whether it was created, updated, left unchanged, failed (and why) or rejected by the
catalog rules — so one broken model is named alone and the others visibly went through.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pulumi import automation as auto
from pulumi.automation import events

from tkf_infra.settings import Catalog, SettingsError, validate_catalog

PROJECT_DIR = Path(__file__).resolve().parents[1]
DEV_PASSPHRASE = "tkf-dev-only"  # documented in README.md; only ever used for the dev stack
MODEL_SERVING_TYPE = "tkf:serving:ModelServing"
FIT_CHECK_SUFFIX = "-fit"


class UsageError(Exception):
    """A mistake the user can fix (unknown stack, missing passphrase, engine not installed)."""


def pulumi_home() -> Path:
    return Path(os.environ.get("PULUMI_HOME", Path.home() / ".pulumi"))


def engine_env(stack: str, project_dir: Path = PROJECT_DIR, backend_url: str | None = None) -> dict[str, str]:
    """Environment for the engine: the bootstrap's binaries, the project's virtualenv, the backend."""
    env = {
        "PATH": os.pathsep.join([str(pulumi_home() / "bin"), str(project_dir / ".venv" / "bin"),
                                 os.environ.get("PATH", "")]),
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        # The language host buildable on air-gapped machines predates runtime options: point it at
        # the project's virtualenv explicitly (docs/engine.md).
        "PULUMI_PYTHON_CMD": str(project_dir / ".venv" / "bin" / "python"),
        "PULUMI_BACKEND_URL": backend_url
        or os.environ.get("PULUMI_BACKEND_URL")
        or f"file://{project_dir / '.pulumi-state'}",
    }
    if env["PULUMI_BACKEND_URL"].startswith("file://"):
        Path(env["PULUMI_BACKEND_URL"].removeprefix("file://")).mkdir(parents=True, exist_ok=True)
    has_passphrase = os.environ.get("PULUMI_CONFIG_PASSPHRASE") or os.environ.get("PULUMI_CONFIG_PASSPHRASE_FILE")
    if stack == "dev" and not has_passphrase:
        env["PULUMI_CONFIG_PASSPHRASE"] = DEV_PASSPHRASE
    return env


def _check_engine() -> auto.PulumiCommand:
    binary = pulumi_home() / "bin" / "pulumi"
    if not binary.exists() and not shutil.which("pulumi"):
        raise UsageError("the Pulumi engine is not installed; run `scripts/setup.sh` (builds it if needed)")
    root = str(pulumi_home()) if binary.exists() else None
    return auto.PulumiCommand(root=root)


def open_stack(stack: str, *, create: bool = False, project_dir: Path = PROJECT_DIR,
               backend_url: str | None = None) -> auto.Stack:
    """Select (or, with create, create) a stack of the project, with a clear error when it cannot."""
    env = engine_env(stack, project_dir, backend_url)
    if not (os.environ.get("PULUMI_CONFIG_PASSPHRASE") or os.environ.get("PULUMI_CONFIG_PASSPHRASE_FILE")
            or "PULUMI_CONFIG_PASSPHRASE" in env):
        stack_file = project_dir / f"Pulumi.{stack}.yaml"
        if stack_file.exists() and "encryptionsalt" in stack_file.read_text():
            raise UsageError(f"stack {stack!r} uses a passphrase secrets provider: set PULUMI_CONFIG_PASSPHRASE "
                             "(or PULUMI_CONFIG_PASSPHRASE_FILE) before running this command")
    if create and not (project_dir / f"Pulumi.{stack}.yaml").exists():
        files = ", ".join(sorted(p.name.split(".")[1] for p in project_dir.glob("Pulumi.*.yaml")))
        raise UsageError(f"unknown stack {stack!r}: there is no Pulumi.{stack}.yaml (stack files: {files})")
    cmd = _check_engine()
    opts = auto.LocalWorkspaceOptions(env_vars=env, pulumi_command=cmd)
    try:
        if create:
            return auto.create_or_select_stack(stack, work_dir=str(project_dir), opts=opts)
        return auto.select_stack(stack, work_dir=str(project_dir), opts=opts)
    except auto.StackNotFoundError:
        raise UsageError(f"stack {stack!r} does not exist in {env['PULUMI_BACKEND_URL']}; "
                         f"run `python -m tkf_infra up --stack {stack}` first, or check the name") from None
    except auto.CommandError as err:
        raise UsageError(_last_error_line(str(err)).removeprefix("error: ")) from None


def stack_catalog(stack: auto.Stack) -> Catalog | None:
    """Validate the stack's catalog locally, for reporting rejected entries per model."""
    try:
        cfg = stack.get_all_config()
    except auto.CommandError:
        return None
    doc: dict[str, Any] = {}
    for key, value in cfg.items():
        ns, _, name = key.partition(":")
        if ns != "tkf-infra" or value.secret or name == "apiKey":
            continue
        doc[name] = yaml.safe_load(value.value) if isinstance(value.value, str) else value.value
    try:
        return validate_catalog(doc)
    except SettingsError:
        return None


@dataclass
class ModelReport:
    name: str
    ops: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    failed_urns: set[str] = field(default_factory=set)

    @property
    def status(self) -> str:
        if self.rejected:
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
        if self.errors or self.rejected:
            out["reasons"] = self.rejected + self.errors
        if self.drift:
            out["drift"] = self.drift
        return out


_OP_KIND = {
    "create": "create", "create-replacement": "replace", "replace": "replace", "delete-replaced": "replace",
    "update": "update", "delete": "delete", "same": "same", "read": "same", "refresh": "refresh",
}


class RunTracker:
    """Collects engine events of one operation and attributes each to a catalog model."""

    def __init__(self, operation: str = "preview") -> None:
        self.operation = operation
        self.parents: dict[str, str] = {}
        self.models: dict[str, ModelReport] = {}
        self.stack_errors: list[str] = []

    def model_of(self, urn: str | None) -> str | None:
        seen = 0
        while urn and seen < 64:
            rtype, name = _urn_type_and_name(urn)
            if rtype == MODEL_SERVING_TYPE:
                return name
            if rtype.endswith(":FitCheck") or (rtype.startswith("pulumi-python:dynamic") and
                                               name.endswith(FIT_CHECK_SUFFIX)):
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
            state = meta.new or meta.old
            if state is not None and state.parent:
                self.parents[meta.urn] = state.parent
            model = self.model_of(meta.urn)
            if model and event.res_outputs_event:
                op = meta.op.value if hasattr(meta.op, "value") else str(meta.op)
                kind = _OP_KIND.get(op, op)
                report = self.report(model)
                report.ops[kind] += 1
                if self.operation == "refresh" and (kind in {"update", "delete"} or meta.diffs):
                    _, res = _urn_type_and_name(meta.urn)
                    what = "deleted out of band" if kind == "delete" else "changed out of band"
                    fields = list(meta.diffs or [])
                    if not fields and kind == "update" and meta.old and meta.new:
                        fields = changed_paths(meta.old.outputs or {}, meta.new.outputs or {})
                    detail = f" ({', '.join(fields)})" if fields else ""
                    report.drift.append(f"{res}: {what}{detail}")
        if event.res_op_failed_event:
            model = self.model_of(event.res_op_failed_event.metadata.urn)
            if model:
                op = event.res_op_failed_event.metadata.op
                self.report(model).errors.append(f"{getattr(op, 'value', op)} failed")
        if event.diagnostic_event and event.diagnostic_event.severity == "error":
            diag = event.diagnostic_event
            message = diag.message.strip()
            model = self.model_of(diag.urn)
            if model:
                self.report(model).errors.append(message)
                if diag.urn:
                    self.report(model).failed_urns.add(diag.urn)
            elif message and not message.startswith("update failed") and message not in self.stack_errors:
                self.stack_errors.append(message)


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


def _urn_type_and_name(urn: str) -> tuple[str, str]:
    # urn:pulumi:<stack>::<project>::<parent-type$...$type>::<name>
    parts = urn.split("::")
    if len(parts) < 4:
        return "", urn
    types = parts[2].split("$")
    return types[-1], "::".join(parts[3:])


def summarize(stack_name: str, operation: str, tracker: RunTracker, catalog: Catalog | None,
              ok: bool, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The `--json` summary: per model, what happened and why; stable keys (pinned by tests)."""
    models: dict[str, dict[str, Any]] = {}
    names = [m.name for m in catalog.models] if catalog else []
    if catalog:
        for r in catalog.rejected:
            rep = tracker.report(r.name or f"models[{r.index}]")
            rep.rejected = [str(p) for p in r.problems]
    for name in sorted(set(names) | set(tracker.models)):
        models[name] = tracker.report(name).as_dict()
    counts = Counter(m["status"] for m in models.values())
    failed = sorted(n for n, m in models.items() if m["status"] in {"failed", "rejected"})
    return {
        "stack": stack_name,
        "operation": operation,
        "ok": ok and not failed and not tracker.stack_errors,
        "models": models,
        "counts": dict(sorted(counts.items())),
        "failedModels": failed,
        "errors": tracker.stack_errors,
        **(extra or {}),
    }


@dataclass
class RunResult:
    summary: dict[str, Any]
    """The `--json` summary (see `summarize`)."""
    tracker: RunTracker
    """What the run saw per model; a preview's tracker steers the `up` after it."""


def run_operation(stack: auto.Stack, operation: str, *, on_output: Any = None,
                  after: RunTracker | None = None) -> RunResult:
    """Run preview / up / refresh / destroy with event tracking; never raises for a failed plan.

    `after`: the tracker of a preview run just before an `up`. Models whose checks failed there are
    excluded from the up (with their dependents): a failed check would otherwise abort the whole
    deployment — continue-on-error only covers failures while steps execute — and one bad model
    must not block the others. They are reported as failed with the preview's reasons.
    """
    tracker = RunTracker(operation)
    excluded: list[str] = []
    if after is not None:
        for name, rep in after.models.items():
            if rep.failed_urns:
                excluded.extend(sorted(rep.failed_urns))
                tracker.report(name).errors.extend(rep.errors)
    ok = True
    extra: dict[str, Any] = {}
    try:
        if operation == "preview":
            res = stack.preview(on_event=tracker, on_output=on_output, diff=False)
            extra["changeSummary"] = {str(k.value if hasattr(k, 'value') else k): v
                                      for k, v in res.change_summary.items()}
        elif operation == "up":
            up = stack.up(on_event=tracker, on_output=on_output, continue_on_error=True,
                          exclude=excluded or None, exclude_dependents=True if excluded else None)
            extra["changeSummary"] = dict(up.summary.resource_changes or {})
        elif operation == "refresh":
            ref = stack.refresh(on_event=tracker, on_output=on_output)
            extra["changeSummary"] = dict(ref.summary.resource_changes or {})
        elif operation == "destroy":
            des = stack.destroy(on_event=tracker, on_output=on_output, continue_on_error=True)
            extra["changeSummary"] = dict(des.summary.resource_changes or {})
        else:
            raise UsageError(f"unknown operation {operation!r}")
    except auto.CommandError as err:
        ok = False
        if not tracker.models and not tracker.stack_errors:
            tracker.stack_errors.append(_last_error_line(str(err)))
    return RunResult(summarize(stack.name, operation, tracker, stack_catalog(stack), ok, extra), tracker)


def _last_error_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("error:")]
    return lines[-1] if lines else text.strip().splitlines()[-1] if text.strip() else "the engine failed"


def stack_outputs(stack: auto.Stack, *, show_secrets: bool = False) -> dict[str, Any]:
    """Stack outputs as plain values; secret outputs are left out unless asked for."""
    out: dict[str, Any] = {}
    for key, value in stack.outputs().items():
        if value.secret and not show_secrets:
            continue
        out[key] = value.value
    return out


PROJECT_FILES = ("Pulumi.yaml", "__main__.py", "models.lock.json", "requirements.txt")
PROJECT_DIRS = ("tkf_infra", "components", "providers")


def copy_project(dest: Path, project_dir: Path = PROJECT_DIR) -> Path:
    """A private copy of the program (sharing the virtualenv), so tests and benchmarks can create
    stack files and state without touching the checkout."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in PROJECT_FILES:
        shutil.copy2(project_dir / name, dest / name)
    for name in PROJECT_DIRS:
        shutil.copytree(project_dir / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    (dest / ".venv").symlink_to(project_dir / ".venv")
    return dest


__all__ = [
    "PROJECT_DIR",
    "ModelReport",
    "RunResult",
    "RunTracker",
    "UsageError",
    "copy_project",
    "engine_env",
    "open_stack",
    "run_operation",
    "stack_catalog",
    "stack_outputs",
    "summarize",
]
