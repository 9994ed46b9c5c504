"""The policy pack in a run: which pack and config to pass, and its violations attributed to models.

Why per model: a violation arrives from the engine as a policy event — the policy's name, its
enforcement level, the text, and the URN of the resource it judged. CI and catalog authors think in
catalog entries, so each violation is attributed to the models it is about: a mandatory one fails its
models as a refused fit check does (and its resources are excluded from the `up` that follows the
preview, so the siblings still deploy); an advisory one is a warning under the model. A violation
without a resource (a fleet total) is a stack-level error or warning.

Attribution reads the guardrails' message subject (``model a: …`` / ``models a, b: …``), written and
read by ``tkf_infra.names.subject`` / ``subject_models``: a weight-cache volume or a fleet total is under
no single ModelServing, so the URN alone cannot say whose it is.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pulumi.automation import events

from tkf_infra.names import MODEL_SERVING_TYPE, PROJECT_ROOT, STACK_TYPE, subject_models

#: The pack, started by the engine as a binary analyzer (policy/analyzer explains why not the directory).
PACK_DIR = PROJECT_ROOT / "policy"
PACK = PACK_DIR / "analyzer"

_COLOR = re.compile(r"<\{%[^%]*%\}>")


def config_for(stack: str, pack_dir: Path = PACK_DIR) -> Path | None:
    """The platform owner's limits for a stack (``policy/config/<stack>.json``), if it has any."""
    path = pack_dir / "config" / f"{stack}.json"
    return path if path.is_file() else None


@dataclass(frozen=True)
class PackArgs:
    """The Automation API's ``policy_packs`` / ``policy_pack_configs`` of ``Stack.preview`` and ``Stack.up``."""

    policy_packs: list[str] | None = None
    policy_pack_configs: list[str] | None = None


def policy_args(stack: str, pack_dir: Path = PACK_DIR) -> PackArgs:
    """Run the pack with the stack's config; nothing for a stack without a config (the pack's limits are
    required — the engine refuses to run it without them — and such a stack has no owner limits)."""
    config = config_for(stack, pack_dir)
    if config is None:
        return PackArgs()
    return PackArgs([str(pack_dir / PACK.name)], [str(config)])


@dataclass(frozen=True)
class PolicyViolation:
    policy: str
    level: str
    """``mandatory`` or ``advisory`` (the stack's config decides)."""
    text: str
    """The guardrail's own message (the policy's description and colour codes stripped)."""
    models: tuple[str, ...]
    urn: str | None
    """The resource judged; None for a stack-level violation."""

    @property
    def mandatory(self) -> bool:
        return self.level == "mandatory"

    def line(self) -> str:
        return f"policy {self.policy} ({self.level}): {self.text}"

    def as_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "level": self.level, "message": self.text}


def from_event(event: events.PolicyEvent) -> PolicyViolation:
    """One engine policy event as a violation; the models come from the guardrail's message prefix."""
    lines = [ln.strip() for ln in _COLOR.sub("", event.message).splitlines() if ln.strip()]
    # pulumi-policy sends "<policy description>\n<message>": keep the message.
    text = next((ln for ln in lines if subject_models(ln) is not None), lines[-1] if lines else "")
    models = subject_models(text) or ()
    level = str(getattr(event.enforcement_level, "value", event.enforcement_level)).lower()
    urn = event.resource_urn or None
    if urn and urn.split("::")[-2:-1] == [STACK_TYPE]:
        urn = None  # the engine attributes stack-level violations to the root stack resource
    return PolicyViolation(event.policy_name, level, text, models, urn)


class _Report(Protocol):
    errors: list[str]
    failed_urns: set[str]
    warnings: list[str]


class _Tracker(Protocol):
    """What this module needs of ``tkf_infra.ops.summary.RunTracker``."""

    parents: dict[str, str]
    diagnostics: list[str]

    def report(self, name: str) -> _Report: ...


