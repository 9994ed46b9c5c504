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
_BARE_RE = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
#: The most CPU cores a node's figure plausibly is when written bare; past it the figure was almost surely
#: meant in millicores (`191450` for `191450m`, as `kubectl get node` prints allocatable CPU).
MAX_BARE_CORES = 4096
#: What a node's memory or storage plausibly is: 1 GiB to 64 TiB. A bare number is read in bytes; the likely
#: unit is the first of these that puts it in that range.
_PLAUSIBLE_BYTES = (GIB, 64 * 2**40)
_LIKELY_UNITS = (("Gi", GIB), ("Mi", MIB), ("Ki", 2**10))


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


def unit_problem(value: object, base: str) -> str | None:
    """Why a quantity written without a unit is not what was meant, naming the likely unit; None when it has one
    (or, for ``base`` "cores", when a bare number of cores is plausible).

    Kubernetes reads a bare number in the base unit: bytes for memory and storage, cores for CPU. A node's
    memory written `2000` is then 2000 bytes, and every model on the pool is refused for a reason that never
    names the setting; so a bare byte count is refused here, and a bare CPU figure past `MAX_BARE_CORES`."""
    if isinstance(value, bool) or not (isinstance(value, int | float) or _BARE_RE.fullmatch(str(value).strip())):
        return None
    number = parse_quantity(value)
    if isinstance(value, float) and value.is_integer():  # YAML's 2000, once a `str | float` field has it
        value = int(value)
    if base == "cores":
        if number <= MAX_BARE_CORES:
            return None
        return (f"{value!r} has no unit, so it is read as {number.normalize():f} CPU cores; millicores take an m: "
                f"{value}m ({number / 1000:g} cores)")
    low, high = _PLAUSIBLE_BYTES
    likely = next((f"{value}{unit}" for unit, size in _LIKELY_UNITS if low <= number * size <= high),
                  f"{float(number) / GIB:.0f}Gi")
    return (f"{value!r} has no unit, so it is read as {number.normalize():f} bytes; write the unit, e.g. {likely} "
            "(Ki, Mi, Gi, Ti: powers of 1024)")


def gib_number(value: object) -> object:
    """A field whose name says GiB (`gpuMemoryGiB`, `weightCacheBudgetGiB`, `cpuKvCacheGiB`) takes a bare number;
    a quantity with a unit (`80Gi`, `80G`) is refused naming the number to write. Anything else is left to the
    field's own type check. For a pydantic `mode="before"` validator."""
    if not isinstance(value, str) or _BARE_RE.fullmatch(value.strip()):
        return value
    try:
        gib = parse_quantity(value) / GIB
    except ValueError:
        return value
    raise ValueError(f"{value!r} is a quantity with a unit, but this setting is a number of GiB (powers of 1024): "
                     f"write {gib.normalize():f}" + ("" if value.strip().endswith("Gi") else
                                                     f" ({value} is {gib:.4g} GiB)"))
