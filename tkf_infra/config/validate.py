"""From a raw stack document to a validated `Catalog`: strict where one error breaks everything,
per item where one bad item must not block the others.

- stack-level settings (cluster, namespaces, platform, serving, URLs): strict — every problem at
  once, then the run stops (`SettingsError`);
- node pools: one by one — a bad pool refuses only the models placed on it;
- catalog entries: one by one, then the rules that need several entries or the pools.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from tkf_infra.config.api_keys import CONFIG_KEYS as API_KEY_CONFIG_KEYS
from tkf_infra.config.base import Problem, SettingsError, label_name, problems_from, short
from tkf_infra.config.catalog import ModelEntry, parallelism_problem, step_budget_problems
from tkf_infra.config.extra_args import SERVE_OPTIONS_VLLM, unknown_option_problems
from tkf_infra.config.lora import ADAPTERS_LEFT_OUT, AdapterEntry
from tkf_infra.config.node_pool import NodePool
from tkf_infra.config.stack import StackSettings, image_version, release_of


@dataclass(frozen=True)
class Rejected:
    """A catalog entry left out of the deployment by the catalog rules, with every reason at once."""

    index: int
    name: str
    problems: tuple[Problem, ...]


@dataclass(frozen=True)
class Catalog:
    """The validated result: settings, usable pools, the entries that may be deployed, the ones left out."""

    settings: StackSettings
    models: tuple[ModelEntry, ...]
    rejected: tuple[Rejected, ...] = ()
    pools: tuple[NodePool, ...] = ()
    pool_problems: tuple[Problem, ...] = ()
    """Problems of node pools that were left out (their models are in `rejected`)."""
    labels: Mapping[int, str] = field(default_factory=dict)
    """`models[i] name` of every raw entry, as messages name them."""
    adapter_problems: tuple[Problem, ...] = ()
    """LoRA adapters left out of entries that deploy without them (a bad pin, a served name taken):
    one bad adapter must not take its base and the base's other adapters down."""

    @property
    def ok(self) -> bool:
        return not self.rejected and not self.pool_problems

    def pool(self, name: str | None) -> NodePool | None:
        return next((p for p in self.pools if p.name == name), None)


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Merge `over` onto `base`; nested mappings merge, everything else (lists too) is replaced."""
    out = copy.deepcopy(dict(base))
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _entry_label(index: int, raw: Any) -> str:
    name = raw.get("name") if isinstance(raw, Mapping) else None
    return f"models[{index}] {label_name(name)}" if isinstance(name, str) and name else f"models[{index}]"


def _validate_pools(raws: list[Any]) -> tuple[list[NodePool], list[Problem], dict[str, str]]:
    """(usable pools, problems, bad pool name → where), each pool on its own."""
    pools: list[NodePool] = []
    problems: list[Problem] = []
    bad: dict[str, str] = {}
    for i, raw in enumerate(raws):
        name = raw.get("name") if isinstance(raw, Mapping) else None
        where = f"nodePools[{i}]" + (f" {label_name(name)}" if isinstance(name, str) and name else "")
        if not isinstance(raw, Mapping):
            problems.append(Problem(where, "", f"expected a mapping of keys, got {short(raw)}"))
            continue
        try:
            pool = NodePool.model_validate(raw)
        except ValidationError as err:
            problems.extend(problems_from(err, where, model=NodePool))
            if isinstance(name, str):
                bad[name] = where
            continue
        if any(p.name == pool.name for p in pools):
            problems.append(Problem(where, "name", f"node pool name {pool.name!r} is used twice; names must be unique"))
            bad[pool.name] = where
            continue
        pools.append(pool)
    return pools, problems, bad


def validate_catalog(raw: Mapping[str, Any]) -> Catalog:
    """Validate a whole stack document (see the module docstring for what is strict and what is not).

    Raises SettingsError when the stack-level settings are unusable, or when `strict` is set and
    any pool or entry is bad. Otherwise returns the entries that passed and the rejected ones.
    """
    if not isinstance(raw, Mapping):
        raise SettingsError([Problem("stack settings", "", f"expected a mapping of keys, got {short(raw)}")])
    try:
        settings = StackSettings.model_validate(raw)
    except ValidationError as err:
        problems = problems_from(err, "stack settings", model=StackSettings, also=API_KEY_CONFIG_KEYS)
        raise SettingsError(problems) from None
    pools, pool_problems, bad_pools = _validate_pools(settings.node_pools)

    per_entry: dict[int, list[Problem]] = {}
    parsed: dict[int, ModelEntry] = {}
    labels: dict[int, str] = {}
    dropped: dict[int, list[Problem]] = {}
    for i, entry in enumerate(settings.models):
        labels[i] = _entry_label(i, entry)
        if not isinstance(entry, Mapping):
            per_entry[i] = [Problem(labels[i], "", f"expected a mapping of keys, got {short(entry)}")]
            continue
        merged, dropped[i] = _without_bad_adapters(deep_merge(settings.model_defaults, entry), labels[i])
        try:
            parsed[i] = ModelEntry.model_validate(merged, context={ADAPTERS_LEFT_OUT: bool(dropped[i])})
        except ValidationError as err:
            found = problems_from(err, labels[i], model=ModelEntry)
            raw_rules = _raw_parallelism_problems(merged, labels[i]) + _raw_step_budget_problems(merged, labels[i])
            # A rule that ran (every field parsed) is in `found` already; only the ones pydantic skipped are added.
            per_entry[i] = found + [p for p in raw_rules if not any(p.message in q.message for q in found)]

    _cross_entry_rules(settings, pools, bad_pools, parsed, labels, per_entry, dropped)
    # An entry refused anyway reports its adapters' problems with its own, all at once.
    for i in per_entry:
        per_entry[i] += dropped.pop(i, [])
    adapter_problems = tuple(p for i in sorted(dropped) for p in dropped[i])

    rejected = tuple(
        Rejected(i, str(settings.models[i].get("name", "")) if isinstance(settings.models[i], Mapping) else "",
                 tuple(per_entry[i]))
        for i in sorted(per_entry)
    )
    if (rejected or pool_problems or adapter_problems) and settings.strict:
        raise SettingsError([*pool_problems, *(p for r in rejected for p in r.problems), *adapter_problems],
                            headline="strict: true and the stack has bad entries; nothing was registered")
    good = tuple(parsed[i] for i in sorted(parsed) if i not in per_entry)
    return Catalog(settings=settings, models=good, rejected=rejected, pools=tuple(pools),
                   pool_problems=tuple(pool_problems), labels=labels, adapter_problems=adapter_problems)


def _without_bad_adapters(merged: dict[str, Any], label: str) -> tuple[dict[str, Any], list[Problem]]:
    """The entry without the LoRA adapters that fail their own rules, and those adapters' problems.

    A malformed `lora` block (not a mapping, adapters not a list, an adapter not a mapping) stays for
    the entry's validation to refuse: only a well-formed adapter with bad values is left out alone."""
    lora = merged.get("lora")
    adapters = lora.get("adapters") if isinstance(lora, Mapping) else None
    if not isinstance(lora, Mapping) or not isinstance(adapters, list) or not all(isinstance(a, Mapping)
                                                                                  for a in adapters):
        return merged, []
    kept, problems = [], []
    for raw in adapters:
        try:
            AdapterEntry.model_validate(raw)
            kept.append(raw)
        except ValidationError as err:
            name = raw.get("name") or adapters.index(raw)
            said = f"adapter {name!r}: "  # AdapterEntry's own prefix, which the field names already
            problems += [Problem(label, f"lora.adapters {name}", p.message.removeprefix(said))
                         for p in problems_from(err, label, model=AdapterEntry)]
    if not problems:
        return merged, []
    return {**merged, "lora": {**lora, "adapters": kept}}, problems


