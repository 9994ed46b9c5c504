"""The GPU table against a complete list of CUDA parts of compute capability 7.0 and newer (issue 29).

tests/data/cuda_gpus.json: NVIDIA's driver list of supported GPUs (Turing and newer), pci.ids for Volta and
Jetson device names from public logs (sources in the file and in tests/data/SOURCES.md). Every part must
resolve by the label the GPU Operator puts on its nodes, by the name nvidia-smi prints and by its plain name,
to an entry of its compute capability whose memory is never above the part's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tkf_infra.sizing.gpus import GPUS, lookup_gpu, pre_volta_family

LIST = json.loads((Path(__file__).parent / "data" / "cuda_gpus.json").read_text())
PARTS: list[dict[str, Any]] = LIST["parts"]


def gfd_label(name: str) -> str:
    """GPU feature discovery's `nvidia.com/gpu.product` (k8s-device-plugin internal/lm/resource.go `sanitise`)."""
    return "-".join(re.sub(r"[^A-Za-z0-9\-_. ]", "", name).split())


def plain(name: str) -> str:
    """The name as users write it: no vendor or line words ("NVIDIA GeForce RTX 4080" -> "RTX 4080")."""
    return re.sub(r"^(NVIDIA |Tesla )?(GeForce )?", "", name)


def test_the_list_is_complete_enough_to_mean_something() -> None:
    families = {p["family"] for p in PARTS}
    assert families == {"Volta", "Turing", "Ampere", "Ada Lovelace", "Hopper", "Blackwell"}
    assert {p["segment"] for p in PARTS} == {"desktop", "laptop", "workstation", "data centre", "embedded"}
    assert len(PARTS) >= 200
    names = {p["name"] for p in PARTS}
    assert {"NVIDIA GeForce RTX 4080", "Orin", "Xavier", "Tesla V100-SXM2-16GB", "NVIDIA B200"} <= names
    assert all(p["label"] == gfd_label(p["name"]) for p in PARTS)


@pytest.mark.parametrize("part", PARTS, ids=[p["name"] for p in PARTS])
def test_every_cuda_part_resolves_by_label_name_and_plain_name(part: dict[str, Any]) -> None:
    gpu = lookup_gpu(part["label"])
    assert lookup_gpu(part["name"]).name == gpu.name
    assert lookup_gpu(plain(part["name"])).name == gpu.name, plain(part["name"])
    assert gpu.compute_capability == part["compute_capability"]
    # One name may cover several sizes (the table's twins): the name resolves to the smallest.
    assert gpu.nominal_gib <= part["memory_gb"] and gpu.memory_gib < part["memory_gb"]
    assert pre_volta_family(part["name"]) is None


def test_a_label_not_among_its_entrys_product_labels_is_a_known_second_spelling() -> None:
    """A pool selects nodes by its entry's product label; these list labels resolve but are not one (a second
    spelling of a name the driver list also spells the other way, or the bare H100 name sized as the 80 GB part)."""
    odd = {p["label"] for p in PARTS if p["label"] not in lookup_gpu(p["label"]).product_labels}
    assert odd == {"NVIDIA-GeForce-RTX-2070-Super", "NVIDIA-GeForce-RTX-2080-Super", "NVIDIA-H100",
                   "NVIDIA-GeForce-RTX-3050Ti-Laptop-GPU"}


def test_excluded_parts_say_why() -> None:
    assert all(p["reason"] for p in LIST["excluded"])


@pytest.mark.parametrize(("spelling", "family"), [
    ("Tesla P4", "Pascal"), ("Quadro P4000", "Pascal"), ("NVIDIA GeForce GTX 1070", "Pascal"),
    ("NVIDIA TITAN X (Pascal)", "Pascal"), ("NVIDIA-Tesla-P100-PCIE-16GB", "Pascal"), ("Tesla M40", "Maxwell"),
    ("Quadro M4000", "Maxwell"), ("Tesla K40m", "Kepler"),
])
def test_pre_volta_parts_are_still_refused_with_their_family(spelling: str, family: str) -> None:
    with pytest.raises(KeyError, match=rf"is a {family} part"):
        lookup_gpu(spelling)


def test_every_table_entry_is_in_the_list_or_a_size_of_a_listed_name() -> None:
    listed = {lookup_gpu(p["label"]).name for p in PARTS}
    twins = {g.name for g in GPUS if g.cuda_name in {p["name"] for p in PARTS}}
    assert [g.name for g in GPUS if g.name not in listed | twins] == []
