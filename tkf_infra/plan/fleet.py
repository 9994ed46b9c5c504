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
from enum import StrEnum
from typing import Any

from pydantic import ValidationError

from tkf_infra.config import Catalog, ModelEntry
from tkf_infra.config.base import label_name
from tkf_infra.config.catalog import Backend
from tkf_infra.config.flags import extra_args_dests, row, sized_fields
from tkf_infra.config.platform import installed_pieces
from tkf_infra.config.quantity import cpu_text, gib_text
from tkf_infra.hub.lock import Lock
from tkf_infra.plan import admission as adm
from tkf_infra.plan.layout import Demand, PoolLayout, SliceDemand, plan_mig, prove_time_slicing
from tkf_infra.plan.pools import PoolFacts, PoolProblem, resolve_pool
from tkf_infra.plan.share import Share, ShareProblem, context_gib, size_share
from tkf_infra.sizing.arch import parse_arch
from tkf_infra.sizing.contract import FitInputs, FitResult
from tkf_infra.sizing.ec2 import InstanceGpus
from tkf_infra.sizing.facts import ModelFacts
from tkf_infra.sizing.node_room import EKS_AMI_TAG, eks_node_room
from tkf_infra.sizing.params import SizingError, SizingParams
from tkf_infra.sizing.weights import checkpoint_bytes


class Stage(StrEnum):
    """Which check left a model out (the `stage` of a `rejected` output entry)."""

    CATALOG = "catalog"
    """The catalog rules: a field value, uniqueness, placement on a pool."""
    POOL = "pool"
    """Its node pool's settings do not hold together (EC2 facts, product labels)."""
    LIVE = "live"
    """What the GPUs report (DCGM) contradicts its pool, or a shared GPU lacks the free memory."""
    LOCK = "lock"
    """No usable facts in models.lock.json."""
    ACCESS = "access"
    """A gated repo without hfTokenSecret."""
    FIT = "fit"
    """It does not fit its GPUs (or no MIG profile / time-sliced share of them)."""
    PLACEMENT = "placement"
    """Its pool's layout cannot hold it: MIG slices that do not pack, or time-sliced shares that could overrun a GPU."""
    POLICY = "policy"
    """The platform owner's policy pack refused it (reported by the CLI, which runs the pack)."""
    TOPOLOGY = "topology"
    """The configured platform cannot render it: an API it needs (LeaderWorkerSet, KServe) is not served."""
    CAPACITY = "capacity"
    """A replica's CPU, memory and GPU requests fit on no node of its pool (`tkf_infra.plan.admission`)."""
    STORAGE = "storage"
    """Its weight cache does not fit in what its storage class (quota, capacity, budget) has left."""


@dataclass(frozen=True)
class Exclusion:
    """A model left out of the deployment, with every reason at once."""

    name: str
    index: int
    stage: Stage
    reasons: tuple[str, ...]
    kept: bool = False
    """Deployed before and still serving at its last deployed settings (nothing of it changes)."""

    def as_output(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "stage": self.stage.value, "reasons": list(self.reasons),
                "kept": self.kept}

    @classmethod
    def from_output(cls, data: Mapping[str, Any]) -> Exclusion:
        return cls(str(data.get("name") or ""), int(data.get("index", -1)), Stage(str(data.get("stage", "catalog"))),
                   tuple(str(r) for r in data.get("reasons") or ()), bool(data.get("kept", False)))

    @property
    def label(self) -> str:
        return label_name(self.name) if self.name else f"models[{self.index}]"

    def log_line(self) -> str:
        """How the program reports it (the CLI recognises the line and attributes it to the model)."""
        reasons = "\n".join(f"  - {r}" for r in self.reasons)
        if self.kept:
            return (f"{self.label}: the new settings were refused ({self.stage.value}); it keeps serving at its last "
                    f"deployed settings:\n{reasons}")
        return f"{self.label} was left out of this deployment ({self.stage.value}):\n{reasons}"


