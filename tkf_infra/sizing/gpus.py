"""Every NVIDIA GPU a user may own, Volta to Blackwell: its memory as CUDA reports it, and its names.

vLLM budgets from the total `cudaMemGetInfo` reports, which is below the marketing size (driver
reservations, and on data-centre GDDR parts the ECC carve-out of 1/16). Where a public start-up log
or `nvidia-smi` output shows the figure, the entry cites it (`memory_measured`). Elsewhere the
figure is *derived conservatively* (`derive_total_gib`, documented in docs/sizing.md): it is never
above what CUDA reports on the real part, so an unmeasured GPU can only make the check stricter.
A node pool overrides the figure with `gpuMemoryGiB` once its own logs show it.

Names: our short name (the stack file), the CUDA device name (`torch.cuda.get_device_name`, what
DCGM calls `modelName`), the GPU Operator's `nvidia.com/gpu.product` label (the CUDA name with spaces
replaced by dashes) and the aliases users write. All GPU naming lives here; `find_gpu` / `same_gpu`
are what the rest of the product (and the live fleet checks) compare names with.
"""

from __future__ import annotations

import re
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


def _g(name: str, cuda_name: str, nominal: float, cc: str, link: Interconnect, *, mem: float | None = None,
       src: str = "", aliases: tuple[str, ...] = (), ecc: bool = False, nvml: float | None = None,
       labels: tuple[str, ...] = (), unified: bool = False, twin: bool = False) -> GpuSpec:
    if twin:  # shares its CUDA name (and label) with a smaller sibling, which that spelling resolves to
        _TWINS.add(name)
    if mem is None:
        basis = f"NVML total {nvml} GiB ({src})" if nvml else f"nominal {nominal:g} GB" + (", ECC on" if ecc else "")
        memory, source, measured = derive_total_gib(nominal, ecc, nvml), f"derived from {basis}", False
    else:
        memory, source, measured = mem, f"measured: {src}", True
    return GpuSpec(name=name, memory_gib=memory, nominal_gib=nominal, compute_capability=cc,
                   product_labels=(cuda_name.replace(" ", "-"), *labels), aliases=aliases, cuda_name=cuda_name,
                   interconnect=link,
                   memory_measured=measured, memory_source=source, unified_memory=unified, ecc_gddr=ecc)


_TWINS: set[str] = set()
_PR205 = "vLLM 0.19 'Free memory on device (78.68/79.19 GiB)', llm-d-incubation/llm-d-planner PR 205 logs"
# Sources of measured totals (vLLM prints total_gpu_memory / 'Free memory on device (free/total GiB)').
_SRC = {
    "3090": "vLLM 'total_gpu_memory (23.56GiB)', vllm-project/vllm#17327 (device_name=NVIDIA_GeForce_RTX_3090)",
    "4070L": "vLLM 'total_gpu_memory (7.65GiB)' on an RTX 4070 laptop GPU (calibration case blog-llama3.2-3b-q8-"
             "gguf-rtx4070-8gb-10k-eager)",
    "2060": "vLLM 'total_gpu_memory (12.00GiB)', Q07K/langgraph-mcp-example README @4ef5c829",
    "L40S": "vLLM 'total_gpu_memory (44.31GiB)' next to device_name=NVIDIA_L40S (code-index document 57044493590)",
    "PRO6000": "nvitop '86.54GiB / 95.59GiB' on the RTX PRO 6000 Blackwell Workstation Edition (calibration case "
               "vlmbench-lightonocr-2-1b-rtxpro6000-ws-v0.15.1-16k)",
    "L4": "nvidia-smi '23034MiB' on g6.2xlarge (calibration case triton-l4-qwen2.5-1.5b-util0.7-2k)",
    "4090": "nvidia-smi '24564MiB', vllm-project/vllm#7553",
    "GB10": "'CUDA free caps at ~102/121.69 GiB' on DGX Spark (GB10), MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks#47",
}

