"""The engine reads every run makes, started before the program's modules are imported, so they overlap.

Why: a run of a fleet stack reads two stacks' outputs through the engine (`readStackOutputs`: the platform's
contract, `tkf_infra.layer_edge`, and this stack's last deployment, `tkf_infra.program.last_outputs`), each a
blocking round trip in which the engine loads and parses a state file, and made one after the other only
once the plan's modules (pydantic models, the sizing tables) are imported: about a second of a small fleet's
preview in which the engine and the program wait for each other (docs/performance.md). `__main__.py` calls
`start` first; each read then runs in a thread of its own, with the program's context (the SDK keeps the
engine's address in context variables), while the main thread imports. Whoever asks for a stack's outputs
later (`read_outputs`) gets the answer read early, or reads it then: the mock tests and `bench/` never call
`start`. A private SDK touch point (docs/architecture.md): the SDK's `invoke` run from a thread.

It imports nothing of ours at module level: it runs before the rest of the program is imported.
"""

from __future__ import annotations

import contextvars
import threading
from concurrent.futures import Future
from typing import Any

import pulumi

READ_OUTPUTS = "pulumi:pulumi:readStackOutputs"
_EARLY: dict[str, Future[Any]] = {}


def stack_path(stack: str) -> str:
    """The name `readStackOutputs` takes: organization/project/stack."""
    return f"{pulumi.get_organization()}/{pulumi.get_project()}/{stack}"


def _run(future: Future[Any], stack: str) -> None:
    try:
        future.set_result(pulumi.runtime.invoke(READ_OUTPUTS, {"name": stack_path(stack)}))
    except BaseException as exc:  # handed to the reader, which says what it means for its run
        future.set_exception(exc)


def _begin(stack: str) -> None:
    if stack in _EARLY:
        return
    future: Future[Any] = Future()
    _EARLY[stack] = future
    context = contextvars.copy_context()
    threading.Thread(target=context.run, args=(_run, future, stack), name=f"read-{stack}", daemon=True).start()


def _other_stack(stack: str) -> None:
    """The other layer's stack of a split environment, when this one has one (its settings say so)."""
    from tkf_infra import layers

    if layers.is_platform_stack(stack):
        _begin(layers.environment(stack))
    elif pulumi.Config("tkf-infra").get(layers.LAYER_KEY) == layers.Layer.FLEET.value:
        _begin(layers.platform_stack(layers.environment(stack)))


def start() -> None:
    """Begin this stack's read at once, and the other layer's once `tkf_infra.layers` says which it is."""
    stack = pulumi.get_stack()
    _begin(stack)
    context = contextvars.copy_context()
    threading.Thread(target=context.run, args=(_other_stack, stack), name="read-other", daemon=True).start()


def read_outputs(stack: str) -> Any:
    """The engine's `readStackOutputs` answer for `stack` (an `InvokeResult`): the one read early (once: a process
    that runs the program again reads again), else read now. Raises what the invoke raised."""
    future = _EARLY.pop(stack, None)
    if future is not None:
        return future.result()
    return pulumi.runtime.invoke(READ_OUTPUTS, {"name": stack_path(stack)})