@dataclass(frozen=True)
class ModelPlan:
    """One model that will be deployed, with everything its resources need as plain values."""

    entry: ModelEntry
    facts: ModelFacts
    weight_bytes: int
    pool: PoolFacts | None
    fit_inputs: FitInputs
    fit: FitResult
    share: Share | None = None
    """The part of a GPU each replica gets (None: whole GPUs); `entry` then carries the share's vLLM flags."""


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

    @property
    def deployed(self) -> set[str]:
        return {m.entry.name for m in self.models}

    def verdict(self) -> str | None:
        """Why the run must end non-zero (None when everything went through)."""
        if self.excluded:
            names = ", ".join(x.label + (" (kept at its last deployed settings)" if x.kept else "")
                              for x in self.excluded)
            n = len(self.excluded)
            fresh = len(self.models) - sum(x.kept for x in self.excluded)
            return (f"{n} catalog entr{'y was' if n == 1 else 'ies were'} refused ({names}); the other "
                    f"{fresh} were deployed. Fix the errors above and run again.")
        if self.errors:
            return (f"{len(self.errors)} fleet problem(s), reported above; the models were deployed but the fleet "
                    "needs fixing")
        return None

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
        return None, 0, Stage.LOCK, f"{entry.model_ref} is not in models.lock.json, so it cannot be sized; {fix}"
    try:
        weight_bytes = checkpoint_bytes(facts, quantization=entry.quantization)
    except (SizingError, KeyError, ValueError) as exc:
        return None, 0, Stage.LOCK, f"the lock entry of {entry.model_ref} gives no weight size ({exc}); {fix}"
    if facts.gated and not entry.hf_token_secret:
        return facts, weight_bytes, Stage.ACCESS, (
            f"{entry.repo} is gated on the Hugging Face Hub but hfTokenSecret is not set; create a Secret with key "
            "HF_TOKEN in the serving namespace and name it in hfTokenSecret")
    return facts, weight_bytes, None, ""


def _prefix_caching(extra_args: list[str]) -> bool | None:
    """What extraArgs say about prefix caching (it changes hybrid models' state blocks); None: vLLM's default.

    Read as vLLM's parser reads them (`--enable_prefix_caching`, `--no-enable-prefix`: tkf_infra.config.flags)."""
    said = extra_args_dests(extra_args).get("enable_prefix_caching")
    return None if said is None else not said.startswith("--no-")


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


def _plan_model(entry: ModelEntry, index: int, ctx: _Context) -> ModelPlan | Exclusion:
    """One model: planned, or left out with the stage and reason."""

    def leave_out(stage: Stage, reason: str) -> Exclusion:
        return Exclusion(entry.name, index, stage, (f"model {entry.name}: {reason}",))

    if entry.node_pool is not None and entry.node_pool in ctx.pool_problems:
        return leave_out(Stage.POOL, "not deployed because its node pool is wrong: "
                         f"{ctx.pool_problems[entry.node_pool]}")
    if ctx.live and entry.name in ctx.live.model_problems:
        return Exclusion(entry.name, index, Stage.LIVE, (ctx.live.model_problems[entry.name],))
    facts, weight_bytes, stage, why = _facts_problem(entry, ctx.lock)
    if stage is not None or facts is None:
        return leave_out(stage or Stage.LOCK, why)
    if spec := _speculative_problem(entry, facts):
        return leave_out(Stage.CATALOG, spec)
    pool = ctx.pools.get(entry.node_pool or "")
    gpu = pool.gpu if pool is not None and not entry.is_cpu else None
    inputs = FitInputs(model=entry.name, repo=entry.repo, revision=entry.revision, facts=facts, gpu=gpu,
                       params=sizing_params(entry, ctx.vllm_version),
                       max_tensor_parallel=(pool.gpus_per_node if pool else 0) or 8,
                       prefix_caching=_prefix_caching(entry.extra_args))
    try:
        sized = size_share(entry, pool, inputs)
    except ShareProblem as exc:
        return Exclusion(entry.name, index, Stage.CATALOG, (str(exc),))
    if not sized.fit.fits:
        return Exclusion(entry.name, index, Stage.FIT, (sized.fit.message or "does not fit",))
    return ModelPlan(sized.entry, facts, weight_bytes, pool, sized.inputs, sized.fit, sized.share)


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
    served = {m.entry.served_name for m in planned}
    out: list[Exclusion] = []
    for x in excluded:
        raw = previous.get(x.name)
        kept: ModelPlan | Exclusion | None = None
        if isinstance(raw, Mapping) and x.name not in names:
            try:
                kept = _plan_model(ModelEntry.model_validate(raw), x.index, ctx)
            except ValidationError:
                kept = None
        if isinstance(kept, ModelPlan) and kept.entry.served_name not in served:
            planned.append(kept)
            names.add(kept.entry.name)
            served.add(kept.entry.served_name)
            x = replace(x, kept=True)
        out.append(x)
    return out


