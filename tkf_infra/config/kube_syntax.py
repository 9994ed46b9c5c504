"""What the Kubernetes API server accepts as a name, a label or a taint — checked at load, not at apply.

Why here: a stack setting the API server would refuse (a StorageClass name with a space, a node
label key with a `!`) previews fine and fails mid-`up`, after other objects were already changed.
The rules are the API server's own, from k8s.io/apimachinery v0.36.3
(`pkg/api/validate/content/dns.go`, `kube.go`, `identifier.go`); each check returns what is wrong
and how to write it, or None.
"""

from __future__ import annotations

import re

#: Unanchored: use them with `fullmatch` only. (Go's `^…$` spans the whole text; Python's `$` also matches
#: before a final newline, and `re.match` anchors only the start, so "name\n" would pass.)
_DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_LABEL_RE = re.compile(_DNS1123_LABEL)
DNS1123_SUBDOMAIN_RE = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
_LABEL_NAME_RE = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
C_IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DNS1123_SUBDOMAIN_MAX, LABEL_NAME_MAX = 253, 63


def _suggest(value: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9.-]", "-", value.lower())).strip("-.") or "my-name"


def subdomain_problem(value: str, what: str) -> str | None:
    """A DNS-1123 subdomain: object names such as StorageClasses and Nodes."""
    if len(value) <= DNS1123_SUBDOMAIN_MAX and DNS1123_SUBDOMAIN_RE.fullmatch(value):
        return None
    return (f"{value!r} is not a valid {what} (a DNS-1123 subdomain: at most 253 lowercase letters, digits, "
            f"'-' and '.', starting and ending with a letter or digit); the API server would refuse it: "
            f"use e.g. {_suggest(value)!r}")


def label_key_problem(key: str) -> str | None:
    """A label (or taint) key: an optional DNS subdomain prefix and '/', then a name of at most 63."""
    prefix, _, name = key.rpartition("/")
    if (not prefix or subdomain_problem(prefix, "prefix") is None) and len(name) <= LABEL_NAME_MAX \
            and _LABEL_NAME_RE.fullmatch(name):
        return None
    return (f"{key!r} is not a valid key (an optional DNS prefix and '/', then at most 63 letters, digits, "
            "'-', '_' or '.', starting and ending with a letter or digit, e.g. tkf.io/pool); the API server "
            "would refuse it")


def label_value_problem(value: str) -> str | None:
    """A label (or taint) value: empty, or at most 63 letters, digits, '-', '_', '.' around alphanumerics."""
    if value == "" or (len(value) <= LABEL_NAME_MAX and _LABEL_NAME_RE.fullmatch(value)):
        return None
    return (f"{value!r} is not a valid value (empty, or at most 63 letters, digits, '-', '_' or '.', starting "
            "and ending with a letter or digit); the API server would refuse it")


def env_name_problem(value: str) -> str | None:
    """An environment variable name shells and `os.environ/NAME` references can carry (a C identifier)."""
    if C_IDENTIFIER_RE.fullmatch(value):
        return None
    return (f"{value!r} is not an environment variable name (letters, digits and '_', not starting with a "
            f"digit); use e.g. {re.sub(r'[^A-Za-z0-9_]', '_', value).upper().lstrip('0123456789') or 'MY_KEY'!r}")
