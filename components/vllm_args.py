"""The vLLM command line both backends run, rendered from the serving-flag table (no Pulumi, no I/O).

Why one module: the same model runs under two backends (a KServe ``LLMInferenceService`` or a plain
Deployment / LeaderWorkerSet), and both must agree on every flag. The pod's sizes are
`components/pod_sizes.py`, its paths, labels and image `components/pod_meta.py`; `components/pod.py`
turns all three into typed Kubernetes objects.
"""

from __future__ import annotations

import functools
from pathlib import Path

from components import metrics_proxy, pod_meta
from components.argv_layers import ArgvPath, env_reference, shell_line
from tkf_infra.config import ModelEntry
from tkf_infra.config.flags import KServe, rows
from tkf_infra.names import METRICS_PORT, SERVING_PORT

#: Env vars holding the runtime keys, each from the API-key Secret (``secretKeyRef``). vLLM reads
#: ``VLLM_API_KEY`` itself, but only one key (``vllm/envs.py``); the second key of a rotation reaches
#: it through ``--api-key`` (``nargs="+"``, which takes precedence over the variable:
#: ``vllm/entrypoints/serve/middleware/register.py``), by reference, never by value.
API_KEY_ENV = "VLLM_API_KEY"
API_KEY_EXTRA_ENV = "TKF_API_KEY_EXTRA"


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
                two_keys: bool = False) -> list[str]:
    """Shell command of a LeaderWorkerSet pod: vLLM's multiprocessing multi-node mode (no Ray).

    LWS injects ``LWS_LEADER_ADDRESS``, ``LWS_GROUP_SIZE`` and ``LWS_WORKER_INDEX``; node 0 serves
    the API, the others run ``--headless``. A shell is needed to expand the variables; it also
    expands a rotation's two keys (quoted, so any value stays one word), on the leader only.
    """
    base = serve_command(entry, model_path, revision)
    dist = ["--nnodes", "${LWS_GROUP_SIZE}", "--node-rank", "${LWS_WORKER_INDEX}",
            "--master-addr", "${LWS_LEADER_ADDRESS}"]
    if not leader:
        dist.append("--headless")
    elif two_keys:
        dist += ["--api-key", f'"${API_KEY_ENV}"', f'"${API_KEY_EXTRA_ENV}"']
    return ["/bin/sh", "-c", f"exec {shell_line(base)} {' '.join(dist)}"]


def metrics_proxy_command(model: str) -> list[str]:
    """The metrics sidecar: components/metrics_proxy.py, mounted from the stack's ConfigMap, run by the vLLM
    image's ``python3``, serving the facts the plan holds about catalog entry ``model``."""
    return ["python3", f"{pod_meta.METRICS_PROXY_DIR}/{pod_meta.METRICS_PROXY_FILE}",
            "--listen", f"0.0.0.0:{METRICS_PORT}", "--upstream", f"http://127.0.0.1:{SERVING_PORT}{metrics_proxy.PATH}",
            "--facts", f"{pod_meta.FLEET_FACTS_DIR}/{pod_meta.FLEET_FACTS_FILE}", "--model", model]


@functools.cache
def metrics_proxy_source() -> str:
    """Read once per run: every model's pod runs the same sidecar source (this repository's own file,
    not the operator's: docs/architecture.md, "The edge")."""
    return Path(metrics_proxy.__file__).read_text()
