"""The GPU table: names as users, CUDA and the GPU Operator write them, and totals never above CUDA's."""

from __future__ import annotations

import pytest

from tkf_infra.sizing.gpus import GPUS, derive_total_gib, find_gpu, lookup_gpu, product_label, same_gpu, table_name


@pytest.mark.parametrize(
    ("spelling", "entry"),
    [
        ("RTX 3090 24GB", "RTX-3090"),  # the bench once matched this to the 4090
        ("NVIDIA GeForce RTX 3090", "RTX-3090"),  # torch.cuda.get_device_name / DCGM modelName
        ("NVIDIA-GeForce-RTX-4090", "RTX-4090"),  # GPU Operator nvidia.com/gpu.product
        ("NVIDIA-H100-80GB-HBM3", "H100-80GB"),
        ("NVIDIA H100 PCIe", "H100-PCIe"),
        ("NVIDIA H20", "H20"),
        ("NVIDIA GH200 480GB", "GH200-480GB"),
        ("NVIDIA GB200", "GB200"),
        ("DGX Spark", "GB10"),
        ("NVIDIA GeForce RTX 5090", "RTX-5090"),
        ("NVIDIA GeForce RTX 2060", "RTX-2060"),
        ("RTX 2060 12GB", "RTX-2060-12GB"),
        ("Tesla V100-SXM2-32GB", "V100-32GB"),
        ("Tesla T4", "T4"),
        ("NVIDIA A30", "A30"),
        ("NVIDIA A16", "A16"),
        ("NVIDIA L40S 48GB", "L40S"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "RTX-PRO-6000"),
        ("NVIDIA GeForce RTX 4070 Laptop GPU", "RTX-4070-Laptop"),
        ("NVIDIA RTX A2000 12GB", "RTX-A2000-12GB"),  # its own CUDA name, not the 6 GB part's
        ("NVIDIA RTX A2000", "RTX-A2000"),
        ("NVIDIA GeForce RTX 4090 D", "RTX-4090-D"),  # not the RTX 4090
        ("NVIDIA GeForce RTX 3080 Laptop GPU", "RTX-3080-Laptop"),  # the smaller twin owns the CUDA name
        ("RTX 3080 Laptop 16GB", "RTX-3080-Laptop-16GB"),
        ("NVIDIA GeForce GTX 1660 SUPER", "GTX-1660-Super"),  # Turing (7.5): vLLM runs it
        ("NVIDIA H800 PCIe", "H800-PCIe"),
    ],
)
def test_every_spelling_of_a_part_finds_its_entry(spelling: str, entry: str) -> None:
    gpu = find_gpu(spelling)
    assert gpu is not None and gpu.name == entry


@pytest.mark.parametrize("spelling", ["RTX 3090 48GB", "H100 96GB", "RTX 309", "A100-120GB", ""])
def test_a_wrong_size_or_a_partial_name_finds_nothing(spelling: str) -> None:
    assert find_gpu(spelling) is None


def test_lookup_names_the_allowed_parts_and_how_to_add_one() -> None:
    with pytest.raises(KeyError, match=r"unknown GPU 'H1000'.*H100-80GB.*tkf_infra/sizing/gpus.py"):
        lookup_gpu("H1000")


@pytest.mark.parametrize(("spelling", "family"), [
    ("Tesla P40", "Pascal"), ("Tesla P100-PCIE-16GB", "Pascal"), ("NVIDIA GeForce GTX 1080 Ti", "Pascal"),
    ("Quadro P6000", "Pascal"), ("NVIDIA TITAN Xp", "Pascal"), ("Tesla M60", "Maxwell"), ("Tesla K80", "Kepler"),
])
def test_a_pre_volta_part_is_refused_with_the_reason_not_as_unknown(spelling: str, family: str) -> None:
    with pytest.raises(KeyError, match=rf"{spelling!r} is a {family} part.*compute capability 7.0 or newer") as err:
        lookup_gpu(spelling)
    assert "unknown GPU" not in str(err.value)


def test_no_part_in_the_table_is_older_than_volta() -> None:
    assert all(gpu.cc >= (7, 0) for gpu in GPUS)


def test_every_part_has_a_label_an_interconnect_and_a_total_below_nominal() -> None:
    names = [g.name for g in GPUS]
    assert len(names) == len(set(names))
    for gpu in GPUS:
        assert gpu.product_labels and all(" " not in lbl for lbl in gpu.product_labels), gpu.name
        assert gpu.interconnect in ("nvlink", "pcie")
        assert 0 < gpu.memory_gib <= gpu.nominal_gib, gpu.name
        assert gpu.memory_source.startswith(("measured: ", "derived from")), gpu.name


