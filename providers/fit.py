"""The fit check in the engine: one FitCheck per stack, holding every deployed model's verdict,
recorded in state and enforced by `check`, so no workload can be created unless the check passed.

Why the verdict is not computed here: the engine aborts a whole preview or update at the first
failed check, which would let one refused model block every other. The program therefore sizes
every model first (`tkf_infra.sizing.contract.evaluate`, in `tkf_infra.plan`), leaves the refused
ones out with their reasons, and puts only the models it deploys into the FitCheck — each with its
verdict and a digest of what it was computed from. This provider gates on those verdicts (a
FitCheck holding a refusal fails at preview, naming every refused model with its message) and keeps
them in state; the figures themselves are on each workload and in the stack outputs, not here, since
every property a resource holds is paid for at each preview (issue 18).

Why one per stack and not one per model (issue 18): each resource costs the SDK and the engine a
registration, and each dynamic-provider call is served one at a time by one Python process; at a few
hundred models the per-model checks were a fifth of the preview. A model's figures still reach its
workload (the `tkf.io/fit-*` annotations), so a changed verdict still shows as that model's update.
It imports nothing but Pulumi at module level: dill pickles it into state and the engine's Python
host re-imports it. States written by the per-model FitCheck (provider version 2) are removed by
the next `up` through this same class (its `delete` does nothing).
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi.dynamic as dyn

#: Bump when what a FitCheck records changes, so existing FitCheck resources are re-recorded.
PROVIDER_VERSION = "4"
_UNKNOWN_SENTINEL = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
_KEYS = ("models", "providerVersion")


def _has_unknown(value: Any) -> bool:
    from pulumi.output import Unknown

    if isinstance(value, Unknown) or value == _UNKNOWN_SENTINEL:
        return True
    if isinstance(value, dict):
        return any(_has_unknown(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_unknown(v) for v in value)
    return False


def refusals(models: Any) -> list[tuple[str, str]]:
    """(model, message) of every recorded verdict that is known and is not a fit, in model order."""
    if not isinstance(models, dict):
        return []
    out = []
    for name, record in models.items():
        result = record.get("result") if isinstance(record, dict) else None
        if _has_unknown(result) or not isinstance(result, dict) or result.get("fits") is True:
            continue
        out.append((str(name), str(result.get("message") or f"model {name}: the fit check refused it")))
    return out


class FitProvider(dyn.ResourceProvider):
    """Gate and record: `check` refuses every recorded refusal; create/update store what was checked."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.CheckResult:
        refused = refusals(news.get("models"))
        failures = [dyn.CheckFailure(f"models.{name}.result", message) for name, message in refused]
        return dyn.CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        changed = [k for k in _KEYS if olds.get(k) != news.get(k)]
        return dyn.DiffResult(changes=bool(changed), replaces=[], delete_before_replace=False)

    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        return dyn.CreateResult(id_="fleet", outs={k: props.get(k) for k in _KEYS})

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        return dyn.UpdateResult(outs={k: news.get(k) for k in _KEYS})

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        return None


class FitCheck(dyn.Resource, module="tkf", name="FitCheck"):
    """One per stack: `models` maps each deployed model to `sizedFor` (a digest of what its verdict
    depends on) and `result` (the verdict; `tkf_infra.sizing.contract.fit_record`)."""

    models: pulumi.Output[dict[str, Any]]

    def __init__(self, name: str, models: dict[str, dict[str, Any]],
                 opts: pulumi.ResourceOptions | None = None) -> None:
        props = {"models": models, "providerVersion": PROVIDER_VERSION}
        super().__init__(FitProvider(), name, props, opts)
