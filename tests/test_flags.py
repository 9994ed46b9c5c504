"""The serving-flag table is the one source: the command line, the sizing inputs and the extraArgs
rule all follow from its rows, on both backends."""

from __future__ import annotations

from typing import Any

import pytest

from components import pod
from components import vllm_args as va
from tests.mocks import CPU, MULTI_NODE, SINGLE_GPU, TP4, stack_doc
from tkf_infra.config import ModelEntry, Serving, validate_catalog
from tkf_infra.config.extra_args import owned_flags
from tkf_infra.config.flags import Applies, KServe, rows, sized_fields
from tkf_infra.plan import sizing_params
from tkf_infra.sizing.params import SizingParams


def entry(raw: dict[str, Any], **over: Any) -> ModelEntry:
    cat = validate_catalog(stack_doc({**raw, **over}))
    assert not cat.rejected, cat.rejected
    return cat.models[0]


def flags(argv: list[str]) -> dict[str, str | None]:
    """`--flag value` / `--flag` pairs of a command line (values never start with '--')."""
    out: dict[str, str | None] = {}
    for i, word in enumerate(argv):
        if word.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            out[word] = nxt if nxt is not None and not nxt.startswith("--") else None
    return out


def test_every_sized_row_is_a_sizing_input_and_nothing_else_is() -> None:
    context = {"vllm_version"}
    assert set(sized_fields()) == set(SizingParams.model_fields) - context


@pytest.mark.parametrize("raw", [SINGLE_GPU, TP4, MULTI_NODE, CPU], ids=["single", "tp", "multi-node", "cpu"])
def test_the_sizing_inputs_are_what_vllm_is_told(raw: dict[str, Any]) -> None:
    e = entry(raw, maxNumBatchedTokens=4096, kvCacheDtype="fp8", cpuKvCacheGiB=2.5)
    params = sizing_params(e, "0.19.0")
    told = flags(va.serve_command(e, "/mnt/models"))
    env = {x.name: x.value for x in pod.env(pod.PodInputs(entry=e, serving=Serving(), weight_bytes=1))}
    for r in rows():
        if not r.flag.sized:
            continue
        value = getattr(params, r.field)
        if not r.applies_to(e.is_cpu):
            assert r.flag.flag not in told and r.flag.env not in env
        elif r.flag.env:
            assert env[r.flag.env] == r.text(getattr(e, r.field)) and float(str(env[r.flag.env])) == value
        elif isinstance(value, bool):
            assert (r.flag.flag in told) == value
        elif value is None:
            assert r.flag.flag not in told
        else:
            assert told[r.flag.flag] == r.text(value), r.field


def test_kserve_passes_in_args_exactly_the_rows_its_preset_does_not_render() -> None:
    single_pp = entry(SINGLE_GPU, gpusPerNode=2, pipelineParallelSize=2)
    args = flags(va.kserve_args(single_pp))
    assert args["--pipeline-parallel-size"] == "2", "the single-node preset renders only the tensor size"
    assert "--tensor-parallel-size" not in args and "--served-model-name" not in args
    multi = flags(va.kserve_args(entry(MULTI_NODE)))
    assert "--pipeline-parallel-size" not in multi, "the multi-node preset renders both sizes"
    spec_rows = {r.flag.flag for r in rows() if r.flag.kserve != KServe.ARGS}
    assert spec_rows == {"--served-model-name", "--tensor-parallel-size", "--pipeline-parallel-size"}


def test_both_backends_pass_the_same_table_flags() -> None:
    e = entry(TP4, maxNumBatchedTokens=4096, enforceEager=True, enablePrefixCaching=False,
              extraArgs=["--disable-log-stats"])
    vllm_backend = flags(va.serve_command(e, "/mnt/models"))
    kserve = flags(va.kserve_args(e))
    # What the KServe preset renders from the LLMInferenceService spec instead of args.
    kserve |= {"--served-model-name": e.served_name, "--tensor-parallel-size": str(e.tensor_parallel_size)}
    platform = {"--host", "--port"}
    assert {k: v for k, v in vllm_backend.items() if k not in platform} == kserve


def test_cpu_profile_passes_no_gpu_flag_and_its_kv_space_as_env() -> None:
    e = entry(CPU)
    argv = va.serve_command(e, "/mnt/models")
    gpu_only = {r.flag.flag for r in rows() if r.flag.applies == Applies.GPU}
    assert not gpu_only & set(argv)
    env = pod.env(pod.PodInputs(entry=e, serving=Serving(), weight_bytes=1))
    assert [(x.name, x.value) for x in env if x.name == "VLLM_CPU_KVCACHE_SPACE"] == [("VLLM_CPU_KVCACHE_SPACE", "2")]


def test_every_flag_a_row_emits_is_owned() -> None:
    owned = owned_flags()
    for r in rows():
        for name in (r.flag.flag, *r.flag.aliases):
            if name:
                assert name in owned, name


@pytest.mark.parametrize(("said", "words"), [(True, ["--enable-prefix-caching"]),
                                             (False, ["--no-enable-prefix-caching"]), (None, [])])
def test_prefix_caching_said_either_way_reaches_vllm_and_the_fit_check(said: bool | None, words: list[str]) -> None:
    """Both backends pass what the catalog says (off included: vLLM's default is on for hybrid models from
    0.28), and the fit check sizes the recurrent state with the same value; unset passes nothing."""
    e = entry(SINGLE_GPU, enablePrefixCaching=said)
    for argv in (va.serve_command(e, "/mnt/models"), va.kserve_args(e)):
        assert [w for w in argv if "prefix-caching" in w] == words
    assert sizing_params(e, "0.32.0").enable_prefix_caching is said
