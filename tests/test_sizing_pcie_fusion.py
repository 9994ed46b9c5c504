"""PCIe TP > 1 from 0.17: the bound's non-torch ceiling without the all-reduce fusion workspace (issue 29).

The NVLink figure (2.15 GiB at TP 2 on H100 from 0.17, 0.55 on 0.11-0.16) grew when 0.17 turned on FlashInfer's
all-reduce + RMSNorm fusion, whose workspace the profile's compile builds
(vllm/compilation/passes/fusion/allreduce_rms_fusion.py@v0.24.0:966-994) only at TP > 1 on compute capability 9.0
or 10.x (`enable_allreduce_rms_fusion`, vllm/config/vllm.py@v0.24.0:131-151, the same test @v0.33.0:179-203; off at
every optimisation level @v0.16.0:118-194). A PCIe box of any other GPU never allocates it, so its bound takes the
pre-fusion figure. The PCIe IPC all-reduce 0.30 added (device_communicators/flashinfer_pcie_ipc_all_reduce.py) is
opt-in (VLLM_ALLREDUCE_USE_FLASHINFER_PCIE_IPC, default 0, envs.py@v0.32.0:1976-1978) and built with the
communicator before the start-up snapshot, so 0.30-0.33 keep the pre-fusion ceiling too.
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


def test_qwen3_14b_at_full_context_on_two_rtx_3090s_fits_on_0_24_and_0_30() -> None:
    """One 40960-token request needs 3.1 GiB of KV per GPU. On 0.24 the bound keeps 3.95 GiB (it kept 2.40, a
    refusal, while it charged the fusion workspace a 3090 never builds); 0.30's opt-in PCIe all-reduce does not
    change that. An H100 PCIe (cc 9.0), which builds the fusion workspace, keeps the NVLink ceiling."""
    params = SizingParams(vllm_version="0.24.0", tensor_parallel_size=2, max_model_len=40960)
    for version in ("0.24.0", "0.30.0"):
        e = estimate(QWEN3_14B, lookup_gpu("RTX-3090"), params.model_copy(update={"vllm_version": version}))
        assert e.fits, (version, e.problems)
        assert e.need_per_request_gib < e.available_kv_gib_bound < e.available_kv_gib


@pytest.mark.parametrize("gpu", ["RTX-3090", "RTX-4090", "L40S", "RTX-PRO-6000", "A40"])
@pytest.mark.parametrize("version", ["0.17.0", "0.24.0", "0.27.1", "0.29.0", "0.30.0", "0.32.0", "0.33.0"])
def test_pcie_boards_without_the_fusion_keep_only_the_pre_fusion_ceiling(gpu: str, version: str) -> None:
    """cc 8.6, 8.9 and 12.0 at TP 2 over PCIe: the central figure is the TP 1 one (0.25 GiB; Ada start-ups at TP 2
    had nothing beyond it), the bound's ceiling the pre-fusion 0.55 plus the row's uncertainty; on Ada, where
    L40S and L4 start-ups at TP 2 measured it (0.11 to 0.28), the measured 0.3 GiB (tkf_infra/sizing/measured.py)."""
    uncertainty = 0.1 if version == "0.17.0" else 0.3
    ada_measured = gpu in ("RTX-4090", "L40S") and version in ("0.17.0", "0.24.0", "0.27.1")
    assert non_torch_doubt(gpu, version) == pytest.approx(0.3 if ada_measured else 0.55 - 0.25 + uncertainty)


@pytest.mark.parametrize(("gpu", "version"), [("H100-PCIe", "0.24.0"), ("H100-PCIe", "0.17.0"),
                                              ("H100-PCIe", "0.30.0"), ("H100-PCIe", "0.33.0")])
def test_the_nvlink_figure_stays_the_ceiling_where_a_workspace_may_be_built(gpu: str, version: str) -> None:
    """An H100 PCIe (cc 9.0) builds the fusion workspace on every release from 0.17."""
    uncertainty = 0.1 if version == "0.17.0" else 0.3
    assert non_torch_doubt(gpu, version) == pytest.approx(2.15 - 0.25 + uncertainty)
