"""The fleet plan: which models are deployed, on what, sized how — and every model left out, with why.

Why a plan before any resource: one bad model must not block the good ones, under `pulumi up` as
much as under the CLI. The engine aborts a whole preview or update at the first failed provider
check, so refusals are decided here, in plain Python, from data gathered at the program's edge
(the lock, EC2, DCGM). Every reason a model is left out — the catalog rules, its pool, what the
GPUs report, the lock, gated access, the fit check — becomes one `Exclusion` of that model; the
outputs, the program's error log and the CLI's per-model summary all read these, so they cannot
disagree.

`plan_fleet` reads as its stages: pools, each model alone (`plan.one_model`), the autoscalers the
cluster can run, admission of the fleet together (`plan.admit_fleet`), the refusals recorded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tkf_infra.config import Catalog
from tkf_infra.config.scaling import Overcommit
from tkf_infra.hub.lock import Lock
from tkf_infra.plan import admission as adm
from tkf_infra.plan.admit_fleet import admit, plan_layouts, reserved
from tkf_infra.plan.cache_modes import ACCESS_KEY, cache_modes, existing_modes, legacy_modes
from tkf_infra.plan.exclusion import Exclusion, Refusal, Stage, verdict
from tkf_infra.plan.model_plan import ModelPlan
from tkf_infra.plan.one_model import LiveFindings, ModelContext, keep_last_good, plan_model
from tkf_infra.plan.pins import Pin
from tkf_infra.plan.pool_layout import PoolLayout
from tkf_infra.plan.pools import PoolFacts, PoolProblem, resolve_pool
from tkf_infra.plan.scaling import at_maximum, at_minimum, over_maximum, overcommitted, scaling_checks
from tkf_infra.plan.storage_room import multi_node_mounts
from tkf_infra.sizing.ec2 import InstanceGpus
from tkf_infra.sizing.estimate import sized_once


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
    cache_modes: Mapping[str, str] = field(default_factory=dict)
    """Weight cache (PVC name) → the access mode its claim is written with (`tkf_infra.plan.cache_modes`)."""

    @property
    def deployed(self) -> set[str]:
        return {m.entry.name for m in self.models}

    def verdict(self) -> str | None:
        """Why the run must end non-zero (None when everything went through)."""
        return verdict(self.excluded, self.errors, len(self.models))

    def model(self, name: str) -> ModelPlan:
        return next(m for m in self.models if m.entry.name == name)


def plan_fleet(catalog: Catalog, *, lock: Lock, ec2: Mapping[str, InstanceGpus] | None = None,
               ec2_errors: Mapping[str, str] | None = None, live: LiveFindings | None = None,
               refused_by_policy: Mapping[str, Sequence[str]] | None = None,
               previous: Mapping[str, Any] | None = None, cluster: adm.ClusterState | None = None,
               footprints: adm.Footprints | None = None,
               refused_by_platform: Mapping[str, Sequence[str]] | None = None,
               previous_layout: Any = None, previous_pins: Mapping[str, Pin] | None = None,
               previous_claims: Mapping[str, str] | None = None) -> FleetPlan:
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
    `previous_claims`: each weight cache's access mode as the last run published it (`cache_modes.published_modes`);
    a claim keeps its mode (`tkf_infra.plan.cache_modes`).
    """
    s = catalog.settings
    run = _Run(_positions(catalog), errors=[str(p) for p in catalog.pool_problems] +
               [f"{p}; deployed without that adapter" for p in catalog.adapter_problems],
               warnings=list(live.warnings) if live else [])
    pools, pool_problems = _resolve_pools(catalog, ec2 or {}, ec2_errors or {}, live, run)
    ctx = ModelContext(lock, s.serving.version, pools, pool_problems, live, strict=s.strict)
    plan_models(catalog, ctx, run, refused_by_policy or {}, refused_by_platform or {}, previous or {})
    _check_scaling(run, catalog, cluster)
    multi = multi_node_mounts(cluster, s.serving.storage_class, s.serving.storage_multi_node)
    claims = existing_modes(cluster, previous_claims or {}, legacy_modes(previous or {}, multi))
    placed = _admit(run, catalog, pools, cluster, footprints, ec2 or {}, previous or {}, previous_layout,
                    previous_pins, claims)
    _record_refusals(run, placed, pools)
    models = tuple(m for m in run.planned if m.entry.name not in placed.refusals)
    modes = cache_modes(models, multi, claims)
    for m in models:  # published, so the next run knows each claim's mode without reading the cluster
        fp = placed.prints.get(m.entry.name)
        if fp is not None and fp.get("weightCache") in modes:
            fp[ACCESS_KEY] = modes[fp["weightCache"]]
    return FleetPlan(catalog=catalog, pools=pools, models=models,
                     excluded=tuple(sorted(run.excluded, key=lambda e: (e.index, e.name))),
                     errors=tuple(run.errors), warnings=tuple(run.warnings), layouts=placed.layouts,
                     footprints=placed.prints, floors=placed.floors - set(placed.refusals), pins=placed.pins,
                     downloads=placed.downloads, cache_modes=modes)


