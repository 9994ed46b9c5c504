"""MIG (Multi-Instance GPU) profiles per GPU model: what each slice is, where it may sit, what CUDA sees.

Why a table of our own: the fit check sizes a model for a slice before any node exists, so the
memory a MIG device reports and the placement rules must be plain values at preview.

**Geometry.** A100, H100, H200 and B200 boards are cut into 8 memory slices and 7 compute slices.
A GPU instance of a profile occupies a run of memory slices starting at one of its allowed
placements; two instances may share a GPU exactly when their runs do not overlap. The placements
are NVML's (`nvidia-smi mig -lgipp`, printed in NVIDIA's MIG user guide, "Getting Started with
MIG", for the A100 and identical on the H100 NVL per NVIDIA's H100 NVL MIG article)::

    1g (1/8 memory)   {0,1,2,3,4,5,6}:1      2g (2/8)  {0,2,4}:2      4g (4/8)  {0}:4
    1g (2/8 memory)   {0,2,4,6}:2            3g (4/8)  {0,4}:4        7g (8/8)  {0}:8

The profiles of each board (names, memory fraction, instance count) are the MIG user guide's
"Supported MIG Profiles" tables (v580); B200's fractions and counts are those of the H100, so its
placements are taken to be the same (inferred, not printed). Media-extension variants (`+me`) are
left out: at most one fits per GPU and they add nothing an LLM uses.

**Memory.** What `cudaMemGetInfo` reports on a MIG device equals the GPU instance's memory that
`nvidia-smi mig -lgip` prints (A100 80GB PCIe 1g.10gb: torch `total_memory=9728MB` = 9.50 GiB,
-lgip 9.50 GiB; public blog output, code-index document 22161947869). That figure differs slightly
between drivers and instances (A100-40GB 2g.10gb 9.62 or 9.75 GiB), so each profile takes the
lowest public -lgip figure, or its sibling's with the same memory slices; where no output is
public, `name GB x MIG_DERIVED_FRACTION`, below every measured profile (a test keeps it so). No
profile is sized above its whole board's total.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tkf_infra.sizing.gpu_spec import GpuSpec, derive_total_gib

#: Lowest ratio of -lgip GiB to the profile's nominal GB among the measured profiles (A100-40GB
#: 1g.5gb 4.75/5, A100-80GB 1g.10gb 9.50/10): a profile without a public figure is sized at this.
MIG_DERIVED_FRACTION = 0.95
MEMORY_SLICES = 8
COMPUTE_SLICES = 7
#: Allowed placement starts by (compute slices, memory slices): NVML's -lgipp (module docstring).
PLACEMENTS: dict[tuple[int, int], tuple[int, ...]] = {
    (1, 1): (0, 1, 2, 3, 4, 5, 6), (1, 2): (0, 2, 4, 6), (2, 2): (0, 2, 4), (3, 4): (0, 4), (4, 4): (0,),
    (7, 8): (0,),
}

_PROFILE = re.compile(r"(\d+)g\.(\d+)gb")  # with fullmatch: `$` passes "1g.10gb\n"

# Public `nvidia-smi mig -lgip` outputs (GiB column): the lowest seen per profile.
_LGIP_A100_40 = ("nvidia-smi mig -lgip on A100-SXM4-40GB (MIG user guide example and public outputs, code-index "
                 "documents 5030353953, 34261985429)")
_LGIP_A100_80 = "nvidia-smi mig -lgip on A100 80GB (public outputs, code-index documents 36981796389, 68858751843)"
_LGIP_H100 = ("nvidia-smi mig -lgip on NVIDIA H100 80GB HBM3 (code-index document 8225626544) and H100 PCIe "
              "(code-index document 59275486674)")


@dataclass(frozen=True)
class MigProfile:
    """One GPU-instance profile of one board."""

    name: str
    """`1g.10gb`: compute slices, then the nominal memory; the resource is `nvidia.com/mig-<name>`."""
    compute: int
    slices: int
    """Memory slices the instance occupies (its placement size)."""
    memory_gib: float
    """What CUDA reports on a device of this profile (see module docstring)."""
    source: str

    @property
    def nominal_gb(self) -> int:
        match = _PROFILE.fullmatch(self.name)
        return int(match.group(2)) if match else 0

    @property
    def starts(self) -> tuple[int, ...]:
        return PLACEMENTS[(self.compute, self.slices)]

    @property
    def measured(self) -> bool:
        return not self.source.startswith("derived")

    @property
    def resource(self) -> str:
        """The extended resource a pod requests under the GPU Operator's `mixed` MIG strategy."""
        return f"nvidia.com/mig-{self.name}"


@dataclass(frozen=True)
class MigBoard:
    """The MIG profiles of one GPU model (a name of `tkf_infra.sizing.gpus`)."""

    gpu: str
    profiles: tuple[MigProfile, ...]

    def profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.profiles if p.name == name), None)

    def by_size(self) -> tuple[MigProfile, ...]:
        """Smallest first: memory, then memory slices taken, then compute slices."""
        return tuple(sorted(self.profiles, key=lambda p: (p.memory_gib, p.slices, p.compute)))