def _raw_parallelism_problems(raw: Mapping[str, Any], label: str) -> list[Problem]:
    """The GPU arithmetic rule, checked on the raw entry when other fields already failed.

    Pydantic runs cross-field rules only on entries whose fields all parsed; a person fixing a bad
    revision should also learn, in the same run, that their parallelism does not add up.
    """
    keys = ("nodeCount", "gpusPerNode", "tensorParallelSize", "pipelineParallelSize", "dataParallelSize")
    values = [raw.get(k, 1) for k in keys]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        return []
    problem = parallelism_problem(*values)
    return [Problem(label, "tensorParallelSize", problem)] if problem else []


def _raw_step_budget_problems(raw: Mapping[str, Any], label: str) -> list[Problem]:
    """The step-budget rule on the raw entry when other fields already failed (as `_raw_parallelism_problems`)."""
    mnbt, seqs, mml = raw.get("maxNumBatchedTokens"), raw.get("maxNumSeqs", 256), raw.get("maxModelLen")
    args = raw.get("extraArgs", [])
    if not (isinstance(mnbt, int) and isinstance(seqs, int) and isinstance(mml, int)) or any(
            isinstance(v, bool) for v in (mnbt, seqs, mml)):
        return []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        return []
    return [Problem(label, "maxNumBatchedTokens", p) for p in step_budget_problems(mnbt, seqs, mml, args)]


