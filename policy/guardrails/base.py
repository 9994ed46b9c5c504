"""What a guardrail is, and the one format of its violation messages.

Why a message format: the engine hands a violation back to tkf-infra as text plus the URN of the
resource. ``python -m tkf_infra`` attributes each violation to catalog entries; a weight-cache PVC or a
fleet total is not under any one model, so every message starts with the models it is about
(``model qwen-0-5b: …`` or ``models a, b: …``): ``tkf_infra.names.subject`` writes that prefix and
``tkf_infra.names.subject_models`` reads it back (``tkf_infra/ops/policy_report.py``), one definition for
both sides.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tkf_infra.names import subject


@dataclass(frozen=True)
class Violation:
    message: str
    urn: str | None = None
    """The resource in violation (stack policies); None = the object being validated, or the stack."""


@dataclass(frozen=True)
class Guardrail:
    """One policy of the pack: name, plain-language description, check and config schema.

    The enforcement level is not here: it is the platform owner's per-stack choice, in
    ``policy/config/<stack>.json`` (``enforcementLevel`` of each policy).
    """

    name: str
    description: str
    scope: Literal["resource", "stack"]
    check: Callable[..., list[Violation]]
    """A resource check (one object and the policy's configuration) or a stack check (every object of the
    stack and the configuration) → violations, empty when compliant."""
    config_schema: dict[str, Any] = field(default_factory=dict)
    """JSON Schema ``properties`` of the policy's configuration; the engine validates the stack's
    config file against it before anything runs."""
    required: tuple[str, ...] = ()


def violation(models: Sequence[str], what: str, problem: str, fix: str, urn: str | None = None) -> Violation:
    """``<models>: <resource>: <problem>. Fix: <fix>`` — who, where, the value, and what to do."""
    return Violation(f"{subject(models)}: {what}: {problem}. Fix: {fix}", urn)


def owner_fix() -> str:
    """The second way out of every violation: the platform owner changes the limit."""
    return "or ask the platform owner to change the limit in policy/config/<stack>.json"
