"""Serve the guardrails to the Pulumi engine as the policy pack ``tkf-guardrails`` (pulumi-policy).

Runs in the pack's own virtualenv (``policy/.venv``, see docs/policy.md for why it is not the
project's), started by the engine through ``policy/analyzer``. Everything that decides a verdict is in
``policy/guardrails`` (pure, unit-tested in the project's virtualenv); this module only adapts
pulumi-policy's arguments to it and reports the violations back.

No enforcement level is set here on purpose: each stack's ``policy/config/<stack>.json`` sets every
policy's ``enforcementLevel``, and the pack's default (advisory) applies to a policy a stack leaves out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pulumi_policy import (  # type: ignore[import-not-found, unused-ignore]
    EnforcementLevel,
    PolicyConfigSchema,
    PolicyPack,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy import proxy as _proxy  # type: ignore[import-not-found, unused-ignore]

from policy.guardrails import GUARDRAILS, Guardrail, Violation
from policy.guardrails.objects import UNKNOWN, K8sObject

PACK_NAME = "tkf-guardrails"
#: The strings pulumi-policy puts where the engine sent an unknown value (pulumi_policy/proxy.py).
_UNKNOWN_SENTINELS = frozenset(getattr(_proxy, n) for n in dir(_proxy)
                               if n.startswith("UNKNOWN_") and n.endswith("_VALUE"))


def unwrap(value: Any) -> Any:
    """pulumi-policy's unknown-checking proxies as plain data, with unknowns as ``UNKNOWN``.

    The proxies raise on any unknown value they are asked for; iterating a mapping that holds one
    (e.g. the fit annotations during a preview) would abort the whole check. Plain data lets each
    check skip just the values it cannot judge yet.
    """
    if isinstance(value, str):
        return UNKNOWN if value in _UNKNOWN_SENTINELS else value
    if isinstance(value, Mapping):
        target = value["__target"] if hasattr(value, "_DictProxy__target") else value
        return {str(k): unwrap(v) for k, v in target.items()}
    if hasattr(value, "_ListProxy__target"):
        return [unwrap(v) for v in value["__target"]]
    if isinstance(value, list | tuple):
        return [unwrap(v) for v in value]
    return value


def _object(resource_type: str, props: Mapping[str, Any], urn: str, protect: bool) -> K8sObject:
    return K8sObject(type=resource_type, props=unwrap(props), urn=urn, protect=bool(protect))


def _report(violations: list[Violation], report: ReportViolation) -> None:
    for v in violations:
        report(v.message, v.urn)


def _resource_validate(g: Guardrail) -> Callable[[ResourceValidationArgs, ReportViolation], None]:
    def validate(args: ResourceValidationArgs, report: ReportViolation) -> None:
        obj = _object(args.resource_type, args.props, args.urn, args.opts.protect)
        _report(g.check(obj, args.get_config()), report)

    return validate


def _stack_validate(g: Guardrail) -> Callable[[StackValidationArgs, ReportViolation], None]:
    def validate(args: StackValidationArgs, report: ReportViolation) -> None:
        objects = [_object(r.resource_type, r.props, r.urn, r.opts.protect) for r in args.resources]
        _report(g.check(objects, args.get_config()), report)

    return validate


def policies() -> list[Any]:
    out: list[Any] = []
    for g in GUARDRAILS:
        schema = PolicyConfigSchema(g.config_schema, list(g.required) or None) if g.config_schema else None
        if g.scope == "resource":
            out.append(ResourceValidationPolicy(g.name, g.description, validate=_resource_validate(g),
                                                config_schema=schema))
        else:
            out.append(StackValidationPolicy(g.name, g.description, validate=_stack_validate(g), config_schema=schema))
    return out


def serve() -> None:
    """Start the analyzer gRPC server; prints its port for the engine and blocks."""
    PolicyPack(name=PACK_NAME, policies=policies(), enforcement_level=EnforcementLevel.ADVISORY,
               description="tkf-infra platform owner's guardrails for the LLM fleet")
