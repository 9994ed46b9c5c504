"""One GPU model's record and how an unmeasured part's CUDA total is derived (the table: `gpu_table`).

Split from `tkf_infra.sizing.gpus` so the table module (`gpu_table`) and the naming functions
(`gpus`) both import `GpuSpec` without a cycle; import it from `tkf_infra.sizing.gpus` as before.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

Interconnect = Literal["nvlink", "pcie"]

#: Gap between nominal size and CUDA's total on the parts we measured, rounded up: H100 80GB
#: 80 -> 79.19 (0.81), A100 40GB 40 -> 39.39 (0.61), RTX 3090 24 -> 23.56, RTX 4070 Laptop 8 -> 7.65.
DERIVATION_MIN_GAP_GIB = 0.8
DERIVATION_GAP_FRACTION = 0.02
#: Data-centre GDDR parts ship with ECC on, which reserves 1/16 of the memory (T4 16 GB -> 15 GiB).
ECC_GDDR_FRACTION = 15 / 16
#: CUDA's total sits below NVML's (nvidia-smi) by 0.35-0.46 GiB on the parts where we saw both.
NVML_TO_CUDA_GAP_GIB = 0.65


def derive_total_gib(nominal_gb: float, ecc_gddr: bool = False, nvml_gib: float | None = None) -> float:
    """The conservative CUDA total of a part no source shows: below every measured part's figure."""
    if nvml_gib is not None:
        return round(nvml_gib - NVML_TO_CUDA_GAP_GIB, 2)
    usable = nominal_gb * (ECC_GDDR_FRACTION if ecc_gddr else 1.0)
    return round(usable - max(DERIVATION_MIN_GAP_GIB, DERIVATION_GAP_FRACTION * nominal_gb), 2)


class GpuSpec(BaseModel):
    """One GPU model. ``memory_gib`` is the total vLLM sees per device."""

    model_config = ConfigDict(frozen=True)

    name: str
    memory_gib: float
    nominal_gib: float
    compute_capability: str
    product_labels: tuple[str, ...]
    aliases: tuple[str, ...] = ()
    cuda_name: str = ""
    interconnect: Interconnect = "pcie"
    """How the GPUs of one node talk at TP > 1: SXM/NVL boards NVLink, PCIe and consumer parts PCIe."""
    memory_measured: bool = False
    memory_source: str = "derived"
    ecc_gddr: bool = False
    """A data-centre GDDR part that ships with ECC on (1/16 of the memory reserved)."""
    unified_memory: bool = False
    """CPU and GPU share one memory (GB10): vLLM reads free memory from the OS, not from CUDA."""
    shared: bool = False
    """Time-sliced with other pods: another engine may allocate while this one profiles."""

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * 2**30)

    @property
    def cc(self) -> tuple[int, int]:
        major, _, minor = self.compute_capability.partition(".")
        return int(major), int(minor or 0)

    def with_memory(self, memory_gib: float, source: str) -> GpuSpec:
        """Copy with a measured/overridden total (node pool ``gpuMemoryGiB``)."""
        if not memory_gib > 0:  # model_copy does not validate; a zero total would divide by zero later
            raise ValueError(f"GPU memory total must be above 0 GiB, got {memory_gib!r} ({source})")
        return self.model_copy(update={"memory_gib": memory_gib, "memory_source": source, "memory_measured": True})

    def with_interconnect(self, interconnect: Interconnect) -> GpuSpec:
        return self.model_copy(update={"interconnect": interconnect})
