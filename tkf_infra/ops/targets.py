"""Which URNs a targeted run (`preview|up --models a,b`) tells the engine to keep, from the stack's own catalog
and, for a model the edit removed, its last deployment (`tkf_infra.targeted` says what is stepped and why).

Why here and not in the program: the engine needs the exclusion list before the program starts. The catalog is
read raw (names, repo and revision after `modelDefaults`), not validated: a named entry the catalog refuses is
still stepped, and the program refuses it as a full run would.
"""

from __future__ import annotations

import atexit
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pulumi import automation as auto

from tkf_infra import names
from tkf_infra.config.reader import read_stack_file
from tkf_infra.config.validate import deep_merge
from tkf_infra.ops.stacks import UsageError, project_name, stack_outputs
from tkf_infra.outputs import DEPLOYED_OUTPUT
from tkf_infra.targeted import (
    TARGET_KEEP_ENV,
    TARGET_MODELS_ENV,
    TARGET_TICKET_ENV,
    Keep,
    exclude_patterns,
    skip_set,
    ticket_digest,
)


@dataclass(frozen=True)
class Targeting:
    """A targeted run: the models it names, what it keeps, the engine's `--exclude` list, the program's environment
    (with the run's ticket, `tkf_infra.targeted.TARGET_TICKET_ENV`: written here, removed when this process exits,
    so the variables copied into another shell are refused by the program)."""

    models: tuple[str, ...]
    keep: Keep
    excludes: list[str]
    ticket: Path = field(init=False)

    def __post_init__(self) -> None:
        fd, path = tempfile.mkstemp(prefix="tkf-target-", suffix=".ticket")
        with os.fdopen(fd, "w") as f:
            f.write(ticket_digest(self._models_text, self.keep.as_json()))
        atexit.register(Path(path).unlink, missing_ok=True)
        object.__setattr__(self, "ticket", Path(path))

    @property
    def _models_text(self) -> str:
        return json.dumps(list(self.models))

    @property
    def env(self) -> dict[str, str]:
        return {TARGET_MODELS_ENV: self._models_text, TARGET_KEEP_ENV: self.keep.as_json(),
                TARGET_TICKET_ENV: str(self.ticket)}


def parse_models(text: str) -> tuple[str, ...]:
    """`a,b` → ("a", "b"); an empty name is a usage error naming the value."""
    found = tuple(dict.fromkeys(part.strip() for part in text.split(",")))
    if not found or any(not n for n in found):
        raise UsageError(f"--models {text!r}: give model names separated by commas, e.g. --models qwen-05b,coder")
    return found


def stack_settings(stack: auto.Stack) -> dict[str, Any]:
    """The stack's `tkf-infra:` settings: from its stack file when the workspace has one (no engine call: a
    targeted run is the quick loop), else from the engine's config."""
    path = Path(stack.workspace.work_dir) / f"Pulumi.{stack.name}.yaml"
    if path.exists():
        return read_stack_file(path)
    out: dict[str, Any] = {}
    for key, item in stack.get_all_config().items():
        if key.startswith("tkf-infra:") and not item.secret:
            out[key.split(":", 1)[1]] = yaml.safe_load(item.value) if isinstance(item.value, str) else item.value
    return out


def raw_entries(settings: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The catalog's entries by name, `modelDefaults` merged under each (unvalidated)."""
    defaults, entries = settings.get("modelDefaults") or {}, settings.get("models") or []
    out: dict[str, dict[str, Any]] = {}
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            out[entry["name"]] = deep_merge(defaults if isinstance(defaults, Mapping) else {}, entry)
    return out


def _cache(entry: Mapping[str, Any]) -> str | None:
    repo, revision = entry.get("repo"), entry.get("revision")
    if not isinstance(repo, str) or not isinstance(revision, str):
        return None
    try:
        return names.weight_cache(repo, revision)
    except ValueError:
        return None


def resolve(stack: auto.Stack, models: tuple[str, ...]) -> Targeting:
    """A run of `models` on `stack`: what it keeps and the engine's exclusions for it; a name neither in its catalog
    nor in its last deployment is a usage error naming it and the names there are. Each model's weight cache is
    read as the catalog names it now and as the last run deployed it: a removed model, or a new revision, leaves
    a cache to update or delete, which the run then steps."""
    entries = raw_entries(stack_settings(stack))
    try:
        found = stack_outputs(stack).get(DEPLOYED_OUTPUT)
    except auto.CommandError:
        found = None
    deployed: dict[str, Any] = dict(found) if isinstance(found, Mapping) else {}
    unknown = [m for m in models if m not in entries and m not in deployed]
    if unknown:
        known = sorted({*entries, *deployed})
        raise UsageError(f"--models: no model named {', '.join(map(repr, unknown))} in stack {stack.name!r} (its "
                         f"catalog or its last deployment); known: {', '.join(known) or 'none'}")
    keep = skip_set(models, {m: _cache(e) for m, e in entries.items()},
                    {m: _cache(e) if isinstance(e, Mapping) else None for m, e in deployed.items()})
    return Targeting(models, keep, exclude_patterns(stack.name, project_name(), keep))