# fmt: off
GPUS: tuple[GpuSpec, ...] = (
    # --- Hopper (9.0) ---
    _g("H100-80GB", "NVIDIA H100 80GB HBM3", 80, "9.0", "nvlink", mem=79.19, src=_PR205,
       aliases=("H100", "H100-SXM", "H100-SXM5", "H100-80GB-SXM", "H100-80GB-HBM3", "H100 SXM5 80GB")),
    _g("H100-PCIe", "NVIDIA H100 PCIe", 80, "9.0", "pcie", aliases=("H100-80GB-PCIe", "H100 PCIe 80GB")),
    _g("H100-NVL", "NVIDIA H100 NVL", 94, "9.0", "nvlink", aliases=("H100-94GB", "H100 NVL 94GB")),
    _g("H800", "NVIDIA H800", 80, "9.0", "nvlink", aliases=("H800-80GB",)),
    _g("H800-PCIe", "NVIDIA H800 PCIe", 80, "9.0", "pcie", aliases=("H800 PCIe 80GB",)),
    _g("H200", "NVIDIA H200", 141, "9.0", "nvlink", aliases=("H200-141GB", "H200-SXM", "H200 SXM 141GB")),
    _g("H200-NVL", "NVIDIA H200 NVL", 141, "9.0", "nvlink", aliases=("H200 NVL 141GB",)),
    _g("H20", "NVIDIA H20", 96, "9.0", "nvlink", aliases=("H20-96GB",)),
    _g("H20-141GB", "NVIDIA H20", 141, "9.0", "nvlink", twin=True, aliases=("H20 141GB", "H20 141GB HBM3e")),
    # CUDA names the 96 GB HBM3 part after its 480 GB of LPDDR5X.
    _g("GH200-480GB", "NVIDIA GH200 480GB", 96, "9.0", "nvlink", aliases=("GH200", "GH200-96GB", "GH200 96GB HBM3")),
    _g("GH200-144GB", "NVIDIA GH200 144G HBM3e", 144, "9.0", "nvlink", aliases=("GH200-144G", "GH200 144GB")),
    # --- Blackwell data centre (10.x) and GB10 (12.1) ---
    _g("B200", "NVIDIA B200", 180, "10.0", "nvlink", aliases=("B200-180GB", "B200 SXM 180GB")),
    _g("GB200", "NVIDIA GB200", 186, "10.0", "nvlink", aliases=("GB200-186GB", "GB200 NVL72")),
    _g("B300", "NVIDIA B300 SXM6 AC", 288, "10.3", "nvlink", aliases=("B300-288GB", "B300")),
    _g("GB300", "NVIDIA GB300", 288, "10.3", "nvlink", aliases=("GB300-288GB",)),
    _g("GB10", "NVIDIA GB10", 128, "12.1", "pcie", unified=True, mem=121.69, src=_SRC["GB10"],
       aliases=("DGX-Spark", "DGX Spark", "GB10 128GB", "ASUS Ascent GX10")),
    # --- Ampere data centre (8.0 / 8.6) ---
    # One entry per size for both boards (SXM4 on NVLink, PCIe): the GPU Operator labels differ, the
    # memory does not. Sized as the SXM4 board (NVLink's larger non-torch); a PCIe pool may set
    # interconnect: pcie. The total is derived, not the SXM4's measured 39.39 GiB: no PCIe log shows it.
    _g("A100-40GB", "NVIDIA A100-SXM4-40GB", 40, "8.0", "nvlink", labels=("NVIDIA-A100-PCIE-40GB",),
       aliases=("A100", "A100 40GB", "A100-40GB-SXM", "A100-40GB-SXM4", "A100-40GB-PCIe", "NVIDIA A100-PCIE-40GB")),
    _g("A100-80GB", "NVIDIA A100-SXM4-80GB", 80, "8.0", "nvlink", labels=("NVIDIA-A100-80GB-PCIe",),
       aliases=("A100 80GB", "A100-80GB-SXM", "A100-80GB-SXM4", "A100-80GB-PCIe", "NVIDIA A100 80GB PCIe")),
    _g("A800-80GB", "NVIDIA A800-SXM4-80GB", 80, "8.0", "nvlink", aliases=("A800", "A800 80GB")),
    _g("A30", "NVIDIA A30", 24, "8.0", "pcie", aliases=("A30-24GB",)),
    _g("A40", "NVIDIA A40", 48, "8.6", "pcie", ecc=True, aliases=("A40-48GB",)),
    _g("A10", "NVIDIA A10", 24, "8.6", "pcie", ecc=True, aliases=("A10-24GB",)),
    _g("A10G", "NVIDIA A10G", 24, "8.6", "pcie", ecc=True, aliases=("A10G-24GB",)),
    _g("A16", "NVIDIA A16", 16, "8.6", "pcie", ecc=True, aliases=("A16-16GB",)),
    _g("A2", "NVIDIA A2", 16, "8.6", "pcie", ecc=True, aliases=("A2-16GB",)),
    # --- Ada data centre and workstation (8.9) ---
    _g("L4", "NVIDIA L4", 24, "8.9", "pcie", ecc=True, nvml=22.49, src=_SRC["L4"], aliases=("L4-24GB",)),
    _g("L40S", "NVIDIA L40S", 48, "8.9", "pcie", ecc=True, mem=44.31, src=_SRC["L40S"], aliases=("L40S-48GB",)),
    _g("L40", "NVIDIA L40", 48, "8.9", "pcie", ecc=True, aliases=("L40-48GB",)),
    _g("L20", "NVIDIA L20", 48, "8.9", "pcie", ecc=True, aliases=("L20-48GB",)),
    _g("RTX-6000-Ada", "NVIDIA RTX 6000 Ada Generation", 48, "8.9", "pcie",
       aliases=("RTX6000-ADA", "RTX-6000-ADA-48GB", "RTX 6000 Ada")),
    _g("RTX-5000-Ada", "NVIDIA RTX 5000 Ada Generation", 32, "8.9", "pcie", aliases=("RTX 5000 Ada",)),
    _g("RTX-4500-Ada", "NVIDIA RTX 4500 Ada Generation", 24, "8.9", "pcie", aliases=("RTX 4500 Ada",)),
    _g("RTX-4000-Ada", "NVIDIA RTX 4000 Ada Generation", 20, "8.9", "pcie", aliases=("RTX 4000 Ada",)),
    _g("RTX-2000-Ada", "NVIDIA RTX 2000 Ada Generation", 16, "8.9", "pcie", aliases=("RTX 2000 Ada",)),
    _g("RTX-A6000", "NVIDIA RTX A6000", 48, "8.6", "pcie", aliases=("A6000", "RTX A6000 48GB")),
    _g("RTX-A5000", "NVIDIA RTX A5000", 24, "8.6", "pcie", aliases=("A5000",)),
    _g("RTX-A4500", "NVIDIA RTX A4500", 20, "8.6", "pcie", aliases=("A4500",)),
    _g("RTX-A4000", "NVIDIA RTX A4000", 16, "8.6", "pcie", aliases=("A4000",)),
    _g("RTX-A2000-12GB", "NVIDIA RTX A2000 12GB", 12, "8.6", "pcie", aliases=("A2000 12GB",)),
    _g("RTX-A2000", "NVIDIA RTX A2000", 6, "8.6", "pcie", aliases=("A2000", "RTX A2000 6GB")),
    _g("RTX-A1000", "NVIDIA RTX A1000", 8, "8.6", "pcie", aliases=("A1000",)),
    # --- Blackwell workstation (12.0) ---
    _g("RTX-PRO-6000", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 96, "12.0", "pcie",
       nvml=95.59, src=_SRC["PRO6000"], aliases=("RTX PRO 6000", "RTX-PRO-6000-Blackwell", "RTX PRO 6000 96GB",
                                                  "RTX PRO 6000 Blackwell Workstation Edition 96GB")),
    _g("RTX-PRO-6000-Server", "NVIDIA RTX PRO 6000 Blackwell Server Edition", 96, "12.0", "pcie",
       aliases=("RTX PRO 6000 Server",)),
    _g("RTX-PRO-6000-Max-Q", "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", 96, "12.0", "pcie",
       aliases=("RTX PRO 6000 Max-Q",)),
    _g("RTX-PRO-5000", "NVIDIA RTX PRO 5000 Blackwell", 48, "12.0", "pcie", aliases=("RTX PRO 5000",)),
    _g("RTX-PRO-4500", "NVIDIA RTX PRO 4500 Blackwell", 32, "12.0", "pcie", aliases=("RTX PRO 4500",)),
    _g("RTX-PRO-4000", "NVIDIA RTX PRO 4000 Blackwell", 24, "12.0", "pcie", aliases=("RTX PRO 4000",)),
    # --- GeForce Blackwell (12.0) ---
    _g("RTX-5090", "NVIDIA GeForce RTX 5090", 32, "12.0", "pcie", aliases=("RTX5090", "5090", "RTX 5090 32GB")),
    _g("RTX-5080", "NVIDIA GeForce RTX 5080", 16, "12.0", "pcie", aliases=("RTX5080", "5080")),
    _g("RTX-5070-Ti", "NVIDIA GeForce RTX 5070 Ti", 16, "12.0", "pcie", aliases=("RTX5070TI", "5070 Ti")),
    _g("RTX-5070", "NVIDIA GeForce RTX 5070", 12, "12.0", "pcie", aliases=("RTX5070", "5070")),
    _g("RTX-5060-Ti-16GB", "NVIDIA GeForce RTX 5060 Ti", 16, "12.0", "pcie", twin=True, aliases=("RTX 5060 Ti 16GB",)),
    _g("RTX-5060-Ti-8GB", "NVIDIA GeForce RTX 5060 Ti", 8, "12.0", "pcie", aliases=("RTX 5060 Ti 8GB", "5060 Ti")),
    _g("RTX-5060", "NVIDIA GeForce RTX 5060", 8, "12.0", "pcie", aliases=("RTX5060", "5060")),
    _g("RTX-5090-Laptop", "NVIDIA GeForce RTX 5090 Laptop GPU", 24, "12.0", "pcie", aliases=("RTX 5090 Laptop",)),
    _g("RTX-5080-Laptop", "NVIDIA GeForce RTX 5080 Laptop GPU", 16, "12.0", "pcie", aliases=("RTX 5080 Laptop",)),
    # --- GeForce Ada (8.9) ---
    _g("RTX-4090", "NVIDIA GeForce RTX 4090", 24, "8.9", "pcie", nvml=23.99, src=_SRC["4090"],
       aliases=("RTX4090", "4090", "RTX 4090 24GB")),
    _g("RTX-4090-D", "NVIDIA GeForce RTX 4090 D", 24, "8.9", "pcie", aliases=("RTX 4090D", "4090 D")),
    _g("RTX-4080-Super", "NVIDIA GeForce RTX 4080 SUPER", 16, "8.9", "pcie", aliases=("RTX 4080 Super",)),
    _g("RTX-4080", "NVIDIA GeForce RTX 4080", 16, "8.9", "pcie", aliases=("RTX4080", "4080")),
    _g("RTX-4070-Ti-Super", "NVIDIA GeForce RTX 4070 Ti SUPER", 16, "8.9", "pcie", aliases=("RTX 4070 Ti Super",)),
    _g("RTX-4070-Ti", "NVIDIA GeForce RTX 4070 Ti", 12, "8.9", "pcie", aliases=("RTX4070TI", "4070 Ti")),
    _g("RTX-4070-Super", "NVIDIA GeForce RTX 4070 SUPER", 12, "8.9", "pcie", aliases=("RTX 4070 Super",)),
    _g("RTX-4070", "NVIDIA GeForce RTX 4070", 12, "8.9", "pcie", aliases=("RTX4070", "4070", "RTX 4070 12GB")),
    _g("RTX-4060-Ti-16GB", "NVIDIA GeForce RTX 4060 Ti", 16, "8.9", "pcie", twin=True, aliases=("RTX 4060 Ti 16GB",)),
    _g("RTX-4060-Ti", "NVIDIA GeForce RTX 4060 Ti", 8, "8.9", "pcie", aliases=("RTX 4060 Ti 8GB", "4060 Ti")),
    _g("RTX-4060", "NVIDIA GeForce RTX 4060", 8, "8.9", "pcie", aliases=("RTX4060", "4060", "RTX 4060 8GB")),
    _g("RTX-4090-Laptop", "NVIDIA GeForce RTX 4090 Laptop GPU", 16, "8.9", "pcie", aliases=("RTX 4090 Laptop",)),
    _g("RTX-4080-Laptop", "NVIDIA GeForce RTX 4080 Laptop GPU", 12, "8.9", "pcie", aliases=("RTX 4080 Laptop",)),
    _g("RTX-4070-Laptop", "NVIDIA GeForce RTX 4070 Laptop GPU", 8, "8.9", "pcie", mem=7.65, src=_SRC["4070L"],
       aliases=("RTX 4070 Laptop", "RTX 4070 8GB")),
    _g("RTX-4060-Laptop", "NVIDIA GeForce RTX 4060 Laptop GPU", 8, "8.9", "pcie", aliases=("RTX 4060 Laptop",)),
    # --- GeForce Ampere (8.6) ---
    _g("RTX-3090-Ti", "NVIDIA GeForce RTX 3090 Ti", 24, "8.6", "pcie", aliases=("RTX 3090 Ti",)),
    _g("RTX-3090", "NVIDIA GeForce RTX 3090", 24, "8.6", "pcie", mem=23.56, src=_SRC["3090"],
       aliases=("RTX3090", "3090", "RTX 3090 24GB")),
    _g("RTX-3080-Ti", "NVIDIA GeForce RTX 3080 Ti", 12, "8.6", "pcie", aliases=("RTX 3080 Ti",)),
    _g("RTX-3080-12GB", "NVIDIA GeForce RTX 3080", 12, "8.6", "pcie", twin=True, aliases=("RTX 3080 12GB",)),
    _g("RTX-3080", "NVIDIA GeForce RTX 3080", 10, "8.6", "pcie", aliases=("RTX3080", "3080", "RTX 3080 10GB")),
    _g("RTX-3070-Ti", "NVIDIA GeForce RTX 3070 Ti", 8, "8.6", "pcie", aliases=("RTX 3070 Ti",)),
    _g("RTX-3070", "NVIDIA GeForce RTX 3070", 8, "8.6", "pcie", aliases=("RTX3070", "3070")),
    _g("RTX-3060-Ti", "NVIDIA GeForce RTX 3060 Ti", 8, "8.6", "pcie", aliases=("RTX 3060 Ti",)),
    _g("RTX-3060", "NVIDIA GeForce RTX 3060", 12, "8.6", "pcie", aliases=("RTX3060", "3060", "RTX 3060 12GB")),
    _g("RTX-3050", "NVIDIA GeForce RTX 3050", 8, "8.6", "pcie", aliases=("RTX3050", "3050", "RTX 3050 8GB")),
    _g("RTX-3080-Laptop-16GB", "NVIDIA GeForce RTX 3080 Laptop GPU", 16, "8.6", "pcie", twin=True,
       aliases=("RTX 3080 Laptop 16GB",)),
    _g("RTX-3080-Laptop", "NVIDIA GeForce RTX 3080 Laptop GPU", 8, "8.6", "pcie",
       aliases=("RTX 3080 Laptop", "RTX 3080 Laptop 8GB")),
    _g("RTX-3070-Laptop", "NVIDIA GeForce RTX 3070 Laptop GPU", 8, "8.6", "pcie", aliases=("RTX 3070 Laptop",)),
    _g("RTX-3060-Laptop", "NVIDIA GeForce RTX 3060 Laptop GPU", 6, "8.6", "pcie", aliases=("RTX 3060 Laptop",)),
    # --- Turing (7.5) ---
    _g("T4", "Tesla T4", 16, "7.5", "pcie", ecc=True, aliases=("T4-16GB", "NVIDIA-T4", "NVIDIA T4")),
    _g("Titan-RTX", "NVIDIA TITAN RTX", 24, "7.5", "pcie", aliases=("TITAN RTX",)),
    _g("Quadro-RTX-8000", "Quadro RTX 8000", 48, "7.5", "pcie", aliases=("RTX 8000",)),
    _g("Quadro-RTX-6000", "Quadro RTX 6000", 24, "7.5", "pcie", aliases=("RTX 6000 Turing",)),
    _g("RTX-2080-Ti", "NVIDIA GeForce RTX 2080 Ti", 11, "7.5", "pcie", aliases=("RTX2080TI", "2080 Ti")),
    _g("RTX-2080-Super", "NVIDIA GeForce RTX 2080 SUPER", 8, "7.5", "pcie", aliases=("RTX 2080 Super",)),
    _g("RTX-2080", "NVIDIA GeForce RTX 2080", 8, "7.5", "pcie", aliases=("RTX2080", "2080")),
    _g("RTX-2070-Super", "NVIDIA GeForce RTX 2070 SUPER", 8, "7.5", "pcie", aliases=("RTX 2070 Super",)),
    _g("RTX-2070", "NVIDIA GeForce RTX 2070", 8, "7.5", "pcie", aliases=("RTX2070", "2070")),
    _g("RTX-2060-Super", "NVIDIA GeForce RTX 2060 SUPER", 8, "7.5", "pcie", aliases=("RTX 2060 Super",)),
    _g("RTX-2060-12GB", "NVIDIA GeForce RTX 2060", 12, "7.5", "pcie", mem=12.0, src=_SRC["2060"], twin=True,
       aliases=("RTX 2060 12GB",)),
    _g("RTX-2060", "NVIDIA GeForce RTX 2060", 6, "7.5", "pcie", aliases=("RTX2060", "2060", "RTX 2060 6GB")),
    # GTX 16xx: Turing without tensor cores; vLLM runs them in float16 like the RTX 20xx.
    _g("GTX-1660-Super", "NVIDIA GeForce GTX 1660 SUPER", 6, "7.5", "pcie", aliases=("GTX 1660 Super",)),
    _g("GTX-1660-Ti", "NVIDIA GeForce GTX 1660 Ti", 6, "7.5", "pcie", aliases=("GTX 1660 Ti",)),
    _g("GTX-1660", "NVIDIA GeForce GTX 1660", 6, "7.5", "pcie", aliases=("GTX1660",)),
    _g("GTX-1650", "NVIDIA GeForce GTX 1650", 4, "7.5", "pcie", aliases=("GTX1650",)),
    # --- Volta (7.0) ---
    _g("V100-16GB", "Tesla V100-SXM2-16GB", 16, "7.0", "nvlink", aliases=("V100", "V100-SXM2-16GB", "V100 16GB")),
    _g("V100-32GB", "Tesla V100-SXM2-32GB", 32, "7.0", "nvlink", aliases=("V100-SXM2-32GB", "V100 32GB")),
    _g("V100-PCIe-16GB", "Tesla V100-PCIE-16GB", 16, "7.0", "pcie", aliases=("V100 PCIe 16GB",)),
    _g("V100-PCIe-32GB", "Tesla V100-PCIE-32GB", 32, "7.0", "pcie", aliases=("V100 PCIe 32GB",)),
    _g("V100S", "Tesla V100S-PCIE-32GB", 32, "7.0", "pcie", aliases=("V100S-32GB", "V100S 32GB")),
    _g("Titan-V", "NVIDIA TITAN V", 12, "7.0", "pcie", aliases=("TITAN V",)),
    _g("Quadro-GV100", "Quadro GV100", 32, "7.0", "pcie", aliases=("GV100",)),
)
# fmt: on

