"""Which stacks `preview` / `up --stack S` run: a split environment's platform first, then its fleet.

Why the default is both: `--stack dev` names the environment a user works on; its fleet plans against
what its platform applied, so a platform edit must be applied first (docs/stacks.md).
"""

from __future__ import annotations

from enum import StrEnum

from tkf_infra import layers
from tkf_infra.names import PROJECT_ROOT


class Only(StrEnum):
    both = "both"
    platform = "platform"
    fleet = "fleet"


def layer_stacks(stack: str, only: Only) -> list[str]:
    """The stacks `preview`/`up` of `stack` run, in order."""
    from tkf_infra.config import read_stack_file

    if layers.is_platform_stack(stack):
        return [stack]
    path = PROJECT_ROOT / f"Pulumi.{stack}.yaml"
    split = path.exists() and read_stack_file(path).get(layers.LAYER_KEY) == layers.Layer.FLEET.value
    if not split:
        return [stack]
    return {Only.both: [layers.platform_stack(stack), stack], Only.platform: [layers.platform_stack(stack)],
            Only.fleet: [stack]}[only]
