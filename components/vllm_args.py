"""Pure rules for a vLLM pod: its command line (rendered from the serving-flag table), its sizes, its labels.

Why pure functions: the same model runs under two backends (a KServe ``LLMInferenceService`` or a
plain Deployment / LeaderWorkerSet), and both must agree on every flag, every GPU request and every
probe. Keeping the arithmetic here (no Pulumi, no I/O) lets tests check it directly; `components.pod`
turns it into typed Kubernetes objects.

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

import functools
import math
from pathlib import Path

from components.argv_layers import ArgvPath, env_reference, shell_line
from tkf_infra.config import ModelEntry, Serving
from tkf_infra.config.flags import KServe, rows
from tkf_infra.names import METRICS_PORT, SERVING_PORT
from tkf_infra.names import MODEL_MOUNT as MODEL_MOUNT  # where KServe mounts the model; the vllm backend too
from tkf_infra.sizing.params import GIB, MIB

#: Where the wait-for-weights init container sees the whole weight-cache PVC.
CACHE_MOUNT = "/weight-cache"
#: Written by the download Job after a complete download of one revision; serving pods wait for it.
MARKER_FILE = ".tkf-download-complete"
#: A non-root user every vLLM image we use can run as (HOME and /tmp are emptyDirs).
RUN_AS_USER = 1000

#: Env vars holding the runtime keys, each from the API-key Secret (``secretKeyRef``). vLLM reads
#: ``VLLM_API_KEY`` itself, but only one key (``vllm/envs.py``); the second key of a rotation reaches
#: it through ``--api-key`` (``nargs="+"``, which takes precedence over the variable:
#: ``vllm/entrypoints/serve/middleware/register.py``), by reference, never by value.
API_KEY_ENV = "VLLM_API_KEY"
API_KEY_EXTRA_ENV = "TKF_API_KEY_EXTRA"
#: Pod-template annotation: digest of the accepted key set (``ApiKeys.accepted_digest``), so pods roll
#: when the set changes and only then. Never the key: a slow salted hash (tkf_infra/config/api_keys.py).
API_KEYS_ANNOTATION = "tkf.io/api-keys-scrypt"

PART_OF = "tkf-infra"
LOAD_BYTES_PER_SECOND = 200 * MIB
#: Assumed throughput of one download from the Hub, for the time bounds of `up`'s waits.
HUB_DOWNLOAD_BYTES_PER_SECOND = 100 * MIB
#: The metrics sidecar's requests (components/pod.py), counted on every serving pod by the node-capacity check.
SIDECAR_CPU_MILLIS, SIDECAR_MEMORY_MIB = 10, 32
STARTUP_BASE_SECONDS = 300
PROBE_PERIOD_SECONDS = 10


# --------------------------------------------------------------------------------------------
# Topology arithmetic
# --------------------------------------------------------------------------------------------


def shm_gib(entry: ModelEntry) -> int:
    return min(16, max(1, 2 * entry.gpus_per_pod))


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
    return 4 if entry.is_cpu else 2 + 2 * entry.gpus_per_pod


def startup_failure_threshold(entry: ModelEntry, weight_bytes: int) -> int:
    seconds = STARTUP_BASE_SECONDS + weights_per_pod_bytes(entry, weight_bytes) / LOAD_BYTES_PER_SECOND
    return math.ceil(seconds / PROBE_PERIOD_SECONDS)


def ready_timeout_seconds(entry: ModelEntry, weight_bytes: int) -> int:
    """How long ``pulumi up`` waits for Ready: download (100 MiB/s from the Hub) + start-up + 10 min."""
    download = weight_bytes / HUB_DOWNLOAD_BYTES_PER_SECOND
    return int(download + startup_failure_threshold(entry, weight_bytes) * PROBE_PERIOD_SECONDS + 600)


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def _values(entry: ModelEntry, kserve: set[KServe]) -> list[str]:
    """The flag-table rows delivered the given KServe ways, rendered for this entry."""
    out: list[str] = []
    for r in rows():
        if r.flag.kserve in kserve and not r.flag.env and r.applies_to(entry.is_cpu):
            out += r.render(getattr(entry, r.field))
    return out


def engine_args(entry: ModelEntry) -> list[str]:
    """Flags both backends pass the same way: the table's args rows, then the entry's `extraArgs`.

    `extraArgs` cannot repeat a flag the table owns (the catalog refuses it), so their order does
    not decide anything.
    """
    return _values(entry, {KServe.ARGS}) + list(entry.extra_args)


def kserve_args(entry: ModelEntry) -> list[str]:
    """Container ``main`` args on KServe, appended to the preset's ``vllm serve`` line.

    The presets render parallelism and the served name from the LLMInferenceService spec; the
    single-node preset renders only ``--tensor-parallel-size``, so a single-node pipeline-parallel
    entry passes its ``--pipeline-parallel-size`` here.
    """
    spec_rows = set() if entry.is_multi_node else {KServe.SPEC_MULTI_NODE}
    return _values(entry, spec_rows) + engine_args(entry)


def serve_command(entry: ModelEntry, model_path: str, revision: str | None = None) -> list[str]:
    """Full ``vllm serve`` command of the vllm backend: every row of the table, spec rows included."""
    cmd = ["vllm", "serve", model_path, "--host", "0.0.0.0", "--port", str(SERVING_PORT)]
    if revision:
        cmd += ["--revision", revision]
    return cmd + _values(entry, {KServe.SPEC, KServe.SPEC_MULTI_NODE}) + engine_args(entry)


def kserve_path(entry: ModelEntry) -> ArgvPath:
    """How KServe's preset hands the container ``args`` to vLLM: the single-node preset through
    ``eval``, our pipeline-parallel preset as ``"$@"`` (components/argv_layers.py)."""
    return ArgvPath.KSERVE_ARGS if entry.is_multi_node else ArgvPath.KSERVE_EVAL


def two_key_args(path: ArgvPath) -> list[str]:
    """``--api-key`` with both keys of a rotation, as references to the env, never by value.

    The pod spec, the Pulumi state and the rendered manifests hold only the references
    (`argv_layers.env_reference`: the kubelet's ``$(VAR)``, or the shell's ``"$VAR"`` where KServe's
    preset parses the line again). What it exposes: the running process's argv (its
    ``/proc/<pid>/cmdline``, which any process in the host's PID namespace can read) holds the keys
    for as long as the rotation lasts; the env (read at start) holds them anyway, but readable by
    the same user only. Only during a rotation: with one key vLLM reads ``VLLM_API_KEY`` and argv
    holds none.
    """
    return ["--api-key", env_reference(API_KEY_ENV, path), env_reference(API_KEY_EXTRA_ENV, path)]


def lws_command(entry: ModelEntry, model_path: str, *, leader: bool, revision: str | None = None,
                two_keys: bool = False) -> list[str]:  # fmt: skip
    """Shell command of a LeaderWorkerSet pod: vLLM's multiprocessing multi-node mode (no Ray).

    LWS injects ``LWS_LEADER_ADDRESS``, ``LWS_GROUP_SIZE`` and ``LWS_WORKER_INDEX``; node 0 serves
    the API, the others run ``--headless``. A shell is needed to expand the variables; it also
    expands a rotation's two keys (quoted, so any value stays one word), on the leader only.
    """
    base = serve_command(entry, model_path, revision)
    dist = ["--nnodes", "${LWS_GROUP_SIZE}", "--node-rank", "${LWS_WORKER_INDEX}",
            "--master-addr", "${LWS_LEADER_ADDRESS}"]  # fmt: skip
    if not leader:
        dist.append("--headless")
    elif two_keys:
        dist += ["--api-key", f'"${API_KEY_ENV}"', f'"${API_KEY_EXTRA_ENV}"']
    return ["/bin/sh", "-c", f"exec {shell_line(base)} {' '.join(dist)}"]


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


def metrics_proxy_command() -> list[str]:
    """The metrics sidecar: components/metrics_proxy.py's source run by the vLLM image's ``python3``."""
    from components import metrics_proxy

    return ["python3", "-c", _source_of(metrics_proxy.__file__), "--listen", f"0.0.0.0:{METRICS_PORT}",
            "--upstream", f"http://127.0.0.1:{SERVING_PORT}{metrics_proxy.PATH}"]  # fmt: skip


@functools.cache
def _source_of(path: str) -> str:
    """Read once per run: every model's pod carries the same sidecar source."""
    return Path(path).read_text()


def image(entry: ModelEntry, serving: Serving) -> str:
    """The image the fit check sized for (its tag is the vLLM version), or the CPU build."""
    return serving.vllm_cpu_image if entry.is_cpu else serving.vllm_image
