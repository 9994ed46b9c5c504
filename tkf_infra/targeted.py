"""A targeted run (`python -m tkf_infra preview|up --models a,b`): the whole program runs, the engine steps only
the named models' objects, the objects every model shares, and the stack's outputs.

Why the whole program: the fit check and admission must see the whole fleet, so a targeted run refuses what a
full run refuses (a model that no longer fits because another was added, a pool that ran out of room), and the
outputs (`endpoints`, the gateway's model list, `deployed`) are built from the whole plan as in a full run. What
the engine skips is the per-resource work that follows each object's property leaves (docs/performance.md): the
Kubernetes provider's Check and Diff of every other model's objects, which the engine then keeps as they are
in state (`pulumi up --target`). The root stack and the providers are always stepped by the engine, so the
outputs are written in full.

Why a targeted run can refuse what it would leave stale: an object the engine does not step keeps its old
inputs even when the program registered new ones. So the program compares every model the run does not name
with what the last run deployed (`untargeted_changes`) and stops before registering anything when one changed,
was added or was removed: the message names them, and the fix is to name them too or to run without --models.
Stack-level settings (`serving`, `namespaces`, …) are not compared: an edit of those needs a full run (README).

The URNs are built from the type tokens and Pulumi names in `tkf_infra.names`, as globs the engine matches
(`*` within a URN segment, `**` across): a model added by the edit is targeted before it exists, a removed one
is deleted by the same patterns. A model's objects are named `<model>-<suffix>` under its component, so the
pattern of model `a` also matches the objects of a model named `a-b`: those are stepped too (diffed, unchanged),
never skipped.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from tkf_infra import names

#: Set by `python -m tkf_infra preview|up --models` for the engine's run: JSON list of the models it names.
TARGET_MODELS_ENV = "TKF_TARGET_MODELS"
CONFIGMAP_TYPE = "kubernetes:core/v1:ConfigMap"


def urn_patterns(stack: str, project: str, models: Iterable[str], caches: Iterable[str]) -> list[str]:
    """The engine's `--target` list for these models and weight caches (their components and every object under
    them), with the stack's shared objects: the FitCheck, the plan-facts and sidecar-source ConfigMaps, the MIG
    sharing component and what it holds.

    Every entry is a glob: the engine refuses a literal target that no resource of the run or of the state has
    (a stack without MIG pools has no sharing component, a refused new model registers nothing), but not a glob
    that matches nothing. The `*` after a type matches nothing in our URNs (a type is followed by `::`, and a
    child's `$type` holds a colon), so `<type>*::<name>` is that one resource."""
    base = f"urn:pulumi:{stack}::{project}::"

    def one(rtype: str, name: str) -> str:
        return f"{base}{rtype}*::{name}"

    out: list[str] = []
    for model in sorted(set(models)):
        out += [one(names.MODEL_SERVING_TYPE, model), f"{base}{names.MODEL_SERVING_TYPE}$**::{model}-*"]
    for cache in sorted(set(caches)):
        out += [one(names.WEIGHT_CACHE_TYPE, cache), f"{base}{names.WEIGHT_CACHE_TYPE}$**::{cache}-*"]
    return [*out, one(names.FIT_CHECK_TYPE, names.FIT_CHECK), one(CONFIGMAP_TYPE, names.FLEET_FACTS_RESOURCE),
            one(CONFIGMAP_TYPE, names.METRICS_PROXY_RESOURCE), one(names.GPU_SHARING_TYPE, names.GPU_SHARING_RESOURCE),
            f"{base}{names.GPU_SHARING_TYPE}$**"]


def targeted_models(environ: Mapping[str, str] = os.environ) -> frozenset[str] | None:
    """The models the CLI's targeted run names (None for a full run, or when plain `pulumi` runs the program)."""
    text = environ.get(TARGET_MODELS_ENV, "")
    if not text:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, list) or not all(isinstance(x, str) for x in data):
        raise ValueError(f"{TARGET_MODELS_ENV} is {text!r}, not a JSON list of model names; unset it (only "
                         "`python -m tkf_infra preview|up --models` sets it)")
    return frozenset(data)


def untargeted_changes(named: frozenset[str], now: Mapping[str, Any], before: Mapping[str, Any]) -> list[str]:
    """Why a targeted run would leave a model it does not name stale: each model deployed now (`now`, its
    `deployed` entry) or by the last run (`before`, the last `deployed` output) whose entry differs, one line
    each, in catalog order then the last run's."""
    problems = []
    for name, entry in now.items():
        if name in named:
            continue
        if name not in before:
            problems.append(f"model {name} is new (not deployed by the last run)")
        elif before[name] != entry:
            old = before[name] if isinstance(before[name], Mapping) else {}
            changed = sorted(k for k in {*entry, *old} if entry.get(k) != old.get(k))
            problems.append(f"model {name} changed since the last run ({', '.join(changed)})")
    problems += [f"model {name} was deployed by the last run and is not now" for name in before
                 if name not in now and name not in named]
    return problems


def targeted_refusal(models: Iterable[Any], before: Mapping[str, Any],
                     environ: Mapping[str, str] = os.environ) -> str | None:
    """Why this targeted run must stop before registering anything (None for a full run, or when every model it
    does not name is as the last run deployed it): `models` are the plan's `ModelPlan`s, `before` the last
    `deployed` output."""
    from tkf_infra.outputs import deployed_entry

    try:
        named = targeted_models(environ)
    except ValueError as err:
        return str(err)
    if named is None:
        return None
    now = {m.entry.name: deployed_entry(m.entry) for m in models}
    problems = untargeted_changes(named, now, before)
    return stale_message(named, problems) if problems else None


def stale_message(named: frozenset[str], problems: list[str]) -> str:
    """The refusal of a targeted run that would leave models stale: what changed and the two ways out."""
    more = sorted(p.split(" ", 2)[1] for p in problems)
    return (f"--models {','.join(sorted(named))}: a targeted run steps only the models it names, and "
            f"{'; '.join(problems)}; name them too (--models {','.join(sorted(named | set(more)))}) or run "
            "without --models")
