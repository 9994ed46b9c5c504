"""Read a model's sizing facts from the Hugging Face Hub without downloading its weights.

Only ``config.json`` (a few kB) is downloaded; tensor shapes, dtypes and byte ranges come from the
safetensors headers, which ``huggingface_hub`` reads with HTTP Range requests, and are kept as bytes per
layer kind and dtype (`tkf_infra/sizing/tensor_kinds.py`). Everything is read at a pinned
commit so the result can be locked forever. The endpoint is configurable (argument or
``HF_ENDPOINT``) so tests and air-gapped mirrors work the same way as the public Hub.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
from huggingface_hub import HfApi
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    NotASafetensorsRepoError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
    SafetensorsParsingError,
)

from tkf_infra.sizing.adapter_facts import AdapterFacts
from tkf_infra.sizing.facts import ModelFacts, resolve_text_config
from tkf_infra.sizing.tensor_kinds import tally

T = TypeVar("T")

_SHA = re.compile(r"^[0-9a-f]{40}$")


def _network_errors() -> tuple[type[BaseException], ...]:
    """Transport errors of whichever HTTP client this huggingface_hub uses (2.x ships httpx2)."""
    errors: list[type[BaseException]] = [httpx.HTTPError, OSError]
    try:
        import httpx2  # type: ignore[import-not-found, unused-ignore]

        errors.append(httpx2.HTTPError)
    except ImportError:  # older huggingface_hub on plain httpx
        pass
    return tuple(errors)


class HubError(RuntimeError):
    """A Hub read failed; ``kind`` is one of revision_not_found, gated, not_found, unreachable, no_weights,
    bad_config, bad_weights."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def default_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def _map_error(exc: BaseException, repo: str, revision: str, endpoint: str) -> HubError:
    where = f"{repo}@{revision}"
    if isinstance(exc, RevisionNotFoundError):
        return HubError(
            "revision_not_found",
            f"{where}: revision {revision!r} does not exist on {endpoint} (404); pin a commit SHA that "
            f"exists (see https://huggingface.co/{repo}/commits/main) in the catalog entry's revision",
        )
    if isinstance(exc, GatedRepoError):
        return HubError(
            "gated",
            f"{where}: the repository is gated and the request was refused (401/403); accept the licence "
            "on the model page, then set the Hugging Face token secret (HF_TOKEN, or the stack's "
            "hfToken secret) to a token of that account and retry",
        )
    if isinstance(exc, RepositoryNotFoundError):
        return HubError(
            "not_found",
            f"{where}: repository not found on {endpoint}, or private/gated without a valid token; check "
            "the repo name, or set the Hugging Face token secret (HF_TOKEN) if it is private or gated",
        )
    if isinstance(exc, SafetensorsParsingError):
        return HubError(
            "bad_weights",
            f"{where}: a safetensors header at this revision cannot be read ({exc}); the checkpoint's files are "
            "damaged or not safetensors: pin a revision whose weights load",
        )
    if isinstance(exc, NotASafetensorsRepoError):
        return HubError(
            "no_weights",
            f"{where}: no model.safetensors or model.safetensors.index.json at this revision; "
            "vLLM sizing needs safetensors weights",
        )
    if isinstance(exc, HfHubHTTPError) and exc.response is not None and exc.response.status_code == 403:
        return HubError(
            "gated",
            f"{where}: access denied (403); set the Hugging Face token secret (HF_TOKEN) to a token that "
            "has accepted the model's licence",
        )
    return HubError(
        "unreachable",
        f"{where}: cannot reach the Hugging Face Hub at {endpoint} ({type(exc).__name__}: {exc}); run "
        "`python -m tkf_infra lock` on a machine with Hub access and commit models.lock.json",
    )


def _tensors(meta: Any) -> list[tuple[str, str, int]]:
    """Every tensor of every shard as (name, dtype, bytes): bytes from the header's data offsets, exact for
    packed dtypes too (FP4 in U8, int4 in I32) where elements x size would not be."""
    return [(name, str(t.dtype), int(t.data_offsets[1]) - int(t.data_offsets[0]))
            for file_meta in meta.files_metadata.values() for name, t in file_meta.tensors.items()]


