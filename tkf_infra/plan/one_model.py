"""Stage 2 of the fleet plan, one model at a time: its lock entry, adapters, speculative draft, share and fit.

Why apart from `plan.fleet`: this is the part of the plan that sees one entry alone (and a refused entry's last
deployed twin), while `plan_fleet` runs the stages that see the fleet together; `LiveFindings` is here because
the per-model step is the first that reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from tkf_infra.config import ModelEntry
from tkf_infra.config.flags import row, sized_fields
from tkf_infra.hub.lock import Lock
from tkf_infra.plan.exclusion import Exclusion, Stage
from tkf_infra.plan.lora import adapter_problems
from tkf_infra.plan.model_plan import ModelPlan
from tkf_infra.plan.pools import PoolFacts
from tkf_infra.plan.share import ShareProblem, size_share
from tkf_infra.sizing.arch import parse_arch
from tkf_infra.sizing.contract import FitInputs
from tkf_infra.sizing.facts import ModelFacts
from tkf_infra.sizing.params import SizingError, SizingParams
from tkf_infra.sizing.weights import checkpoint_bytes


@dataclass(frozen=True)
class LiveFindings:
    """What the program's edge learned from DCGM (see `tkf_infra.live`), as plain data."""

    warnings: tuple[str, ...] = ()
    pool_errors: Mapping[str, list[str]] = field(default_factory=dict)
    model_problems: Mapping[str, str] = field(default_factory=dict)


def sizing_params(entry: ModelEntry, vllm_version: str) -> SizingParams:
    """The entry's sized flags, as vLLM will receive them (rendered through the flag table)."""
    values: dict[str, Any] = {}
    for name in sized_fields():
        r = row(name)
        if not r.applies_to(entry.is_cpu):
            continue
        value = getattr(entry, name)
        values[name] = type(value)(r.text(value)) if r.flag.fmt is not None and value is not None else value
    return SizingParams(vllm_version=vllm_version, **values)


def facts_problem(entry: ModelEntry, lock: Lock) -> tuple[ModelFacts | None, int, Stage | None, str]:
    facts = lock.get(entry.repo, entry.revision)
    fix = f"run `python -m tkf_infra lock {entry.model_ref}` on a machine with Hub access and commit the lock"
    if facts is None:
        why = lock.problem(entry.repo, entry.revision) or f"{entry.model_ref} is not in models.lock.json"
        return None, 0, Stage.LOCK, f"{why}, so it cannot be sized; {fix}"
    try:
        weight_bytes = checkpoint_bytes(facts, quantization=entry.quantization)
    except (SizingError, KeyError, ValueError) as exc:
        return None, 0, Stage.LOCK, f"the lock entry of {entry.model_ref} gives no weight size ({exc}); {fix}"
    if facts.gated and not entry.hf_token_secret:
        return facts, weight_bytes, Stage.ACCESS, (
            f"{entry.repo} is gated on the Hugging Face Hub but hfTokenSecret is not set; create a Secret with key "
            "HF_TOKEN in the serving namespace and name it in hfTokenSecret")
    return facts, weight_bytes, None, ""


def speculative_problem(entry: ModelEntry, facts: ModelFacts) -> str | None:
    """`mtp` drafts with the checkpoint's own multi-token-prediction layers, which it must have.

    vLLM 0.32 takes the target checkpoint as the MTP draft (vllm/config/speculative.py@v0.32.0:1147-1163)
    and maps its model type to the `*_mtp` twin with `n_predict = num_nextn_predict_layers` (lines 663-1040);
    a checkpoint without MTP layers has nothing to draft with, while the fit check would size one MTP
    layer (tkf_infra/sizing/weights.py `draft_bytes`: `max(mtp_layers, 1)`) that does not exist."""
    sc = entry.speculative_config or {}
    if sc.get("method") != "mtp" or sc.get("model"):
        return None
    try:
        layers = parse_arch(facts.text_config(), facts.config).mtp_layers
    except Exception:  # an unreadable config is the fit check's to name, with its own message
        return None
    if layers > 0:
        return None
    return (f"speculativeConfig.method mtp drafts with the checkpoint's own multi-token-prediction layers, but "
            f"{entry.model_ref}'s config.json declares none (num_nextn_predict_layers, mtp_num_hidden_layers, "
            "num_mtp_layers are absent or 0); use method eagle or eagle3 with a draft `model`, or ngram, or remove "
            "speculativeConfig")


