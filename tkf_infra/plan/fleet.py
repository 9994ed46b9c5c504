"""The fleet plan: which models are deployed, on what, sized how — and every model left out, with why.

Why a plan before any resource: one bad model must not block the good ones, under `pulumi up` as
much as under the CLI. The engine aborts a whole preview or update at the first failed provider
check, so refusals are decided here, in plain Python, from data gathered at the program's edge
(the lock, EC2, DCGM). Every reason a model is left out — the catalog rules, its pool, what the
GPUs report, the lock, gated access, the fit check — becomes one `Exclusion` of that model; the
outputs, the program's error log and the CLI's per-model summary all read these, so they cannot
disagree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from tkf_infra.config import Catalog, ModelEntry
from tkf_infra.config.flags import row, sized_fields
from tkf_infra.config.scaling import Overcommit
from tkf_infra.hub.lock import Lock
from tkf_infra.plan import admission as adm
from tkf_infra.plan.admit_fleet import admit, plan_layouts, reserved
from tkf_infra.plan.exclusion import Exclusion, Refusal, Stage, verdict
from tkf_infra.plan.lora import adapter_problems
from tkf_infra.plan.model_plan import ModelPlan
from tkf_infra.plan.pins import Pin
from tkf_infra.plan.pool_layout import PoolLayout
from tkf_infra.plan.pools import PoolFacts, PoolProblem, resolve_pool
from tkf_infra.plan.scaling import at_maximum, at_minimum, over_maximum, overcommitted, scaling_checks
from tkf_infra.plan.share import ShareProblem, size_share
from tkf_infra.sizing.arch import parse_arch
from tkf_infra.sizing.contract import FitInputs
from tkf_infra.sizing.ec2 import InstanceGpus
from tkf_infra.sizing.estimate import sized_once
from tkf_infra.sizing.facts import ModelFacts
from tkf_infra.sizing.params import SizingError, SizingParams
from tkf_infra.sizing.weights import checkpoint_bytes


@dataclass(frozen=True)
class LiveFindings:
    """What the program's edge learned from DCGM (see `tkf_infra.live`), as plain data."""

    warnings: tuple[str, ...] = ()
    pool_errors: Mapping[str, list[str]] = field(default_factory=dict)
    model_problems: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FleetPlan:
    catalog: Catalog
    pools: dict[str, PoolFacts]
    models: tuple[ModelPlan, ...]
    excluded: tuple[Exclusion, ...]
    errors: tuple[str, ...] = ()
    """Stack-level problems (bad pools, capacity, DCGM contradictions): the run must end non-zero."""
    warnings: tuple[str, ...] = ()
    layouts: Mapping[str, PoolLayout] = field(default_factory=dict)
    """Node pool → its layout, for MIG pools and time-sliced pools with shares (`tkf_infra.plan.layout`)."""
    footprints: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    """Model → what it asks of nodes and storage (pod CPU/memory/GPUs, nodes per replica, cache GiB)."""
    floors: frozenset[str] = frozenset()
    """Autoscaled models admitted with room for minReplicas only (`serving.overcommit: allow`)."""
    pins: Mapping[str, Pin] = field(default_factory=dict)
    """Model → the nodes its pods are pinned to, where node names are real (`tkf_infra.plan.pins`)."""
    downloads: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    """Weight cache (PVC name) → (pool, node) its download Job is pinned to (same condition)."""
    multi_node_cache: bool | None = None
    """Whether pods on several nodes can mount one weight cache (False: one node's; None: not known)."""

    @property
    def deployed(self) -> set[str]:
        return {m.entry.name for m in self.models}

    def verdict(self) -> str | None:
        """Why the run must end non-zero (None when everything went through)."""
        return verdict(self.excluded, self.errors, len(self.models))

    def model(self, name: str) -> ModelPlan:
        return next(m for m in self.models if m.entry.name == name)


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