def _cross_entry_rules(settings: StackSettings, pools: list[NodePool], bad_pools: Mapping[str, str],
                       parsed: dict[int, ModelEntry], labels: Mapping[int, str],
                       per_entry: dict[int, list[Problem]], dropped: dict[int, list[Problem]]) -> None:
    """Rules that need more than one entry, or the node pools: placement and CPU policy first, then the names
    (claimed only by entries every other rule let through: `_claim_names`)."""
    by_name = {p.name: p for p in pools}
    for i, m in sorted(parsed.items()):
        problems = _placement_problems(settings, m, labels[i], by_name, bad_pools)
        problems += _release_problems(settings, m, labels[i])
        if problems:
            per_entry.setdefault(i, []).extend(problems)
    _claim_names(parsed, labels, per_entry, dropped)


def _release_problems(settings: StackSettings, m: ModelEntry, label: str) -> list[Problem]:
    """What the stack's vLLM release refuses at start-up: `extraArgs` words that are no option of its `vllm serve`.

    Checked only when the stack runs the release the option table was generated from (`SERVE_OPTIONS_VLLM`): a
    stack pinned to another release may pass options that release has."""
    if release_of(settings.serving.version) != SERVE_OPTIONS_VLLM:
        return []
    return [Problem(label, "extraArgs", p) for p in unknown_option_problems(m.extra_args)]


def _claim_names(parsed: dict[int, ModelEntry], labels: Mapping[int, str], per_entry: dict[int, list[Problem]],
                 dropped: dict[int, list[Problem]]) -> None:
    """Every name must be unique: entry `name`s, and every name a client can send — each model's
    `servedName` and each LoRA adapter's (they share vLLM's and the gateway's model list).

    Only an entry no other rule refused claims a name, so a refused entry never takes a name from a good
    one; and claims go by rank, then catalog order: entry names, then the models' served names, then the
    adapters' (an adapter is dropped from its base, never the base, so an adapter given another model's
    served name loses it to that model wherever the two stand in the catalog). The loser is named with the
    winner; an adapter that loses goes into `dropped` and its base deploys without it."""
    names: dict[str, int] = {}
    for i in _alive(parsed, per_entry):
        if (m := parsed[i]).name in names:
            per_entry.setdefault(i, []).append(Problem(labels[i], "name", f"{m.name!r} is already used by "
                                                       f"{labels[names[m.name]]}; names must be unique"))
        else:
            names[m.name] = i
    served: dict[str, str] = {}
    unique = "must be unique across the catalog, its models and their LoRA adapters"
    for i in _alive(parsed, per_entry):
        if (m := parsed[i]).served_name in served:
            per_entry.setdefault(i, []).append(Problem(labels[i], "servedName", f"{m.served_name!r} is already "
                                                       f"served by {served[m.served_name]}; servedName {unique}"))
        else:
            served[m.served_name] = labels[i]
    for i in _alive(parsed, per_entry):
        taken = []
        lora = parsed[i].lora
        for a in lora.adapters if lora else ():
            if a.served_name in served:
                dropped.setdefault(i, []).append(Problem(
                    labels[i], f"lora.adapters {a.name}.servedName", f"{a.served_name!r} is already served by "
                    f"{served[a.served_name]}; servedName {unique}; the adapter is left out, its base deploys"))
                taken.append(a.name)
            else:
                served[a.served_name] = f"{labels[i]} adapter {a.name}"
        if taken:
            parsed[i] = parsed[i].without_adapters(taken)


