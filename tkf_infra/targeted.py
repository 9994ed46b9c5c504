"""A targeted run (`python -m tkf_infra preview|up --models a,b`): the engine steps the named models' objects, the
objects every model shares, and the stack's outputs; the program registers every model except those the run keeps.

Why the plan still sees the whole fleet: the fit check and admission must, so a targeted run refuses what a full
run refuses (a model that no longer fits because another was added, a pool that ran out of room), and the
outputs (`endpoints`, the gateway's model list, `deployed`) are built from the whole plan as in a full run.

Why the models the run keeps are not even registered: a registered object costs the SDK's serialization of its
inputs, an engine step, the Kubernetes provider's Check and Diff (they follow each object's property leaves,
docs/performance.md) and its place in every checkpoint, which kept a one-model edit at 200 models at 3× the same
edit at 2. The engine keeps an object of its state that the program did not register when an `--exclude` glob
matches it, with everything it depends on (pulumi `pkg/resource/deploy/step_generator.go` at v3.274.1,
`GenerateDeletes` and `determineForbiddenResourcesToDeleteFromExcludes`: an "untargeted same" step, handed to
stack policies as it is in state), and steps every registered object no glob matches. So the run is an
exclusion, not a `--target` list: the engine deletes, or refuses to delete, every dependent of a target the
program did not register (`determineAllowedResourcesToDeleteFromTargets`), and every workload depends on the
FitCheck, which must be stepped. `skip_set` says what the run keeps, the CLI excludes exactly that
(`exclude_patterns`), and the program registers everything else (`skipped` tells it what to leave out): an
object the program leaves out and no glob matches would be deleted.

Kept, besides the models the run does not name: their weight caches, and the platform's pieces (node pools, GPU
Operator, serving prerequisites, observability: an edit of those needs a full run, README). Stepped: the named
models and their caches, the FitCheck, the plan-facts and sidecar-source ConfigMaps, the MIG sharing layout, the
serving namespace, the API-key Secret and the provider.

Why a targeted run can refuse what it would leave stale: a kept object keeps its old inputs whatever the program
would register. So the program compares every model the run does not name with what the last run deployed
(`untargeted_changes`) and where the last run placed it (`moved_models`: its pin, its cache's access mode, its
MIG placement, which the plan may change without an edit of its entry) and stops before registering anything
when one changed, was added or was removed: the message names them, and the fix is to name them too or to run
without --models. Stack-level settings
(`serving`, `namespaces`, …) are not compared: an edit of those needs a full run (README).

The exclusion globs are built from the type tokens and Pulumi names in `tkf_infra.names`, as the engine matches
them (`*` within a URN segment, `**` across). A model's objects are named `<model>-<suffix>` under its
component, so the glob of a kept model `a` would also match the objects of a named model `a-b` (and a kept
`a-b`'s, those of a named `a` with a suffix `b-…`): a model whose name extends another's, either way, is kept
only when both are, and the same for caches.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tkf_infra import names

#: Set by `python -m tkf_infra preview|up --models` for the engine's run: JSON list of the models it names.
TARGET_MODELS_ENV = "TKF_TARGET_MODELS"
#: Set with it: JSON `{"models": [...], "caches": [...]}`, what the run keeps and the program does not register.
TARGET_KEEP_ENV = "TKF_TARGET_KEEP"
#: Set with them: a file the CLI writes for its run and removes when it exits, holding `ticket_digest` of the two
#: above. Why: plain `pulumi up` run with the two variables exported by hand would leave the kept models unregistered
#: without the CLI's `--exclude` list, and the engine would delete them; without a live ticket the program refuses.
TARGET_TICKET_ENV = "TKF_TARGET_TICKET"
#: Every variable of a targeted run: a full run clears them all, so none is left over from another run.
TARGET_ENV = (TARGET_MODELS_ENV, TARGET_KEEP_ENV, TARGET_TICKET_ENV)
#: The platform's components, which a targeted run keeps as they are in state.
KEPT_PLATFORM_TYPES = (names.GPU_NODE_POOL_TYPE, names.GPU_OPERATOR_TYPE, names.SERVING_PREREQUISITES_TYPE,
                       names.OBSERVABILITY_TYPE)


@dataclass(frozen=True)
class Keep:
    """What a targeted run keeps as it is in state: these models and weight caches (by Pulumi name)."""

    models: frozenset[str]
    caches: frozenset[str]

    def as_pair(self) -> tuple[frozenset[str], frozenset[str]]:
        """(models, caches), as `components.fleet.build_fleet` takes them."""
        return self.models, self.caches

    def as_json(self) -> str:
        return json.dumps({"models": sorted(self.models), "caches": sorted(self.caches)})


def _related(a: str, b: str) -> bool:
    """Whether one name's object glob (`<name>-*`) can match the other's objects."""
    return a == b or a.startswith(f"{b}-") or b.startswith(f"{a}-")


def _stepped(every: set[str], seeds: set[str]) -> set[str]:
    """`seeds` and every name related to a stepped one, transitively."""
    out = set(seeds)
    while grown := {n for n in every - out if any(_related(n, s) for s in out)}:
        out |= grown
    return out


def skip_set(named: Iterable[str], now: Mapping[str, str | None], before: Mapping[str, str | None]) -> Keep:
    """What a run naming `named` keeps, from each model's weight cache in the catalog now (`now`) and as the last
    run deployed it (`before`; None: unknown). A model is stepped when named or related to a stepped one; a
    cache when a stepped model reads it, now or before, or related to a stepped one."""
    models = {*now, *before}
    stepped = _stepped(models, set(named) & models)
    caches = {c for c in (*now.values(), *before.values()) if c}
    readers = {c for m in stepped for c in (now.get(m), before.get(m)) if c}
    return Keep(frozenset(models - stepped), frozenset(caches - _stepped(caches, readers)))


def exclude_patterns(stack: str, project: str, keep: Keep) -> list[str]:
    """The engine's `--exclude` list of a run keeping `keep`: each kept model's and cache's component and every
    object under it, and the platform's components with theirs. The `*` after a type matches nothing in our
    URNs (a type is followed by `::`, and a child's `$type` holds a colon), so `<type>*::<name>` is that one
    resource."""
    base = f"urn:pulumi:{stack}::{project}::"
    out: list[str] = []
    for rtype, kept in ((names.MODEL_SERVING_TYPE, keep.models), (names.WEIGHT_CACHE_TYPE, keep.caches)):
        for name in sorted(kept):
            out += [f"{base}{rtype}*::{name}", f"{base}{rtype}$**::{name}-*"]
    for rtype in KEPT_PLATFORM_TYPES:
        out += [f"{base}{rtype}*::*", f"{base}{rtype}$**"]
    return out


def _json_env(environ: Mapping[str, str], key: str) -> Any:
    text = environ.get(key, "")
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _bad(key: str, text: str, what: str) -> ValueError:
    return ValueError(f"{key} is {text!r}, not {what}; unset it (only `python -m tkf_infra preview|up --models` "
                      "sets it)")


def ticket_digest(models_text: str, keep_text: str) -> str:
    """What a targeted run's ticket holds: a digest of its two variables, so a ticket serves that run only."""
    return hashlib.sha256(f"{models_text}\0{keep_text}".encode()).hexdigest()


def _check_ticket(environ: Mapping[str, str]) -> None:
    path = environ.get(TARGET_TICKET_ENV, "")
    want = ticket_digest(environ.get(TARGET_MODELS_ENV, ""), environ.get(TARGET_KEEP_ENV, ""))
    try:
        valid = bool(path) and Path(path).read_text().strip() == want
    except OSError:
        valid = False
    if not valid:
        why = f"{TARGET_TICKET_ENV} is not set" if not path else f"its ticket {path} is gone or for another run"
        raise ValueError(f"{TARGET_MODELS_ENV} and {TARGET_KEEP_ENV} are set, but not by a running `python -m "
                         f"tkf_infra preview|up --models` ({why}): a run that leaves the kept models unregistered "
                         "without the CLI's matching --exclude list would have the engine delete them; unset both "
                         "variables and run again, or run `python -m tkf_infra up --models NAME`")


def kept(environ: Mapping[str, str] = os.environ) -> Keep | None:
    """What the CLI's targeted run keeps (None for a full run, or when plain `pulumi` runs the program). Read only
    beside the models the run names: a full run that registered less than everything would have the engine
    delete the rest, so a keep list left over in an environment without them is ignored. A keep list without
    the run's live ticket (`TARGET_TICKET_ENV`) is refused, for the same reason."""
    data = _json_env(environ, TARGET_KEEP_ENV)
    if data is None or not environ.get(TARGET_MODELS_ENV):
        return None
    parts = [data.get(k) if isinstance(data, dict) else None for k in ("models", "caches")]
    if not all(isinstance(p, list) and all(isinstance(x, str) for x in p) for p in parts):
        raise _bad(TARGET_KEEP_ENV, environ[TARGET_KEEP_ENV], 'a JSON {"models": [names], "caches": [names]}')
    _check_ticket(environ)
    return Keep(frozenset(parts[0] or ()), frozenset(parts[1] or ()))


def targeted_models(environ: Mapping[str, str] = os.environ) -> frozenset[str] | None:
    """The models the CLI's targeted run names (None for a full run, or when plain `pulumi` runs the program)."""
    data = _json_env(environ, TARGET_MODELS_ENV)
    if data is None:
        return None
    if not isinstance(data, list) or not all(isinstance(x, str) for x in data):
        raise _bad(TARGET_MODELS_ENV, environ[TARGET_MODELS_ENV], "a JSON list of model names")
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


#: Where the plan put a model, as its endpoint publishes it (`endpoints[…]`): what a targeted run would leave
#: stale on a model it keeps when the plan moves it (a repack after a node was lost, readers gathered on a
#: ReadWriteOnce cache's node, a MIG re-layout), though its catalog entry is unchanged.
PLACEMENT_KEYS = (("footprint", "pin"), ("footprint", "weightCacheAccess"), ("share", "placement"))
#: Placement keys newer than stacks still deployed: absent from the last run's endpoint, not a change.
NEWER_PLACEMENT_KEYS = frozenset({"footprint.weightCacheAccess"})


def _placement(endpoint: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for outer, inner in PLACEMENT_KEYS:
        part = endpoint.get(outer) if isinstance(endpoint, Mapping) else None
        if isinstance(part, Mapping) and inner in part:
            out[f"{outer}.{inner}"] = part[inner]
    return out


def moved_models(named: frozenset[str], now: Mapping[str, Any], before: Any) -> list[str]:
    """Each model the run does not name whose placement (`PLACEMENT_KEYS`) differs from the last run's `endpoints`
    output (`before`), one line each; a model new to the plan is `untargeted_changes`'s to name. Numbers compare
    by value: the engine hands outputs back with every number a float."""
    last = {ep["name"]: ep for ep in before.values() if isinstance(ep, Mapping) and isinstance(ep.get("name"), str)
            } if isinstance(before, Mapping) else {}
    problems = []
    for ep in now.values():
        name = ep.get("name")
        if name in named or name not in last:
            continue
        b = _placement(last[name])
        a = {k: v for k, v in _placement(ep).items() if k in b or k not in NEWER_PLACEMENT_KEYS}
        if a != b:
            keys = ", ".join(sorted(k for k in {*a, *b} if a.get(k) != b.get(k)))
            problems.append(f"model {name} was placed anew by the plan ({keys})")
    return problems


def targeted_refusal(models: Iterable[Any], before: Mapping[str, Any], environ: Mapping[str, str] = os.environ, *,
                     plan: Any = None, before_endpoints: Any = None) -> str | None:
    """Why this targeted run must stop before registering anything (None for a full run, or when every model it
    does not name is as the last run deployed and placed it): `models` are the plan's `ModelPlan`s, `before` the
    last `deployed` output; with `plan` (the `FleetPlan`), each kept model's placement is compared with the last
    `endpoints` output (`before_endpoints`) too."""
    from tkf_infra.outputs import deployed_entry, endpoints_output

    try:
        named = targeted_models(environ)
        kept(environ)
    except ValueError as err:
        return str(err)
    if named is None:
        return None
    now = {m.entry.name: deployed_entry(m.entry) for m in models}
    problems = untargeted_changes(named, now, before)
    if plan is not None:
        problems += moved_models(named, endpoints_output(plan), before_endpoints)
    return stale_message(named, problems) if problems else None


def stale_message(named: frozenset[str], problems: list[str]) -> str:
    """The refusal of a targeted run that would leave models stale: what changed and the two ways out."""
    more = sorted(p.split(" ", 2)[1] for p in problems)
    return (f"--models {','.join(sorted(named))}: a targeted run steps only the models it names, and "
            f"{'; '.join(problems)}; name them too (--models {','.join(sorted(named | set(more)))}) or run "
            "without --models")
