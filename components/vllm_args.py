"""Pure builders for what a vLLM pod looks like: command line, resources, probes, labels, volumes.

Why pure functions: the same model runs under two backends (a KServe ``LLMInferenceService`` or a
plain Deployment / LeaderWorkerSet), and both must agree on every flag, every GPU request and every
probe. Keeping the arithmetic here (no Pulumi, no I/O) lets tests check it directly and keeps the
components to "which objects exist and how they depend on each other".

Sizing rules derived from the model size (weights bytes, from the lock) instead of hand-tuned
numbers, so a 0.5B dev model and a 405B model both get sane pods:

- host memory: vLLM streams safetensors through the page cache and keeps a CPU copy of nothing
  except buffers, so a base of 16 GiB plus a quarter of the pod's weight share is enough (the CPU
  profile instead holds all weights and the KV cache in RAM);
- ``/dev/shm``: tensor parallelism exchanges activations through shared memory (NCCL, vLLM's
  message queues); 2 GiB per GPU of the pod, at least 1 GiB, at most 16 GiB. It counts against the
  memory limit, so it is added to it;
- start-up patience: reading the pod's weights at a conservative 200 MiB/s from network storage,
  plus 5 minutes for CUDA graphs / torch.compile.
"""

from __future__ import annotations

import math
from typing import Any

from tkf_infra.settings import ModelEntry, Serving
from tkf_infra.sizing.facts import ModelFacts

GIB = 2**30
MIB = 2**20

#: vLLM's OpenAI server port (KServe's presets use it too).
SERVING_PORT = 8000
#: Where KServe mounts the model (``pvc://`` / storage-initializer); the vllm backend uses the same.
MODEL_MOUNT = "/mnt/models"
#: Where the wait-for-weights init container sees the whole weight-cache PVC.
CACHE_MOUNT = "/weight-cache"
#: Written by the download Job after a complete download of one revision; serving pods wait for it.
MARKER_FILE = ".tkf-download-complete"
#: A non-root user every vLLM image we use can run as (HOME and /tmp are emptyDirs).
RUN_AS_USER = 1000

PART_OF = "tkf-infra"
LOAD_BYTES_PER_SECOND = 200 * MIB
STARTUP_BASE_SECONDS = 300
PROBE_PERIOD_SECONDS = 10


# --------------------------------------------------------------------------------------------
# Model size
# --------------------------------------------------------------------------------------------


def checkpoint_bytes(facts: ModelFacts) -> int:
    """Bytes of the checkpoint's tensors: the lock's figure, else derived from the config.

    Several lock entries have no ``weight_bytes`` (single-file checkpoints, sibling configs); the
    sizing engine's per-tensor count of an unsharded rank is then the best figure we have.
    """
    if facts.weight_bytes:
        return int(facts.weight_bytes)
    if facts.param_counts:
        from tkf_infra.sizing.facts import DTYPE_BYTES

        return int(sum(DTYPE_BYTES.get(k, 2) * v for k, v in facts.param_counts.items()))
    if facts.parameter_count:
        return int(facts.parameter_count * 2)
    from tkf_infra.sizing.engine import ServingParams, parse_arch, quant_scheme, weights_bytes_per_rank

    arch = parse_arch(facts.text_config())
    scheme = quant_scheme(arch, ServingParams(), 2.0)
    return int(sum(weights_bytes_per_rank(arch, 1, 1, scheme, 2.0)))


def gib_ceil(n_bytes: float) -> int:
    return max(1, math.ceil(n_bytes / GIB))


# --------------------------------------------------------------------------------------------
# Topology arithmetic
# --------------------------------------------------------------------------------------------


def gpus_per_pod(entry: ModelEntry) -> int:
    """GPUs each pod requests: one pod per node, so TP x PP / nodes (0 for the CPU profile).

    KServe never sets ``nvidia.com/gpu`` itself; without this the pod would schedule on any node
    and vLLM would fail to find devices.
    """
    if entry.is_cpu:
        return 0
    return entry.tensor_parallel_size * entry.pipeline_parallel_size // entry.node_count


def is_multi_node(entry: ModelEntry) -> bool:
    return entry.node_count > 1


def shm_gib(entry: ModelEntry) -> int:
    return min(16, max(1, 2 * gpus_per_pod(entry)))


def weights_per_pod_bytes(entry: ModelEntry, weight_bytes: int) -> int:
    return math.ceil(weight_bytes / entry.node_count)


def memory_gib(entry: ModelEntry, weight_bytes: int) -> int:
    """Host memory request (= limit) of one serving pod, /dev/shm included."""
    if entry.is_cpu:
        body = weight_bytes / GIB + entry.cpu_kv_cache_gib + 2
    else:
        body = 16 + weights_per_pod_bytes(entry, weight_bytes) / GIB / 4
    return math.ceil(body) + shm_gib(entry)


