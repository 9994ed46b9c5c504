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

from pydantic import BaseModel, ConfigDict

#: CUDA-reported total of an H100 80GB as printed by vLLM 0.19 ("Free memory on device (78.68/79.19 GiB)").
H100_80GB_REPORTED_GIB = 79.19
_REPORTED_RATIO = H100_80GB_REPORTED_GIB / 80.0


class GpuSpec(BaseModel):
    """One GPU model. ``memory_gib`` is the total vLLM sees per device."""

    model_config = ConfigDict(frozen=True)

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

    def with_memory(self, memory_gib: float, source: str) -> GpuSpec:
        """Copy with a measured/overridden total (node pool ``gpuMemoryGiB``)."""
        return self.model_copy(update={"memory_gib": memory_gib, "memory_source": source})


def _gpu(name: str, memory_gib: float, nominal_gib: float, cc: str, labels: tuple[str, ...],
         aliases: tuple[str, ...] = (), source: str | None = None) -> GpuSpec:
    extra = {"memory_source": source} if source else {}
    return GpuSpec(name=name, memory_gib=memory_gib, nominal_gib=nominal_gib, compute_capability=cc,
                   product_labels=labels, aliases=aliases, **extra)


def _est(nominal: float) -> float:
    return round(nominal * _REPORTED_RATIO, 2)


# Product labels follow the GPU Operator's feature discovery: the CUDA device name with spaces
# replaced by dashes (``nvidia.com/gpu.product``).
GPUS: tuple[GpuSpec, ...] = (
    _gpu("H100-80GB", H100_80GB_REPORTED_GIB, 80, "9.0",
            ("NVIDIA-H100-80GB-HBM3",), ("H100", "H100-SXM", "H100-80GB-SXM", "H100-80GB-HBM3"),
            "measured: 79.19 GiB printed by vLLM 0.19 on H100 80GB (calibration cases)"),
    _gpu("H100-PCIe", _est(80), 80, "9.0", ("NVIDIA-H100-PCIe",), ("H100-80GB-PCIe", "H100-PCIE")),
    _gpu("H100-NVL", _est(94), 94, "9.0", ("NVIDIA-H100-NVL",), ("H100-94GB",)),
    _gpu("H200", _est(141), 141, "9.0", ("NVIDIA-H200",), ("H200-141GB",)),
    _gpu("B200", _est(180), 180, "10.0", ("NVIDIA-B200",), ("B200-180GB",)),
    _gpu("A100-80GB", _est(80), 80, "8.0",
            ("NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-80GB-PCIe"), ("A100-80GB-SXM", "A100-80GB-PCIE")),
    _gpu("A100-40GB", _est(40), 40, "8.0",
            ("NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-PCIE-40GB"), ("A100", "A100-40GB-SXM", "A100-40GB-PCIE")),
    _gpu("L40S", _est(48), 48, "8.9", ("NVIDIA-L40S",), ("L40S-48GB",)),
    _gpu("L4", _est(24), 24, "8.9", ("NVIDIA-L4",), ("L4-24GB",)),
    _gpu("A10G", _est(24), 24, "8.6", ("NVIDIA-A10G",), ("A10G-24GB",)),
    _gpu("A10", _est(24), 24, "8.6", ("NVIDIA-A10",), ("A10-24GB",)),
    _gpu("T4", _est(16), 16, "7.5", ("Tesla-T4",), ("T4-16GB", "NVIDIA-T4")),
    _gpu("RTX-4090", _est(24), 24, "8.9", ("NVIDIA-GeForce-RTX-4090",), ("RTX4090", "4090")),
    _gpu("RTX-6000-Ada", _est(48), 48, "8.9",
            ("NVIDIA-RTX-6000-Ada-Generation",), ("RTX6000-ADA", "RTX-6000-ADA-48GB")),
)  # fmt: skip


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


_INDEX: dict[str, GpuSpec] = {}
for _spec in GPUS:
    for _n in (_spec.name, *_spec.product_labels, *_spec.aliases):
        _INDEX.setdefault(_norm(_n), _spec)


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


def find_gpu(name: str) -> GpuSpec | None:
    """`lookup_gpu` for callers that handle an unknown part themselves."""
    return _INDEX.get(_norm(name))


def product_label(gpu: GpuSpec, given: str = "") -> str | None:
    """The ``nvidia.com/gpu.product`` value GPU feature discovery puts on nodes with this GPU.

    `given` (the pool's gpuProduct) picks among several labels (A100: SXM4 / PCIe); None when it
    cannot, so the caller selects the nodes another way or asks for the exact label.
    """
    exact = [lbl for lbl in gpu.product_labels if _norm(lbl) == _norm(given)]
    if exact:
        return exact[0]
    if len(gpu.product_labels) == 1:
        return gpu.product_labels[0]
    return None
