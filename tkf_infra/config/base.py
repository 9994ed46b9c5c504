"""What every settings shape shares: the YAML key style, and how a problem is reported.

Why here: a problem with a catalog entry, a node pool or a platform piece must read the same way
wherever it is found (pydantic field rules, cross-entry rules, fit checks), so the person editing
the stack file always sees `where: field: what is wrong, what is allowed, how to fix it`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel


class SettingsModel(BaseModel):
    """Base for every settings model: camelCase keys as in the stack file, unknown keys refused."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one field, phrased for the person editing the stack file."""

    where: str  # e.g. "models[3] qwen-72b" or "nodePools[0]"
    field: str  # e.g. "revision"
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.field}: {self.message}" if self.field else f"{self.where}: {self.message}"


class SettingsError(Exception):
    """Raised for stack settings that cannot be used at all (or any bad entry under `strict`)."""

    def __init__(self, problems: Sequence[Problem], headline: str = "the stack settings are invalid") -> None:
        self.problems = list(problems)
        self.headline = headline
        super().__init__(self.render())

    def render(self) -> str:
        lines = [f"{self.headline} ({len(self.problems)} problem{'s' if len(self.problems) != 1 else ''}):"]
        lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)


def loc_path(loc: Sequence[int | str]) -> str:
    """Render a pydantic error location (aliases, i.e. the stack file's keys) as `a.b[0].c`."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def problems_from(err: ValidationError, where: str, prefix: str = "") -> list[Problem]:
    """pydantic's errors as Problems, with the stack file's own key names and an actionable hint."""
    problems = []
    for e in err.errors(include_url=False):
        path = loc_path(list(e["loc"]))
        field_path = f"{prefix}.{path}" if prefix and path else (prefix or path)
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "missing":
            msg = ("is required but missing; add it to the entry or to modelDefaults" if where.startswith("models")
                   else "is required but missing")
        elif e["type"] == "extra_forbidden":
            msg = (f"unknown key (value {short(e.get('input'))}); "
                   "check the spelling against `python -m tkf_infra schema`")
        elif "input" in e and e["type"] not in {"value_error", "assertion_error"}:
            msg = f"{msg}; got {short(e['input'])}"
        problems.append(Problem(where, field_path, msg))
    return problems
