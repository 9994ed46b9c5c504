"""Contradictions between fields (issue 30, second round): values each valid alone that vLLM or Kubernetes refuses
together, or that make the fit check size something other than what runs. Each is refused naming both fields, the
values and the fix; a catalog entry (or the models of a pool) is left out while its siblings deploy.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.mocks import SINGLE_GPU, stack_doc
from tkf_infra.config import SettingsError, validate_catalog
from tkf_infra.hub.lock import load_lock
from tkf_infra.names import GPU_PRODUCT_LABEL
from tkf_infra.plan import FleetPlan, Stage, plan_fleet
from tkf_infra.sizing.ec2 import InstanceGpus
from tkf_infra.sizing.gpus import lookup_gpu

LOCK = load_lock()
SIBLING = {**SINGLE_GPU, "name": "sibling", "servedName": "sibling"}


def rejected_text(doc: dict[str, Any]) -> str:
    """The one rejected entry's problems; its sibling still deploys."""
    cat = validate_catalog(doc)
    assert [m.name for m in cat.models] == ["sibling"], cat.rejected
    (rejected,) = cat.rejected
    return "\n".join(str(p) for p in rejected.problems)


def plan(doc: dict[str, Any], **kw: Any) -> FleetPlan:
    return plan_fleet(validate_catalog(doc), lock=LOCK, **kw)


def stack_error(doc: dict[str, Any]) -> str:
    with pytest.raises(SettingsError) as err:
        validate_catalog(doc)
    return str(err.value)


# -- 1. the step budget --------------------------------------------------------------------------------------------

def test_a_step_budget_below_the_batch_is_refused_naming_both() -> None:
    """vllm/config/scheduler.py@v0.32.0:328-333: max_num_batched_tokens must be >= max_num_seqs."""
    msg = rejected_text(stack_doc({**SINGLE_GPU, "maxNumSeqs": 256, "maxNumBatchedTokens": 128}, SIBLING))
    assert "maxNumBatchedTokens 128 is below maxNumSeqs 256" in msg
    assert "raise maxNumBatchedTokens to at least 256 or lower maxNumSeqs to at most 128" in msg


def test_the_step_budget_is_named_with_the_entrys_other_problems() -> None:
    """Pydantic skips an entry's cross-field rules once a field failed; the catalog still reports every reason."""
    msg = rejected_text(stack_doc({**SINGLE_GPU, "revision": "main", "maxNumBatchedTokens": 128}, SIBLING))
    assert "revision 'main' is a branch" in msg and "maxNumBatchedTokens 128 is below maxNumSeqs 256" in msg


def test_a_step_budget_equal_to_the_batch_or_left_to_vllm_passes() -> None:
    cat = validate_catalog(stack_doc({**SINGLE_GPU, "maxNumSeqs": 64, "maxNumBatchedTokens": 64},
                                     {**SIBLING, "maxNumSeqs": 4096}))
    assert not cat.rejected


@pytest.mark.parametrize("off", ["--no-enable-chunked-prefill", "--no_enable_chunked_prefill", "--no-enable-chunked"])
def test_without_chunked_prefill_a_prompt_must_fit_one_step(off: str) -> None:
    """vllm/config/scheduler.py@v0.32.0:314-326: with chunked prefill off, max_num_batched_tokens < max_model_len
    is refused at start-up. Any spelling vLLM's parser reads as the flag counts."""
    msg = rejected_text(stack_doc({**SINGLE_GPU, "maxModelLen": 8192, "maxNumBatchedTokens": 4096,
                                   "extraArgs": [off]}, SIBLING))
    assert "maxNumBatchedTokens 4096 is below maxModelLen 8192 while extraArgs turn chunked prefill off" in msg
    assert "raise maxNumBatchedTokens to at least 8192, lower maxModelLen to 4096, or drop" in msg


def test_with_chunked_prefill_on_a_step_budget_below_the_context_passes() -> None:
    cat = validate_catalog(stack_doc({**SINGLE_GPU, "maxModelLen": 8192, "maxNumBatchedTokens": 4096,
                                      "extraArgs": ["--enable-chunked-prefill"]}))
    assert not cat.rejected


# -- 2. speculative decoding ---------------------------------------------------------------------------------------

