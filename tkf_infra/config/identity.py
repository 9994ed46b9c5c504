"""What identifies something a client can call: a pinned revision, a served name, a price per token.

Why a module of its own: a catalog entry (`catalog.ModelEntry`) and each of its LoRA adapters
(`lora.AdapterEntry`) are both pinned to a commit, both served under a name clients send and both
priced for the gateway, by the same rules; written once here, so the two cannot drift.
"""

from __future__ import annotations

import re

from pydantic import Field

from tkf_infra.config.base import SettingsModel

#: Unanchored: used with `fullmatch` only (kube_syntax says why).
SHA_RE = re.compile(r"[0-9a-f]{40}")
SERVED_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}")
#: A Hugging Face repo id, `org/name`.
HF_REPO_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")


class Cost(SettingsModel):
    input_per_token: float = Field(0.0, ge=0, description="USD per input token; 0 = tracked, never limited.")
    output_per_token: float = Field(0.0, ge=0, description="USD per output token.")


def revision_problem(v: str) -> str | None:
    """Why `v` is not a pinned 40-hex commit (None when it is): a branch or tag can move under a deployment."""
    if SHA_RE.fullmatch(v):
        return None
    if SHA_RE.fullmatch(v.strip()):
        return f"revision {v!r} has spaces or a line break around the commit SHA; remove them"
    if re.fullmatch(r"[0-9a-fA-F]{40}", v):
        return f"revision {v!r} has upper-case letters; write the commit SHA in lower case"
    if re.fullmatch(r"[0-9a-f]{7,39}", v):
        return f"revision {v!r} is an abbreviated commit; pin the full 40-character commit SHA"
    if re.fullmatch(r"v?\d+(\.\d+)*.*", v):
        return f"revision {v!r} is a tag, which can move; pin the 40-character commit SHA"
    return f"revision {v!r} is a branch, which can move; pin the 40-character commit SHA"


def served_name_problem(v: str) -> str | None:
    """Why `v` cannot be a served name (None when it can)."""
    if SERVED_NAME_RE.fullmatch(v):
        return None
    return f"servedName {v!r} is not allowed: use 1-128 letters, digits and . _ : / -"