def _layers(config: dict[str, Any]) -> int:
    """The decoder's layer count (where MTP layers start), 0 when the config does not say."""
    layers = resolve_text_config(config).get("num_hidden_layers")
    return layers if isinstance(layers, int) and not isinstance(layers, bool) and layers > 0 else 0


def _at_commit(repo: str, revision: str, ep: str, read: Callable[[HfApi, str], T], token: str | None,
               timeout: float, files_metadata: bool = False) -> tuple[Any, str, T]:
    """Resolve `revision` to its commit and run `read(api, sha)` there: the one Hub read both kinds of entry
    share, every error mapped to a `HubError` naming the entry and the fix."""
    api = HfApi(endpoint=ep, token=token)
    try:
        info = api.model_info(repo, revision=revision, files_metadata=files_metadata, timeout=timeout)
        sha = info.sha or revision
        if not _SHA.match(sha):
            raise HubError("revision_not_found", f"{repo}@{revision}: the Hub did not return a commit SHA")
        return info, sha, read(api, sha)
    except HubError:
        raise
    except (RevisionNotFoundError, GatedRepoError, RepositoryNotFoundError, NotASafetensorsRepoError,
            SafetensorsParsingError, HfHubHTTPError, LocalEntryNotFoundError) as exc:
        raise _map_error(exc, repo, revision, ep) from exc
    except _network_errors() as exc:
        raise _map_error(exc, repo, revision, ep) from exc


def _json_file(api: HfApi, repo: str, filename: str, sha: str, cache_dir: str | Path | None,
               timeout: float) -> Any:
    path = api.hf_hub_download(repo, filename, revision=sha, cache_dir=cache_dir, etag_timeout=timeout)
    return json.loads(Path(path).read_text())


def fetch_facts(
    repo: str,
    revision: str,
    token: str | None = None,
    endpoint: str | None = None,
    cache_dir: str | Path | None = None,
    timeout: float = 10.0,
) -> ModelFacts:
    """Read config.json and the safetensors headers of ``repo`` at ``revision``.

    A branch or tag is resolved to its commit SHA first (the returned facts carry the SHA), so the
    lock never records a moving reference. The headers give each tensor's dtype, shape and byte range
    (one Range request per shard, huggingface_hub's `get_safetensors_metadata`); the weights are never
    downloaded."""
    ep = (endpoint or default_endpoint()).rstrip("/")

    def read(api: HfApi, sha: str) -> tuple[Any, Any]:
        config = _json_file(api, repo, "config.json", sha, cache_dir, timeout)
        return config, api.get_safetensors_metadata(repo, revision=sha, timeout=timeout)

    info, sha, (config, meta) = _at_commit(repo, revision, ep, read, token, timeout, files_metadata=True)
    if not isinstance(config, dict):
        raise HubError("bad_config", f"{repo}@{sha}: config.json is not a JSON object")
    tensors = _tensors(meta)
    counts: dict[str, int] = {}
    for file_meta in meta.files_metadata.values():
        for tensor in file_meta.tensors.values():
            counts[tensor.dtype] = counts.get(tensor.dtype, 0) + int(tensor.parameter_count)
    return ModelFacts(
        repo=repo,
        revision=sha,
        config=config,
        param_counts=counts,
        weight_bytes=sum(n for _, _, n in tensors),
        tensor_bytes=tally(tensors, _layers(config)),
        gated=bool(info.gated),
        source=f"read from {ep} with huggingface_hub: config.json and safetensors headers at {sha}",
    )


def fetch_adapter_facts(
    repo: str,
    revision: str,
    token: str | None = None,
    endpoint: str | None = None,
    cache_dir: str | Path | None = None,
    timeout: float = 10.0,
) -> AdapterFacts:
    """Read a LoRA adapter's ``adapter_config.json`` at ``revision`` (resolved to its commit, as `fetch_facts`)."""
    ep = (endpoint or default_endpoint()).rstrip("/")
    _, sha, config = _at_commit(
        repo, revision, ep, lambda api, sha: _json_file(api, repo, "adapter_config.json", sha, cache_dir, timeout),
        token, timeout)
    if not isinstance(config, dict):
        raise HubError("bad_config", f"{repo}@{sha}: adapter_config.json is not a JSON object")
    return AdapterFacts(repo=repo, revision=sha, config=config, source=f"adapter_config.json from {ep}")