def plan_fleet(catalog: Catalog, *, lock: Lock, ec2: Mapping[str, InstanceGpus] | None = None,
               ec2_errors: Mapping[str, str] | None = None, live: LiveFindings | None = None,
               refused_by_policy: Mapping[str, Sequence[str]] | None = None,
               previous: Mapping[str, Any] | None = None, cluster: adm.ClusterState | None = None,
               footprints: adm.Footprints | None = None,
               refused_by_platform: Mapping[str, Sequence[str]] | None = None) -> FleetPlan:
    """Decide the fleet from validated settings and the edge's data; no I/O, no resources.

    `refused_by_policy`: models the platform owner's policy pack refused at the preview before this
    run (model → violations), handed over by the CLI. `previous`: the entries deployed by the last
    run (its `deployed` output), so a refused model keeps serving at its last good settings.
    `cluster`: what the cluster said (cluster mode; None in render mode); `footprints`: how pods and
    caches are sized — with them the node capacity, storage and topology checks run
    (`tkf_infra.plan.admission`). `refused_by_platform`: models a fleet stack's platform cannot serve
    (model → reasons, `tkf_infra.platform_contract.unmet_needs`), left out at the topology stage.
    """
    s = catalog.settings
    errors = [str(p) for p in catalog.pool_problems]
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
    ctx = _Context(lock, s.serving.version, pools, pool_problems, live)

    excluded = [Exclusion(r.name or f"models[{r.index}]", r.index, Stage.CATALOG, tuple(str(p) for p in r.problems))
                for r in catalog.rejected]  # fmt: skip
    planned: list[ModelPlan] = []
    policy = refused_by_policy or {}
    # Positions in the stack file, found once (a search per model grew with the catalog's square).
    positions: dict[str, int] = {}
    for i, raw in enumerate(catalog.settings.models):
        if isinstance(raw, Mapping) and isinstance(raw.get("name"), str):
            positions.setdefault(raw["name"], i)
    for entry in catalog.models:
        index = positions.get(entry.name, -1)
        if entry.name in policy:
            excluded.append(Exclusion(entry.name, index, Stage.POLICY, tuple(policy[entry.name])))
            continue
        if refused_by_platform and entry.name in refused_by_platform:
            excluded.append(Exclusion(entry.name, index, Stage.TOPOLOGY, tuple(refused_by_platform[entry.name])))
            continue
        result = _plan_model(entry, index, ctx)
        if isinstance(result, Exclusion):
            excluded.append(result)
        else:
            planned.append(result)
    if previous:
        excluded = _keep_last_good(excluded, planned, previous, ctx)

    layouts = plan_layouts(planned, pools, s.serving.version)
    for layout in layouts.values():
        for name, reason in layout.refused.items():
            excluded.append(Exclusion(name, positions.get(name, -1), Stage.PLACEMENT, (reason,)))
    placed = [m for m in planned if not any(m.entry.name in lay.refused for lay in layouts.values())]
    warnings += [f"model {m.entry.name}: {w}" for m in placed for w in m.fit.warnings]
    errors += capacity_errors(placed, pools)
    prints: dict[str, dict[str, Any]] = {}
    if footprints is not None:
        # Models the last run deployed hold their room; the others follow in catalog order.
        order = sorted(placed, key=lambda m: (m.entry.name not in (previous or {}), positions.get(m.entry.name, -1)))
        refusals, admission_warnings, prints = admit(order, pools, catalog, cluster, footprints, ec2 or {})
        warnings += admission_warnings
        excluded += [Exclusion(name, positions.get(name, -1), stage, (reason,))
                     for name, (stage, reason) in refusals.items()]
        placed = [m for m in placed if m.entry.name not in refusals]
    return FleetPlan(catalog=catalog, pools=pools, models=tuple(placed),
                     excluded=tuple(sorted(excluded, key=lambda e: (e.index, e.name))),
                     errors=tuple(errors), warnings=tuple(warnings), layouts=layouts, footprints=prints)