# Words that never tell two parts apart (vendor and line names, form factors DCGM sometimes adds).
_FILLER = re.compile(r"\b(nvidia|geforce|tesla|graphics|gpu)\b")
# Sharing suffixes of GPU Operator labels: they describe how a GPU is shared, not which part it is.
_CLUSTER_SUFFIX = re.compile(r"([\s_-]+MIG[\s_-].*|[\s_-]+SHARED)$", re.IGNORECASE)


def _norm(name: str) -> str:
    text = _CLUSTER_SUFFIX.sub("", name.strip())
    text = re.sub(r"\([^)]*\)", " ", text.lower())
    return re.sub(r"[^a-z0-9]", "", _FILLER.sub(" ", text))


def _keys(spec: GpuSpec) -> list[str]:
    # A twin does not own its CUDA name / label: the smaller sibling does.
    shared = (spec.cuda_name, *spec.product_labels) if spec.name not in _TWINS else ()
    return [_norm(n) for n in (spec.name, *shared, *spec.aliases) if n]


_INDEX: dict[str, GpuSpec] = {}
for _spec in GPUS:
    for _key in _keys(_spec):
        if _INDEX.setdefault(_key, _spec) is not _spec:
            raise AssertionError(f"GPU name {_key!r} is claimed by two table entries")


