"""`split`: move a one-stack environment's platform into its `<env>-platform` stack, deleting nothing.

Why `pulumi state move` (engine ≥ 3.117; the pinned 3.274.1 has it): the platform stack registers the
same resources under the same names, parents and provider name (`components.fleet.build_platform`),
so once their state entries are in that stack its first `up` finds every object as it left it, and
the fleet's first `up` no longer owns them — neither deletes nor recreates anything in the cluster.
Aliases could not do this: an alias renames a resource within one stack, never across stacks.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tkf_infra import layers
from tkf_infra.names import GPU_NODE_POOL_TYPE, GPU_OPERATOR_TYPE, SERVING_PREREQUISITES_TYPE
from tkf_infra.ops import stacks

#: The top-level components a platform stack registers; everything under them moves with them.
PLATFORM_COMPONENTS = frozenset({GPU_NODE_POOL_TYPE, GPU_OPERATOR_TYPE, SERVING_PREREQUISITES_TYPE})


@dataclass(frozen=True)
class SplitResult:
    source: str
    dest: str
    moved: tuple[str, ...]
    """URNs moved (as they were in the source stack)."""


def platform_urns(resources: Iterable[Mapping[str, Any]]) -> list[str]:
    """The URNs of the platform's components and every resource under them, in state order (parents first)."""
    resources = list(resources)
    parent = {str(r["urn"]): str(r.get("parent") or "") for r in resources}
    kind = {str(r["urn"]): str(r.get("type")) for r in resources}

    def under_platform(urn: str) -> bool:
        while urn:
            if kind.get(urn) in PLATFORM_COMPONENTS:
                return True
            urn = parent.get(urn, "")
        return False

    return [str(r["urn"]) for r in resources if under_platform(str(r["urn"]))]


def split(stack: str, *, project_dir: Path = stacks.PROJECT_DIR, backend_url: str | None = None) -> SplitResult:
    """Move `stack`'s platform resources into `<stack>-platform` (created when missing)."""
    if layers.is_platform_stack(stack):
        raise stacks.UsageError(f"{stack!r} is already a platform stack; give the environment's stack "
                                f"({layers.environment(stack)})")
    dest = layers.platform_stack(stack)
    source = stacks.open_stack(stack, project_dir=project_dir, backend_url=backend_url)
    deployment = stacks.state_deployment(source)
    if deployment is None:
        raise stacks.UsageError(f"the state of stack {stack!r} cannot be read; check the backend and passphrase")
    urns = platform_urns(deployment.get("resources") or [])
    if not urns:
        raise stacks.UsageError(f"stack {stack!r} holds no platform resources: nothing to move (already split, or "
                                "every piece alreadyInstalled)")
    stacks.open_stack(dest, create=True, project_dir=project_dir, backend_url=backend_url)
    env = {**os.environ, **stacks.engine_env(stack, project_dir, backend_url)}  # as the Automation API runs it
    binary = stacks.pulumi_home() / "bin" / "pulumi"
    proc = subprocess.run([str(binary), "state", "move", "--source", stack, "--dest", dest, "--yes",
                           "--non-interactive", *urns],
                          cwd=project_dir, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        known = stacks.engine_error(proc.stderr, stack, env["PULUMI_BACKEND_URL"], project_dir)
        raise known or stacks.UsageError(f"pulumi state move failed: "
                                         f"{stacks.last_error_line(proc.stderr + proc.stdout)}")
    return SplitResult(stack, dest, tuple(urns))