def _alive(parsed: Mapping[int, ModelEntry], per_entry: Mapping[int, list[Problem]]) -> list[int]:
    """The parsed entries no rule has refused so far, in catalog order."""
    return [i for i in sorted(parsed) if i not in per_entry]


def _placement_problems(settings: StackSettings, m: ModelEntry, label: str, by_name: Mapping[str, NodePool],
                        bad_pools: Mapping[str, str]) -> list[Problem]:
    """Where the entry runs: a usable pool that has its GPUs and nodes, or the CPU profile the stack allows."""
    pools = list(by_name.values())
    pool = by_name.get(m.node_pool or "")
    if m.node_pool is not None and m.node_pool in bad_pools:
        return [Problem(label, "nodePool", f"{m.node_pool!r} is not usable: {bad_pools[m.node_pool]} has errors "
                        "(reported above); fix the pool or move the model")]
    if m.is_cpu:
        return _cpu_problems(settings, m, label, pools)
    if m.node_pool is None:
        return [Problem(label, "nodePool", f"is required for a GPU model; choose one of {_pool_names(pools)}")]
    if pool is None:
        return [_unknown_pool(label, m.node_pool, pools)]
    if pool.gpus_per_node == 0:
        return [Problem(label, "nodePool", f"{pool.name!r} is a CPU pool; a model with gpusPerNode "
                        f"{m.gpus_per_node} needs a GPU pool")]
    problems = []
    if m.gpus_per_node > pool.gpus_per_node:
        problems.append(Problem(label, "gpusPerNode", f"{m.gpus_per_node} but node pool {pool.name!r} has "
                                f"{pool.gpus_per_node} GPUs per node; lower it or use a bigger pool"))
    if m.node_count > pool.node_count:
        problems.append(Problem(label, "nodeCount", f"{m.node_count} but node pool {pool.name!r} has "
                                f"{pool.node_count} nodes"))
    return problems


def _cpu_problems(settings: StackSettings, m: ModelEntry, label: str, pools: list[NodePool]) -> list[Problem]:
    """A CPU-profile entry: allowed by the stack, on a pool that exists, sized on the release its image runs."""
    problems = []
    if not settings.serving.allow_cpu:
        problems.append(Problem(label, "gpusPerNode", "0 selects the CPU profile, which this stack does not allow "
                                "(serving.allowCpu is false); give the model GPUs"))
    if m.node_pool is not None and m.node_pool not in {p.name for p in pools}:
        problems.append(_unknown_pool(label, m.node_pool, pools))
    # The CPU profile runs the CPU image, sized as the release vllmImage's tag names (vllmVersion agrees with it).
    cpu_release = image_version(settings.serving.vllm_cpu_image)
    gpu_release = image_version(settings.serving.vllm_image)
    if cpu_release and gpu_release and cpu_release != gpu_release:
        problems.append(Problem(label, "gpusPerNode", f"0 runs serving.vllmCpuImage "
                                f"{settings.serving.vllm_cpu_image!r}, vLLM {cpu_release}, but the fit check sizes "
                                f"vLLM {gpu_release} (serving.vllmImage); tag both images with one release"))
    return problems


def _pool_names(pools: list[NodePool]) -> str:
    return ", ".join(repr(p.name) for p in pools) or "(none: add nodePools to the stack)"


def _unknown_pool(label: str, name: str, pools: list[NodePool]) -> Problem:
    return Problem(label, "nodePool", f"{name!r} is not a node pool of this stack; choose one of {_pool_names(pools)}")
