"""The program's edge for a split environment: which layer this run is, what the other stack published.

Why here and not in the plan: reading another stack's outputs is I/O (the engine's
`readStackOutputs`, which is what a `pulumi.StackReference` reads too — as plain values, because the
plan must decide before anything is registered, where a StackReference's Outputs are not yet known),
and the program's edge is the only place that reads the outside (`tkf_infra.program`). The plan gets
plain data: settings, and the models the platform cannot serve.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tkf_infra import layers
from tkf_infra import platform_contract as pc
from tkf_infra.config import Catalog, SettingsError, validate_catalog
from tkf_infra.config.base import Problem
from tkf_infra.layers import Layer
from tkf_infra.outputs import CONTRACT_VERSION_OUTPUT

ReadOutputs = Callable[[str], "dict[str, Any] | None"]
"""Stack name → its outputs (None: no such stack, or never deployed)."""


@dataclass(frozen=True)
class LayerRun:
    """What this run is and the settings it plans with."""

    layer: Layer
    environment: str
    settings: dict[str, Any]
    warnings: tuple[str, ...] = ()
    platform: pc.PlatformContract | None = None
    """Fleet: the platform stack's contract it plans against (`refused` says what it cannot serve)."""
    contract: dict[str, Any] | None = None
    """Platform: the contract it exports."""


def read_env_file(env: str) -> dict[str, Any] | None:
    """The `tkf-infra:` settings of `Pulumi.<env>.yaml` (secrets left out: the platform needs none)."""
    from tkf_infra.config import read_stack_file
    from tkf_infra.names import PROJECT_ROOT

    path = PROJECT_ROOT / f"Pulumi.{env}.yaml"
    return read_stack_file(path) if path.exists() else None


def engine_outputs(stack: str) -> dict[str, Any] | None:
    """A stack's outputs through the engine's `readStackOutputs` (None when it has none or does not exist)."""
    import pulumi

    name = f"{pulumi.get_organization()}/{pulumi.get_project()}/{stack}"
    try:
        result = pulumi.runtime.invoke("pulumi:pulumi:readStackOutputs", {"name": name})
    except Exception:  # no such stack: the callers say what that means for them
        return None
    outputs = (result.value or {}).get("outputs")
    return dict(outputs) if isinstance(outputs, dict) and outputs else None


def _refuse(problems: list[str], headline: str) -> SettingsError:
    return SettingsError([Problem("", "", p) for p in problems], headline=headline)


def prepare(stack: str, settings: dict[str, Any], *, dry_run: bool, read_outputs: ReadOutputs,
            env_file: Callable[[str], dict[str, Any] | None] = read_env_file) -> LayerRun:
    """This run's layer and settings; a SettingsError (printed by the program, no traceback) when it cannot go on."""
    layer, raw = layers.resolve(stack, settings, env_file)
    env = layers.environment(stack)
    if layer == Layer.ALL:
        return LayerRun(layer, env, raw)
    if layer == Layer.PLATFORM:
        return _platform(stack, env, raw, read_outputs)
    return _fleet(stack, env, raw, dry_run, read_outputs)


def check_one_stack_removals(stack: str, contract: dict[str, Any], use: dict[str, int], previous: Any) -> None:
    """One stack holds both layers, so removing a platform piece deletes its CRDs in the same run that keeps
    the models using them: a SettingsError when it would. `contract`: what this run installs; `use`: this
    run's `platform_use`; `previous`: the contract its last run exported."""
    last = previous if isinstance(previous, dict) else None
    if problems := pc.crd_removal_problems(last, contract, {stack: use}, one_stack=True):
        raise _refuse(problems, f"stack {stack} refuses to remove CRDs its own models still use")


def _platform(stack: str, env: str, raw: dict[str, Any], read_outputs: ReadOutputs) -> LayerRun:
    """The platform's contract, and the refusal to delete a CRD a fleet still has objects of."""
    contract = pc.publish(validate_catalog(raw), env)
    previous = (read_outputs(stack) or {}).get(pc.PLATFORM_CONTRACT_OUTPUT)
    fleet = read_outputs(env) or {}
    use = fleet.get(pc.PLATFORM_USE_OUTPUT)
    problems = pc.crd_removal_problems(previous if isinstance(previous, dict) else None, contract,
                                       {env: use} if isinstance(use, dict) else {})
    if problems:
        raise _refuse(problems, f"platform stack {stack} refuses to remove CRDs its fleet still uses")
    return LayerRun(Layer.PLATFORM, env, raw, contract=contract)


def _fleet(stack: str, env: str, raw: dict[str, Any], dry_run: bool, read_outputs: ReadOutputs) -> LayerRun:
    """The fleet's settings from its platform stack's contract, and the models that contract cannot serve."""
    platform = layers.platform_stack(env)
    outputs = read_outputs(platform) or {}
    warnings: list[str] = []
    # Only the platform's own keys of this file: the comparison below is against what it would publish.
    intended = pc.publish(validate_catalog(layers.platform_settings(raw)), env)
    if pc.PLATFORM_CONTRACT_OUTPUT not in outputs:
        # This stack's own outputs only here, where they matter: reading them makes the engine load and parse
        # this stack's whole state file (megabytes at a few hundred models, docs/performance.md), and a
        # platform that has published its contract means this stack was split already.
        own = read_outputs(stack) or {}
        if CONTRACT_VERSION_OUTPUT in own and own.get(pc.LAYER_OUTPUT) != Layer.FLEET.value:
            raise _refuse([f"stack {stack} was deployed as one stack (platform and fleet): its state still holds "
                           f"the platform, which this fleet run would delete; move it to stack {platform} first: "
                           f"`python -m tkf_infra split --stack {stack}` (docs/stacks.md)"],
                          f"fleet stack {stack} cannot run yet")
        if not dry_run:
            raise _refuse([f"platform stack {platform} has not been applied (no {pc.PLATFORM_CONTRACT_OUTPUT} output): "
                           f"run `python -m tkf_infra up --stack {platform}` first (`make up` applies both, platform "
                           "first)"], f"fleet stack {stack} cannot run yet")
        warnings.append(f"platform stack {platform} has not been applied yet: previewing against what "
                        f"Pulumi.{env}.yaml asks of it; run `python -m tkf_infra up --stack {platform}` before the "
                        "fleet's up")
        value: Any = intended
    else:
        value = outputs[pc.PLATFORM_CONTRACT_OUTPUT]
    contract = pc.read(value, platform)
    applied, asked = pc.as_read(value), pc.as_read(intended)
    differ = sorted(k for k in asked if asked.get(k) != applied.get(k))
    if differ and value is not intended:
        warnings.append(f"Pulumi.{env}.yaml's platform settings differ from what platform stack {platform} last "
                        f"applied ({', '.join(differ)}): this fleet plans against the applied platform; run "
                        f"`python -m tkf_infra up --stack {platform}` to apply them")
    return LayerRun(Layer.FLEET, env, pc.fleet_settings(raw, contract), tuple(warnings), platform=contract)


def refused(run: LayerRun, catalog: Catalog) -> dict[str, list[str]]:
    """Model → why the fleet's platform cannot serve it (nothing outside a fleet stack)."""
    if run.platform is None:
        return {}
    return pc.unmet_needs(catalog, run.platform, layers.platform_stack(run.environment))
