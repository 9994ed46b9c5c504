"""What the fit check said of each model: a platform owner may refuse a *tight* fit on a stack.

Why a guardrail and not only the stack's `strict`: the fit check's verdict is three-valued (docs/sizing.md):
*fits* on the conservative bound, *tight* when the estimate of what vLLM will print fits and the bound does
not, *refuses*. A tight model deploys by default with a warning naming the margin and the doubt, since vLLM
usually starts it; on a stack where a start-up failure costs more than an idle GPU (prod), the owner can make
that a violation without asking every catalog author for `strict: true`. The verdict is read from the
workload's `tkf.io/fit-verdict` annotation, which the components copy from the plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tkf_infra.names import FIT_VERDICT_ANNOTATION

from .base import Guardrail, Violation, owner_fix, violation
from .objects import UNKNOWN, K8sObject, as_str


def check_fit_verdict(obj: K8sObject, config: Mapping[str, Any]) -> list[Violation]:
    if not obj.is_model_server or config.get("allowTight", True) is not False:
        return []
    verdict = obj.annotations.get(FIT_VERDICT_ANNOTATION)
    if verdict is UNKNOWN or as_str(verdict) != "tight":
        return []
    return [violation(
        [obj.model or "?"], obj.ref,
        "its fit is tight: the estimate of what vLLM will print fits its GPUs, the conservative bound does not "
        "(the preview's warning for this model names the margin and the doubt)",
        "make it fit on the bound as that warning says (more GPUs with tensorParallelSize, a shorter maxModelLen, "
        f"or the input that removes the doubt), {owner_fix()}")]


FIT_VERDICT = Guardrail(
    name="fit-verdict",
    description=("A model whose fit is tight (the estimate fits its GPUs, the conservative bound does not) is "
                 "refused where the owner forbids it (allowTight: false)."),
    scope="resource",
    check=check_fit_verdict,
    config_schema={"allowTight": {"type": "boolean"}},
)
