"""What a serving pod carries besides its command line and sizes: paths, its user, labels, image.

Why apart: the download Job (`components/weight_cache.py`), the pod builder (`components/pod.py`), both
backends (`components/model_serving.py`) and the autoscalers select on or mount the same names, and
none of them needs the command line (`components/vllm_args.py`) or the sizes (`components/pod_sizes.py`).
"""

from __future__ import annotations

import hashlib

from tkf_infra import names
from tkf_infra.config import ModelEntry, Serving
from tkf_infra.names import MODEL_MOUNT as MODEL_MOUNT  # where KServe mounts the model; the vllm backend too

#: The serving pods' init container that waits for the download Job's marker (the cluster tier's kwok stages
#: name it too: tests/cluster/stages/pod-weights-arrived.yaml).
WAIT_FOR_WEIGHTS = "wait-for-weights"
#: Where the wait-for-weights init container sees the whole weight-cache PVC.
CACHE_MOUNT = "/weight-cache"
#: Written by the download Job after a complete download of one revision; serving pods wait for it.
MARKER_FILE = ".tkf-download-complete"
#: Where the metrics sidecar's source (components/metrics_proxy.py) is mounted in an API-serving pod, from the
#: stack's ConfigMap (`metrics_proxy_configmap`): in the pod spec it was 5 KB of every workload's argv,
#: held three times per model in Pulumi's state, which every `up` rewrites (docs/performance.md).
METRICS_PROXY_DIR = "/opt/tkf/metrics-proxy"
METRICS_PROXY_FILE = "metrics_proxy.py"
METRICS_PROXY_VOLUME = "metrics-proxy"
#: Where the sidecar reads the plan's facts (components/fleet_facts.py), from the stack's one mutable ConfigMap
#: (`tkf_infra.names.FLEET_FACTS_CONFIGMAP`), mounted whole (no subPath) so the kubelet refreshes the file in
#: place when a run changes the plan: no pod restarts for a new prediction or pool figure. Optional: a pod
#: whose ConfigMap is missing serves without facts rather than not starting.
FLEET_FACTS_DIR = "/opt/tkf/fleet-facts"
FLEET_FACTS_FILE = "facts.json"
FLEET_FACTS_VOLUME = "fleet-facts"
#: A non-root user every vLLM image we use can run as (HOME and /tmp are emptyDirs).
RUN_AS_USER = 1000



def labels(entry: ModelEntry, component: str = names.MODEL_SERVER) -> dict[str, str]:
    """Recommended labels plus ours: dashboards and the NetworkPolicy select on ``tkf.io/model``."""
    return {
        names.NAME_LABEL: names.SERVER_NAME,
        names.INSTANCE_LABEL: entry.name,
        names.COMPONENT_LABEL: component,
        names.PART_OF_LABEL: names.PART_OF,
        names.MANAGED_BY_LABEL: names.MANAGED_BY,
        names.MODEL_LABEL: entry.name,
        names.REVISION_KEY: entry.revision[:12],
    }


def image(entry: ModelEntry, serving: Serving) -> str:
    """The image the fit check sized for (its tag is the vLLM version), or the CPU build."""
    return serving.vllm_cpu_image if entry.is_cpu else serving.vllm_image


def metrics_proxy_configmap(source: str) -> str:
    """The sidecar source's ConfigMap, named by its content: a changed source is a new immutable object, so
    the pod templates that mount it change and their pods roll, as they did when the source was inline."""
    return f"tkf-metrics-proxy-{hashlib.sha256(source.encode()).hexdigest()[:10]}"
