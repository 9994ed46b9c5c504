"""ModelServing under mocks: per profile and backend, what a user of the cluster would notice."""

from __future__ import annotations

from typing import Any

import pytest

from components.fleet import Fleet
from components.model_serving import KSERVE_OWNED_LABELS
from tests.mocks import CPU, MULTI_NODE, SINGLE_GPU, TP4, Harness, Registered, program, stack_doc
from tkf_infra.hub.lock import load_lock
from tkf_infra.names import PIPELINE_PARALLEL_PRESET

LOCK = load_lock()
API_KEY = "sk-test-4f1c9a7e-not-a-real-key"


def build(*models: dict[str, Any], backend: str = "kserve", **overrides: Any) -> Harness[Fleet]:
    h = program(stack_doc(*models, backend=backend, **overrides), api_key=API_KEY,
                outputs=lambda f: {f"{n}.url": m.base_url for n, m in f.models.items()})
    assert h.error is None and h.result is not None, h.error
    return h


def workload(h: Harness[Fleet], name: str) -> Registered:
    kinds = {"LLMInferenceService", "LeaderWorkerSet", "Deployment"}
    found = [r for r in h.resources if r.custom and r.metadata.get("name") == name and r.inputs.get("kind") in kinds]
    assert len(found) == 1, h.mocks.dump()
    return found[0]


def main(pod: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod["containers"] if c["name"] == "main")


def _gib(container: dict[str, Any]) -> int:
    return int(container["resources"]["requests"]["memory"].removesuffix("Gi"))


def flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


# ---------------------------------------------------------------------------------------------
# KServe backend, per profile
# ---------------------------------------------------------------------------------------------


def test_single_gpu_llmisvc_requests_one_gpu_on_the_pool_and_serves_from_the_cache() -> None:
    h = build(SINGLE_GPU)
    svc = workload(h, "qwen3-8b")
    spec = svc.spec
    assert svc.inputs["apiVersion"] == "serving.kserve.io/v1alpha2"
    assert spec["model"]["name"] == "qwen3-8b"
    assert spec["model"]["uri"].startswith("pvc://weights-qwen3-8b-")
    assert spec["model"]["uri"].endswith("/b968826d9c46dd6066d109eabc6255188de91218")
    assert spec["parallelism"] == {"tensor": 1}
    assert "worker" not in spec
    c = main(spec["template"])
    assert c["resources"]["requests"]["nvidia.com/gpu"] == "1" == c["resources"]["limits"]["nvidia.com/gpu"]
    assert c["image"] == "vllm/vllm-openai:v0.32.0"
    assert flag(c["args"], "--max-model-len") == "8192"
    assert flag(c["args"], "--gpu-memory-utilization") == "0.9"
    assert spec["template"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["template"]["tolerations"]
    assert spec["template"]["initContainers"][0]["name"] == "wait-for-weights"


def test_tensor_parallel_gpus_equal_tp_and_shm_grows_with_it() -> None:
    h = build(TP4, SINGLE_GPU)
    tp4, one = workload(h, "qwen-72b").spec, workload(h, "qwen3-8b").spec
    assert tp4["parallelism"] == {"tensor": 4}
    assert main(tp4["template"])["resources"]["limits"]["nvidia.com/gpu"] == "4"
    shm = {v["name"]: v for v in tp4["template"]["volumes"]}["dshm"]["emptyDir"]
    shm1 = {v["name"]: v for v in one["template"]["volumes"]}["dshm"]["emptyDir"]
    assert shm["medium"] == "Memory" and shm["sizeLimit"] == "8Gi" and shm1["sizeLimit"] == "2Gi"


def test_bigger_models_get_more_memory_and_startup_patience() -> None:
    h = build(TP4, SINGLE_GPU)
    big, small = main(workload(h, "qwen-72b").spec["template"]), main(workload(h, "qwen3-8b").spec["template"])
    assert _gib(big) > _gib(small)
    assert big["startupProbe"]["failureThreshold"] > small["startupProbe"]["failureThreshold"]
    assert big["startupProbe"]["httpGet"]["path"] == "/health"


def test_multi_node_has_a_worker_spec_with_the_pipeline_parallel_preset() -> None:
    h = build(MULTI_NODE)
    spec = workload(h, "llama-405b").spec
    assert spec["parallelism"] == {"tensor": 8, "pipeline": 2}
    assert spec["baseRefs"] == [{"name": PIPELINE_PARALLEL_PRESET}]
    for pod in (spec["template"], spec["worker"]):
        assert main(pod)["resources"]["limits"]["nvidia.com/gpu"] == "8"
        assert pod["serviceAccountName"] == "llama-405b-sa"
    assert "startupProbe" not in main(spec["worker"])
    # The preset is installed with the prerequisites, in the KServe namespace.
    preset = [r for r in h.resources if r.inputs.get("kind") == "LLMInferenceServiceConfig"]
    assert [p.metadata["name"] for p in preset] == [PIPELINE_PARALLEL_PRESET]
    assert preset[0].metadata["namespace"] == "kserve"
    # Gated: the ServiceAccount lists the token Secret; the download Job reads HF_TOKEN from it.
    sa = next(r for r in h.resources if r.type == "kubernetes:core/v1:ServiceAccount")
    assert sa.inputs["secrets"] == [{"name": "hf-token"}]
    job = next(r for r in h.resources if r.type == "kubernetes:batch/v1:Job")
    env = job.spec["template"]["spec"]["containers"][0]["env"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}}} in env