Refusals = dict[str, tuple[Stage, str]]


def _pool_nodes(pf: PoolFacts, cluster: adm.ClusterState | None, ec2: Mapping[str, InstanceGpus],
                render: bool, operator_installed_here: bool) -> tuple[adm.PoolNodes, list[str]]:  # fmt: skip
    """Where a pool's node figures come from: the cluster's Nodes, else EC2 (eks), else the pool's settings."""
    gpus = pf.mig is None
    warnings: list[str] = []
    why = "render mode reads no cluster" if render else ""
    if cluster is not None and cluster.nodes is not None:
        live, notes = adm.live_pool_nodes(pf.name, pf.pool.nodes, pf.node_selector, pf.tolerations, cluster.nodes,
                                          cluster.source, gpus, pf.gpus_per_node * max(1, pf.time_slices),
                                          operator_installed_here)
        if live is not None:
            return live, notes
        why = "; ".join(notes)
    elif cluster is not None:
        why = f"the Nodes could not be read ({cluster.nodes_error})"
    info = ec2.get(str(pf.pool.instance_type)) if pf.pool.kind == "eks" else None
    if info is not None and info.vcpus and info.host_memory_mib:
        room = eks_node_room("", info.vcpus, info.host_memory_mib, pf.gpus_per_node * max(1, pf.time_slices)
                             if gpus else 0, info.default_max_enis, info.ipv4_per_eni)
        nodes = tuple(replace(room, name=f"{pf.name}-{i + 1}") for i in range(pf.node_count))
        source = (f"EC2 {info.instance_type} ({info.vcpus} vCPUs, {info.host_memory_mib / 1024:g} GiB) less the EKS "
                  f"AMI's kube-reserved and eviction threshold (amazon-eks-ami {EKS_AMI_TAG}: "
                  f"{cpu_text(room.cpu_millis)}, {gib_text(room.memory_mib)} per node)")
        if cluster is not None:
            warnings.append(adm.named(adm.W_NODES_NOT_LIVE, f"nodePool {pf.name}: node capacity was not read live "
                                      f"({why}); planned from {source}"))
        return adm.PoolNodes(pf.name, nodes, source, gpus=gpus), warnings
    if pf.pool.kind == "eks":
        itype = str(pf.pool.instance_type)
        why = "; ".join(w for w in (why, f"EC2 gave no vCPU and memory figures for {itype}") if w)
    res = pf.pool.node_resources
    nodes_ = adm.settings_pool_nodes(pf.name, pf.node_count, pf.gpus_per_node * max(1, pf.time_slices),
                                     res.cpu if res else None, res.memory if res else None,
                                     res.ephemeral_storage if res else None, res.pods if res else None, gpus)
    code = adm.W_NODES_UNREAD if cluster is not None and cluster.nodes is None else adm.W_NODES_NOT_LIVE
    if res is not None:
        warnings.append(adm.named(code, f"nodePool {pf.name}: node capacity was not read live ({why}); planned "
                                  f"from {nodes_.source}"))
    else:
        warnings.append(adm.named(code if cluster is not None else adm.W_NODES_UNCHECKED,
                                  f"nodePool {pf.name}: node capacity was not read live ({why}) and the pool sets no "
                                  f"nodeResources, so {'only its GPUs were packed and ' if gpus else ''}the pods' CPU "
                                  f"and memory were not checked; set nodePools[{pf.name}].nodeResources: "
                                  "{cpu, memory} (one node's allocatable)"))
    return nodes_, warnings


