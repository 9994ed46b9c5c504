"""The runtime API keys: which keys vLLM accepts, which one the gateway sends, and the rotation between them.

Why a second key: vLLM reads its keys once, at start, so a changed key reaches a pod only when the
pod restarts, while the gateway switches as soon as it is redeployed. With one key there is always
a moment when one side holds a key the other refuses (401s). With two accepted keys the gateway can
switch while every pod accepts both:

1. ``apiKeyNext`` set (``apiKey`` unchanged): pods roll to accept both; the gateway keeps ``apiKey``;
2. ``apiKey`` := the new key, ``apiKeyPrevious`` := the old one, ``apiKeyNext`` removed: the key *set*
   is unchanged, so no pod restarts; ``runtimeApiKey`` (the gateway's key) switches — redeploy it;
3. ``apiKeyPrevious`` removed: pods roll to accept the new key only.

The gateway always sends ``apiKey``, which every pod accepts in every step; only the second key
comes and goes (docs/operations.md has the commands). The program never holds more than two keys.

Keys must be Bearer tokens of a shell-safe alphabet: during a rotation vLLM gets both keys on its
command line (it reads only one from ``VLLM_API_KEY``), and KServe's preset runs that command line
through ``eval``, so a quote, ``$`` or space in a key would be executed or split, not passed.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from tkf_infra.config.base import Problem

#: Stack config keys (namespace ``tkf-infra:``), all secrets.
API_KEY, API_KEY_NEXT, API_KEY_PREVIOUS = "apiKey", "apiKeyNext", "apiKeyPrevious"
CONFIG_KEYS = (API_KEY, API_KEY_NEXT, API_KEY_PREVIOUS)

#: The one stack that may serve without a runtime API key (render mode, the dev-only passphrase): every
#: other stack refuses to run without one, so authentication is never turned off by an unset or empty secret.
DEV_STACK = "dev"

#: RFC 6750 ``b64token`` characters minus ``~`` (bash expands ``~`` after ``=`` in arguments), first
#: character alphanumeric (a leading ``-`` would read as a flag to vLLM's parser).
KEY_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+/=-]*")
KEY_ALPHABET = "letters, digits and . _ + / = - (starting with a letter or digit)"
KEY_HOWTO = "generate one with `openssl rand -hex 32`"

# The digest sits on pod templates, which far more people may read than the Secret: scrypt makes a
# guessable key expensive to test against it (16 MiB and ~0.1 s per guess); the salt only separates
# this use from others. Deterministic on purpose: the same key set must give the same annotation.
_SCRYPT_SALT = b"tkf-infra/api-keys/v1"
_SCRYPT_N, _SCRYPT_R, _SCRYPT_P = 2**14, 8, 1


class Rotation(StrEnum):
    """Where a stack is in a key rotation (published in the ``apiKeyRotation`` output)."""

    NONE = "none"
    """One key."""
    NEXT_ACCEPTED = "next-accepted"
    """Step 1: pods accept ``apiKey`` and ``apiKeyNext``; the gateway still sends ``apiKey``."""
    PREVIOUS_ACCEPTED = "previous-accepted"
    """Step 2: the gateway sends the new ``apiKey``; pods still accept ``apiKeyPrevious``."""


@dataclass(frozen=True)
class ApiKeys:
    """The stack's keys, in plaintext only inside the program: every use wraps them as secrets."""

    current: str = field(repr=False)
    """``apiKey``: the key the gateway sends (``runtimeApiKey``); always accepted."""
    next: str | None = field(default=None, repr=False)
    previous: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        problems = key_problems({API_KEY: self.current, API_KEY_NEXT: self.next, API_KEY_PREVIOUS: self.previous})
        if problems:
            raise ValueError("; ".join(str(p) for p in problems))

    @property
    def extra(self) -> str | None:
        """The second accepted key, whichever step of the rotation holds it."""
        return self.next or self.previous

    @property
    def accepted(self) -> tuple[str, ...]:
        return (self.current, self.extra) if self.extra else (self.current,)

    @property
    def rotation(self) -> Rotation:
        if self.next:
            return Rotation.NEXT_ACCEPTED
        return Rotation.PREVIOUS_ACCEPTED if self.previous else Rotation.NONE

    @property
    def accepted_digest(self) -> str:
        """Digest of the accepted key *set* (order-free): pods roll exactly when it changes."""
        return keys_digest(self.accepted)

    @property
    def current_digest(self) -> str:
        """Digest of the gateway's key: the gateway's pods roll when it changes."""
        return keys_digest((self.current,))


@functools.lru_cache(maxsize=16)
def _digest(keys: tuple[str, ...]) -> str:
    material = b"\n".join(k.encode() for k in keys)
    raw = hashlib.scrypt(material, salt=_SCRYPT_SALT, n=_SCRYPT_N, r=_SCRYPT_R, p=_SCRYPT_P, dklen=32)
    return "scrypt:" + raw.hex()


def keys_digest(keys: tuple[str, ...]) -> str:
    """scrypt of the sorted, de-duplicated keys (cached: the mock tier runs the program hundreds of times)."""
    return _digest(tuple(sorted(set(keys))))


def missing_key_problem(stack: str) -> Problem | None:
    """Why stack ``stack`` cannot run without ``apiKey`` (None for the dev stack, which may)."""
    if stack == DEV_STACK:
        return None
    return Problem("tkf-infra", API_KEY, f"is not set or is empty on stack {stack!r}, so vLLM would serve without "
                                         f"authentication, which only the {DEV_STACK} stack may; set it with "
                                         f"`pulumi config set --secret {API_KEY} \"$(openssl rand -hex 32)\" "
                                         f"--stack {stack}`")


def key_problems(values: Mapping[str, str | None], is_secret: Callable[[str], bool] | None = None) -> list[Problem]:
    """Every problem with the keys at once; never echoes a value (it is the secret)."""
    where = "tkf-infra"
    problems: list[Problem] = []
    for name, value in values.items():
        if value is None:
            continue
        if not KEY_PATTERN.fullmatch(value):
            problems.append(Problem(where, name, f"may contain only {KEY_ALPHABET} (it reaches vLLM's command line "
                                                 f"during a rotation); {KEY_HOWTO}"))
        if is_secret is not None and not is_secret(name):
            problems.append(Problem(where, name, "is stored in plaintext in the stack file; remove it and set it "
                                                 f"with `pulumi config set --secret {name} …`"))
    current, nxt, prev = (values.get(k) for k in CONFIG_KEYS)
    if current is None and (nxt or prev):
        problems.append(Problem(where, API_KEY_NEXT if nxt else API_KEY_PREVIOUS,
                                f"is set but {API_KEY} is not: a rotation needs the key the gateway sends; set "
                                f"`{API_KEY}` first"))
    if nxt and prev:
        problems.append(Problem(where, API_KEY_PREVIOUS,
                                f"is set together with {API_KEY_NEXT}: a rotation accepts two keys, not three; "
                                f"finish the current step first (docs/operations.md)"))
    for name, other in ((API_KEY_NEXT, nxt), (API_KEY_PREVIOUS, prev)):
        if other is not None and other == current:
            problems.append(Problem(where, name, f"equals {API_KEY}: nothing would rotate; set a new key, or "
                                                 f"remove `{name}`"))
    return problems