# ------------------------------------------------------------------------------------------------
# plan_fleet's stages in the order they run, each leaving out what it refuses by name on the run
# (stage 2, each model alone, is `plan.one_model`)
# ------------------------------------------------------------------------------------------------


@dataclass
class _Run:
    """What the stages hand on: the models still planned, and what each stage left out, warned of or found wrong."""

    positions: Mapping[str, int]
    """Model name → its index in the stack file's models (found once: a search per model grew with the square)."""
    errors: list[str]
    warnings: list[str]
    planned: list[ModelPlan] = field(default_factory=list)
    excluded: list[Exclusion] = field(default_factory=list)

    def leave_out(self, name: str, stage: Stage, reasons: Sequence[str], field_name: str | None = "") -> None:
        """`field_name` "": the stage's usual field (`Exclusion.of`)."""
        self.excluded.append(Exclusion.of(name, self.positions.get(name, -1), stage, reasons, field_name))


def _positions(catalog: Catalog) -> dict[str, int]:
    positions: dict[str, int] = {}
    for i, raw in enumerate(catalog.settings.models):
        if isinstance(raw, Mapping) and isinstance(raw.get("name"), str):
            positions.setdefault(raw["name"], i)
    return positions


def _resolve_pools(catalog: Catalog, ec2: Mapping[str, InstanceGpus], ec2_errors: Mapping[str, str],
                   live: LiveFindings | None, run: _Run) -> tuple[dict[str, PoolFacts], dict[str, str]]:
    """Stage 1, pools: what each pool is; a wrong pool is an error of the stack and of the models on it."""
    s = catalog.settings
    shared = s.platform.gpu_operator.time_slicing_replicas > 1
    pools: dict[str, PoolFacts] = {}
    problems: dict[str, str] = {}
    for settings_pool in catalog.pools:
        itype = str(settings_pool.instance_type)
        try:
            if settings_pool.kind == "eks" and itype in ec2_errors:
                raise PoolProblem(f"node pool {settings_pool.name}: instanceType: {ec2_errors[itype]}")
            pools[settings_pool.name] = resolve_pool(settings_pool, ec2, shared,
                                                     mig_strategy=s.platform.gpu_operator.mig_strategy,
                                                     time_slices=s.platform.gpu_operator.time_slicing_replicas)
        except PoolProblem as exc:
            problems[settings_pool.name] = str(exc)
            run.errors.append(str(exc))
    if live:
        run.errors += [m for msgs in live.pool_errors.values() for m in msgs]
    return pools, problems


def plan_models(catalog: Catalog, ctx: ModelContext, run: _Run, policy: Mapping[str, Sequence[str]],
                 platform: Mapping[str, Sequence[str]], previous: Mapping[str, Any]) -> None:
    """Stage 2, each model alone: the catalog's rejects, the policy pack's, what the platform cannot serve,
    then each entry's lock, adapters, share and fit; a refused model deployed before keeps its last good
    settings."""
    run.excluded += [Exclusion(r.name or f"models[{r.index}]", r.index, Stage.CATALOG,
                               tuple(Refusal(p.field or None, str(p)) for p in r.problems)) for r in catalog.rejected]
    with sized_once():  # many entries of few checkpoints at few settings: each estimate computed once
        for entry in catalog.models:
            if entry.name in policy:
                run.leave_out(entry.name, Stage.POLICY, policy[entry.name])
                continue
            if entry.name in platform:
                run.leave_out(entry.name, Stage.TOPOLOGY, platform[entry.name])
                continue
            result = plan_model(entry, run.positions.get(entry.name, -1), ctx)
            if isinstance(result, Exclusion):
                run.excluded.append(result)
            else:
                run.planned.append(result)
        if previous:
            run.excluded = keep_last_good(run.excluded, run.planned, previous, ctx)