def test_cpu_profile_uses_cpu_image_no_gpus_and_kv_cache_space() -> None:
    h = build(CPU)
    spec = workload(h, "tiny").spec
    c = main(spec["template"])
    assert c["image"].startswith("public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo")
    assert "nvidia.com/gpu" not in c["resources"]["requests"] and "nvidia.com/gpu" not in c["resources"]["limits"]
    assert {"name": "VLLM_CPU_KVCACHE_SPACE", "value": "2"} in c["env"]
    assert "--gpu-memory-utilization" not in c["args"]
    assert "parallelism" not in spec and "nodeSelector" not in spec["template"]


def test_llmisvc_waits_for_ready_with_a_timeout_and_is_replaced_on_parallelism_change() -> None:
    h = build(SINGLE_GPU)
    svc = workload(h, "qwen3-8b")
    ann = svc.metadata["annotations"]
    assert ann["pulumi.com/waitFor"] == "condition=Ready"
    assert int(ann["pulumi.com/timeoutSeconds"]) > 600
    assert "spec.parallelism" in svc.options["replaceOnChanges"]
    assert svc.options["deleteBeforeReplace"] is True


def test_ready_timeout_seconds_bounds_ups_wait_for_every_model() -> None:
    """`cluster.readyTimeoutSeconds`: a CI gate names a model that is not Ready after it (both backends)."""
    for backend in ("kserve", "vllm"):
        h = build(SINGLE_GPU, backend=backend, cluster={"mode": "render", "renderDir": "r", "readyTimeoutSeconds": 120})
        assert workload(h, "qwen3-8b").metadata["annotations"]["pulumi.com/timeoutSeconds"] == "120", backend


def test_skip_await_switches_waiting_off() -> None:
    h = build(SINGLE_GPU, cluster={"mode": "render", "renderDir": "r", "skipAwait": True})
    ann = workload(h, "qwen3-8b").metadata["annotations"]
    assert ann["pulumi.com/skipAwait"] == "true" and "pulumi.com/waitFor" not in ann


def _published_fit(fleet: Any, model: str) -> dict[str, Any]:
    """The figures the stack's `endpoints` output publishes for a model (tkf_infra.outputs)."""
    return dict(next(m for m in fleet.plan.models if m.entry.name == model).fit.published())


def test_labels_and_fit_annotations() -> None:
    h = build(CPU)
    md = workload(h, "tiny").metadata
    assert md["labels"]["tkf.io/model"] == "tiny"
    assert md["labels"]["tkf.io/revision"] == "7ae557604adf"
    for key in ("name", "instance", "component", "part-of", "managed-by"):
        assert f"app.kubernetes.io/{key}" in md["labels"]
    assert md["annotations"]["tkf.io/fit-kv-cache-gib"] == "2.0"
    assert h.result is not None and _published_fit(h.result, "tiny")["fits"] is True


