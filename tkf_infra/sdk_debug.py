"""Drop the Pulumi SDK's own per-resource debug lines in the program's process instead of sending each one
to the engine, where the CLI drops them anyway unless `--debug`.

Why: the Python SDK (3.272.0, requirements.txt) logs four or five debug lines for every resource it registers
("registering resource", "resource registration prepared", "beginning rpc register resource", "resource
registration successful", and for components "register resource outputs prepared"), and each one is a
blocking `Engine/Log` call from the program's only thread (`pulumi.log._log`: `engine.Log(req)`), which
the engine turns into a diagnostic event it copies, sends to the display and to the Automation API's
event stream, and then drops: the CLI shows debug lines only under `--debug`. A 200-model fleet stack
makes 3,872 of those calls per preview (docs/performance.md, issue 32). Nothing in this project logs at
debug level; its warnings and errors (`pulumi.log.warn`/`error`) are untouched.

Changed for users: `pulumi preview --debug` no longer shows the SDK's per-resource lines; the engine's
and the providers' own debug output is unchanged. Set `TKF_SDK_DEBUG_LOGS=1` in the environment of
`pulumi` (or `python -m tkf_infra`) to keep them, e.g. when debugging the SDK itself.
"""

from __future__ import annotations

import os
from typing import Any

import pulumi.log

#: The environment variable that keeps the SDK's debug lines (any non-empty value).
KEEP_ENV = "TKF_SDK_DEBUG_LOGS"
#: The SDK's own function, kept so tests can compare and a run with `KEEP_ENV` set keeps it.
SDK_DEBUG = pulumi.log.debug


def _not_sent(msg: str, resource: Any = None, stream_id: Any = None, ephemeral: Any = None) -> None:
    """`pulumi.log.debug` with the same signature, sending nothing."""


def drop_sdk_debug_lines() -> bool:
    """Replace `pulumi.log.debug` for this process unless `KEEP_ENV` is set; True when replaced.

    The SDK's modules call it as `log.debug(...)` through the `pulumi.log` module, so swapping the
    module's attribute reaches every call site (`tests/test_sdk_debug.py` checks that a registration
    sends no debug line and that warnings still go out).
    """
    if os.environ.get(KEEP_ENV):
        pulumi.log.debug = SDK_DEBUG
        return False
    pulumi.log.debug = _not_sent
    return True
