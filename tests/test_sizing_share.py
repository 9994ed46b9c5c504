"""The fit check on part of a GPU: a pinned KV cache (--kv-cache-memory-bytes), time-sliced budgets, MIG devices.

What a user would notice: a time-sliced share's KV cache is exactly what the fit check proved the
budget holds, whatever co-tenants do; a budget that cannot hold it, or a vLLM without the flag,
is refused with the fix; `size` names the smallest share a model fits and its concurrency there.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tkf_infra.exit_codes import ExitCode
from tkf_infra.hub.lock import load_lock
from tkf_infra.ops.cli import app
from tkf_infra.plan.share import context_gib, slice_fit, slice_utilization
from tkf_infra.sizing.contract import FitInputs, evaluate
from tkf_infra.sizing.estimate import estimate
from tkf_infra.sizing.gpus import lookup_gpu
from tkf_infra.sizing.params import GIB, SizingParams

LOCK = load_lock()
QWEN3_8B = LOCK.get("Qwen/Qwen3-8B", "b968826d9c46dd6066d109eabc6255188de91218")
H100 = lookup_gpu("H100-80GB")


def params(**kw: object) -> SizingParams:
    return SizingParams(vllm_version="0.11.0", max_model_len=8192, max_num_seqs=32, **kw)


def test_a_pinned_kv_cache_is_exactly_the_bytes_and_must_fit_the_budget() -> None:
    assert QWEN3_8B is not None
    free = estimate(QWEN3_8B, H100, params())
    pinned = estimate(QWEN3_8B, H100, params(kv_cache_memory_bytes=20 * 2**30))
    assert pinned.fits and pinned.available_kv_gib == pinned.available_kv_gib_bound == 20.0
    assert pinned.kv_cache_tokens == pinned.kv_cache_tokens_bound < free.kv_cache_tokens
    too_big = int((free.available_kv_gib_bound + 0.5) * GIB)
    refused = estimate(QWEN3_8B, H100, params(kv_cache_memory_bytes=too_big))
    assert not refused.fits and "is more than the" in refused.problems[0] and "lower kvCacheMemoryBytes" in \
        refused.problems[0]
    old = estimate(QWEN3_8B, H100, SizingParams(vllm_version="0.9.1", max_model_len=8192,
                                                kv_cache_memory_bytes=2**30))
    assert not old.fits and "kvCacheMemoryBytes needs vLLM >= 0.10.2" in " ".join(old.problems)


def test_a_time_sliced_budget_is_k_over_n_less_the_cuda_context() -> None:
    c = context_gib("0.11.0")
    assert c == 0.51  # memory in use before vLLM's snapshot (versions.py), outside its budget
    for k in (1, 2, 3):
        u = slice_utilization(H100.memory_gib, k, 4, "0.11.0")
        assert u * H100.memory_gib + c <= k * H100.memory_gib / 4 < (u + 0.0001) * H100.memory_gib + c + 0.01
    assert slice_utilization(H100.memory_gib, 4, 4, "0.11.0") == 0.99  # never past the catalog's limit
    assert context_gib("latest") >= c  # unknown release: the largest context of every row


def test_a_pinned_share_does_not_carry_the_co_tenant_doubt() -> None:
    assert QWEN3_8B is not None
    shared = H100.model_copy(update={"shared": True})
    inputs = FitInputs(model="m", repo="Qwen/Qwen3-8B", revision="b" * 40, facts=QWEN3_8B, gpu=shared,
                       params=params())
    whole = evaluate(inputs)  # time-sliced without a budget: every byte outside it may be taken
    assert "GPU shared by time-slicing" in (whole.uncertainty or "")
    u, kv, final, fit = slice_fit(inputs, 2, 4)
    assert fit.fits and "GPU shared by time-slicing" not in (fit.uncertainty or "")
    assert final.params.gpu_memory_utilization == u and final.params.kv_cache_memory_bytes == kv
    assert fit.kv_cache_gib == fit.kv_cache_gib_bound == pytest.approx(kv / GIB, abs=0.01)
    # the share holds weights + activation + graphs + the pinned cache within its budget
    budget = u * H100.memory_gib
    assert fit.weights_gib + fit.activation_gib + kv / GIB < budget


def size(*args: str) -> tuple[str, int]:
    result = CliRunner().invoke(app, ["size", *args])
    return result.output, result.exit_code


def test_size_names_the_smallest_mig_profile_and_slice_and_the_concurrency_there() -> None:
    ref = "Qwen/Qwen3-8B@b968826d9c46dd6066d109eabc6255188de91218"
    text, code = size(ref, "--gpu", "H100-80GB", "--max-model-len", "32768", "--max-num-seqs", "32",
                      "--time-slices", "4", "--vllm-version", "0.11.0")
    assert code == ExitCode.OK
    assert "smallest MIG profile: mig:3g.40gb" in text and "smallest time-sliced share: slice:2/4" in text
    out, _ = size(ref, "--gpu", "H100-80GB", "--max-model-len", "32768", "--max-num-seqs", "32",
                  "--vllm-version", "0.11.0", "--json")
    data = json.loads(out)
    assert data["smallest_share"] == "mig:3g.40gb"
    rows = {r["share"]: r for r in data["shares"]}
    assert not rows["mig:1g.20gb"]["fits"] and rows["mig:3g.40gb"]["maxConcurrencyBound"] > 4
    assert rows["mig:1g.10gb"]["memoryGiB"] == 9.62
    no_mig, _ = size(ref, "--gpu", "L40S", "--max-model-len", "8192", "--json")
    assert json.loads(no_mig)["shares"] == []  # L40S has no MIG