#: Operations the engine runs policy packs on.
RUNS_PACK = frozenset({"preview", "up"})
PACK_NAME = "tkf-guardrails"


@dataclass
class PolicyCollector:
    """One run's pack arguments and ``on_event`` sink: keeps every policy violation the engine reports."""

    pack: PackArgs = field(default_factory=PackArgs)
    """What ``Stack.preview`` / ``Stack.up`` get (empty: the pack does not run)."""
    violations: list[PolicyViolation] = field(default_factory=list)

    @classmethod
    def for_run(cls, stack: str, operation: str, pack_dir: Path = PACK_DIR) -> PolicyCollector:
        return cls(policy_args(stack, pack_dir) if operation in RUNS_PACK else PackArgs())

    def __call__(self, event: events.EngineEvent) -> None:
        if event.policy_event is not None:
            v = from_event(event.policy_event)
            if v not in self.violations:
                self.violations.append(v)

    def by_model(self) -> dict[str, list[PolicyViolation]]:
        out: dict[str, list[PolicyViolation]] = {}
        for v in self.violations:
            if v.urn:
                for m in v.models:
                    out.setdefault(m, []).append(v)
        return out

    def stack_level(self) -> list[PolicyViolation]:
        return [v for v in self.violations if not v.urn or not v.models]

    def record(self, tracker: _Tracker) -> None:
        """Put the violations in the run's tracker. Mandatory ones fail their models like a refused fit
        check: the reason, and the URN to exclude from the `up` after this preview (the model's
        ModelServing, so its Service and NetworkPolicy stay out too). Advisory ones are warnings."""
        for model, found in self.by_model().items():
            report = tracker.report(model)
            for v in found:
                if not v.mandatory:
                    report.warnings.append(v.line())
                    continue
                report.errors.append(v.line())
                report.failed_urns.add(_serving_ancestor(v.urn or "", tracker.parents) or v.urn or "")
        for v in self.stack_level():
            if v.mandatory and v.line() not in tracker.diagnostics:
                tracker.diagnostics.append(v.line())

    def annotate(self, summary: dict[str, Any]) -> dict[str, Any]:
        """Add to a ``--json`` summary what the tracker does not carry: ``policy`` per model (each
        violation with its policy and level), ``policyWarnings`` (stack-level advisories) and
        ``policyPack`` (the pack and config that ran; null when none did)."""
        if self.pack.policy_pack_configs:
            config = Path(self.pack.policy_pack_configs[0])
            summary["policyPack"] = {"name": PACK_NAME, "config": f"policy/config/{config.name}"}
        else:
            summary["policyPack"] = None
        models: dict[str, Any] = summary.setdefault("models", {})
        for model, found in self.by_model().items():
            entry = models.setdefault(model, {"status": "unchanged", "changes": {}})
            entry["policy"] = [v.as_dict() for v in found]
        stack_warnings = [v.line() for v in self.stack_level() if not v.mandatory]
        if stack_warnings:
            summary["policyWarnings"] = stack_warnings
        return summary


def _serving_ancestor(urn: str, parents: Mapping[str, str]) -> str | None:
    """The ModelServing component a resource belongs to, walking up its parents."""
    for _ in range(64):
        parts = urn.split("::")
        if len(parts) >= 4 and parts[2].split("$")[-1] == MODEL_SERVING_TYPE:
            return urn
        urn = parents.get(urn, "")
        if not urn:
            return None
    return None


def tee(*sinks: Callable[[events.EngineEvent], None]) -> Callable[[events.EngineEvent], None]:
    """One ``on_event`` callback feeding several collectors, in order."""

    def on_event(event: events.EngineEvent) -> None:
        for sink in sinks:
            sink(event)

    return on_event


__all__ = [
    "PACK",
    "PACK_DIR",
    "PACK_NAME",
    "PackArgs",
    "PolicyCollector",
    "PolicyViolation",
    "config_for",
    "from_event",
    "policy_args",
    "tee",
]