def cpu_cores(entry: ModelEntry) -> int:
    """CPU request: vLLM runs one busy process per GPU plus the API server and tokenizers."""
    return 4 if entry.is_cpu else 2 + 2 * gpus_per_pod(entry)


def startup_failure_threshold(entry: ModelEntry, weight_bytes: int) -> int:
    seconds = STARTUP_BASE_SECONDS + weights_per_pod_bytes(entry, weight_bytes) / LOAD_BYTES_PER_SECOND
    return math.ceil(seconds / PROBE_PERIOD_SECONDS)


def ready_timeout_seconds(entry: ModelEntry, weight_bytes: int) -> int:
    """How long ``pulumi up`` waits for Ready: download (100 MiB/s from the Hub) + start-up + 10 min."""
    download = weight_bytes / (100 * MIB)
    return int(download + startup_failure_threshold(entry, weight_bytes) * PROBE_PERIOD_SECONDS + 600)


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def engine_args(entry: ModelEntry) -> list[str]:
    """Flags from the catalog entry that every backend passes to ``vllm serve``.

    Parallelism, port, model path and served name are not here: KServe's presets render them
    from the LLMInferenceService spec, and ``serve_args`` adds them for the vllm backend.
    """
    args = ["--max-model-len", str(entry.max_model_len)]
    if not entry.is_cpu:
        args += ["--gpu-memory-utilization", f"{entry.gpu_memory_utilization:g}"]
    args += [
        "--dtype",
        entry.dtype,
        "--kv-cache-dtype",
        entry.kv_cache_dtype,
        "--max-num-seqs",
        str(entry.max_num_seqs),
    ]
    if entry.max_num_batched_tokens:
        args += ["--max-num-batched-tokens", str(entry.max_num_batched_tokens)]
    if entry.quantization:
        args += ["--quantization", entry.quantization]
    if entry.enforce_eager:
        args.append("--enforce-eager")
    if entry.enable_auto_tool_choice:
        args.append("--enable-auto-tool-choice")
    if entry.tool_call_parser:
        args += ["--tool-call-parser", entry.tool_call_parser]
    return args + list(entry.extra_args)


def kserve_args(entry: ModelEntry) -> list[str]:
    """Container ``main`` args on KServe, appended to the preset's ``vllm serve`` line.

    The single-node preset passes only ``--tensor-parallel-size``; single-node pipeline parallelism
    (PP > 1 on one node) therefore needs its flag here. The multi-node preset passes both.
    """
    extra = []
    if not is_multi_node(entry) and entry.pipeline_parallel_size > 1:
        extra = ["--pipeline-parallel-size", str(entry.pipeline_parallel_size)]
    return extra + engine_args(entry)


def serve_command(entry: ModelEntry, model_path: str, revision: str | None = None) -> list[str]:
    """Full ``vllm serve`` command of the vllm backend's single-node pods (Deployment)."""
    cmd = ["vllm", "serve", model_path, "--served-model-name", entry.served_name, "--host", "0.0.0.0",
           "--port", str(SERVING_PORT)]  # fmt: skip
    if revision:
        cmd += ["--revision", revision]
    if not entry.is_cpu:
        cmd += ["--tensor-parallel-size", str(entry.tensor_parallel_size),
                "--pipeline-parallel-size", str(entry.pipeline_parallel_size)]  # fmt: skip
    return cmd + engine_args(entry)


def lws_command(entry: ModelEntry, model_path: str, *, leader: bool, revision: str | None = None) -> list[str]:
    """Shell command of a LeaderWorkerSet pod: vLLM's multiprocessing multi-node mode (no Ray).

    LWS injects ``LWS_LEADER_ADDRESS``, ``LWS_GROUP_SIZE`` and ``LWS_WORKER_INDEX``; node 0 serves
    the API, the others run ``--headless``. A shell is needed to expand the variables.
    """
    base = serve_command(entry, model_path, revision)
    dist = ["--nnodes", "${LWS_GROUP_SIZE}", "--node-rank", "${LWS_WORKER_INDEX}",
            "--master-addr", "${LWS_LEADER_ADDRESS}"]  # fmt: skip
    if not leader:
        dist.append("--headless")
    line = " ".join(_sh_quote(a) for a in base) + " " + " ".join(dist)
    return ["/bin/sh", "-c", f"exec {line}"]


def _sh_quote(arg: str) -> str:
    if arg and all(c.isalnum() or c in "-_./:=," for c in arg):
        return arg
    return "'" + arg.replace("'", "'\"'\"'") + "'"


# --------------------------------------------------------------------------------------------
# Pod pieces
# --------------------------------------------------------------------------------------------