def _facts_problem(entry: ModelEntry, lock: Lock) -> tuple[ModelFacts | None, int, Stage | None, str]:
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


def _speculative_problem(entry: ModelEntry, facts: ModelFacts) -> str | None:
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
class _Context:
    """What planning one model needs besides the entry."""

    lock: Lock
    vllm_version: str
    pools: Mapping[str, PoolFacts]
    pool_problems: Mapping[str, str]
    live: LiveFindings | None
    strict: bool = False
    """`strict: true`: a tight fit is refused (Stage.TIGHT) instead of deployed with its warning."""


def _plan_model(entry: ModelEntry, index: int, ctx: _Context) -> ModelPlan | Exclusion:
    """One model: planned, or left out with the stage and reason."""

    def leave_out(stage: Stage, reason: str, field: str | None = "") -> Exclusion:
        return Exclusion.of(entry.name, index, stage, (f"model {entry.name}: {reason}",), field)

    if entry.node_pool is not None and entry.node_pool in ctx.pool_problems:
        return leave_out(Stage.POOL, "not deployed because its node pool is wrong: "
                         f"{ctx.pool_problems[entry.node_pool]}")
    if ctx.live and entry.name in ctx.live.model_problems:
        return Exclusion.of(entry.name, index, Stage.LIVE, (ctx.live.model_problems[entry.name],))
    facts, weight_bytes, stage, why = _facts_problem(entry, ctx.lock)
    if stage is not None or facts is None:
        return leave_out(stage or Stage.LOCK, why)
    if spec := _speculative_problem(entry, facts):
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


def _keep_last_good(excluded: list[Exclusion], planned: list[ModelPlan], previous: Mapping[str, Any],
                    ctx: _Context) -> list[Exclusion]:
    """A model refused now but deployed before keeps serving at its last deployed settings.

    Why: leaving a refused model out of the program would make `up` delete the running one, so a bad
    edit (a typo, a context that no longer fits, a pool the owner closed) would take a live model
    down. Its last deployed entry is re-planned instead (so nothing of it changes) while the refusal
    is still reported and the run still ends non-zero. Removing an entry from the catalog removes the
    model as before; only refused entries are kept.
    """
    names = {m.entry.name for m in planned}
    served = {n for m in planned for n in _client_names(m.entry)}
    out: list[Exclusion] = []
    for x in excluded:
        raw = previous.get(x.name)
        kept: ModelPlan | Exclusion | None = None
        if isinstance(raw, Mapping) and x.name not in names:
            try:
                kept = _plan_model(ModelEntry.model_validate(raw), x.index, ctx)
            except ValidationError:
                kept = None
        if isinstance(kept, ModelPlan) and not served & _client_names(kept.entry):
            planned.append(kept)
            names.add(kept.entry.name)
            served |= _client_names(kept.entry)
            x = replace(x, kept=True)
        out.append(x)
    return out


def _client_names(entry: ModelEntry) -> set[str]:
    """Every model name clients may send to this entry: its served name and its LoRA adapters'."""
    return {entry.served_name, *(a.served_name for a in (entry.lora.adapters if entry.lora else ()))}


