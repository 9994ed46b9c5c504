"""GPU table: memory as vLLM sees it, compute capability, and the names clusters use for each part.

vLLM budgets from ``cudaMemGetInfo`` total memory, which is below the marketing figure (driver
and ECC reservations). Only one part has a figure measured by us from real start-up logs: the H100
80GB, 79.19 GiB (``gpu_total_memory_gib_printed`` in the calibration cases, copied to
``tests/data/calibration``). For every other part the usable total is *estimated* by scaling the
nominal size with the same measured ratio (79.19 / 80), and the entry says so; a node pool can
override it with ``gpuMemoryGiB`` once a real ``nvidia-smi`` / vLLM log figure is known.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: CUDA-reported total of an H100 80GB as printed by vLLM 0.19 ("Free memory on device (78.68/79.19 GiB)").
H100_80GB_REPORTED_GIB = 79.19
_REPORTED_RATIO = H100_80GB_REPORTED_GIB / 80.0


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model. ``memory_gib`` is the total vLLM sees per device."""

    name: str
    memory_gib: float
    nominal_gib: float
    compute_capability: str
    product_labels: tuple[str, ...]
    aliases: tuple[str, ...] = ()
    memory_source: str = "estimated: nominal size x 79.19/80 (ratio measured on H100 80GB, vLLM 0.19)"

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * 2**30)

    @property
    def large_defaults(self) -> bool:
        """vLLM picks 8192 batched tokens / 1024 sequences on >=70 GiB parts except A100."""
        return self.memory_gib >= 70 and not self.name.startswith("A100")

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "memory_gib": self.memory_gib,
            "nominal_gib": self.nominal_gib,
            "compute_capability": self.compute_capability,
            "product_labels": list(self.product_labels),
            "memory_source": self.memory_source,
        }

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> GpuSpec:
        labels = data.get("product_labels") or ()
        return cls(
            name=str(data["name"]),
            memory_gib=float(str(data["memory_gib"])),
            nominal_gib=float(str(data.get("nominal_gib", data["memory_gib"]))),
            compute_capability=str(data.get("compute_capability", "")),
            product_labels=tuple(str(x) for x in labels) if isinstance(labels, list | tuple) else (),
            memory_source=str(data.get("memory_source", "")),
        )

    def with_memory(self, memory_gib: float, source: str) -> GpuSpec:
        """Copy with a measured/overridden total (node pool ``gpuMemoryGiB``)."""
        return GpuSpec(self.name, memory_gib, self.nominal_gib, self.compute_capability,
                       self.product_labels, self.aliases, source)  # fmt: skip


def _est(nominal: float) -> float:
    return round(nominal * _REPORTED_RATIO, 2)


# Product labels follow the GPU Operator's feature discovery: the CUDA device name with spaces
# replaced by dashes (``nvidia.com/gpu.product``).
GPUS: tuple[GpuSpec, ...] = (
    GpuSpec("H100-80GB", H100_80GB_REPORTED_GIB, 80, "9.0",
            ("NVIDIA-H100-80GB-HBM3",), ("H100", "H100-SXM", "H100-80GB-SXM", "H100-80GB-HBM3"),
            "measured: 79.19 GiB printed by vLLM 0.19 on H100 80GB (calibration cases)"),
    GpuSpec("H100-PCIe", _est(80), 80, "9.0", ("NVIDIA-H100-PCIe",), ("H100-80GB-PCIe", "H100-PCIE")),
    GpuSpec("H100-NVL", _est(94), 94, "9.0", ("NVIDIA-H100-NVL",), ("H100-94GB",)),
    GpuSpec("H200", _est(141), 141, "9.0", ("NVIDIA-H200",), ("H200-141GB",)),
    GpuSpec("B200", _est(180), 180, "10.0", ("NVIDIA-B200",), ("B200-180GB",)),
    GpuSpec("A100-80GB", _est(80), 80, "8.0",
            ("NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-80GB-PCIe"), ("A100-80GB-SXM", "A100-80GB-PCIE")),
    GpuSpec("A100-40GB", _est(40), 40, "8.0",
            ("NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-PCIE-40GB"), ("A100", "A100-40GB-SXM", "A100-40GB-PCIE")),
    GpuSpec("L40S", _est(48), 48, "8.9", ("NVIDIA-L40S",), ("L40S-48GB",)),
    GpuSpec("L4", _est(24), 24, "8.9", ("NVIDIA-L4",), ("L4-24GB",)),
    GpuSpec("A10G", _est(24), 24, "8.6", ("NVIDIA-A10G",), ("A10G-24GB",)),
    GpuSpec("A10", _est(24), 24, "8.6", ("NVIDIA-A10",), ("A10-24GB",)),
    GpuSpec("T4", _est(16), 16, "7.5", ("Tesla-T4",), ("T4-16GB", "NVIDIA-T4")),
    GpuSpec("RTX-4090", _est(24), 24, "8.9", ("NVIDIA-GeForce-RTX-4090",), ("RTX4090", "4090")),
    GpuSpec("RTX-6000-Ada", _est(48), 48, "8.9",
            ("NVIDIA-RTX-6000-Ada-Generation",), ("RTX6000-ADA", "RTX-6000-ADA-48GB")),
)  # fmt: skip


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


_INDEX: dict[str, GpuSpec] = {}
for _gpu in GPUS:
    for _n in (_gpu.name, *_gpu.product_labels, *_gpu.aliases):
        _INDEX.setdefault(_norm(_n), _gpu)


def known_gpu_names() -> list[str]:
    return [g.name for g in GPUS]


def lookup_gpu(name: str) -> GpuSpec:
    """Resolve our short name (``H100-80GB``) or a GPU Operator label (``NVIDIA-H100-80GB-HBM3``).

    Raises ``KeyError`` with the allowed names, because a typo here silently sizing against the
    wrong card would be worse than failing.
    """
    gpu = _INDEX.get(_norm(name))
    if gpu is None:
        allowed = ", ".join(known_gpu_names())
        raise KeyError(
            f"unknown GPU {name!r}: use one of {allowed} or a GPU Operator product label such as "
            "NVIDIA-H100-80GB-HBM3 (add the part to tkf_infra/sizing/gpus.py if it is missing)"
        )
    return gpu