def _board(gpu: str, rows: list[tuple[str, int, float | None]], source: str) -> MigBoard:
    """Profiles from (name, memory slices, -lgip GiB or None); siblings share a measured figure."""
    measured = {slices: gib for _, slices, gib in rows if gib is not None}
    profiles = []
    for name, slices, gib in rows:
        match = _PROFILE.fullmatch(name)
        assert match, name
        compute = int(match.group(1))
        figure = gib if gib is not None else measured.get(slices)
        if figure is not None:
            src = source if gib is not None else f"{source}; the {slices}-memory-slice sibling's figure"
        else:
            figure = round(int(match.group(2)) * MIG_DERIVED_FRACTION, 2)
            src = f"derived: {match.group(2)} GB x {MIG_DERIVED_FRACTION} (no public -lgip output)"
        profiles.append(MigProfile(name, compute, slices, figure, src))
    return MigBoard(gpu, tuple(profiles))


def _eighths(sizes: tuple[int, int, int, int]) -> list[tuple[str, int, float | None]]:
    """The six profiles of an 8-slice board from its nominal GB at 1/8, 2/8, 4/8 and 8/8."""
    one, two, four, full = sizes
    return [(f"1g.{one}gb", 1, None), (f"1g.{two}gb", 2, None), (f"2g.{two}gb", 2, None), (f"3g.{four}gb", 4, None),
            (f"4g.{four}gb", 4, None), (f"7g.{full}gb", 8, None)]


_H100_80 = [("1g.10gb", 1, 9.62), ("1g.20gb", 2, None), ("2g.20gb", 2, 19.50), ("3g.40gb", 4, 39.25),
            ("4g.40gb", 4, None), ("7g.80gb", 8, 79.25)]
_H200 = _eighths((18, 35, 71, 141))
BOARDS: tuple[MigBoard, ...] = (
    _board("A100-40GB", [("1g.5gb", 1, 4.75), ("1g.10gb", 2, 9.62), ("2g.10gb", 2, 9.62), ("3g.20gb", 4, 19.50),
                         ("4g.20gb", 4, 19.50), ("7g.40gb", 8, 39.25)], _LGIP_A100_40),
    _board("A100-80GB", [("1g.10gb", 1, 9.50), ("1g.20gb", 2, None), ("2g.20gb", 2, 19.50), ("3g.40gb", 4, 39.25),
                         ("4g.40gb", 4, 39.25), ("7g.80gb", 8, 79.00)], _LGIP_A100_80),
    _board("A800-80GB", [("1g.10gb", 1, 9.50), ("1g.20gb", 2, None), ("2g.20gb", 2, 19.50), ("3g.40gb", 4, 39.25),
                         ("4g.40gb", 4, 39.25), ("7g.80gb", 8, 79.00)], _LGIP_A100_80 + " (A800 = A100 80GB board)"),
    _board("H100-80GB", _H100_80, _LGIP_H100),
    _board("H100-PCIe", _H100_80, _LGIP_H100),
    _board("H800", _H100_80, _LGIP_H100 + " (H800 = H100 80GB board)"),
    _board("H100-NVL", _eighths((12, 24, 47, 94)), ""),
    _board("H200", _H200, ""),
    _board("H200-NVL", _H200, ""),
    _board("B200", _eighths((23, 45, 90, 180)), ""),
)


def mig_board(gpu: GpuSpec | str) -> MigBoard | None:
    """The MIG table of a board (its spec, or its table name: `gpus.find_gpu` resolves other spellings), else None:
    the part has no MIG."""
    name = gpu.name if isinstance(gpu, GpuSpec) else gpu
    return next((b for b in BOARDS if b.gpu == name), None)


def mig_gpu(gpu: GpuSpec, profile: MigProfile) -> GpuSpec:
    """The board seen through one MIG device: what the fit check sizes a slice as.

    A MIG device is one GPU to CUDA, with its instance's memory and no peer access (no NVLink)."""
    memory = min(profile.memory_gib, gpu.memory_gib)
    return gpu.model_copy(update={
        "name": f"{gpu.name}-MIG-{profile.name}", "memory_gib": memory, "nominal_gib": float(profile.nominal_gb),
        "memory_measured": profile.measured, "interconnect": "pcie", "shared": False,
        "memory_source": f"MIG {profile.name}: {profile.source}",
        "product_labels": tuple(f"{label}-MIG-{profile.name}" for label in gpu.product_labels)})


def mig_label_gpu(gpu: GpuSpec, profile: str) -> GpuSpec:
    """The board seen through the MIG device a product label names (`…-MIG-1g.5gb`, the GPU Operator's `single`
    strategy): the table's profile where the board has it, else sized from the profile's own size, conservatively
    (`derive_total_gib`)."""
    board = mig_board(gpu)
    known = board.profile(profile) if board is not None else None
    if known is not None:
        return mig_gpu(gpu, known)
    match = _PROFILE.fullmatch(profile)
    if match is None:
        raise ValueError(f"MIG profile {profile!r} is not of the form <compute>g.<memory>gb (e.g. 1g.10gb)")
    return gpu.model_copy(update={
        "name": f"{gpu.name}-MIG-{profile}", "memory_gib": derive_total_gib(float(match.group(2))),
        "nominal_gib": float(match.group(2)), "memory_measured": False, "interconnect": "pcie", "shared": False,
        "memory_source": f"derived from the MIG profile {profile}",
        "product_labels": tuple(f"{label}-MIG-{profile}" for label in gpu.product_labels)})