def _check_scaling(run: _Run, catalog: Catalog, cluster: adm.ClusterState | None) -> None:
    """Stage 3: an autoscaler the cluster cannot run refuses its models before they take any room."""
    refused, warnings = scaling_checks([m.entry for m in run.planned], catalog.settings, cluster)
    for name, reason in refused.items():
        run.leave_out(name, Stage.TOPOLOGY, (reason,), "scaling")
    run.warnings += warnings
    run.planned = [m for m in run.planned if m.entry.name not in refused]


@dataclass(frozen=True)
class _Placed:
    """What admission decided (stage 4): layouts, refusals by stage name, footprints, pins."""

    layouts: Mapping[str, PoolLayout]
    refusals: Mapping[str, tuple[str, str]]
    laid_out: frozenset[str]
    """Models the layout planner refused (their fit warnings are not reported: they are not sized as deployed)."""
    prints: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    pins: Mapping[str, Pin] = field(default_factory=dict)
    downloads: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    floors: frozenset[str] = frozenset()


def _admit(run: _Run, catalog: Catalog, pools: Mapping[str, PoolFacts], cluster: adm.ClusterState | None,
           footprints: adm.Footprints | None, ec2: Mapping[str, InstanceGpus], previous: Mapping[str, Any],
           previous_layout: Any, previous_pins: Mapping[str, Pin] | None, claims: Mapping[str, str]) -> _Placed:
    """Stage 4, the fleet together: layouts, node room, storage and pins (`admit_fleet`); without footprints
    (no sizes for pods and caches) only the layouts."""
    s = catalog.settings
    if footprints is None:
        layouts = plan_layouts(run.planned, pools, s.serving.version, previous=previous_layout)
        run.warnings += [w for lay in layouts.values() for w in lay.warnings]
        refusals = {name: ("placement", reason) for lay in layouts.values() for name, reason in lay.refused.items()}
        return _Placed(layouts, refusals, frozenset(refusals))
    # Models the last run deployed hold their room; the others follow by priority, then catalog order.
    order = sorted(run.planned, key=lambda m: (m.entry.name not in previous, -(m.entry.priority or 0),
                                               run.positions.get(m.entry.name, -1)))
    entries = {m.entry.name: m.entry for m in run.planned}
    done = admit(order, pools, catalog, cluster, footprints, ec2, frozenset(previous),
                 previous_layout=previous_layout, previous_pins=previous_pins, claims=claims)
    floors: frozenset[str] = frozenset()
    if s.serving.overcommit is Overcommit.ALLOW and (floors := over_maximum(done.refused, entries)):
        at_max = done.refused  # the same order again, those models at their floor
        done = admit(order, pools, catalog, cluster, footprints, ec2, frozenset(previous), floors,
                     previous_layout, previous_pins, claims)
        run.warnings += [overcommitted(entries[n], at_max[n][1]) for n in sorted(floors) if n not in done.refused]
    run.warnings += done.warnings
    return _Placed(done.layouts, done.refused, done.laid_out_refused, done.prints, done.pins, done.downloads,
                   floors)


def _record_refusals(run: _Run, placed: _Placed, pools: Mapping[str, PoolFacts]) -> None:
    """Stage 5: admission's refusals as exclusions (at the floor or the maximum they were asked at), the sized
    models' fit warnings, the pools asked for more GPUs than they have, the adapters left out."""
    entries = {m.entry.name: m.entry for m in run.planned}
    for name, (stage, reason) in placed.refusals.items():
        asked_at = at_minimum if name in placed.floors else at_maximum
        told = asked_at(entries[name], reason) if name in entries else reason
        run.leave_out(name, Stage(stage), (told,))
    sized = [m for m in run.planned if m.entry.name not in placed.laid_out]
    run.warnings += [f"model {m.entry.name}: {w}" for m in sized for w in m.fit.warnings]
    run.errors += capacity_errors(sized, pools, placed.floors)
    run.errors += [r for m in run.planned for r in m.refused_adapters]


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
