"""Each guardrail refuses what it should: rendered objects of the committed prod stack, varied by hand.

Every violation must name the model, the resource, the offending value and a fix.
"""

from __future__ import annotations

from typing import Any

import pytest

from policy.guardrails.objects import K8sObject
from tests.mocks import program
from tests.policy_helpers import (
    API_KEY,
    edited,
    objects,
    pack_config,
    run_guardrail,
    stack_objects,
    stack_settings,
    template_path,
    with_main,
    workload,
)

PROD = pack_config("prod")
BACKENDS = ["kserve", "vllm"]


def messages(name: str, objs: list[K8sObject], config: dict[str, Any] | None = None) -> list[str]:
    return [v.message for v in run_guardrail(name, objs, PROD[name] if config is None else config)]


def only(name: str, obj: K8sObject, config: dict[str, Any] | None = None) -> str:
    found = messages(name, [obj], config)
    assert len(found) == 1, found
    return found[0]


# --- placement ----------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_pool_not_allowed_in_the_namespace_is_refused(backend: str) -> None:
    w = workload(stack_objects("prod", backend), "qwen-2-5-72b")
    cfg = {
        **PROD["serving-node-pools"],
        "pools": {**PROD["serving-node-pools"]["pools"], "a100": {"nodeSelector": {"gpu": "a100"}}},
    }
    moved = edited(w, f"{template_path(w)}.nodeSelector", {"gpu": "a100"})
    msg = only("serving-node-pools", moved, cfg)
    assert msg.startswith("model qwen-2-5-72b: ")
    assert "node pool 'a100', which is not allowed in namespace 'llm-serving' (allowed: h100)" in msg
    assert "Fix: set the entry's nodePool to one of h100" in msg


@pytest.mark.parametrize("backend", BACKENDS)
def test_pods_selecting_no_known_pool_are_refused(backend: str) -> None:
    w = workload(stack_objects("prod", backend), "llama-3-1-8b")
    msg = only("serving-node-pools", edited(w, f"{template_path(w)}.nodeSelector", None))
    assert "nodeSelector {} (any node) selects no node pool the platform owner defined" in msg
    assert "h100 {nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3}" in msg


def test_serving_namespace_must_be_one_the_owner_allows() -> None:
    w = workload(stack_objects("prod", "kserve"), "llama-3-1-8b")
    msg = only("serving-node-pools", edited(w, "metadata.namespace", "team-x"))
    assert "namespace 'team-x' is not a serving namespace of this stack (allowed: llm-serving)" in msg


