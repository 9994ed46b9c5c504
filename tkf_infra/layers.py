"""Which layer a stack is — the platform, the fleet, or both in one — and the settings it runs with.

Why two stacks per environment (docs/stacks.md): the platform (node pools, GPU Operator, cert-manager,
Gateway API, KServe, LWS) is installed once, models change every week; in one stack a catalog edit
pays for every platform resource and carries the GPU Operator in its blast radius.

Why this design: an environment keeps **one stack file**, `Pulumi.<env>.yaml` (the design card's
layout), so no fact is written twice. `tkf-infra:layer: fleet` in it splits the environment: stack
`<env>` is then the fleet, and stack `<env>-platform` — named by the suffix, its own stack file holding
nothing but the engine's encryption salt — is applied from the platform keys of that same file
(`PLATFORM_KEYS`). Without the key (`layer: all`, the default) a stack holds both, as before: existing
stacks keep working untouched. The fleet reads what the platform applied (not what the file says it
should) from the platform stack's `platformContract` output (`tkf_infra.platform_contract`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any

from tkf_infra.config.base import Problem, SettingsError

PLATFORM_SUFFIX = "-platform"
#: The stack-file keys the platform stack is applied from. `serving` is read for its backend (which
#: pieces are needed) and image (the pipeline-parallel preset's), `prometheusUrl` for KServe's scaling
#: settings (components/prerequisites.py `kserve_wva_config`); the fleet owns everything else.
PLATFORM_KEYS = ("cluster", "namespaces", "nodePools", "platform", "serving", "prometheusUrl")
LAYER_KEY = "layer"


class Layer(StrEnum):
    ALL = "all"
    PLATFORM = "platform"
    FLEET = "fleet"


def is_platform_stack(stack: str) -> bool:
    return stack.endswith(PLATFORM_SUFFIX) and len(stack) > len(PLATFORM_SUFFIX)


def environment(stack: str) -> str:
    """The environment a stack belongs to: `dev` for both `dev` and `dev-platform`."""
    return stack.removesuffix(PLATFORM_SUFFIX) if is_platform_stack(stack) else stack


def platform_stack(env: str) -> str:
    return f"{env}{PLATFORM_SUFFIX}"


def platform_settings(env_doc: Mapping[str, Any]) -> dict[str, Any]:
    """The settings the platform stack runs with: the platform keys of the environment's file, no models."""
    return {k: env_doc[k] for k in PLATFORM_KEYS if k in env_doc}


def resolve(stack: str, settings: Mapping[str, Any],
            read_env_file: Callable[[str], dict[str, Any] | None]) -> tuple[Layer, dict[str, Any]]:
    """(layer, raw settings) of `stack`, from its own settings or, for `<env>-platform`, from `Pulumi.<env>.yaml`.

    Every mistake is a `SettingsError` naming the stack, the key and the fix.
    """
    if not is_platform_stack(stack):
        layer = settings.get(LAYER_KEY, Layer.ALL.value)
        return (Layer.FLEET if layer == Layer.FLEET.value else Layer.ALL), dict(settings)
    env = environment(stack)
    headline = f"the platform stack {stack!r} cannot run"
    # Empty values are the project's defaults (Pulumi.yaml), which the engine hands every stack.
    own = sorted(k for k, v in settings.items() if k != LAYER_KEY and v not in ({}, [], "", None, False))
    if own:
        raise SettingsError([Problem(f"Pulumi.{stack}.yaml", ", ".join(f"tkf-infra:{k}" for k in own),
                                     f"stack {stack} takes every setting from Pulumi.{env}.yaml (one file per "
                                     "environment, docs/stacks.md); move these keys there and remove them here")],
                            headline=headline)
    doc = read_env_file(env)
    if doc is None:
        raise SettingsError([Problem(f"stack {stack}", "", f"there is no Pulumi.{env}.yaml to take its settings "
                                     f"from: a stack named <env>{PLATFORM_SUFFIX} is the platform of environment "
                                     "<env>; create that stack file, or rename this stack")], headline=headline)
    if doc.get(LAYER_KEY, Layer.ALL.value) != Layer.FLEET.value:
        raise SettingsError([Problem(f"Pulumi.{env}.yaml", f"tkf-infra:{LAYER_KEY}",
                                     f"is {doc.get(LAYER_KEY, Layer.ALL.value)!r}: stack {env} holds its own "
                                     f"platform, so {stack} would install it a second time; set "
                                     f"tkf-infra:{LAYER_KEY}: fleet there to split the environment (an existing stack "
                                     f"moves its platform first: `python -m tkf_infra split --stack {env}`)")],
                            headline=headline)
    return Layer.PLATFORM, platform_settings(doc)
