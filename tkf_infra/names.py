"""The names that cross a seam, once: Kubernetes object names derived from catalog names (so length
limits live in one place), the label and annotation keys several packages write or read, our
components' Pulumi type tokens, the pipeline-parallel preset's name, the project root, and the
subject that names the models of a policy violation.

It imports nothing of ours (and nothing but the standard library), so every layer may import it:
components/ write these names, tkf_infra/ops/ and policy/guardrails/ read them back, and
tests/test_vocabulary.py fails when one side changes a name alone.

Why 36: the longest name derived from a model is the one KServe gives a multi-node workload,
`<name>-kserve-mn` (LeaderWorkerSet) with worker StatefulSets `<lws>-<group>`, whose pods carry a
`controller-revision-hash` label of `<statefulset>-<10 chars>` that must stay within 63 characters:
36 + len("-kserve-mn") + len("-99") + 11 = 60, leaving room for our own suffixes below.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

#: The checkout: stack files, `models.lock.json`, `policy/`, vendored charts are found from here.
PROJECT_ROOT = Path(__file__).resolve().parents[1]

MAX_MODEL_NAME_LEN = 36
K8S_NAME_LIMIT = 63
#: vLLM's OpenAI server port (KServe's presets use it too): the alias Service and every pod serve on it.
SERVING_PORT = 8000
#: The metrics sidecar's port (components/metrics_proxy.py): the only port the monitoring namespace may
#: reach, since port 8000 also answers inference routes vLLM's API key does not guard.
METRICS_PORT = 9000

# Suffixes tkf-infra appends to a model's name, longest first; tests check each stays within limits.
MODEL_SUFFIXES: tuple[str, ...] = ("-kserve-mn", "-openai", "-netpol", "-fit", "-sa")


def _check(name: str) -> str:
    if len(name) > K8S_NAME_LIMIT:
        raise ValueError(f"generated Kubernetes name {name!r} is {len(name)} characters (limit 63)")
    return name


def alias_service(model: str) -> str:
    """The stable Service the gateway calls: `<name>-openai`, port 8000."""
    return _check(f"{model}-openai")


def base_url(model: str, namespace: str) -> str:
    """OpenAI-compatible base URL of a model's alias Service, reachable only from the gateway."""
    return f"http://{alias_service(model)}.{namespace}.svc.cluster.local:{SERVING_PORT}/v1"


def network_policy(model: str) -> str:
    return _check(f"{model}-netpol")


def workload(model: str) -> str:
    """Deployment / LeaderWorkerSet / LLMInferenceService name of a model."""
    return _check(model)


def service_account(model: str) -> str:
    return _check(f"{model}-sa")


# ---------------------------------------------------------------------------------------------
# Pulumi type tokens of our components (registered by components/*.py; tkf_infra/ops/summary.py and
# policy_report.py attribute engine events to models by them)
# ---------------------------------------------------------------------------------------------

MODEL_SERVING_TYPE = "tkf:serving:ModelServing"
WEIGHT_CACHE_TYPE = "tkf:serving:WeightCache"
GPU_NODE_POOL_TYPE = "tkf:platform:GpuNodePool"
GPU_OPERATOR_TYPE = "tkf:platform:GpuOperator"
GPU_SHARING_TYPE = "tkf:platform:GpuSharing"
SERVING_PREREQUISITES_TYPE = "tkf:platform:ServingPrerequisites"
OBSERVABILITY_TYPE = "tkf:platform:Observability"
COMPONENT_TYPES = frozenset({MODEL_SERVING_TYPE, WEIGHT_CACHE_TYPE, GPU_NODE_POOL_TYPE, GPU_OPERATOR_TYPE,
                             GPU_SHARING_TYPE, SERVING_PREREQUISITES_TYPE, OBSERVABILITY_TYPE})
#: Pulumi's own type of the stack resource (its outputs arrive on its events).
STACK_TYPE = "pulumi:pulumi:Stack"
#: The WeightCache component's output listing the catalog entries it serves (ops/summary.py reads it).
WEIGHT_CACHE_MODELS_OUTPUT = "models"

# ---------------------------------------------------------------------------------------------
# Label and annotation keys (written by components/, read by policy/guardrails/ and dashboards)
# ---------------------------------------------------------------------------------------------

