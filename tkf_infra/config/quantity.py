"""Kubernetes resource quantities ("192", "191450m", "2048Gi", "1.5T") as plain numbers.

Why our own parser: node allocatable, quota and CSIStorageCapacity figures arrive as quantity
strings, and the stack's `nodeResources` / budget settings are written the same way; the rules are
those of k8s.io/apimachinery/pkg/api/resource (binary suffixes Ki..Ei, decimal n u m k M G T P E,
and exponents like 1e3), enough for every figure a node or a quota reports.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_SUFFIX = {
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1), "k": Decimal("1e3"),
    "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"), "P": Decimal("1e15"), "E": Decimal("1e18"),
}
_QUANTITY_RE = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))((?:[eE][+-]?\d+)|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?")
GIB = 2**30
MIB = 2**20


def parse_quantity(value: object) -> Decimal:
    """A quantity as a Decimal of base units (cores, bytes); ValueError naming the value otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    if isinstance(value, int | float):
        return Decimal(str(value))
    text = str(value).strip()
    match = _QUANTITY_RE.fullmatch(text)
    if not match:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (write it like 192, 191450m, 2048Gi or 3.5Ti)")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        base = Decimal(number)
    except InvalidOperation:
        raise ValueError(f"{value!r} is not a Kubernetes quantity") from None
    if suffix[:1] in ("e", "E"):
        return base * (Decimal(10) ** int(suffix[1:]))
    return base * _SUFFIX[suffix]


def millicores(value: object) -> int:
    return int(parse_quantity(value) * 1000)


def mebibytes(value: object) -> int:
    """Whole MiB, rounded down (what a node gives is never overstated)."""
    return int(parse_quantity(value) / MIB)


def gib_text(mib: float) -> str:
    return f"{mib / 1024:.1f} GiB"


def cpu_text(millis: float) -> str:
    return f"{millis / 1000:g} CPU" if millis % 1000 == 0 else f"{millis / 1000:.2f} CPU"