def admit(models: Sequence[ModelPlan], pools: Mapping[str, PoolFacts], catalog: Catalog,
          cluster: adm.ClusterState | None, fp: adm.Footprints,
          ec2: Mapping[str, InstanceGpus]) -> tuple[Refusals, list[str], dict[str, dict[str, Any]]]:
    """Topology, node capacity and storage for the planned models, in the given order (see admission.py)."""
    s = catalog.settings
    render = s.cluster.mode == "render"
    refused: Refusals = {}
    warnings: list[str] = []
    prints: dict[str, dict[str, Any]] = {}
    installed = installed_pieces(s.platform, s.serving.backend)
    # Topology: what the configured platform renders, against the APIs the cluster serves.
    if cluster is not None and cluster.api_versions is None:
        warnings.append(adm.named(adm.W_APIS_UNREAD, f"topology: the APIs {cluster.source} serves could not be read "
                                  f"({cluster.api_error}); LeaderWorkerSet and KServe were not checked"))
    elif cluster is not None and cluster.api_versions is not None:
        for m in models:
            e = m.entry
            if e.is_multi_node and "lws" not in installed and adm.LWS_API not in cluster.api_versions:
                refused[e.name] = (Stage.TOPOLOGY, (
                    f"model {e.name}: multi-node (nodeCount {e.node_count}) runs as a LeaderWorkerSet, but "
                    f"{cluster.source} does not serve {adm.LWS_API} and platform.lws.alreadyInstalled is true; install "
                    "LeaderWorkerSet there, let tkf-infra install it (remove alreadyInstalled), or set nodeCount 1"))
            elif (s.serving.backend == Backend.KSERVE and "kserve" not in installed
                  and adm.KSERVE_API not in cluster.api_versions):
                refused[e.name] = (Stage.TOPOLOGY, (
                    f"model {e.name}: the kserve backend renders an LLMInferenceService, but {cluster.source} does not "
                    f"serve {adm.KSERVE_API} and platform.kserve.alreadyInstalled is true; install KServe there, let "
                    "tkf-infra install it (remove alreadyInstalled), or set serving.backend: vllm"))
    # Node capacity, per pool.
    for name, pf in sorted(pools.items()):
        on = [m for m in models if m.pool is not None and m.pool.name == name and m.entry.name not in refused]
        if not on:
            continue
        nodes, notes = _pool_nodes(pf, cluster, ec2, render, "gpuOperator" in installed)
        warnings += notes
        demands = []
        for m in on:
            cpu, mem = fp.pod(m.entry, m.weight_bytes)
            gpus = 0 if m.entry.is_cpu or pf.mig is not None else (1 if m.share else m.entry.gpus_per_pod)
            ask = adm.PodAsk(cpu, mem, gpus)
            demands.append(adm.Demand(m.entry.name, m.entry.replicas, m.entry.node_count, ask))
            prints[m.entry.name] = {"pool": name, "pod": {"cpuMillis": cpu, "memoryMiB": mem, "gpus": gpus},
                                    "podsPerReplica": m.entry.node_count, "replicas": m.entry.replicas,
                                    "nodesFrom": nodes.source}
        no_room, placed = adm.pack_pool(nodes, demands)
        for model, reason in no_room.items():
            refused[model] = (Stage.CAPACITY, reason)
        for model, where in placed.items():
            prints[model]["nodes"] = where
    # Storage: one cache per repo@revision, in the order of its first model.
    state = cluster
    limits, notes, shown = adm.storage_limits(state, s.serving.storage_class, s.serving.weight_cache_budget_gib)
    warnings += notes
    caches: dict[str, adm.Cache] = {}
    for m in models:
        e = m.entry
        if e.name in refused:
            continue
        pvc = fp.cache_name(e.repo, e.revision)
        old = caches.get(e.model_ref)
        caches[e.model_ref] = (adm.Cache(pvc, e.model_ref, fp.cache_gib(m.weight_bytes), (*old.models, e.name))
                               if old else adm.Cache(pvc, e.model_ref, fp.cache_gib(m.weight_bytes), (e.name,)))
        prints.setdefault(e.name, {}).update(weightCache=pvc, weightCacheGiB=fp.cache_gib(m.weight_bytes))
    existing = dict(state.pvcs) if state is not None and state.storage_error is None else {}
    for model, reason in adm.admit_storage(list(caches.values()), limits, existing, shown).items():
        refused[model] = (Stage.STORAGE, reason)
    return refused, warnings, prints