#: Every object of one catalog entry carries it; the Services and NetworkPolicies select on it.
MODEL_LABEL = "tkf.io/model"
#: The well-known label every kubelet sets to its node's hostname: the domain of the pins' spread (one per node).
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: The first 12 characters of the served revision (label); the full revision (annotation).
REVISION_KEY = "tkf.io/revision"
#: The catalog entry's Hugging Face repository (annotation).
REPO_ANNOTATION = "tkf.io/repo"
#: The catalog entries one weight cache serves, comma-separated (annotation on its PVC and Job).
CACHE_MODELS_ANNOTATION = "tkf.io/models"
#: The GPU share a workload runs on (`mig:<profile>` / `slice:<k>`); absent for whole GPUs.
GPU_SHARE_ANNOTATION = "tkf.io/gpu-share"
#: The node pool a node belongs to, on the nodes of the pools tkf-infra manages (EKS node groups, and the
#: nodes it labels itself); those pools' nodeSelector is this label (tkf_infra/plan/pools.py).
POOL_LABEL = "tkf.io/node-pool"
#: The most replicas an autoscaled workload may run (`scaling.maxReplicas`); absent for a fixed count.
MAX_REPLICAS_ANNOTATION = "tkf.io/max-replicas"
#: The fit check's verdict on a workload (`fits`, `tight`, `refuses`): one of the `tkf.io/fit-*` annotations the
#: sizing contract writes (`FitFigures.annotations`; tests/test_vocabulary.py holds the two spellings together).
FIT_VERDICT_ANNOTATION = "tkf.io/fit-verdict"
#: How long the Kubernetes provider waits for an object to be ready (its await; pulumi-kubernetes' annotation).
#: The program writes it on each model's workload and download Job; `up`'s own readiness check after the engine
#: (tkf_infra/live/ready_wait.py) reads it back from the workload, so both wait the same bound.
TIMEOUT_ANNOTATION = "pulumi.com/timeoutSeconds"
NAME_LABEL = "app.kubernetes.io/name"
INSTANCE_LABEL = "app.kubernetes.io/instance"
#: The role an object plays: `model-server` (pods that run vLLM), `endpoint`, `weight-cache`.
COMPONENT_LABEL = "app.kubernetes.io/component"
PART_OF_LABEL = "app.kubernetes.io/part-of"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
#: `app.kubernetes.io/part-of` of everything tkf-infra creates.
PART_OF = "tkf-infra"
#: `app.kubernetes.io/managed-by` of the objects tkf-infra labels itself.
MANAGED_BY = "pulumi"
#: `app.kubernetes.io/name` of the serving pods.
SERVER_NAME = "vllm"
MODEL_SERVER = "model-server"
WEIGHT_CACHE_COMPONENT = "weight-cache"
#: Pod-template annotation: digest of the accepted key set (``ApiKeys.accepted_digest``), so pods roll
#: when the set changes and only then. Never the key: a slow salted hash (tkf_infra/config/api_keys.py).
API_KEYS_ANNOTATION = "tkf.io/api-keys-scrypt"

#: Name of the pipeline-parallel preset ServingPrerequisites installs (KServe references, but does
#: not ship, ``config-llm-worker-pipeline-parallel``; its well-known prefix is ``kserve-``). The
#: document itself is components/data/pipeline-parallel-preset.yaml (a test pins its name to this).
PIPELINE_PARALLEL_PRESET = "kserve-config-llm-worker-pipeline-parallel"

# ---------------------------------------------------------------------------------------------
# NVIDIA's names (the device plugin, GPU feature discovery, mig-manager): written by the plan and the
# components, read by the admission checks and policy/guardrails/
# ---------------------------------------------------------------------------------------------

#: The device plugin's whole-GPU extended resource; on a time-sliced node one unit is one replica of a GPU.
GPU_RESOURCE = "nvidia.com/gpu"
#: A MIG slice under the GPU Operator's mixed strategy: `nvidia.com/mig-1g.10gb`.
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
#: The taint tkf-infra's GPU pools carry (only pods that ask for GPUs tolerate it).
GPU_TAINT_KEY = "nvidia.com/gpu"
#: GPU feature discovery's label of a node's GPU product; GPU pools select on it.
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
#: The custom mig-parted ConfigMap (in the GPU Operator's namespace) and its key, as mig-manager reads it:
#: components/gpu_sharing.py writes it, the GPU Operator's values name it, the platform contract publishes it.
MIG_CONFIG_NAME = "tkf-mig-parted-config"
MIG_CONFIG_KEY = "config.yaml"
#: The node label mig-manager watches: the name of the mig-parted config to apply to the node.
MIG_CONFIG_LABEL = "nvidia.com/mig.config"