@pytest.mark.parametrize("raw", [SINGLE_GPU, MULTI_NODE, CPU], ids=["single", "multi-node", "cpu"])
def test_kserve_pod_labels_leave_kserves_own_keys_to_kserve(raw: dict[str, Any]) -> None:
    """KServe v0.20.0 copies `spec.labels` into the labels and selector of the Deployment it writes and
    caches its children by `app.kubernetes.io/part-of: llminferenceservice`: one of ours there and it
    never sees its own Deployment, so the model never becomes Ready (issue 25)."""
    svc = workload(build(raw), raw["name"])
    pod_labels = svc.inputs["spec"]["labels"]
    assert not set(pod_labels) & KSERVE_OWNED_LABELS, pod_labels
    assert pod_labels["tkf.io/model"] == raw["name"]  # what the alias Service and the NetworkPolicy select
    assert svc.metadata["labels"]["app.kubernetes.io/part-of"] == "tkf-infra"  # the service itself stays ours


def test_gpu_fit_estimates_reach_annotations_and_outputs() -> None:
    h = build(SINGLE_GPU)
    assert h.result is not None
    fit = _published_fit(h.result, "qwen3-8b")
    assert fit["fits"] is True and 15 < fit["weightsGiB"] < 16 and fit["kvCacheTokens"] > 100_000
    ann = workload(h, "qwen3-8b").metadata["annotations"]
    assert float(ann["tkf.io/fit-weights-gib"]) == fit["weightsGiB"]