@dataclass(frozen=True)
class ModelContext:
    """What planning one model needs besides the entry."""

    lock: Lock
    vllm_version: str
    pools: Mapping[str, PoolFacts]
    pool_problems: Mapping[str, str]
    live: LiveFindings | None
    strict: bool = False
    """`strict: true`: a tight fit is refused (Stage.TIGHT) instead of deployed with its warning."""


def plan_model(entry: ModelEntry, index: int, ctx: ModelContext) -> ModelPlan | Exclusion:
    """One model: planned, or left out with the stage and reason."""

    def leave_out(stage: Stage, reason: str, field: str | None = "") -> Exclusion:
        return Exclusion.of(entry.name, index, stage, (f"model {entry.name}: {reason}",), field)

    if entry.node_pool is not None and entry.node_pool in ctx.pool_problems:
        return leave_out(Stage.POOL, "not deployed because its node pool is wrong: "
                         f"{ctx.pool_problems[entry.node_pool]}")
    if ctx.live and entry.name in ctx.live.model_problems:
        return Exclusion.of(entry.name, index, Stage.LIVE, (ctx.live.model_problems[entry.name],))
    facts, weight_bytes, stage, why = facts_problem(entry, ctx.lock)
    if stage is not None or facts is None:
        return leave_out(stage or Stage.LOCK, why)
    if spec := speculative_problem(entry, facts):
        return leave_out(Stage.CATALOG, spec, "speculativeConfig")
    refused_adapters: tuple[str, ...] = ()
    if bad := adapter_problems(entry, facts, ctx.lock):
        if bad.base:
            return Exclusion.of(entry.name, index, Stage.LOCK if bad.missing else Stage.CATALOG,
                                tuple(f"model {entry.name}: {r}" for r in bad.reasons), "lora")
        entry = entry.without_adapters(bad.adapters)
        refused_adapters = tuple(f"model {entry.name}: {r}; deployed without that adapter"
                                 for rs in bad.adapters.values() for r in rs)
    pool = ctx.pools.get(entry.node_pool or "")
    gpu = pool.gpu if pool is not None and not entry.is_cpu else None
    inputs = FitInputs(model=entry.name, repo=entry.repo, revision=entry.revision, facts=facts, gpu=gpu,
                       params=sizing_params(entry, ctx.vllm_version),
                       max_tensor_parallel=(pool.gpus_per_node if pool else 0) or 8)
    try:
        sized = size_share(entry, pool, inputs)
    except ShareProblem as exc:
        return Exclusion.of(entry.name, index, Stage.CATALOG, (str(exc),), "gpuShare")
    if not sized.fit.fits:
        return Exclusion.of(entry.name, index, Stage.FIT, (sized.fit.message or "does not fit",))
    if sized.fit.verdict == "tight" and ctx.strict:
        return Exclusion.of(entry.name, index, Stage.TIGHT, (
            f"{sized.fit.message or f'model {entry.name}: ' + '; '.join(sized.fit.tight)}; the stack is strict "
            "(strict: true), "
            "which refuses a tight fit: make it fit on the bound as said, or set strict: false to deploy it with "
            "the warning",))
    return ModelPlan(sized.entry, facts, weight_bytes, pool, sized.inputs, sized.fit, sized.share, refused_adapters)


def keep_last_good(excluded: list[Exclusion], planned: list[ModelPlan], previous: Mapping[str, Any],
                    ctx: ModelContext) -> list[Exclusion]:
    """A model refused now but deployed before keeps serving at its last deployed settings.

    Why: leaving a refused model out of the program would make `up` delete the running one, so a bad
    edit (a typo, a context that no longer fits, a pool the owner closed) would take a live model
    down. Its last deployed entry is re-planned instead (so nothing of it changes) while the refusal
    is still reported and the run still ends non-zero. Removing an entry from the catalog removes the
    model as before; only refused entries are kept.
    """
    names = {m.entry.name for m in planned}
    served = {n for m in planned for n in client_names(m.entry)}
    out: list[Exclusion] = []
    for x in excluded:
        raw = previous.get(x.name)
        kept: ModelPlan | Exclusion | None = None
        if isinstance(raw, Mapping) and x.name not in names:
            try:
                kept = plan_model(ModelEntry.model_validate(raw), x.index, ctx)
            except ValidationError:
                kept = None
        if isinstance(kept, ModelPlan) and not served & client_names(kept.entry):
            planned.append(kept)
            names.add(kept.entry.name)
            served |= client_names(kept.entry)
            x = replace(x, kept=True)
        out.append(x)
    return out


def client_names(entry: ModelEntry) -> set[str]:
    """Every model name clients may send to this entry: its served name and its LoRA adapters'."""
    return {entry.served_name, *(a.served_name for a in (entry.lora.adapters if entry.lora else ()))}