# ---------------------------------------------------------------------------------------------
# The models a policy violation is about (policy/guardrails write it, tkf_infra/ops/policy_report.py
# reads it): the engine hands a violation back as text plus one URN, and a weight-cache volume or a
# fleet total is under no single ModelServing, so every message starts with its models.
# ---------------------------------------------------------------------------------------------

_DNS_LABEL = r"[a-z](?:[-a-z0-9]*[a-z0-9])?"
_SUBJECT = re.compile(rf"^(?:model (?P<one>{_DNS_LABEL})|models (?P<many>{_DNS_LABEL}(?:, {_DNS_LABEL})+)): ")


def subject(models: Sequence[str]) -> str:
    """``model a`` / ``models a, b`` (sorted, once each), or ``stack`` when the violation is about none."""
    found = sorted(dict.fromkeys(m for m in models if m))
    if not found:
        return "stack"
    return f"model {found[0]}" if len(found) == 1 else "models " + ", ".join(found)


def subject_models(message: str) -> tuple[str, ...] | None:
    """The models a message written as ``f"{subject(models)}: …"`` names; None when it has no model subject."""
    match = _SUBJECT.match(message)
    if match is None:
        return None
    return (match["one"],) if match["one"] else tuple(match["many"].split(", "))


#: The fleet stack's one mutable ConfigMap of plan facts (serving namespace) that every metrics sidecar reads
#: (components/fleet_facts.py, components/metrics_proxy.py).
FLEET_FACTS_CONFIGMAP = "tkf-fleet-facts"
#: The platform's observability objects (components/observability.py): the dashboards' ConfigMaps are
#: `tkf-dashboard-<name>`, the alert rules' PrometheusRule and plain rule-file ConfigMap this name.
ALERT_RULES = "tkf-alert-rules"
DASHBOARD_PREFIX = "tkf-dashboard-"


#: Pulumi name of the stack's one FitCheck (not a Kubernetes object; it belongs to no single model).
FIT_CHECK = "fit-checks"
#: Its type token: the SDK's dynamic-provider package and the `module=`/`name=` of `providers.fit.FitCheck`
#: (tests/test_fit_provider.py holds the two together).
FIT_CHECK_TYPE = "pulumi-python:dynamic/tkf:FitCheck"
#: Pulumi names of the fleet stack's objects that belong to no single model but change with any of them (or
#: with none): the plan-facts ConfigMap, the metrics sidecar's source, the MIG pools' sharing component. A
#: targeted run (`--models`, tkf_infra/targeted.py) steps them with the models it names.
FLEET_FACTS_RESOURCE = "fleet-facts"
METRICS_PROXY_RESOURCE = "metrics-proxy"
GPU_SHARING_RESOURCE = "gpu-sharing"
#: Suffix of a model's own FitCheck before issue 18 (one per model, `<model>-fit`): the CLI still maps
#: such a resource, deleted by the first `up` after the change, back to its model (ops/summary.py).
FIT_CHECK_SUFFIX = "-fit"


def _slug(text: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", text.lower())).strip("-")


def weight_cache(repo: str, revision: str) -> str:
    """PVC (and download Job) of one `repo@revision`: the repo's name plus a short revision hash.

    Two catalog entries serving the same weights get the same name, hence one PVC and one
    download. The hash covers repo and revision so repos with the same short name never collide.
    """
    digest = hashlib.sha256(f"{repo}@{revision}".encode()).hexdigest()[:8]
    base = _slug(repo.split("/", 1)[-1]) or "model"
    prefix = "weights-"
    room = K8S_NAME_LIMIT - len(prefix) - len(digest) - 1 - len("-download")
    base = base[:room].rstrip("-")
    return _check(f"{prefix}{base}-{digest}")


def weight_download_job(repo: str, revision: str) -> str:
    return _check(f"{weight_cache(repo, revision)}-download")


#: Where the serving pod sees its model's revision directory (KServe's `pvc://` mount; the vllm backend uses the same).
MODEL_MOUNT = "/mnt/models"
#: The directory, inside a base model's revision directory of the weight cache, that holds its LoRA adapters.
LORA_DIR = ".lora"


def adapter_dir(repo: str, revision: str) -> str:
    """Where one adapter `repo@revision` lives, relative to its base's revision directory.

    The download Job writes it there and `--lora-modules` points vLLM at it: inside the base's
    directory because the pod mounts only that (`pvc://<pvc>/<base revision>`); a dot directory so
    the base's own loader, which reads the top level, never sees it; repo and commit in the path so
    two adapters never share one, and a new revision is a new directory."""
    return f"{LORA_DIR}/{repo.replace('/', '--')}/{revision}"