def known_gpu_names() -> list[str]:
    return [g.name for g in GPUS]


def find_gpu(name: str) -> GpuSpec | None:
    """The table entry for any spelling of a part, else None.

    Spellings are compared whole after dropping vendor words, punctuation and sharing suffixes, so
    "NVIDIA GeForce RTX 3090 24GB", "NVIDIA-GeForce-RTX-3090-SHARED" and "RTX-3090" agree while
    "RTX 3090" never matches the RTX 4090 (no substring matching). A trailing memory size the
    entry's names do not carry ("NVIDIA L40S 48GB") is accepted when it equals the part's size.
    """
    key = _norm(name)
    if not key:
        return None
    if key in _INDEX:
        return _INDEX[key]
    size = re.search(r"(\d+)gb?$", key)
    if size:
        spec = _INDEX.get(key[: size.start()])
        if spec is not None and round(spec.nominal_gib) == int(size.group(1)):
            return spec
    return None


#: vLLM's release builds run on compute capability 7.0 and newer (its installation docs, "Requirements":
#: "GPU: compute capability 7.0 or higher", from v0.3.3 to docs/getting_started/installation/gpu.cuda.inc.md
#: at v0.26.0); older parts work only from a source build (vllm-project/vllm#963). Names of the older
#: families (after `_norm`), so a pool of them gets that reason instead of "unknown GPU".
_PRE_VOLTA = (
    (re.compile(r"^(?:quadro)?(?:p100|p40|p4|p6|gp100|p[1-6]000|p[1-6]20|gtx10[5-8]0(?:ti)?|titanxp?)"),
     "Pascal", "6.x"),
    (re.compile(r"^(?:quadro)?(?:m60|m40|m10|m4|m[2-6]000|gtx9[5-8]0(?:ti)?|gtx750(?:ti)?)"), "Maxwell", "5.x"),
    (re.compile(r"^(?:quadro)?(?:k80|k40|k20|k10|k520|k[2-6]000|gtx7[6-8]0(?:ti)?|titan(?:black|z)?$)"),
     "Kepler", "3.x"),
)