def plan_layouts(models: Sequence[ModelPlan], pools: Mapping[str, PoolFacts], version: str) -> dict[str, PoolLayout]:
    """Lay out every MIG pool, and prove every time-sliced pool that hosts shares (`tkf_infra.plan.layout`)."""
    layouts: dict[str, PoolLayout] = {}
    for name, pool in sorted(pools.items()):
        on = [m for m in models if m.pool is not None and m.pool.name == name and not m.entry.is_cpu]
        if pool.mig is not None and pool.gpu is not None:
            # A multi-node model's replica is one pod per node, each with gpusPerNode GPUs of its node.
            demands = [Demand(m.entry.name, m.entry.replicas * m.entry.node_count,
                              m.share.profile if m.share else None, m.entry.gpus_per_node)
                       for m in on if m.entry.replicas > 0]
            layouts[name] = plan_mig(name, pool.mig, pool.pool.nodes, pool.gpus_per_node, demands)
        elif pool.time_slices > 1 and pool.gpu is not None and any(m.share for m in on):
            total, context = pool.gpu.memory_gib, context_gib(version)
            demands_ts = [SliceDemand(m.entry.name, m.entry.replicas * (1 if m.share else m.entry.gpus),
                                      m.share.memory_gib if m.share else
                                      m.entry.gpu_memory_utilization * total + context) for m in on]
            layouts[name] = prove_time_slicing(name, pool.gpu.name, pool.time_slices,
                                               pool.gpus_per_node * pool.node_count, total, demands_ts)
    return layouts


def capacity_errors(models: list[ModelPlan], pools: Mapping[str, PoolFacts]) -> list[str]:
    """Pools whose models ask, over all replicas, more GPUs than the pool has."""
    demand: dict[str, list[tuple[str, int]]] = {}
    for m in models:  # MIG pools and shares are counted by the layout planner
        if m.entry.is_cpu or m.pool is None or m.pool.mig is not None or m.share is not None:
            continue
        demand.setdefault(m.pool.name, []).append((m.entry.name, m.entry.replicas * m.entry.gpus))
    errors = []
    for name, asks in demand.items():
        pool = pools[name]
        have, need = pool.gpus_per_node * pool.node_count, sum(n for _, n in asks)
        if need > have:
            detail = ", ".join(f"{model} {n}" for model, n in asks)
            errors.append(f"nodePool {name}: models need {need} GPUs ({detail}) but the pool has {have} "
                          f"({pool.node_count} nodes x {pool.gpus_per_node}); raise nodeCount or lower replicas")
    return errors