@pytest.mark.parametrize("backend", BACKENDS)
def test_per_pool_ceiling_counts_every_node_of_a_multi_node_model(backend: str) -> None:
    objs = stack_objects("prod", backend)
    cfg = {
        **PROD["serving-node-pools"],
        "pools": {"h100": {**PROD["serving-node-pools"]["pools"]["h100"], "maxGpusPerModel": 8}},
    }
    found = messages("serving-node-pools", objs, cfg)
    assert len(found) == 1
    assert found[0].startswith("model llama-3-1-405b: ")
    assert "takes 16 GPUs on node pool 'h100'; the pool allows at most 8 per model" in found[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_model_gpu_ceiling_default_and_per_model(backend: str) -> None:
    objs = stack_objects("prod", backend)
    cfg = {"defaultMaxGpus": 2, "maxGpus": {"llama-3-1-405b": 12}}
    found = sorted(messages("model-gpu-ceiling", objs, cfg))
    assert len(found) == 2
    assert found[0].startswith("model llama-3-1-405b: ")
    assert "takes 16 GPUs (replicas x GPUs per replica); its own ceiling (maxGpus) is 12" in found[0]
    assert found[1].startswith("model qwen-2-5-72b: ")
    assert "takes 4 GPUs (replicas x GPUs per replica); the default ceiling (defaultMaxGpus) is 2" in found[1]


def test_replicas_count_towards_the_ceiling() -> None:
    w = workload(stack_objects("prod", "kserve"), "llama-3-1-8b")  # 2 replicas x 1 GPU
    assert messages("model-gpu-ceiling", [w], {"defaultMaxGpus": 2}) == []
    msg = only("model-gpu-ceiling", edited(w, "spec.replicas", 3), {"defaultMaxGpus": 2})
    assert "takes 3 GPUs" in msg


# --- GPU requests -------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_gpu_request_different_from_limit_is_refused(backend: str) -> None:
    w = workload(stack_objects("prod", backend), "qwen-2-5-72b")
    bad = with_main(w, lambda c: c["resources"]["limits"].update({"nvidia.com/gpu": "8"}))
    msg = only("gpu-requests-equal-limits", bad)
    assert "container 'main'" in msg and "requests 4 nvidia.com/gpu but limits 8" in msg


def test_kserve_service_with_parallelism_must_request_gpus() -> None:
    w = workload(stack_objects("prod", "kserve"), "gpt-oss-120b")
    bare = with_main(w, lambda c: c.update(resources={"requests": {"cpu": "6"}, "limits": {}}))
    msg = only("gpu-requests-equal-limits", bare)
    assert msg.startswith("model gpt-oss-120b: LLMInferenceService llm-serving/gpt-oss-120b (pod pods): ")
    assert "sets parallelism but its pods request no nvidia.com/gpu (KServe never adds it)" in msg


def test_a_mig_slice_is_the_gpu_request_of_a_service_with_parallelism() -> None:
    w = workload(stack_objects("prod", "kserve"), "llama-3-1-8b")
    mig = {"requests": {"cpu": "4", "nvidia.com/mig-1g.20gb": "1"}, "limits": {"nvidia.com/mig-1g.20gb": "1"}}
    sliced = with_main(w, lambda c: c.update(resources=mig))
    assert messages("gpu-requests-equal-limits", [sliced]) == []  # gpuShare mig:1g.20gb passes
    uneven = with_main(sliced, lambda c: c["resources"]["limits"].update({"nvidia.com/mig-1g.20gb": "2"}))
    assert "requests 1 nvidia.com/mig-1g.20gb but limits 2" in only("gpu-requests-equal-limits", uneven)


# --- provenance -------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_image_from_an_unapproved_registry_is_refused(backend: str) -> None:
    w = workload(stack_objects("prod", backend), "llama-3-1-8b")
    bad = with_main(w, lambda c: c.update(image="ghcr.io/someone/vllm:v0.11.0"))
    msg = only("approved-images", bad)
    assert "image 'ghcr.io/someone/vllm:v0.11.0' is not from an approved registry (approved: docker.io/vllm/)" in msg


def test_an_approved_repository_is_not_a_prefix_of_lookalikes() -> None:
    w = workload(stack_objects("dev", "kserve"), "qwen-0-5b")
    dev = pack_config("dev")["approved-images"]
    assert messages("approved-images", [w], dev) == []
    fork = "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo-fork:v0.11.0"
    msg = only("approved-images", with_main(w, lambda c: c.update(image=fork)), dev)
    assert f"image '{fork}' is not from an approved registry" in msg


@pytest.mark.parametrize(("image", "expected"), [
    ("vllm/vllm-openai:v0.10.2", "runs vLLM 'v0.10.2', but this stack is pinned to vLLM 'v0.32.0'"),
    ("vllm/vllm-openai:latest", "is not pinned (no tag, or 'latest')"),
    ("vllm/vllm-openai", "is not pinned (no tag, or 'latest')"),
])
def test_vllm_image_must_be_the_pinned_release(image: str, expected: str) -> None:
    w = workload(stack_objects("prod", "vllm"), "gpt-oss-120b")
    msg = only("approved-images", with_main(w, lambda c: c.update(image=image)))
    assert msg.startswith("model gpt-oss-120b: Deployment llm-serving/gpt-oss-120b container 'main': ")
    assert expected in msg


def test_download_job_image_is_checked_and_named_by_its_models() -> None:
    job = next(o for o in stack_objects("prod", "kserve") if o.kind == "Job" and "405b" in o.name)
    msg = only("approved-images", edited(job, "spec.template.spec.containers.0.image", "quay.io/x/hf:1"))
    assert msg.startswith("model llama-3-1-405b: Job llm-serving/")


@pytest.mark.parametrize(("path", "value", "where"), [
    ("metadata.annotations.tkf.io/revision", "main", "annotation tkf.io/revision"),
    ("spec.model.uri", "hf://Qwen/Qwen2.5-72B-Instruct:main", "spec.model.uri"),
])
def test_unpinned_revision_is_refused(path: str, value: str, where: str) -> None:
    w = workload(stack_objects("prod", "kserve"), "qwen-2-5-72b")
    if path.startswith("metadata.annotations."):
        props = dict(w.props)
        props["metadata"] = {
            **props["metadata"],
            "annotations": {**props["metadata"]["annotations"], "tkf.io/revision": value},
        }
        bad = K8sObject(w.type, props, w.urn)
    else:
        bad = edited(w, path, value)
    msg = only("revisions-pinned", bad)
    assert f"{where}: revision {value!r} is not a pinned 40-hex commit" in msg


def test_revision_flag_of_a_hub_download_is_checked() -> None:
    w = workload(stack_objects("prod", "vllm"), "llama-3-1-8b")
    cmd = ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--revision", "v1.0"]
    msg = only("revisions-pinned", with_main(w, lambda c: c.update(command=cmd)))
    assert "container 'main' --revision: revision 'v1.0' is not a pinned 40-hex commit" in msg


# --- exposure -----------------------------------------------------------------------------------


@pytest.mark.parametrize("svc_type", ["LoadBalancer", "NodePort"])
def test_model_service_exposed_outside_the_cluster_is_refused(svc_type: str) -> None:
    svc = next(o for o in stack_objects("prod", "vllm") if o.kind == "Service" and o.model == "llama-3-1-8b")
    msg = only("no-external-model-services", edited(svc, "spec.type", svc_type))
    assert msg.startswith("model llama-3-1-8b: Service llm-serving/llama-3-1-8b-openai: ")
    assert f"is of type {svc_type}" in msg and "Fix: make it type ClusterIP" in msg


def test_any_service_selecting_model_pods_is_covered() -> None:
    extra = K8sObject("kubernetes:core/v1:Service", {"metadata": {"name": "debug", "namespace": "llm-serving"},
                      "spec": {"type": "NodePort", "selector": {"tkf.io/model": "qwen-2-5-72b"}}})
    assert "model qwen-2-5-72b: Service llm-serving/debug: is of type NodePort" in only(
        "no-external-model-services", extra
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_api_key_as_a_literal_is_refused_without_echoing_it(backend: str) -> None:
    w = workload(stack_objects("prod", backend), "llama-3-1-8b")
    env = [{"name": "HOME", "value": "/home"}, {"name": "VLLM_API_KEY", "value": API_KEY}]
    msg = only("api-key-by-secret-ref", with_main(w, lambda c: c.update(env=env)))
    assert "sets VLLM_API_KEY from a literal value" in msg and "valueFrom.secretKeyRef" in msg
    assert API_KEY not in msg


def test_api_key_flag_and_missing_key_are_refused() -> None:
    w = workload(stack_objects("prod", "vllm"), "gpt-oss-120b")
    flagged = with_main(w, lambda c: c.update(args=["--api-key", "x"]))
    assert "passes an API key on the command line (--api-key) other than as a reference" in only(
        "api-key-by-secret-ref", flagged)
    keyless = with_main(w, lambda c: c.update(env=[{"name": "HOME", "value": "/home"}]))
    assert "serves without an API key (VLLM_API_KEY is not set)" in only("api-key-by-secret-ref", keyless)
    assert messages("api-key-by-secret-ref", [keyless], {"required": False}) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_rotations_two_keys_by_reference_pass_and_by_value_do_not(backend: str) -> None:
    """Mid-rotation, `--api-key` names the two Secret-backed variables (single-node and multi-node pods)."""
    objs = objects(program(stack_settings("prod", backend), api_key=API_KEY, api_key_next="sk-policy-next-key"))
    assert run_guardrail("api-key-by-secret-ref", objs, PROD["api-key-by-secret-ref"]) == []
    w = workload(objs, "gpt-oss-120b")
    literal = with_main(w, lambda c: c.update(args=[*(c.get("args") or []), "--api-key", "$(VLLM_API_KEY)", "x"]))
    assert "other than as a reference" in only("api-key-by-secret-ref", literal)
    unknown = with_main(w, lambda c: c.update(args=[*(c.get("args") or []), "--api-key", "$(NOT_A_SECRET_VAR)"]))
    assert "other than as a reference" in only("api-key-by-secret-ref", unknown)


@pytest.mark.parametrize("backend", BACKENDS)
def test_model_pods_without_a_network_policy_are_refused(backend: str) -> None:
    objs = [o for o in stack_objects("prod", backend) if not (o.kind == "NetworkPolicy" and o.model == "qwen-2-5-72b")]
    found = run_guardrail("model-pods-isolated", objs, PROD["model-pods-isolated"])
    assert len(found) == 1
    assert found[0].message.startswith("model qwen-2-5-72b: ")
    assert "no NetworkPolicy in namespace 'llm-serving' selects its pods" in found[0].message
    assert found[0].urn == workload(objs, "qwen-2-5-72b").urn, "attributed to the workload for the engine"


def test_network_policy_admitting_other_sources_is_refused() -> None:
    objs = stack_objects("prod", "kserve")
    i = next(i for i, o in enumerate(objs) if o.kind == "NetworkPolicy" and o.model == "llama-3-1-405b")
    rules = [
        *objs[i].spec["ingress"],
        {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "default"}}}]},
        {"ports": [{"port": 8000}]},
    ]
    objs[i] = edited(objs[i], "spec.ingress", rules)
    found = [v.message for v in run_guardrail("model-pods-isolated", objs, PROD["model-pods-isolated"])]
    assert len(found) == 1
    assert "NetworkPolicy llm-serving/llama-3-1-405b-netpol: admits namespace 'default', every source" in found[0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_monitoring_admitted_to_the_api_port_is_refused(backend: str) -> None:
    """Scraping through port 8000 would let the monitoring namespace call /invocations without a key."""
    objs = stack_objects("prod", backend)
    assert not run_guardrail("model-pods-isolated", objs, PROD["model-pods-isolated"])
    i = next(i for i, o in enumerate(objs) if o.kind == "NetworkPolicy" and o.model == "qwen-2-5-72b")
    rules = [dict(r, ports=[{"protocol": "TCP", "port": 8000}]) if "monitoring" in str(r) else r
             for r in objs[i].spec["ingress"]]
    objs[i] = edited(objs[i], "spec.ingress", rules)
    found = [v.message for v in run_guardrail("model-pods-isolated", objs, PROD["model-pods-isolated"])]
    assert len(found) == 1
    assert "admits namespace 'monitoring' on 8000 (it may reach only the metrics port 9000" in found[0]


# --- weight cache and fleet ------------------------------------------------------------------------


def test_unprotected_weight_cache_is_refused_where_the_stack_requires_it() -> None:
    pvcs = [o for o in stack_objects("prod", "kserve") if o.kind == "PersistentVolumeClaim"]
    assert len(pvcs) == 4 and all(p.protect for p in pvcs)
    bare = K8sObject(pvcs[0].type, pvcs[0].props, pvcs[0].urn, protect=False)
    msg = only("weight-cache-protected", bare)
    assert "the weight-cache PVC is not protected" in msg and "Fix: set serving.protect: true" in msg
    assert messages("weight-cache-protected", [bare], {"requireProtect": False}) == []


def test_fleet_budget_names_every_model_and_the_totals() -> None:
    objs = stack_objects("prod", "kserve")
    found = [v for v in run_guardrail("fleet-budget", objs, {"maxGpus": 20, "maxModels": 3, "maxWeightCacheGiB": 500})]
    text = "\n".join(v.message for v in found)
    assert len(found) == 3 and all(v.urn is None for v in found)
    assert found[0].message.startswith("models gpt-oss-120b, llama-3-1-405b, llama-3-1-8b, qwen-2-5-72b: fleet: ")
    assert "the models take 24 GPUs in total (gpt-oss-120b 2, llama-3-1-405b 16, llama-3-1-8b 2, qwen-2-5-72b 4)" \
        in text
    assert "4 models are served; the stack's budget is 3" in text
    assert "the weight caches request" in text and "budget is 500 GiB" in text


# --- fit verdict --------------------------------------------------------------------------------


def _with_verdict(w: K8sObject, verdict: Any) -> K8sObject:
    props = dict(w.props)
    props["metadata"] = {**props["metadata"], "annotations": {**props["metadata"]["annotations"],
                                                              "tkf.io/fit-verdict": verdict}}
    return K8sObject(w.type, props, w.urn)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_tight_fit_is_refused_where_the_owner_forbids_it_and_allowed_elsewhere(backend: str) -> None:
    """prod forbids a tight fit (allowTight: false): the rendered workload, its verdict annotation set to tight,
    is one violation naming the model, the verdict and the two ways out; dev allows it; a fit or a verdict the
    preview does not know yet is never a violation."""
    w = workload(stack_objects("prod", backend), "qwen-2-5-72b")
    assert w.annotations["tkf.io/fit-verdict"] in ("fits", "tight"), "the components write the plan's verdict"
    msg = only("fit-verdict", _with_verdict(w, "tight"))
    assert msg.startswith("model qwen-2-5-72b: ") and "its fit is tight" in msg
    assert "tensorParallelSize" in msg and "policy/config/<stack>.json" in msg
    assert not messages("fit-verdict", [_with_verdict(w, "tight")], pack_config("dev")["fit-verdict"])
    assert not messages("fit-verdict", [_with_verdict(w, "fits")])
    from policy.guardrails.objects import UNKNOWN
    assert not messages("fit-verdict", [_with_verdict(w, UNKNOWN)])
