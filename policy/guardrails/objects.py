"""Reading the Kubernetes objects tkf-infra registers, whatever backend rendered them.

Why one reader: the same model is a KServe ``LLMInferenceService`` (pods from ``spec.template`` and,
multi-node, ``spec.worker``), a ``Deployment`` or a ``LeaderWorkerSet`` depending on
``serving.backend``. Every guardrail asks the same questions of it (which model, which pods, how many
of them, how many GPUs each, which images) and must get the same answers on both backends, so the
answers are computed here and nowhere else. Pure functions on plain dicts: no Pulumi, no I/O, so the
unit tests feed them exactly what the components register.

Values the engine cannot know during a preview arrive as :data:`UNKNOWN`; readers return ``None`` for
them and the checks skip what they cannot judge yet (the same check runs again on ``up``, where every
value is known).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

# The label and annotation keys the components write, from the one module both sides import (it imports
# only the standard library, so the pack's own virtualenv runs it too).
from tkf_infra.names import (
    COMPONENT_LABEL,
    GPU_RESOURCE,
    MAX_REPLICAS_ANNOTATION,
    MIG_RESOURCE_PREFIX,
    MODEL_LABEL,
    MODEL_SERVER,
    PART_OF,
    PART_OF_LABEL,
)

#: Kinds that carry pod templates, and where.
WORKLOAD_KINDS = frozenset({"Deployment", "LeaderWorkerSet", "LLMInferenceService", "StatefulSet", "DaemonSet",
                            "Job", "Pod"})


class _Unknown:
    """A value the engine will only know after the resource is created (preview)."""

    def __repr__(self) -> str:
        return "<unknown during preview>"


UNKNOWN: Any = _Unknown()


@dataclass(frozen=True)
class K8sObject:
    """One registered resource as a guardrail sees it: its Pulumi type, URN, inputs and options."""

    type: str
    """Pulumi type token, e.g. ``kubernetes:apps/v1:Deployment``."""
    props: Mapping[str, Any]
    urn: str = ""
    protect: bool = False

    @property
    def kind(self) -> str:
        if self.type.startswith("kubernetes:"):
            return self.type.rsplit(":", 1)[-1]
        return ""

    @property
    def metadata(self) -> Mapping[str, Any]:
        return as_map(self.props.get("metadata"))

    @property
    def spec(self) -> Mapping[str, Any]:
        return as_map(self.props.get("spec"))

    @property
    def labels(self) -> Mapping[str, Any]:
        return as_map(self.metadata.get("labels"))

    @property
    def annotations(self) -> Mapping[str, Any]:
        return as_map(self.metadata.get("annotations"))

    @property
    def name(self) -> str:
        return as_str(self.metadata.get("name")) or "?"

    @property
    def namespace(self) -> str:
        return as_str(self.metadata.get("namespace")) or "default"

    @property
    def model(self) -> str | None:
        """The catalog entry this object belongs to (label ``tkf.io/model``), if any."""
        return as_str(self.labels.get(MODEL_LABEL))

    @property
    def ref(self) -> str:
        """How messages name the object: ``Kind namespace/name``."""
        return f"{self.kind or self.type} {self.namespace}/{self.name}"

    @property
    def is_ours(self) -> bool:
        return self.model is not None or self.labels.get(PART_OF_LABEL) == PART_OF

    @property
    def is_model_server(self) -> bool:
        """A workload whose pods run vLLM for a catalog entry."""
        return self.kind in WORKLOAD_KINDS and self.model is not None and \
            self.labels.get(COMPONENT_LABEL, MODEL_SERVER) == MODEL_SERVER


@dataclass(frozen=True)
class PodGroup:
    """Pods made from one template of a workload: ``count`` of them per replica of the model."""

    role: str
    """``pod``, ``leader``, ``worker`` (how messages name the template)."""
    spec: Mapping[str, Any]
    count: int
    labels: Mapping[str, Any] = field(default_factory=dict)


def as_map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def as_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def as_int(value: Any, default: int | None = None) -> int | None:
    """Integers as Kubernetes writes them: ``2``, ``2.0`` (the engine's numbers are floats) or ``"2"``."""
    if isinstance(value, bool) or value is UNKNOWN:
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return default


def replicas(obj: K8sObject) -> int:
    """Replicas of the model (LWS: groups). Kubernetes defaults a missing count to 1. An autoscaled workload
    counts at its maximum (KServe's `spec.scaling.maxReplicas`, or the annotation the vllm backend's
    Deployment carries beside its ScaledObject): what the autoscaler may run, not what runs now."""
    if obj.kind == "Pod":
        return 1
    at_most = max(as_int(as_map(obj.spec.get("scaling")).get("maxReplicas"), 0) or 0,
                  as_int(obj.annotations.get(MAX_REPLICAS_ANNOTATION), 0) or 0)
    return at_most or as_int(obj.spec.get("replicas"), 1) or 0


def pod_groups(obj: K8sObject) -> list[PodGroup]:
    """The pod templates of a workload and how many pods each makes per replica."""
    spec = obj.spec
    kind = obj.kind
    if kind == "Pod":
        return [PodGroup("pod", spec, 1, obj.labels)]
    if kind in {"Deployment", "StatefulSet", "DaemonSet", "Job"}:
        tpl = as_map(spec.get("template"))
        return [PodGroup("pod", as_map(tpl.get("spec")), 1, as_map(as_map(tpl.get("metadata")).get("labels")))]
    if kind == "LeaderWorkerSet":
        lwt = as_map(spec.get("leaderWorkerTemplate"))
        size = as_int(lwt.get("size"), 1) or 1
        worker = as_map(lwt.get("workerTemplate"))
        leader = as_map(lwt.get("leaderTemplate")) or worker
        groups = [PodGroup("leader", as_map(leader.get("spec")), 1,
                           as_map(as_map(leader.get("metadata")).get("labels")))]
        if size > 1:
            groups.append(PodGroup("worker", as_map(worker.get("spec")), size - 1,
                                   as_map(as_map(worker.get("metadata")).get("labels"))))
        return groups
    if kind == "LLMInferenceService":
        # KServe merges `template` (and `worker`) over its presets and labels the pods with spec.labels.
        labels = as_map(spec.get("labels")) or obj.labels
        groups = [PodGroup("leader" if spec.get("worker") else "pod", as_map(spec.get("template")), 1, labels)]
        if spec.get("worker"):
            groups.append(PodGroup("worker", as_map(spec.get("worker")), max(0, kserve_nodes(obj) - 1), labels))
        return groups
    return []


def kserve_nodes(obj: K8sObject) -> int:
    """Pods per replica of a multi-node LLMInferenceService: one per node of TP x PP.

    The GPUs of the whole model (tensor x pipeline) divided by what one pod requests; KServe's
    pipeline-parallel preset starts one ``vllm serve`` rank per pod.
    """
    par = as_map(obj.spec.get("parallelism"))
    total = (as_int(par.get("tensor"), 1) or 1) * (as_int(par.get("pipeline"), 1) or 1)
    per_pod = pod_gpus(as_map(obj.spec.get("template"))) or 1
    return max(1, total // per_pod)


def containers(pod_spec: Mapping[str, Any], *, init: bool = True) -> Iterator[Mapping[str, Any]]:
    """Containers of a pod spec, init containers included unless ``init=False``."""
    keys = ("initContainers", "containers") if init else ("containers",)
    for key in keys:
        for c in as_list(pod_spec.get(key)):
            if isinstance(c, Mapping):
                yield c


def command_words(container: Mapping[str, Any]) -> list[str]:
    """Every word of a container's command and args (shell lines split on whitespace)."""
    return [w for part in as_list(container.get("command")) + as_list(container.get("args")) if isinstance(part, str)
            for w in part.split()]


def gpu_quantity(container: Mapping[str, Any], section: str, resource: str = GPU_RESOURCE) -> int | None:
    """GPUs a container asks for in ``requests`` or ``limits``; None when absent or unknown."""
    res = as_map(container.get("resources"))
    return as_int(as_map(res.get(section)).get(resource))


def mig_resources(container: Mapping[str, Any]) -> list[str]:
    """The MIG slices (`nvidia.com/mig-<profile>`, the GPU Operator's mixed strategy) a container asks for."""
    res = as_map(container.get("resources"))
    names = {str(k) for section in ("requests", "limits") for k in as_map(res.get(section))}
    return sorted(n for n in names if n.startswith(MIG_RESOURCE_PREFIX))


def pod_gpus(pod_spec: Mapping[str, Any], resource: str = GPU_RESOURCE) -> int:
    """GPUs one pod occupies: the scheduler reserves its containers' limits (= requests) summed."""
    total = 0
    for c in containers(pod_spec, init=False):
        total += gpu_quantity(c, "limits", resource) or gpu_quantity(c, "requests", resource) or 0
    return total


def model_gpus(obj: K8sObject, resource: str = GPU_RESOURCE) -> int:
    """GPUs a workload takes when all its replicas run: replicas x the GPUs of each replica's pods."""
    per_replica = sum(g.count * pod_gpus(g.spec, resource) for g in pod_groups(obj))
    return replicas(obj) * per_replica


def node_selector(pod_spec: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): v for k, v in as_map(pod_spec.get("nodeSelector")).items() if isinstance(v, str)}


def plain(value: Any) -> Any:
    """A deep copy with mappings and sequences turned into dicts and lists (tests and the pack)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value
