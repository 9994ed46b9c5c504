"""The program under mocks: provider modes, the shared weight cache, models left out and why, capacity."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from components.fleet import Fleet
from tests.mocks import CPU, MULTI_NODE, QWEN3_8B, SINGLE_GPU, TP4, Harness, program, stack_doc
from tkf_infra.hub.lock import Lock, load_lock
from tkf_infra.program import POLICY_REFUSALS_ENV

LOCK = load_lock()



def build(doc: dict[str, Any], lock: Lock = LOCK, api_key: str | None = "k") -> Harness[Fleet]:
    h = program(doc, lock=lock, api_key=api_key)
    assert h.error is None or any(w in str(h.error) for w in ("were refused", "was refused", "fleet problem")), h.error
    return h


def test_render_mode_provider_gets_only_the_directory() -> None:
    h = build(stack_doc(CPU))
    provider = next(r for r in h.resources if r.type == "pulumi:providers:kubernetes")
    assert provider.inputs["renderYamlToDirectory"] == "rendered/test"
    assert "kubeconfig" not in provider.inputs and "context" not in provider.inputs


def test_kubeconfig_mode_passes_contents_context_and_cluster_identifier_as_secret(tmp_path: Path) -> None:
    kc = tmp_path / "kubeconfig"
    kc.write_text("apiVersion: v1\nkind: Config\n# token: sekrit\n")
    cluster = {"mode": "kubeconfig", "kubeconfig": str(kc), "context": "prod", "clusterIdentifier": "prod-eu-1"}
    h = build(stack_doc(CPU, cluster=cluster))
    provider = next(r for r in h.resources if r.type == "pulumi:providers:kubernetes")
    assert provider.inputs["kubeconfig"] != kc.read_text(), "wrapped as a secret on the wire, never plaintext"
    assert provider.inputs["context"] == "prod" and provider.inputs["clusterIdentifier"] == "prod-eu-1"
    assert "renderYamlToDirectory" not in provider.inputs


def test_two_entries_with_the_same_weights_share_one_pvc_and_one_job() -> None:
    twin = {**SINGLE_GPU, "name": "qwen3-8b-long", "servedName": "qwen3-8b-long", "maxModelLen": 16384}
    h = build(stack_doc(SINGLE_GPU, twin))
    pvcs = [r for r in h.resources if r.type == "kubernetes:core/v1:PersistentVolumeClaim"]
    jobs = [r for r in h.resources if r.type == "kubernetes:batch/v1:Job"]
    assert len(pvcs) == 1 and len(jobs) == 1
    # Pods on different nodes mount it: ReadWriteMany.
    assert pvcs[0].spec["accessModes"] == ["ReadWriteMany"]
    uris = {r.spec["model"]["uri"] for r in h.resources if r.inputs.get("kind") == "LLMInferenceService"}
    assert len(uris) == 1


def test_pvc_is_sized_from_the_lock_and_kept_when_the_model_goes() -> None:
    h = build(stack_doc(SINGLE_GPU))
    pvc = next(r for r in h.resources if r.type == "kubernetes:core/v1:PersistentVolumeClaim")
    # Qwen3-8B: 16,381,470,720 bytes x 1.25 headroom = 19.07 GiB -> 20Gi.
    assert pvc.spec["resources"]["requests"]["storage"] == "20Gi"
    assert pvc.options["retainOnDelete"] is True
    assert not pvc.options["protect"]


def test_prune_and_protect_settings_reach_the_pvc_and_namespace() -> None:
    h = build(stack_doc(SINGLE_GPU, serving={"allowCpu": True, "pruneWeightCache": True, "protect": True,
                                             "storageClass": "fast-rwx"}))
    pvc = next(r for r in h.resources if r.type == "kubernetes:core/v1:PersistentVolumeClaim")
    assert pvc.options["retainOnDelete"] is False and pvc.options["protect"] is True
    assert pvc.spec["storageClassName"] == "fast-rwx"
    assert h.mocks.named("namespace-serving").options["protect"] is True


def test_download_job_pins_the_revision_and_skips_a_finished_download() -> None:
    h = build(stack_doc(SINGLE_GPU))
    job = next(r for r in h.resources if r.type == "kubernetes:batch/v1:Job")
    script = job.spec["template"]["spec"]["containers"][0]["command"][-1]
    assert f"--revision {QWEN3_8B['revision']}" in script
    assert "if [ -f /weight-cache/" in script and "exit 0" in script
    env = {e["name"] for e in job.spec["template"]["spec"]["containers"][0]["env"]}
    assert "HF_HUB_OFFLINE" not in env


def servings(h: Harness[Any]) -> set[str]:
    return {r.name for r in h.resources if r.type == "tkf:serving:ModelServing"}


def test_an_entry_missing_from_the_lock_is_left_out_with_the_fix_and_the_run_fails() -> None:
    lock = Lock(entries={k: v for k, v in LOCK.entries.items() if not k.startswith("Qwen/Qwen3-8B@")})
    h = build(stack_doc(SINGLE_GPU, CPU), lock=lock)
    assert servings(h) == {"tiny"}
    assert any("qwen3-8b was left out of this deployment (lock)" in e
               and "python -m tkf_infra lock Qwen/Qwen3-8B@" in e for e in h.errors()), h.errors()
    assert "1 catalog entry was refused (qwen3-8b); the other 1 were deployed" in str(h.error)


def test_gated_model_without_token_secret_is_left_out() -> None:
    ungated = {k: v for k, v in MULTI_NODE.items() if k != "hfTokenSecret"}
    h = build(stack_doc(ungated, CPU))
    assert servings(h) == {"tiny"}
    assert any("(access)" in e and "hfTokenSecret" in e for e in h.errors())


def test_k_refused_models_are_all_named_and_every_healthy_one_is_deployed() -> None:
    too_long = {**SINGLE_GPU, "name": "too-long", "servedName": "too-long", "maxModelLen": 10_000_000}
    too_big = {**TP4, "name": "too-big", "servedName": "too-big", "gpusPerNode": 1, "tensorParallelSize": 1}
    h = build(stack_doc(too_long, too_big, SINGLE_GPU, CPU))
    assert servings(h) == {"qwen3-8b", "tiny"}
    checks = [r for r in h.resources if r.type.endswith(":FitCheck")]
    assert len(checks) == 1 and set(checks[0].inputs["models"]) == {"qwen3-8b", "tiny"}, (
        "a refused model registers nothing, not even a verdict that would abort the run")
    errors = " ".join(h.errors())
    assert "too-long was left out of this deployment (fit)" in errors and "longer than the model's" in errors
    assert "too-big was left out of this deployment (fit)" in errors and "fits with tensorParallelSize" in errors
    assert "2 catalog entries were refused (too-long, too-big); the other 2 were deployed" in str(h.error)


def test_pool_over_capacity_is_an_error_naming_the_models() -> None:
    h = build(stack_doc(MULTI_NODE, TP4, SINGLE_GPU, nodePools=[
        {"name": "h100", "gpuProduct": "H100-80GB", "gpusPerNode": 8, "nodeCount": 2}]))
    errors = h.errors()
    assert any("nodePool h100" in e and "llama-405b 16" in e and "qwen-72b 4" in e for e in errors), errors


def test_one_bad_pool_leaves_out_only_its_models(ec2: Any) -> None:
    eks = {"name": "p4", "kind": "eks", "instanceType": "g99.huge", "gpusPerNode": 8, "clusterName": "c",
           "nodeRoleArn": "arn:aws:iam::123456789012:role/n", "subnetIds": ["subnet-1"]}
    doc = stack_doc(SINGLE_GPU, {**TP4, "nodePool": "p4"}, CPU)
    doc["nodePools"].append(eks)
    h = program(doc, ec2_client=ec2)
    assert servings(h) == {"qwen3-8b", "tiny"}
    errors = " ".join(h.errors())
    assert "qwen-72b was left out of this deployment (pool)" in errors and "g99.huge" in errors


def test_no_api_key_warns_and_serves_without_the_env_on_the_dev_stack_only() -> None:
    h = program(stack_doc(CPU), lock=LOCK, api_key=None, stack="dev")
    assert h.error is None, h.error
    assert any("without authentication" in w for w in h.warnings())
    assert not [r for r in h.resources if r.type == "kubernetes:core/v1:Secret"]


@pytest.mark.parametrize("stack", ["prod", "staging"])
def test_no_api_key_refuses_every_other_stack_naming_the_command(stack: str) -> None:
    h = program(stack_doc(CPU), lock=LOCK, api_key=None, stack=stack)
    text = " ".join(str(h.error).split())
    assert f"tkf-infra: apiKey: is not set or is empty on stack {stack!r}" in text, text
    assert "vLLM would serve without authentication" in text
    assert f'`pulumi config set --secret apiKey "$(openssl rand -hex 32)" --stack {stack}`' in text
    assert not [r for r in h.resources if r.type.startswith("kubernetes:")], "nothing is registered"


def test_all_platform_pieces_installed_registers_no_platform_resources() -> None:
    h = build(stack_doc(CPU, MULTI_NODE))
    platform = {r.urn for r in h.resources if r.type.startswith("tkf:platform:")}
    assert platform
    children = [r for r in h.resources if r.parent in platform]
    # Only our own pipeline-parallel preset: installed KServe does not ship it.
    assert [r.inputs.get("kind") for r in children] == ["LLMInferenceServiceConfig"]


def deployed_output(*entries: dict[str, Any]) -> dict[str, Any]:
    """The `deployed` output a previous run of the test stack would have exported for these entries."""
    h = build(stack_doc(*entries))
    assert h.result is not None
    return {"deployed": {m.entry.name: m.entry.model_dump(by_alias=True, mode="json", exclude_none=True)
                         for m in h.result.plan.models}}


def workloads(h: Harness[Any]) -> dict[str, dict[str, Any]]:
    return {r.metadata["name"]: r.spec for r in h.resources if r.inputs.get("kind") == "LLMInferenceService"}


def test_a_refused_edit_keeps_the_running_model_at_its_last_deployed_settings() -> None:
    previous = deployed_output(SINGLE_GPU, CPU)
    bad_edit = {**SINGLE_GPU, "maxModelLen": 10_000_000}  # no longer fits: must not take the live model down
    h = program(stack_doc(bad_edit, CPU), previous=previous)
    kept = workloads(h)["qwen3-8b"]
    assert "--max-model-len" in kept["template"]["containers"][0]["args"]
    args = kept["template"]["containers"][0]["args"]
    assert args[args.index("--max-model-len") + 1] == "8192", "served exactly as last deployed"
    errors = " ".join(h.errors())
    assert "qwen3-8b: the new settings were refused (fit); it keeps serving at its last deployed settings" in errors
    assert "1 catalog entry was refused (qwen3-8b (kept at its last deployed settings)); the other 1 were deployed" \
        in str(h.error)


def test_a_removed_entry_is_removed_and_a_refused_new_one_is_not_invented() -> None:
    previous = deployed_output(SINGLE_GPU, CPU)
    h = program(stack_doc(CPU), previous=previous)
    assert set(workloads(h)) == {"tiny"} and h.error is None
    new_bad = {**TP4, "name": "new-bad", "servedName": "new-bad", "maxModelLen": 10_000_000}
    h = program(stack_doc(new_bad, CPU), previous=previous)
    assert set(workloads(h)) == {"tiny"}
    assert any("new-bad was left out of this deployment (fit)" in e for e in h.errors())


def test_models_the_policy_pack_refused_are_left_out_with_stage_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    violation = "model qwen3-8b: LLMInferenceService llm-serving/qwen3-8b: pool 'h100' is not allowed. Fix: …"
    monkeypatch.setenv(POLICY_REFUSALS_ENV, json.dumps({"qwen3-8b": [violation]}))
    h = program(stack_doc(SINGLE_GPU, CPU))
    assert set(workloads(h)) == {"tiny"}
    assert any("qwen3-8b was left out of this deployment (policy)" in e and violation in e for e in h.errors())
