"""The check that keeps the vLLM tier honest: tests/vllm/pod.py's emulation of KServe's merge (which the
rest of that tier starts, without a server) against the pod KServe's real manager wrote.

Run over the LLMInferenceService and the Secrets as the server stores them, with the vendored preset (our
pipeline-parallel preset for a multi-node service), the emulation must give the argv, env, probes and
mounts of the Deployment's (or LeaderWorkerSet leader's) pod template KServe wrote.
"""

from __future__ import annotations

from components.pod_meta import MODEL_MOUNT
from components.prerequisites import PIPELINE_PARALLEL_PRESET_FILE
from tests.kube.client import KubeClient
from tests.kube.platform.readback import LLMISVC
from tests.vllm.kubelet import server_secrets
from tests.vllm.pod import PodCommand, kserve_command, kserve_preset


def emulated_command(kube: KubeClient, namespace: str, workload: str) -> PodCommand:
    """tests/vllm/pod.py's emulation of KServe's merge, as the rest of the vLLM tier runs it, over our
    LLMInferenceService and Secrets as the server stores them."""
    isvc = kube.get(LLMISVC, "LLMInferenceService", workload, namespace)
    assert isvc is not None, workload
    env = isvc["spec"]["template"]["containers"][0].get("env", [])
    manifests = {("LLMInferenceService", workload): isvc, **server_secrets(kube, namespace, env)}
    multi_node = "worker" in isvc["spec"]
    return kserve_command(manifests, workload, kserve_preset(PIPELINE_PARALLEL_PRESET_FILE) if multi_node else None)


def assert_emulation_is_kserves(emulated: PodCommand, written: PodCommand, workload: str) -> None:
    """The emulated pod is the one KServe wrote: argv word for word, env, probes and mounts — but for the
    model's own mount, which KServe adds from ``spec.model.uri`` (our weight cache's PVC) and pod.py does
    not model: localize() replaces that path, so it must be where KServe put the weights."""
    assert emulated.argv == written.argv, f"{workload}: pod.py's merge no longer gives the argv KServe writes"
    assert emulated.env == written.env, f"{workload}: pod.py's merge no longer gives the env KServe writes"
    assert emulated.probes == written.probes, f"{workload}: probes differ from KServe's"
    assert written.mounts.get(MODEL_MOUNT) == "persistentVolumeClaim", (workload, written.mounts)
    assert emulated.mounts == {k: v for k, v in written.mounts.items() if k != MODEL_MOUNT}, (
        f"{workload}: mounts differ from KServe's: {emulated.mounts} != {written.mounts}")