def test_mtp_on_a_checkpoint_without_mtp_layers_is_left_out_while_its_sibling_deploys() -> None:
    p = plan(stack_doc({**SINGLE_GPU, "speculativeConfig": {"method": "mtp", "num_speculative_tokens": 2}}, SIBLING))
    assert [m.entry.name for m in p.models] == ["sibling"]
    (x,) = p.excluded
    assert x.name == "qwen3-8b" and x.stage == Stage.CATALOG
    assert "speculativeConfig.method mtp" in x.reasons[0] and "Qwen/Qwen3-8B@" in x.reasons[0]
    assert "declares none" in x.reasons[0] and "use method eagle or eagle3" in x.reasons[0]


def test_mtp_on_a_checkpoint_with_mtp_layers_is_not_this_rules() -> None:
    from tkf_infra.plan.one_model import speculative_problem as _speculative_problem

    deepseek = next(f for f in LOCK.entries.values() if f.repo == "deepseek-ai/DeepSeek-V3")
    entry = validate_catalog(stack_doc({**SINGLE_GPU, "repo": deepseek.repo, "revision": deepseek.revision,
                                        "speculativeConfig": {"method": "mtp"}})).models[0]
    assert _speculative_problem(entry, deepseek) is None
    qwen = LOCK.get(str(SINGLE_GPU["repo"]), str(SINGLE_GPU["revision"]))
    assert qwen is not None and _speculative_problem(entry, qwen) is not None


@pytest.mark.parametrize("draft", ["https://huggingface.co/yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "/models/draft",
                                   "./draft", "draft", "org/name/extra", "org/name\n", 42])
def test_a_draft_model_that_is_not_a_repo_id_is_refused(draft: Any) -> None:
    msg = rejected_text(stack_doc({**SINGLE_GPU, "speculativeConfig": {"method": "eagle", "model": draft}}, SIBLING))
    assert f"speculativeConfig.model {draft!r} is not a Hugging Face repo id" in msg and "'org/name'" in msg