def plan_fleet(catalog: Catalog, *, lock: Lock, ec2: Mapping[str, InstanceGpus] | None = None,
               ec2_errors: Mapping[str, str] | None = None, live: LiveFindings | None = None,
               refused_by_policy: Mapping[str, Sequence[str]] | None = None,
               previous: Mapping[str, Any] | None = None, cluster: adm.ClusterState | None = None,
               footprints: adm.Footprints | None = None,
               refused_by_platform: Mapping[str, Sequence[str]] | None = None,
               previous_layout: Any = None, previous_pins: Mapping[str, Pin] | None = None) -> FleetPlan:
    """Decide the fleet from validated settings and the edge's data; no I/O, no resources.

    `refused_by_policy`: models the platform owner's policy pack refused at the preview before this
    run (model → violations), handed over by the CLI. `previous`: the entries deployed by the last
    run (its `deployed` output), so a refused model keeps serving at its last good settings.
    `cluster`: what the cluster said (cluster mode; None in render mode); `footprints`: how pods and
    caches are sized — with them the node capacity, storage and topology checks run
    (`tkf_infra.plan.admission`). `refused_by_platform`: models a fleet stack's platform cannot serve
    (model → reasons, `tkf_infra.platform_contract.unmet_needs`), left out at the topology stage.
    `previous_layout`: the last run's `gpuLayout` output; each MIG pool keeps what it placed where it was
    (`tkf_infra.plan.mig_sticky`) so an added model re-partitions only the nodes it lands on. None (or a first
    run's nothing): laid out from scratch; unreadable: from scratch with a warning. `previous_pins`: the last
    run's pins (`tkf_infra.plan.pins.read_pins`), which a model keeps while its nodes still hold it.
    """
    s = catalog.settings
    errors = [str(p) for p in catalog.pool_problems]
    errors += [f"{p}; deployed without that adapter" for p in catalog.adapter_problems]
    warnings = list(live.warnings) if live else []
    shared = s.platform.gpu_operator.time_slicing_replicas > 1
    pools: dict[str, PoolFacts] = {}
    pool_problems: dict[str, str] = {}
    for settings_pool in catalog.pools:
        itype = str(settings_pool.instance_type)
        try:
            if settings_pool.kind == "eks" and ec2_errors and itype in ec2_errors:
                raise PoolProblem(f"node pool {settings_pool.name}: instanceType: {ec2_errors[itype]}")
            pools[settings_pool.name] = resolve_pool(settings_pool, ec2 or {}, shared,
                                                     mig_strategy=s.platform.gpu_operator.mig_strategy,
                                                     time_slices=s.platform.gpu_operator.time_slicing_replicas)
        except PoolProblem as exc:
            pool_problems[settings_pool.name] = str(exc)
            errors.append(str(exc))
    if live:
        errors += [m for msgs in live.pool_errors.values() for m in msgs]
    ctx = _Context(lock, s.serving.version, pools, pool_problems, live, strict=s.strict)

    excluded = [Exclusion(r.name or f"models[{r.index}]", r.index, Stage.CATALOG,
                          tuple(Refusal(p.field or None, str(p)) for p in r.problems)) for r in catalog.rejected]
    planned: list[ModelPlan] = []
    policy = refused_by_policy or {}
    # Positions in the stack file, found once (a search per model grew with the catalog's square).
    positions: dict[str, int] = {}
    for i, raw in enumerate(catalog.settings.models):
        if isinstance(raw, Mapping) and isinstance(raw.get("name"), str):
            positions.setdefault(raw["name"], i)
    with sized_once():  # many entries of few checkpoints at few settings: each estimate computed once
        for entry in catalog.models:
            index = positions.get(entry.name, -1)
            if entry.name in policy:
                excluded.append(Exclusion.of(entry.name, index, Stage.POLICY, policy[entry.name]))
                continue
            if refused_by_platform and entry.name in refused_by_platform:
                excluded.append(Exclusion.of(entry.name, index, Stage.TOPOLOGY, refused_by_platform[entry.name]))
                continue
            result = _plan_model(entry, index, ctx)
            if isinstance(result, Exclusion):
                excluded.append(result)
            else:
                planned.append(result)
        if previous:
            excluded = _keep_last_good(excluded, planned, previous, ctx)

    # An autoscaler the cluster cannot run refuses its models before they take any room.
    scale_refused, scale_warnings = scaling_checks([m.entry for m in planned], s, cluster)
    excluded += [Exclusion.of(n, positions.get(n, -1), Stage.TOPOLOGY, (r,), "scaling")
                 for n, r in scale_refused.items()]
    warnings += scale_warnings
    planned = [m for m in planned if m.entry.name not in scale_refused]
    prints: dict[str, dict[str, Any]] = {}
    entries = {m.entry.name: m.entry for m in planned}
    floors: frozenset[str] = frozenset()
    if footprints is not None:
        # Models the last run deployed hold their room; the others follow by priority, then catalog order.
        order = sorted(planned, key=lambda m: (m.entry.name not in (previous or {}), -(m.entry.priority or 0),
                                               positions.get(m.entry.name, -1)))
        done = admit(order, pools, catalog, cluster, footprints, ec2 or {}, frozenset(previous or {}),
                     previous_layout=previous_layout, previous_pins=previous_pins)
        if s.serving.overcommit is Overcommit.ALLOW and (floors := over_maximum(done.refused, entries)):
            at_max = done.refused  # the same order again, those models at their floor
            done = admit(order, pools, catalog, cluster, footprints, ec2 or {}, frozenset(previous or {}), floors,
                         previous_layout, previous_pins)
            warnings += [overcommitted(entries[n], at_max[n][1]) for n in sorted(floors) if n not in done.refused]
        layouts, refusals, prints, laid_out = done.layouts, done.refused, done.prints, done.laid_out_refused
        pins, downloads, multi_node = done.pins, done.downloads, done.multi_node_cache
        warnings += done.warnings
    else:
        layouts = plan_layouts(planned, pools, s.serving.version, previous=previous_layout)
        warnings += [w for lay in layouts.values() for w in lay.warnings]
        refusals = {name: ("placement", reason) for lay in layouts.values() for name, reason in lay.refused.items()}
        laid_out = frozenset(refusals)
        pins, downloads, multi_node = {}, {}, None
    excluded += [Exclusion.of(name, positions.get(name, -1), Stage(stage),
                              ((at_minimum if name in floors else at_maximum)(entries[name], reason)
                               if name in entries else reason,))
                 for name, (stage, reason) in refusals.items()]
    sized = [m for m in planned if m.entry.name not in laid_out]
    warnings += [f"model {m.entry.name}: {w}" for m in sized for w in m.fit.warnings]
    errors += capacity_errors(sized, pools, floors)
    errors += [r for m in planned for r in m.refused_adapters]
    placed = [m for m in planned if m.entry.name not in refusals]
    return FleetPlan(catalog=catalog, pools=pools, models=tuple(placed),
                     excluded=tuple(sorted(excluded, key=lambda e: (e.index, e.name))),
                     errors=tuple(errors), warnings=tuple(warnings), layouts=layouts, footprints=prints,
                     floors=floors - set(refusals), pins=pins, downloads=downloads, multi_node_cache=multi_node)


def capacity_errors(models: list[ModelPlan], pools: Mapping[str, PoolFacts],
                    floors: frozenset[str] = frozenset()) -> list[str]:
    """Pools whose models ask, over all replicas (an autoscaled model's maximum, or its minimum in `floors`),
    more GPUs than the pool has."""
    demand: dict[str, list[tuple[str, int]]] = {}
    for m in models:  # MIG pools and shares are counted by the layout planner
        if m.entry.is_cpu or m.pool is None or m.pool.mig is not None or m.share is not None:
            continue
        demand.setdefault(m.pool.name, []).append((m.entry.name, reserved(m, floors) * m.entry.gpus))
    errors = []
    for name, asks in demand.items():
        pool = pools[name]
        have, need = pool.gpus_per_node * pool.node_count, sum(n for _, n in asks)
        if need > have:
            detail = ", ".join(f"{model} {n}" for model, n in asks)
            errors.append(f"nodePool {name}: models need {need} GPUs ({detail}) but the pool has {have} "
                          f"({pool.node_count} nodes x {pool.gpus_per_node}); raise nodeCount or lower replicas "
                          "(scaling.maxReplicas for an autoscaled model)")
    return errors
