"""PCIe TP > 1 on 0.17-0.29: the bound's non-torch ceiling without the all-reduce fusion workspace (issue 29).

The NVLink figure (2.15 GiB at TP 2 on H100 from 0.17, 0.55 on 0.11-0.16) grew when 0.17 turned on FlashInfer's
all-reduce + RMSNorm fusion, whose workspace the profile's compile builds
(vllm/compilation/passes/fusion/allreduce_rms_fusion.py@v0.24.0:966-994) only at TP > 1 on compute capability 9.0
or 10.x (`enable_allreduce_rms_fusion`, vllm/config/vllm.py@v0.24.0:131-151; off at every optimisation level
@v0.16.0:118-194). A PCIe box of any other GPU never allocates it, so its bound takes the pre-fusion figure;
from 0.30 PCIe boards get their own all-reduce workspace (device_communicators/flashinfer_pcie_ipc_all_reduce.py
@v0.30.0), and the bound takes the NVLink figure again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tkf_infra.sizing.estimate import estimate
from tkf_infra.sizing.gpus import lookup_gpu
from tkf_infra.sizing.params import SizingParams

CONFIGS = Path(__file__).parent / "data" / "calibration" / "configs"
QWEN3_14B: dict[str, Any] = json.loads((CONFIGS / "Qwen__Qwen3-14B.json").read_text())


def non_torch_doubt(gpu: str, version: str) -> float:
    e = estimate(QWEN3_14B, lookup_gpu(gpu), SizingParams(vllm_version=version, tensor_parallel_size=2,
                                                         max_model_len=40960))
    return next(d.gib for d in e.doubts if d.term.startswith("non-torch memory at TP 2 over pcie"))


def test_qwen3_14b_at_full_context_on_two_rtx_3090s_fits_on_0_24_and_not_on_0_30() -> None:
    """One 40960-token request needs 3.1 GiB of KV per GPU. On 0.24 the bound keeps 3.95 GiB (it kept 2.40, a
    refusal, while it charged the fusion workspace a 3090 never builds); on 0.30 the PCIe all-reduce workspace
    is back in the bound and the refusal names what does fit."""
    params = SizingParams(vllm_version="0.24.0", tensor_parallel_size=2, max_model_len=40960)
    on_024 = estimate(QWEN3_14B, lookup_gpu("RTX-3090"), params)
    assert on_024.fits, on_024.problems
    assert on_024.need_per_request_gib < on_024.available_kv_gib_bound < on_024.available_kv_gib
    on_030 = estimate(QWEN3_14B, lookup_gpu("RTX-3090"), params.model_copy(update={"vllm_version": "0.30.0"}))
    assert not on_030.fits and "needs 3.1 GiB KV cache for maxModelLen 40960" in on_030.problems[0]
    fitting = on_030.max_fitting_model_len
    assert fitting is not None and 0 < fitting < 40960


@pytest.mark.parametrize("gpu", ["RTX-3090", "RTX-4090", "L40S", "RTX-PRO-6000", "A40"])
@pytest.mark.parametrize("version", ["0.17.0", "0.24.0", "0.27.1", "0.29.0"])
def test_pcie_boards_without_the_fusion_keep_only_the_rows_uncertainty(gpu: str, version: str) -> None:
    """cc 8.6, 8.9 and 12.0 at TP 2 over PCIe: the pre-fusion ceiling (0.55 GiB) is under the PCIe figure
    (0.6), so the non-torch doubt is the row's own uncertainty."""
    assert non_torch_doubt(gpu, version) == pytest.approx(0.1 if version == "0.17.0" else 0.3)


@pytest.mark.parametrize(("gpu", "version"), [("H100-PCIe", "0.24.0"), ("H100-PCIe", "0.17.0"),
                                              ("RTX-3090", "0.30.0"), ("RTX-PRO-6000", "0.32.0")])
def test_the_nvlink_figure_stays_the_ceiling_where_a_workspace_may_be_built(gpu: str, version: str) -> None:
    """An H100 PCIe (cc 9.0) builds the fusion workspace; from 0.30 every PCIe board may build its own."""
    uncertainty = 0.1 if version == "0.17.0" else 0.3
    assert non_torch_doubt(gpu, version) == pytest.approx(2.15 - 0.6 + uncertainty)