def test_a_draft_model_given_as_a_repo_id_passes() -> None:
    cat = validate_catalog(stack_doc({**SINGLE_GPU, "speculativeConfig": {
        "method": "eagle", "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}}))
    assert not cat.rejected


# -- 3. the sized GPU and the selected GPU are one part ------------------------------------------------------------

def two_pools(h100: dict[str, Any]) -> dict[str, Any]:
    pools = [{"name": "h100", "gpuProduct": "H100-80GB", "gpusPerNode": 8, "nodeCount": 3, **h100},
             {"name": "other", "gpuProduct": "H100-80GB", "gpusPerNode": 8}]
    return stack_doc(SINGLE_GPU, {**SIBLING, "nodePool": "other"}, nodePools=pools)


def test_a_pool_labelled_with_another_part_than_it_is_sized_on_is_refused() -> None:
    p = plan(two_pools({"labels": {GPU_PRODUCT_LABEL: "NVIDIA-A100-SXM4-80GB"}}))
    assert [m.entry.name for m in p.models] == ["sibling"]
    (x,) = p.excluded
    assert x.stage == Stage.POOL
    reason = x.reasons[0]
    assert f"labels {GPU_PRODUCT_LABEL} is 'NVIDIA-A100-SXM4-80GB' (A100-80GB), but gpuProduct sizes H100-80GB" \
        in reason
    assert "drop the label" in reason


def test_a_pool_labelled_with_a_mig_slice_of_its_board_is_refused() -> None:
    p = plan(two_pools({"labels": {GPU_PRODUCT_LABEL: "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"}}))
    (x,) = p.excluded
    assert x.stage == Stage.POOL and "a MIG slice and its whole board are sized apart" in x.reasons[0]


def test_a_pool_labelled_with_its_own_part_keeps_the_label_its_nodes_carry() -> None:
    p = plan(two_pools({"labels": {GPU_PRODUCT_LABEL: "NVIDIA-H100-80GB-HBM3"}}))
    assert not p.excluded
    assert p.pools["h100"].node_selector[GPU_PRODUCT_LABEL] == "NVIDIA-H100-80GB-HBM3"


def test_an_eks_pool_labelled_with_another_part_than_ec2_reports_is_refused() -> None:
    eks = {"name": "p5", "kind": "eks", "instanceType": "p5.48xlarge", "gpusPerNode": 8, "clusterName": "c",
           "nodeRoleArn": "arn:aws:iam::123456789012:role/nodes", "subnetIds": ["subnet-0abc"],
           "labels": {GPU_PRODUCT_LABEL: "NVIDIA-L40S"}}
    doc = stack_doc({**SINGLE_GPU, "nodePool": "p5"}, SIBLING,
                    nodePools=[eks, {"name": "h100", "gpuProduct": "H100-80GB", "gpusPerNode": 8}])
    info = InstanceGpus("p5.48xlarge", "H100", "NVIDIA", 8, 81559, lookup_gpu("H100-80GB"))
    p = plan(doc, ec2={"p5.48xlarge": info})
    (x,) = p.excluded
    assert x.stage == Stage.POOL and "instanceType p5.48xlarge sizes H100-80GB" in x.reasons[0]
    assert [m.entry.name for m in p.models] == ["sibling"]


# -- 4. a GPU memory override the part cannot have -----------------------------------------------------------------

@pytest.mark.parametrize(("value", "side", "hint"), [(141, "more", "H200"), (8, "far less", None),
                                                     (40, "far less", "A100-40GB")])
def test_a_memory_override_no_part_of_that_name_has_is_refused(value: float, side: str, hint: str | None) -> None:
    p = plan(two_pools({"gpuMemoryGiB": value}))
    (x,) = p.excluded
    assert x.stage == Stage.POOL
    reason = x.reasons[0]
    assert f"gpuMemoryGiB {value:g} is {side} than a H100-80GB has (80 GB; CUDA reports 79.19 GiB)" in reason
    assert "no part of that name has it" in reason and "between 60 and 80" in reason
    if hint:
        assert hint in reason
    assert [m.entry.name for m in p.models] == ["sibling"]


def test_a_memory_override_within_the_part_is_used() -> None:
    p = plan(two_pools({"gpuMemoryGiB": 79.5}))
    assert not p.excluded and p.pools["h100"].gpu is not None and p.pools["h100"].gpu.memory_gib == 79.5


# -- 5. the vLLM release: one setting ------------------------------------------------------------------------------

def test_a_vllm_version_that_contradicts_the_image_tag_is_refused() -> None:
    msg = stack_error(stack_doc(SINGLE_GPU, serving={"vllmImage": "vllm/vllm-openai:v0.32.0",
                                                     "vllmVersion": "0.19.0"}))
    assert "serving.vllmVersion '0.19.0' contradicts serving.vllmImage 'vllm/vllm-openai:v0.32.0'" in msg
    assert "whose tag is vLLM 0.32.0" in msg and "remove vllmVersion" in msg


@pytest.mark.parametrize("version", ["0.32.0", "v0.32.0", "0.32"])
def test_a_vllm_version_that_agrees_with_the_tag_passes(version: str) -> None:
    cat = validate_catalog(stack_doc(SINGLE_GPU, serving={"vllmImage": "vllm/vllm-openai:v0.32.0",
                                                          "vllmVersion": version}))
    assert cat.settings.serving.version == version


def test_a_cpu_model_on_a_cpu_image_of_another_release_is_left_out() -> None:
    cpu = {"name": "tiny", "repo": "Qwen/Qwen2.5-0.5B-Instruct", "revision": "7ae557604adf67be50417f59c2c2f167def9a775",
           "servedName": "tiny", "gpusPerNode": 0, "maxModelLen": 4096}
    serving = {"vllmImage": "vllm/vllm-openai:v0.32.0",
               "vllmCpuImage": "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.19.0"}
    cat = validate_catalog(stack_doc(cpu, SIBLING, serving=serving))
    assert [m.name for m in cat.models] == ["sibling"], "the GPU model runs the image the check sizes"
    msg = str(cat.rejected[0].problems[0])
    assert "runs serving.vllmCpuImage" in msg and "vLLM 0.19.0, but the fit check sizes vLLM 0.32.0" in msg


# -- 6. the GPU Operator's privileged namespace is not the models' ------------------------------------------------

def test_the_gpu_operator_and_the_models_cannot_share_a_namespace() -> None:
    msg = stack_error(stack_doc(SINGLE_GPU, namespaces={"serving": "llm", "gpuOperator": "llm"}))
    assert "namespaces.gpuOperator is 'llm', the serving namespace too" in msg
    assert "pod-security.kubernetes.io/enforce: privileged" in msg and "a namespace of its own" in msg