def pre_volta_family(name: str) -> tuple[str, str] | None:
    """(architecture, compute capability) of a part vLLM's release builds cannot run, else None."""
    key = _norm(name)
    for pattern, arch, cc in _PRE_VOLTA:
        if key and pattern.match(key):
            return arch, cc
    return None


_MIG = re.compile(r"[\s_-]+MIG[\s_-]+(\d+)g\.(\d+)gb$", re.IGNORECASE)
_SHARED = re.compile(r"[\s_-]+SHARED$", re.IGNORECASE)


def lookup_gpu(name: str) -> GpuSpec:
    """Resolve our short name (``H100-80GB``) or a GPU Operator label (``NVIDIA-H100-80GB-HBM3``) for sizing.

    A MIG label (``…-MIG-1g.5gb``, the GPU Operator's `single` strategy) sizes the slice, not the
    board: its memory is the profile's in `tkf_infra.sizing.mig` (derived from the profile's size
    when the table lacks it) and its label is the MIG label. A ``-SHARED`` label (time-slicing) marks the GPU
    shared. Raises ``KeyError`` with the allowed names, because a typo here silently sizing against
    the wrong card would be worse than failing.
    """
    gpu = find_gpu(name)
    if gpu is None and (old := pre_volta_family(name)) is not None:
        raise KeyError(
            f"GPU {name!r} is a {old[0]} part (compute capability {old[1]}): vLLM's release images need compute "
            "capability 7.0 or newer (Volta: V100, T4, RTX 20xx and later); put its models on a pool of a newer GPU"
        )
    if gpu is None:
        allowed = ", ".join(known_gpu_names())
        raise KeyError(
            f"unknown GPU {name!r}: use one of {allowed} or a GPU Operator product label such as "
            "NVIDIA-H100-80GB-HBM3 (add the part to tkf_infra/sizing/gpus.py if it is missing)"
        )
    text = name.strip()
    shared = bool(_SHARED.search(text))
    text = _SHARED.sub("", text)
    mig = _MIG.search(text)
    if not shared and not mig:
        return gpu
    board = _MIG.sub("", text)
    labels = [lbl for lbl in gpu.product_labels if _norm(lbl) == _norm(board)] or list(gpu.product_labels)
    if mig:
        from tkf_infra.sizing.mig import mig_board  # the MIG table sizes its slices by this module's boards

        profile = f"{mig.group(1)}g.{mig.group(2)}gb"
        mig_table = mig_board(gpu)
        known = mig_table.profile(profile) if mig_table is not None else None
        memory, measured = (min(known.memory_gib, gpu.memory_gib), known.measured) if known else (
            derive_total_gib(float(mig.group(2))), False)
        source = f"MIG {profile}: {known.source}" if known else f"derived from the MIG profile {profile}"
        gpu = gpu.model_copy(update={
            "name": f"{gpu.name}-MIG-{profile}", "memory_gib": memory, "nominal_gib": float(mig.group(2)),
            "memory_measured": measured, "interconnect": "pcie", "memory_source": source})
        labels = [f"{lbl}-MIG-{profile}" for lbl in labels]
    if shared:
        labels = [f"{lbl}-SHARED" for lbl in labels]
    return gpu.model_copy(update={"shared": gpu.shared or shared, "product_labels": tuple(labels)})


