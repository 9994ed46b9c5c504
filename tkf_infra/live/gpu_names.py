"""GPU product names as DCGM, the GPU Operator and stack files spell them, reduced to one identity.

Why a module of its own: DCGM says "NVIDIA H100 80GB HBM3", the GPU Operator's node label says
"NVIDIA-H100-80GB-HBM3-SHARED" under time-slicing, and a stack file says "H100-80GB". Pool checks
must see these as one part, yet tell an H100 NVL (94 GB) from an H100 SXM (80 GB). The GPU table
(tkf_infra.sizing.gpus) decides which parts are distinct; the token fallback covers parts it lacks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tkf_infra.sizing.gpus import lookup_gpu

# Tokens that do not distinguish one GPU model from another for sizing purposes (fallback only).
# fmt: off
_NOISE_TOKENS = frozenset({
    "NVIDIA", "TESLA", "GEFORCE", "SHARED", "GENERATION", "SXM", "SXM2", "SXM4", "SXM5", "PCIE",
    "HBM2", "HBM2E", "HBM3", "HBM3E", "GDDR6", "GDDR6X",
})
# fmt: on
_MEMORY_TOKEN = re.compile(r"^(\d+)GB?$")


@dataclass(frozen=True)
class ProductKey:
    """A GPU product reduced to what identifies it: model tokens plus memory size when stated."""

    model: tuple[str, ...]
    memory_gb: int | None

    def short_name(self) -> str:
        """The stack-file spelling, e.g. ("H100",), 80 -> "H100-80GB"."""
        base = "-".join(self.model)
        return f"{base}-{self.memory_gb}GB" if self.memory_gb is not None else base


def normalise_product(name: str) -> ProductKey:
    """Fallback for parts missing from the GPU table: reduce any spelling to model tokens + size.

    "NVIDIA H100 80GB HBM3" (DCGM), "NVIDIA-H100-80GB-HBM3-SHARED" (GPU Operator with time-slicing)
    and "H100-80GB" (stack file) all become (("H100",), 80). A MIG suffix ("-MIG-1g.10gb") is dropped
    because DCGM reports the parent GPU's name.
    """
    tokens = [t for t in re.split(r"[\s_\-]+", name.strip().upper()) if t]
    if "MIG" in tokens:
        tokens = tokens[: tokens.index("MIG")]
    model: list[str] = []
    memory: int | None = None
    for token in tokens:
        mem = _MEMORY_TOKEN.match(token)
        if mem:
            memory = int(mem.group(1))
        elif token not in _NOISE_TOKENS:
            model.append(token)
    return ProductKey(model=tuple(model), memory_gb=memory)


_CLUSTER_SUFFIX = re.compile(r"([\s_-]+MIG[\s_-].*|[\s_-]+SHARED)$", re.IGNORECASE)


def table_gpu_name(name: str) -> str | None:
    """The GPU table's name for any spelling of a part it knows, else None.

    The table (tkf_infra.sizing.gpus) is the authority for which parts are distinct, so the same
    names appear in fit verdicts and here. Time-slicing ("-SHARED") and MIG ("-MIG-1g.10gb")
    suffixes of GPU Operator labels are removed first: they describe sharing, not the part.
    """
    try:
        return lookup_gpu(_CLUSTER_SUFFIX.sub("", name.strip())).name
    except KeyError:
        return None


def stack_product_name(reported: str) -> str:
    """How to write a reported product in the stack file: the table name, else a short spelling."""
    return table_gpu_name(reported) or normalise_product(reported).short_name()


def products_match(configured: str, reported: str) -> bool:
    """True when both names denote the same GPU.

    Parts in the GPU table are compared by table entry, so "H100-80GB" matches DCGM's "NVIDIA H100
    80GB HBM3" but not "NVIDIA H100 PCIe" or "NVIDIA H100 NVL", which the table sizes separately.
    For parts the table lacks, model tokens must agree and memory sizes too when both name one.
    """
    a, b = table_gpu_name(configured), table_gpu_name(reported)
    if a is not None and b is not None:
        return a == b
    ka, kb = normalise_product(configured), normalise_product(reported)
    if not ka.model or ka.model != kb.model:
        return False
    return ka.memory_gb is None or kb.memory_gb is None or ka.memory_gb == kb.memory_gb
