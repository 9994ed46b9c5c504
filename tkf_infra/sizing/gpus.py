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

The rows are in `tkf_infra.sizing.gpu_table` (checked against a complete list of CUDA parts, 7.0 and
newer: tests/data/cuda_gpus.json); `GpuSpec` and the derivation in `tkf_infra.sizing.gpu_spec`. Import
all of them from here.
"""

from __future__ import annotations

import re
import unicodedata

from tkf_infra.sizing.gpu_spec import (
    DERIVATION_GAP_FRACTION,
    DERIVATION_MIN_GAP_GIB,
    ECC_GDDR_FRACTION,
    NVML_TO_CUDA_GAP_GIB,
    GpuSpec,
    Interconnect,
    derive_total_gib,
)
from tkf_infra.sizing.gpu_table import GPUS, TWINS
from tkf_infra.sizing.mig import mig_label_gpu
from tkf_infra.sizing.vgpu import vgpu_board, vgpu_spec

__all__ = [
    "DERIVATION_GAP_FRACTION", "DERIVATION_MIN_GAP_GIB", "ECC_GDDR_FRACTION", "GPUS",
    "NVML_TO_CUDA_GAP_GIB", "GpuSpec", "Interconnect", "derive_total_gib", "find_gpu", "known_gpu_names",
    "lookup_gpu", "pre_volta_family", "product_label", "same_gpu", "stack_name", "table_name",
]


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
    shared = (spec.cuda_name, *spec.product_labels) if spec.name not in TWINS else ()
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
    the wrong card would be worse than failing. A vGPU type (``NVIDIA A40-48Q``, `tkf_infra.sizing.vgpu`)
    sizes the VM's framebuffer on its board.
    """
    if hidden := [c for c in name if unicodedata.category(c).startswith("C")]:
        # find_gpu matches loosely (it reads nvidia-smi and pasted names), so 'H100\x1f' would find the H100:
        # a name from a stack file is the user's text, and an invisible character in it is a paste gone wrong.
        raise KeyError(f"GPU {name!r} holds {'an invisible character' if len(hidden) == 1 else 'invisible characters'}"
                       f" ({', '.join(repr(c) for c in hidden)}: a line break, escape or format mark from a paste?); "
                       "write the name alone, e.g. H100-80GB or NVIDIA-H100-80GB-HBM3")
    gpu = find_gpu(name)
    board = vgpu_board(name) if gpu is None else None
    if gpu is None and (old := pre_volta_family(name) or (pre_volta_family(board) if board else None)):
        raise KeyError(
            f"GPU {name!r} is a {old[0]} part (compute capability {old[1]}): vLLM's release images need compute "
            "capability 7.0 or newer (Volta: V100, T4, RTX 20xx and later); put its models on a pool of a newer GPU"
        )
    if gpu is None and (vgpu := vgpu_spec(name, find_gpu)) is not None:
        return vgpu
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
        profile = f"{mig.group(1)}g.{mig.group(2)}gb"
        gpu = mig_label_gpu(gpu, profile)
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