def table_name(name: str) -> str | None:
    """The table's short name for any spelling of a known part (sharing suffixes dropped), else None."""
    gpu = find_gpu(name)
    return gpu.name if gpu else None


def _fallback_key(name: str) -> tuple[tuple[str, ...], int | None]:
    """Parts the table lacks: model tokens plus the memory size when one is written."""
    text = _CLUSTER_SUFFIX.sub("", name.strip()).lower()
    tokens = [t for t in re.split(r"[^a-z0-9]+", _FILLER.sub(" ", text)) if t]
    noise = {"sxm", "sxm2", "sxm4", "sxm5", "pcie", "hbm2", "hbm2e", "hbm3", "hbm3e", "gddr6", "gddr6x", "generation"}
    model = tuple(t for t in tokens if not re.fullmatch(r"\d+gb?", t) and t not in noise)
    sizes = [int(t.rstrip("gb")) for t in tokens if re.fullmatch(r"\d+gb?", t)]
    return model, (sizes[0] if sizes else None)


def stack_name(reported: str) -> str:
    """How to write a reported product (DCGM, a node label) in a stack file: the table's name, else a
    short spelling of its model and size ("NVIDIA Foo 48GB" → "FOO-48GB")."""
    known = find_gpu(reported)
    if known is not None:
        return known.name
    model, size = _fallback_key(reported)
    base = "-".join(model).upper()
    return f"{base}-{size}GB" if size is not None else base


def same_gpu(a: str, b: str) -> bool:
    """True when two spellings denote the same part (stack file vs DCGM ``modelName`` vs node label).

    Known parts compare by table entry, so "H100-80GB" matches "NVIDIA H100 80GB HBM3" but not
    "NVIDIA H100 PCIe", which the table sizes separately. For parts the table lacks, model tokens
    must agree, and memory sizes too when both spellings name one.
    """
    ga, gb = find_gpu(a), find_gpu(b)
    if ga is not None and gb is not None:
        return ga.name == gb.name
    (ma, sa), (mb, sb) = _fallback_key(a), _fallback_key(b)
    if not ma or ma != mb:
        return False
    return sa is None or sb is None or sa == sb


def product_label(gpu: GpuSpec, given: str = "") -> str | None:
    """The ``nvidia.com/gpu.product`` value GPU feature discovery puts on nodes with this GPU.

    `given` (the pool's gpuProduct) picks among several labels; None when it cannot, so the caller
    selects the nodes another way or asks for the exact label.
    """
    exact = [lbl for lbl in gpu.product_labels if _norm(lbl) == _norm(given)]
    if exact:
        return exact[0]
    if len(gpu.product_labels) == 1:
        return gpu.product_labels[0]
    return None
