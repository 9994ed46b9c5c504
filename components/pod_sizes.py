"""How big a serving pod is and how long it may take to start, from the model's size (no Pulumi, no I/O).

Why here, apart from the command line (`components/vllm_args.py`): the node-capacity check
(`tkf_infra/program.py` `pod_requests`, docs/admission.md) and `up`'s waits read the same figures the
pods request, so they live once, as plain functions of the entry and its weight bytes.

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

from tkf_infra.config import ModelEntry
from tkf_infra.sizing.params import GIB, MIB

LOAD_BYTES_PER_SECOND = 200 * MIB
#: Assumed throughput of one download from the Hub, for the time bounds of `up`'s waits.
HUB_DOWNLOAD_BYTES_PER_SECOND = 100 * MIB
#: The metrics sidecar's requests (components/pod.py), counted on every serving pod by the node-capacity check.
SIDECAR_CPU_MILLIS, SIDECAR_MEMORY_MIB = 10, 32
STARTUP_BASE_SECONDS = 300
PROBE_PERIOD_SECONDS = 10


def shm_gib(entry: ModelEntry) -> int:
    return min(16, max(1, 2 * entry.gpus_per_pod))


def weights_per_pod_bytes(entry: ModelEntry, weight_bytes: int) -> int:
    return math.ceil(weight_bytes / entry.node_count)


def memory_gib(entry: ModelEntry, weight_bytes: int, lora_host_gib: float = 0.0) -> int:
    """Host memory request (= limit) of one serving pod, /dev/shm included.

    `lora_host_gib`: one worker's CPU cache of LoRA adapters (`FitResult.lora_host_gib`); every GPU rank of
    the pod runs its own worker with its own cache (the CPU profile one), so the pod holds that many."""
    if entry.is_cpu:
        body = weight_bytes / GIB + entry.cpu_kv_cache_gib + 2
    else:
        body = 16 + weights_per_pod_bytes(entry, weight_bytes) / GIB / 4
    body += lora_host_gib * max(1, entry.gpus_per_pod)
    return math.ceil(body) + shm_gib(entry)


def cpu_cores(entry: ModelEntry) -> int:
    """CPU request: vLLM runs one busy process per GPU plus the API server and tokenizers."""
    return 4 if entry.is_cpu else 2 + 2 * entry.gpus_per_pod


def startup_failure_threshold(entry: ModelEntry, weight_bytes: int) -> int:
    seconds = STARTUP_BASE_SECONDS + weights_per_pod_bytes(entry, weight_bytes) / LOAD_BYTES_PER_SECOND
    return math.ceil(seconds / PROBE_PERIOD_SECONDS)


def ready_timeout_seconds(entry: ModelEntry, weight_bytes: int) -> int:
    """How long ``pulumi up`` waits for Ready: download (100 MiB/s from the Hub) + start-up + 10 min."""
    download = weight_bytes / HUB_DOWNLOAD_BYTES_PER_SECOND
    return int(download + startup_failure_threshold(entry, weight_bytes) * PROBE_PERIOD_SECONDS + 600)
