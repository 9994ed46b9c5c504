"""The fit check in the engine: one FitCheck per deployed model, its verdict recorded in state and
enforced by `check`, so no model's workload can be created unless its check passed.

Why the verdict is not computed here: the engine aborts a whole preview or update at the first
failed check, which would let one refused model block every other. The program therefore sizes
every model first (`tkf_infra.sizing.contract.evaluate`, in `tkf_infra.plan`), leaves the refused
ones out with their reasons, and registers a FitCheck only for the models it deploys — carrying
the verdict and what it was computed from. This provider gates on that verdict (a FitCheck built
with a refusal fails at preview with its message), shows the figures in the preview's diff and
keeps them in state. It imports nothing but Pulumi at module level: dill pickles it into state and
the engine's Python host re-imports it for every call.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi.dynamic as dyn

#: Bump when what a FitCheck records changes, so existing FitCheck resources are re-recorded.
PROVIDER_VERSION = "2"
_UNKNOWN_SENTINEL = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
_KEYS = ("model", "sizedFor", "result", "providerVersion")


def _has_unknown(value: Any) -> bool:
    from pulumi.output import Unknown

    if isinstance(value, Unknown) or value == _UNKNOWN_SENTINEL:
        return True
    if isinstance(value, dict):
        return any(_has_unknown(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_unknown(v) for v in value)
    return False


class FitProvider(dyn.ResourceProvider):
    """Gate and record: `check` refuses a recorded refusal; create/update store what was checked."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.CheckResult:
        result = news.get("result")
        if _has_unknown(result) or not isinstance(result, dict):
            return dyn.CheckResult(news, [])
        if result.get("fits") is True:
            return dyn.CheckResult(news, [])
        message = result.get("message") or f"model {news.get('model')}: the fit check refused it"
        return dyn.CheckResult(news, [dyn.CheckFailure("result", str(message))])

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dyn.DiffResult:
        changed = [k for k in _KEYS if olds.get(k) != news.get(k)]
        return dyn.DiffResult(changes=bool(changed), replaces=[], delete_before_replace=False)

    def create(self, props: dict[str, Any]) -> dyn.CreateResult:
        return dyn.CreateResult(id_=str(props.get("model")), outs={k: props.get(k) for k in _KEYS})

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> dyn.UpdateResult:
        return dyn.UpdateResult(outs={k: news.get(k) for k in _KEYS})

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        return None


class FitCheck(dyn.Resource, module="tkf", name="FitCheck"):
    """One per deployed model: `sizedFor` (what the verdict depends on) and `result` (the verdict)."""

    result: pulumi.Output[dict[str, Any]]

    def __init__(self, name: str, model: str, sized_for: dict[str, Any], result: dict[str, Any],
                 opts: pulumi.ResourceOptions | None = None) -> None:  # fmt: skip
        props = {"model": model, "sizedFor": sized_for, "result": result, "providerVersion": PROVIDER_VERSION}
        super().__init__(FitProvider(), name, props, opts)