def test_sxm_and_nvl_boards_talk_over_nvlink_pcie_and_consumer_parts_do_not() -> None:
    assert lookup_gpu("H100-80GB").interconnect == "nvlink"
    assert lookup_gpu("H200-NVL").interconnect == "nvlink"
    assert lookup_gpu("H100-PCIe").interconnect == "pcie"
    assert lookup_gpu("RTX-4090").interconnect == "pcie"
    assert lookup_gpu("L40S").interconnect == "pcie"


def test_the_derivation_stays_below_every_measured_total() -> None:
    """An unmeasured part is sized with a total no real part of its size exceeded: stricter, never looser."""
    for gpu in (g for g in GPUS if g.memory_measured and not g.unified_memory):
        derived = derive_total_gib(gpu.nominal_gib, gpu.ecc_gddr)
        assert derived <= gpu.memory_gib, (gpu.name, derived, gpu.memory_gib)


def test_measured_totals_are_what_vllm_printed() -> None:
    assert lookup_gpu("H100-80GB").memory_gib == 79.19  # 'Free memory on device (78.68/79.19 GiB)'
    assert lookup_gpu("RTX-3090").memory_gib == 23.56
    assert lookup_gpu("RTX-4070-Laptop").memory_gib == 7.65
    assert "vllm-project/vllm#17327" in lookup_gpu("RTX-3090").memory_source


def test_a100_names_both_boards_and_the_pool_label_picks_one() -> None:
    a100 = lookup_gpu("A100-40GB")
    assert set(a100.product_labels) == {"NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-PCIE-40GB"}
    assert product_label(a100) is None, "two boards: the pool must select its nodes another way"
    assert product_label(a100, "NVIDIA-A100-PCIE-40GB") == "NVIDIA-A100-PCIE-40GB"
    assert same_gpu("A100-40GB", "NVIDIA A100-SXM4-40GB") and same_gpu("A100-40GB", "NVIDIA A100-PCIE-40GB")
    assert a100.memory_gib <= 39.39, "below the SXM4 board's measured total: no PCIe log shows its own"


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("H100-80GB", "NVIDIA H100 80GB HBM3", True),
        ("H100-80GB", "NVIDIA-H100-80GB-HBM3-SHARED", True),
        ("A100-40GB", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", True),
        ("RTX 3090", "NVIDIA GeForce RTX 4090", False),
        ("H100-80GB", "NVIDIA H100 PCIe", False),
        ("H100-80GB", "NVIDIA H100 NVL", False),
        ("A100-80GB", "NVIDIA A100-SXM4-40GB", False),
        ("Some GPU 2000 16GB", "some-gpu-2000", True),  # not in the table: model tokens, sizes when both say
        ("Some GPU 2000 16GB", "Some GPU 2000 24GB", False),
    ],
)
def test_same_gpu_compares_parts_not_spellings(a: str, b: str, same: bool) -> None:
    assert same_gpu(a, b) is same and same_gpu(b, a) is same


def test_table_name_is_the_short_name_the_stack_file_accepts() -> None:
    assert table_name("NVIDIA-H100-80GB-HBM3-SHARED") == "H100-80GB"
    assert table_name("NVIDIA GeForce RTX 3090") == "RTX-3090"
    assert table_name("Some GPU 2000") is None


def test_a_mig_label_sizes_the_slice_and_selects_the_mig_nodes() -> None:
    slice_ = lookup_gpu("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb")
    assert slice_.memory_gib == 4.75 and slice_.memory_measured  # nvidia-smi mig -lgip, tkf_infra/sizing/mig.py
    assert slice_.product_labels == ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",)
    unknown = lookup_gpu("NVIDIA-A100-SXM4-40GB-MIG-2g.11gb")  # not in the MIG table: derived from its name
    assert unknown.memory_gib < 11 and not unknown.memory_measured


def test_a_shared_label_marks_the_gpu_time_sliced() -> None:
    gpu = lookup_gpu("NVIDIA-GeForce-RTX-3090-SHARED")
    assert gpu.shared and gpu.product_labels == ("NVIDIA-GeForce-RTX-3090-SHARED",)
    assert not lookup_gpu("RTX-3090").shared


@pytest.mark.parametrize("pasted", ["H100\x1f", "H100-80GB\n", "NVIDIA-H100-80GB-HBM3\r\n", "H100\u200b-80GB",
                                    "H100-80GB\t"])
def test_a_gpu_name_with_an_invisible_character_is_refused_not_matched_loosely(pasted: str) -> None:
    """find_gpu strips everything but letters and digits (it reads nvidia-smi's and pasted names), so a stack
    file's 'H100\\x1f' used to size an H100: a user's name with a control or format character is refused, saying
    which character and what to write."""
    assert find_gpu(pasted) is not None, "the loose matcher still finds it"
    with pytest.raises(KeyError) as err:
        lookup_gpu(pasted)
    message = str(err.value.args[0])
    assert "invisible character" in message and "write the name alone, e.g. H100-80GB" in message
    assert lookup_gpu("H100\u00a080GB").name == "H100-80GB", "a no-break space from a web page is a space"
