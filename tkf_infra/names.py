"""Kubernetes object names derived from catalog names, so length limits live in one place.

Why 36: the longest name derived from a model is the one KServe gives a multi-node workload,
`<name>-kserve-mn` (LeaderWorkerSet) with worker StatefulSets `<lws>-<group>`, whose pods carry a
`controller-revision-hash` label of `<statefulset>-<10 chars>` that must stay within 63 characters:
36 + len("-kserve-mn") + len("-99") + 11 = 60, leaving room for our own suffixes below.
"""

from __future__ import annotations

import hashlib
import re

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


#: Pulumi name of the stack's one FitCheck (not a Kubernetes object; it belongs to no single model).
FIT_CHECK = "fit-checks"
FIT_CHECK_SUFFIX = "-fit"


def fit_check(model: str) -> str:
    """Pulumi name of a model's FitCheck before issue 18 (one per model): the CLI still maps such a
    resource, deleted by the first `up` after the change, back to its model."""
    return f"{model}{FIT_CHECK_SUFFIX}"


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