def labels(entry: ModelEntry, component: str = "model-server") -> dict[str, str]:
    """Recommended labels plus ours: dashboards and the NetworkPolicy select on ``tkf.io/model``."""
    return {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": entry.name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": PART_OF,
        "app.kubernetes.io/managed-by": "pulumi",
        "tkf.io/model": entry.name,
        "tkf.io/revision": entry.revision[:12],
    }


def image(entry: ModelEntry, serving: Serving) -> str:
    """The image the fit check sized for (its tag is the vLLM version), or the CPU build."""
    return serving.vllm_cpu_image if entry.is_cpu else serving.vllm_image


def resources(entry: ModelEntry, weight_bytes: int) -> dict[str, Any]:
    """Requests/limits; GPUs equal in both (extended resources cannot be overcommitted)."""
    mem = f"{memory_gib(entry, weight_bytes)}Gi"
    requests: dict[str, str] = {"cpu": str(cpu_cores(entry)), "memory": mem}
    limits: dict[str, str] = {"memory": mem}
    gpus = gpus_per_pod(entry)
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
        limits["nvidia.com/gpu"] = str(gpus)
    return {"requests": requests, "limits": limits}


def env(entry: ModelEntry, api_key_secret: str | None, api_key_key: str) -> list[dict[str, Any]]:
    """Serving env. The API key arrives by ``secretKeyRef`` so it is never in args, state or outputs;
    vLLM reads ``VLLM_API_KEY`` and guards only ``/v1``, so ``/health`` and ``/metrics`` stay open
    for probes and Prometheus."""
    out: list[dict[str, Any]] = [
        {"name": "HOME", "value": "/home"},
        # Weights come from the cache (or KServe's storage-initializer); never reach for the Hub.
        {"name": "HF_HUB_OFFLINE", "value": "1"},
    ]
    if api_key_secret:
        out.append({"name": "VLLM_API_KEY",
                    "valueFrom": {"secretKeyRef": {"name": api_key_secret, "key": api_key_key}}})  # fmt: skip
    if entry.is_cpu:
        out.append({"name": "VLLM_CPU_KVCACHE_SPACE", "value": f"{math.ceil(entry.cpu_kv_cache_gib)}"})
    return out


def probes(entry: ModelEntry, weight_bytes: int) -> dict[str, Any]:
    """``/health`` needs no API key. Start-up patience grows with the weights a pod loads."""
    get = {"httpGet": {"path": "/health", "port": SERVING_PORT, "scheme": "HTTP"}}
    return {
        "startupProbe": {**get, "periodSeconds": PROBE_PERIOD_SECONDS, "timeoutSeconds": 5,
                         "failureThreshold": startup_failure_threshold(entry, weight_bytes)},
        "livenessProbe": {**get, "periodSeconds": 10, "timeoutSeconds": 10, "failureThreshold": 3},
        "readinessProbe": {**get, "periodSeconds": 5, "timeoutSeconds": 5, "failureThreshold": 3},
    }  # fmt: skip


def volumes(entry: ModelEntry, cache_pvc: str | None) -> list[dict[str, Any]]:
    """``dshm``, ``home`` and ``tmp-dir`` share KServe's preset volume names, so the strategic merge resizes them."""
    vols: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_gib(entry)}Gi"}},
        {"name": "home", "emptyDir": {}},
        {"name": "tmp-dir", "emptyDir": {}},
    ]
    if cache_pvc:
        vols.append({"name": "weight-cache", "persistentVolumeClaim": {"claimName": cache_pvc, "readOnly": True}})
    return vols


def wait_for_weights(cache_pvc: str, subpath: str, image_ref: str) -> dict[str, Any]:
    """Init container: block until the download Job has written the revision's marker."""
    marker = f"{CACHE_MOUNT}/{subpath}/{MARKER_FILE}"
    return {
        "name": "wait-for-weights",
        "image": image_ref,
        "command": ["/bin/sh", "-c",
                    f'until [ -f "{marker}" ]; do echo "waiting for {marker} (Job fills PVC {cache_pvc})"; '
                    "sleep 10; done"],
        "volumeMounts": [{"name": "weight-cache", "mountPath": CACHE_MOUNT, "readOnly": True}],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
        "securityContext": container_security(),
    }  # fmt: skip


def container_security() -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "runAsUser": RUN_AS_USER,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}  # fmt: skip


def pod_security() -> dict[str, Any]:
    """fsGroup lets the non-root download Job write to a fresh PVC and serving pods read it."""
    return {"runAsNonRoot": True, "runAsUser": RUN_AS_USER, "runAsGroup": RUN_AS_USER, "fsGroup": RUN_AS_USER}


def tolerations_for(pool_tolerations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [dict(t) for t in pool_tolerations]