# ---------------------------------------------------------------------------------------------
# Endpoints and security (any backend)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["kserve", "vllm"])
def test_alias_service_and_base_url(backend: str) -> None:
    h = build(SINGLE_GPU, MULTI_NODE, backend=backend)
    assert h.values["qwen3-8b.url"] == "http://qwen3-8b-openai.llm-serving.svc.cluster.local:8000/v1"
    alias = {r.metadata["name"]: r for r in h.resources if r.type == "kubernetes:core/v1:Service"}
    assert alias["qwen3-8b-openai"].spec["ports"][0]["port"] == 8000
    assert alias["qwen3-8b-openai"].spec["selector"] == {"tkf.io/model": "qwen3-8b"}
    # Only the LWS leader (worker index 0) serves the API.
    assert alias["llama-405b-openai"].spec["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"


@pytest.mark.parametrize("backend", ["kserve", "vllm"])
def test_network_policy_admits_the_gateway_to_8000_and_monitoring_to_the_metrics_port_only(backend: str) -> None:
    h = build(SINGLE_GPU, backend=backend)
    pol = next(r for r in h.resources if r.type == "kubernetes:networking.k8s.io/v1:NetworkPolicy")
    assert pol.metadata["name"] == "qwen3-8b-netpol"
    rules = pol.spec["ingress"]
    by_source = {r["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]: r["ports"]
                 for r in rules}
    assert by_source == {"llm-gateway": [{"protocol": "TCP", "port": 8000}],
                         "monitoring": [{"protocol": "TCP", "port": 9000}]}
    assert len(rules) == 2


def test_api_key_is_a_secret_reference_never_plaintext() -> None:
    h = build(SINGLE_GPU, CPU, MULTI_NODE)
    secret = next(r for r in h.resources if r.type == "kubernetes:core/v1:Secret")
    assert set(secret.options["additionalSecretOutputs"]) >= {"data", "stringData"}
    # On the wire the key travels wrapped as a secret (the engine tier checks state holds no plaintext).
    assert secret.inputs["stringData"] != {"api-key": API_KEY}
    for r in h.resources:
        if r is not secret:
            assert API_KEY not in str(r.inputs), f"{r.type} {r.name} carries the API key"
    assert API_KEY not in str(h.values)
    env = main(workload(h, "qwen3-8b").spec["template"])["env"]
    assert {"name": "VLLM_API_KEY",
            "valueFrom": {"secretKeyRef": {"name": "vllm-api-key", "key": "api-key"}}} in env


def test_the_workload_waits_for_the_fit_check_the_namespace_and_its_network_policy() -> None:
    """No pod before the check has passed, and none before the policy that guards its port exists;
    the Service and the policy need only their namespace (every extra dependency is paid per model)."""
    h = build(SINGLE_GPU)
    ms = next(r for r in h.resources if r.type == "tkf:serving:ModelServing")
    fit = h.mocks.named("fit-checks")
    ns = h.mocks.named("namespace-serving")
    pol = next(r for r in h.resources if r.type == "kubernetes:networking.k8s.io/v1:NetworkPolicy")
    svc = next(r for r in h.resources if r.type == "kubernetes:core/v1:Service" and r.parent == ms.urn)
    wl = workload(h, "qwen3-8b")
    assert wl.parent == ms.urn
    assert {fit.urn, ns.urn, pol.urn} <= set(wl.depends_on)
    assert set(pol.depends_on) == {ns.urn} and set(svc.depends_on) == {ns.urn}


def test_every_kubernetes_resource_uses_the_explicit_provider() -> None:
    h = build(SINGLE_GPU, CPU, MULTI_NODE)
    provider = next(r for r in h.resources if r.type == "pulumi:providers:kubernetes")
    for r in h.resources:
        if r.custom and r.type.startswith("kubernetes:"):
            assert r.provider and r.provider.startswith(provider.urn), f"{r.type} {r.name}: {r.provider}"


# ---------------------------------------------------------------------------------------------
# vllm backend
# ---------------------------------------------------------------------------------------------


def test_a_cpu_model_surges_through_a_roll_and_a_gpu_model_goes_one_pod_at_a_time() -> None:
    """A key rotation replaces every pod: a CPU model must keep answering (the new pod starts beside the
    old one); a GPU model must not wait for a second set of GPUs (no surge, one pod down at a time)."""
    h = build(CPU, SINGLE_GPU, backend="vllm")
    cpu, gpu = workload(h, str(CPU["name"])), workload(h, str(SINGLE_GPU["name"]))
    assert cpu.spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    assert gpu.spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}


def test_vllm_backend_single_node_is_a_no_surge_deployment_with_the_full_command() -> None:
    h = build(TP4, backend="vllm")
    dep = workload(h, "qwen-72b")
    assert dep.type == "kubernetes:apps/v1:Deployment"
    # No second set of GPUs, and one pod down at a time: replicas >= 2 keep serving through a roll.
    assert dep.spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    c = main(dep.spec["template"]["spec"])
    cmd = c["command"]
    assert cmd[:3] == ["vllm", "serve", "/mnt/models"]
    assert flag(cmd, "--served-model-name") == "qwen2.5-72b"
    assert flag(cmd, "--tensor-parallel-size") == "4" and flag(cmd, "--pipeline-parallel-size") == "1"
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "4"
    mount = next(m for m in c["volumeMounts"] if m["mountPath"] == "/mnt/models")
    assert mount["subPath"] == "495f39366efef23836d0cfae4fbe635880d2be31" and mount["readOnly"] is True
    assert not any(r.inputs.get("kind") == "LLMInferenceService" for r in h.resources)


def test_vllm_backend_multi_node_is_a_leader_worker_set_with_lws_env() -> None:
    h = build(MULTI_NODE, backend="vllm")
    lws = workload(h, "llama-405b")
    assert lws.inputs["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    tmpl = lws.spec["leaderWorkerTemplate"]
    assert tmpl["size"] == 2
    leader = main(tmpl["leaderTemplate"]["spec"])["command"][-1]
    worker = main(tmpl["workerTemplate"]["spec"])["command"][-1]
    for line in (leader, worker):
        assert "--nnodes ${LWS_GROUP_SIZE} --node-rank ${LWS_WORKER_INDEX} --master-addr ${LWS_LEADER_ADDRESS}" in line
        assert "--pipeline-parallel-size 2" in line and "--tensor-parallel-size 8" in line
    assert "--headless" in worker and "--headless" not in leader
    assert main(tmpl["workerTemplate"]["spec"])["resources"]["limits"]["nvidia.com/gpu"] == "8"
    # Leader and workers may talk to each other on any port.
    pol = next(r for r in h.resources if r.type == "kubernetes:networking.k8s.io/v1:NetworkPolicy")
    assert {"from": [{"podSelector": {"matchLabels": {"tkf.io/model": "llama-405b"}}}]} in pol.spec["ingress"]
