"""What runs: images only from registries the owner trusts, the vLLM release the fleet was sized for,
and model weights pinned to a commit.

Why the vLLM version is a guardrail: the fit check sizes KV cache and activation memory for one vLLM
release (its tag is ``serving.vllmImage``'s); another release can need more memory and fail at
start-up on the GPUs the check approved.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from typing import Any

from tkf_infra.names import CACHE_MODELS_ANNOTATION, REVISION_KEY

from .base import Guardrail, Violation, owner_fix, violation
from .objects import (
    K8sObject,
    as_list,
    as_map,
    as_str,
    command_words,
    containers,
    pod_groups,
)

SHA_RE = re.compile(r"^[0-9a-f]{40}$")
#: Container name of the vLLM server in every serving pod (KServe merges ours over its preset by it).
SERVER_CONTAINER = "main"


def normalize_image(ref: str) -> str:
    """``vllm/vllm-openai:v1`` → ``docker.io/vllm/vllm-openai:v1``: the registry made explicit.

    Docker's rule: the first path component is a registry only if it contains ``.`` or ``:`` or is
    ``localhost``; otherwise the image is on Docker Hub (``library/`` for single names).
    """
    first, _, rest = ref.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return ref
    return f"docker.io/{ref}" if rest else f"docker.io/library/{ref}"


def split_tag(ref: str) -> tuple[str, str | None, str | None]:
    """(repository, tag, digest) of an image reference."""
    ref, _, digest = ref.partition("@")
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > slash:
        return ref[:colon], ref[colon + 1 :], digest or None
    return ref, None, digest or None


def _approved(image: str, entry: str) -> bool:
    """``docker.io/vllm/`` approves everything under that path; ``docker.io/vllm/vllm-openai``, that
    repository only (``…/vllm-openai-fork`` is another repository, not a prefix match)."""
    repo, _, _ = split_tag(image)
    return repo.startswith(entry) if entry.endswith("/") else repo == entry


def check_images(obj: K8sObject, config: Mapping[str, Any]) -> list[Violation]:
    if not obj.is_ours:
        return []
    allowed = [normalize_image(str(r)) for r in as_list(config.get("registries"))]
    version = as_str(config.get("vllmVersion"))
    models = [obj.model] if obj.model else [m for m in (as_str(obj.annotations.get(CACHE_MODELS_ANNOTATION)) or "")
                                             .split(",") if m]
    out: list[Violation] = []
    for group in pod_groups(obj):
        for c in containers(group.spec):
            image = as_str(c.get("image"))
            if image is None:
                continue
            where = f"{obj.ref} container {c.get('name')!r}"
            full = normalize_image(image)
            if not any(_approved(full, entry) for entry in allowed):
                out.append(
                    violation(
                        models,
                        where,
                        f"image {image!r} is not from an approved registry (approved: {', '.join(allowed) or 'none'})",
                        f"use an image from an approved registry (serving.vllmImage / vllmCpuImage), {owner_fix()}",
                    )
                )
                continue
            _, tag, digest = split_tag(full)
            if (tag is None and digest is None) or tag == "latest":
                out.append(
                    violation(
                        models,
                        where,
                        f"image {image!r} is not pinned (no tag, or 'latest')",
                        "pin the image to a release tag or a digest",
                    )
                )
            elif version and obj.is_model_server and c.get("name") == SERVER_CONTAINER and tag != version:
                out.append(
                    violation(
                        models,
                        where,
                        f"runs vLLM {tag or digest!r}, but this stack is pinned to vLLM {version!r}",
                        f"set serving.vllmImage (and vllmCpuImage) to the {version} tag, {owner_fix()}",
                    )
                )
    # One message per image problem per object is enough: pods of a group repeat their containers.
    return list({v.message: v for v in out}.values())


def _revision_problems(obj: K8sObject) -> list[tuple[str, str]]:
    """(where, value) of every revision reference of the object that is not a 40-hex commit."""
    found: list[tuple[str, str]] = []
    rev = obj.annotations.get(REVISION_KEY)
    if isinstance(rev, str) and not SHA_RE.match(rev):
        found.append(("annotation tkf.io/revision", rev))
    if obj.kind == "LLMInferenceService":
        uri = as_str(as_map(obj.spec.get("model")).get("uri")) or ""
        if uri.startswith("hf://"):
            _, _, pinned = uri.removeprefix("hf://").partition(":")
            if not SHA_RE.match(pinned):
                found.append(("spec.model.uri", uri))
        elif uri.startswith("pvc://"):
            parts = uri.removeprefix("pvc://").split("/")
            if len(parts) < 2 or not SHA_RE.match(parts[1]):
                found.append(("spec.model.uri", uri))
    for group in pod_groups(obj):
        for c in containers(group.spec, init=False):
            for flag, value in itertools.pairwise(command_words(c)):
                if flag == "--revision" and not SHA_RE.match(value.strip("'\"")):
                    found.append((f"container {c.get('name')!r} --revision", value))
    return found


def check_revisions(obj: K8sObject, config: Mapping[str, Any]) -> list[Violation]:
    if not obj.is_ours:
        return []
    models = [obj.model] if obj.model else [m for m in (as_str(obj.annotations.get(CACHE_MODELS_ANNOTATION)) or "")
                                             .split(",") if m]
    return [violation(models, f"{obj.ref} {where}", f"revision {value!r} is not a pinned 40-hex commit",
                      "set the entry's revision to the commit sha (`python -m tkf_infra lock REPO@BRANCH` "
                      "resolves it)") for where, value in _revision_problems(obj)]


APPROVED_IMAGES = Guardrail(
    name="approved-images",
    description=(
        "Every container of tkf-infra's pods comes from a registry the platform owner approved, is pinned, "
        "and model servers run the vLLM release the stack is pinned to."
    ),
    scope="resource",
    check=check_images,
    config_schema={
        "registries": {
            "type": "array",
            "items": {"type": "string"},
            "minItems": 1,
            "description": "Approved images: a path ending in / approves everything under it "
            "(docker.io/vllm/), anything else is one exact repository. Docker Hub names are normalized: "
            "vllm/x means docker.io/vllm/x.",
        },
        "vllmVersion": {"type": "string", "description": "The tag every model server's vLLM image must carry."},
    },
    required=("registries", "vllmVersion"),
)

REVISIONS_PINNED = Guardrail(
    name="revisions-pinned",
    description=(
        "Model weights are pinned to a commit (40-hex revision) everywhere they are referenced, so "
        "what was sized and reviewed is what runs."
    ),
    scope="resource",
    check=check_revisions,
)
