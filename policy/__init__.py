"""tkf-infra's policy pack (``tkf-guardrails``): the platform owner's limits, enforced by the Pulumi engine.

A package so the project's tests and type checker see ``policy.guardrails``; the engine runs
``__main__.py`` (see docs/policy.md).
"""
