"""What every settings shape shares: the YAML key style, and how a problem is reported.

Why here: a problem with a catalog entry, a node pool or a platform piece must read the same way
wherever it is found (pydantic field rules, cross-entry rules, fit checks), so the person editing
the stack file always sees `where: field: what is wrong, what is allowed, how to fix it`.
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator
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


def problem_check(*fields: str, check: Callable[[str], str | None], prefix: str = "") -> Any:
    """A field validator refusing `fields` with what `check` finds wrong (after `prefix`), for a model to bind as
    ``_name = problem_check("field", check=...)``.

    Why: the rules of one syntax (`kube_syntax`'s label keys and subdomains, `identity`'s revisions) each say
    what is wrong and how to write it, and several models' fields follow them; one wrapper keeps every such
    field refused the same way, with the rule's own message, instead of a method per field repeating it. An
    unset optional field (None) has nothing to check."""

    def validate(v: str | None) -> str | None:
        if v is not None and (problem := check(v)):
            raise ValueError(f"{prefix}{problem}")
        return v

    return field_validator(*fields)(validate)


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
        out += f"[{part}]" if isinstance(part, int) else (f".{label_name(part)}" if out else label_name(part))
    return out


def label_name(name: str) -> str:
    """A name as a message's subject: as written, or quoted with escapes when it holds a space or a control
    character (a name "m\\n" must not break the message's line, nor read as the valid "m")."""
    return name if name.isprintable() and not any(c.isspace() for c in name) else repr(name)


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class SecretValue:
    """Stands for the value of a secret stack key in a settings document: never shown in a message."""

    def __repr__(self) -> str:
        return "<secret>"


#: Key names whose value is not echoed even in plaintext (a misspelt `apiKeyNext` set without --secret).
_CREDENTIAL = re.compile(r"key|secret|token|passw", re.IGNORECASE)


def keys_of(model: type[BaseModel]) -> tuple[str, ...]:
    """The keys a settings model takes, as the stack file spells them, in declaration order."""
    return tuple(f.alias or name for name, f in model.model_fields.items())


def did_you_mean(key: str, known: Iterable[str]) -> str:
    """`did you mean 'x'? ` for the nearest known key (difflib, case-insensitive), or ''."""
    by_lower = {k.lower(): k for k in known if k != key}
    close = difflib.get_close_matches(key.lower(), list(by_lower), n=1, cutoff=0.6)
    return f"did you mean {by_lower[close[0]]!r}? " if close else ""


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The settings model inside a field's annotation (`Taint`, `list[Taint]`, `Cost | None`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for arg in typing.get_args(annotation) if (m := _model_in(arg)) is not None), None)


def _keys_at(model: type[BaseModel] | None, loc: Sequence[int | str]) -> tuple[str, ...]:
    """The keys of the model that holds the key at `loc` (an unknown key's location), if it can be found."""
    current = model
    for part in loc[:-1]:
        if current is None:
            return ()
        if isinstance(part, int):
            continue  # an item of a list: the list's model
        info = next((f for name, f in current.model_fields.items() if part in (f.alias, name)), None)
        current = _model_in(info.annotation) if info is not None else None
    return keys_of(current) if current is not None else ()


def problems_from(err: ValidationError, where: str, prefix: str = "", model: type[BaseModel] | None = None,
                  also: Sequence[str] = ()) -> list[Problem]:
    """pydantic's errors as Problems, with the stack file's own key names and an actionable hint.

    ``model``: the model validated, so an unknown key gets the nearest valid one; ``also``: keys its
    top level takes besides the model's own (the stack's secrets).
    """
    problems = []
    for e in err.errors(include_url=False):
        path = loc_path(list(e["loc"]))
        field_path = f"{prefix}.{path}" if prefix and path else (prefix or path)
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "missing":
            msg = ("is required but missing; add it to the entry or to modelDefaults" if where.startswith("models")
                   else "is required but missing")
        elif e["type"] == "extra_forbidden":
            loc = list(e["loc"])
            known = (*_keys_at(model, loc), *(also if len(loc) == 1 else ()))
            value, key = e.get("input"), str(loc[-1])
            hint = did_you_mean(key, known)
            if isinstance(value, SecretValue):
                shown = "a secret, not shown"
            elif _CREDENTIAL.search(key) or any(f"{k!r}?" in hint for k in also):
                shown = "not shown: it may be a credential; set such keys with `pulumi config set --secret`"
            else:
                shown = f"value {short(value)}"
            msg = (f"unknown key ({shown}): nothing reads it; {hint}"
                   "check the spelling against `python -m tkf_infra schema`")
        elif "input" in e and e["type"] not in {"value_error", "assertion_error"}:
            msg = f"{msg}; got {short(e['input'])}"
        problems.append(Problem(where, field_path, msg))
    return problems
