"""The model facts lock: ``models.lock.json`` at the project root, keyed by ``repo@revision``.

A revision is a commit SHA, so an entry is valid forever and ``pulumi preview`` / CI can size
models without network access. ``python -m tkf_infra lock REPO@REV …`` adds entries by reading the
Hub (``tkf_infra.hub.client``); existing entries are never re-fetched or rewritten.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tkf_infra.names import PROJECT_ROOT
from tkf_infra.sizing.adapter_facts import AdapterFacts
from tkf_infra.sizing.facts import ModelFacts

DEFAULT_LOCK_PATH = PROJECT_ROOT / "models.lock.json"
LOCK_VERSION = 1


class LockMissError(LookupError):
    """The model is not in the lock and the Hub could not be asked."""


@dataclass
class Lock:
    """In-memory lock; ``about`` is the free-text header kept when saving."""

    entries: dict[str, ModelFacts] = field(default_factory=dict)
    about: str = ""
    adapters: dict[str, AdapterFacts] = field(default_factory=dict)
    """LoRA adapters' adapter_config.json, keyed like models (the file's `adapters` list)."""

    def get(self, repo: str, revision: str) -> ModelFacts | None:
        return self.entries.get(f"{repo}@{revision}")

    def put(self, facts: ModelFacts) -> None:
        self.entries[facts.key] = facts

    def get_adapter(self, repo: str, revision: str) -> AdapterFacts | None:
        return self.adapters.get(f"{repo}@{revision}")

    def put_adapter(self, facts: AdapterFacts) -> None:
        self.adapters[facts.key] = facts

    def to_json(self) -> dict[str, Any]:
        return {
            "_about": self.about,
            "version": LOCK_VERSION,
            "models": [_stored(self.entries[k]) for k in sorted(self.entries)],
            # Only when there are adapters: a lock without them stays byte for byte what it was.
            **({"adapters": [self.adapters[k].model_dump(mode="json") for k in sorted(self.adapters)]}
               if self.adapters else {}),
        }

    def save(self, path: Path | str | None = None) -> Path:
        target = Path(path) if path else DEFAULT_LOCK_PATH
        target.write_text(json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n")
        return target


def _stored(facts: ModelFacts) -> dict[str, Any]:
    data = facts.model_dump(mode="json")
    data["param_counts"] = dict(sorted(data["param_counts"].items()))
    return data


def load_lock(path: Path | str | None = None) -> Lock:
    """Load the lock; a missing file is an empty lock (a fresh project has nothing pinned yet)."""
    source = Path(path) if path else DEFAULT_LOCK_PATH
    if not source.exists():
        return Lock()
    try:
        data = json.loads(source.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source} is not valid JSON ({exc}); restore it from git") from exc
    if data.get("version") != LOCK_VERSION:
        raise ValueError(f"{source} has lock version {data.get('version')!r}; this code reads {LOCK_VERSION}")
    lock = Lock(about=str(data.get("_about") or ""))
    for raw in data.get("models", []):
        lock.put(ModelFacts.model_validate(raw))
    for raw in data.get("adapters", []):
        lock.put_adapter(AdapterFacts.model_validate(raw))
    return lock


def resolve_facts(
    repo: str,
    revision: str,
    lock: Lock | None = None,
    token: str | None = None,
    endpoint: str | None = None,
    use_hub: bool = True,
) -> ModelFacts:
    """Facts from the lock, else from the Hub; a clear error when neither can answer."""
    current = lock if lock is not None else load_lock()
    hit = current.get(repo, revision)
    if hit is not None:
        return hit
    hint = (
        f"run `python -m tkf_infra lock {repo}@{revision}` on a machine with Hub access and commit "
        "models.lock.json"
    )
    if not use_hub:
        raise LockMissError(f"{repo}@{revision} is not in models.lock.json; {hint}")
    from tkf_infra.hub.client import HubError, fetch_facts

    try:
        return fetch_facts(repo, revision, token=token, endpoint=endpoint)
    except HubError as exc:
        if exc.kind == "unreachable":
            cause = exc.__cause__
            raise LockMissError(
                f"{repo}@{revision} is not in models.lock.json and the Hugging Face Hub cannot be reached "
                f"({type(cause).__name__}: {cause}); {hint}"
            ) from exc
        raise


def refresh_lock(
    entries: list[tuple[str, str]],
    token: str | None = None,
    endpoint: str | None = None,
    lock_path: Path | str | None = None,
) -> tuple[Lock, list[str]]:
    """Add missing ``(repo, revision)`` entries from the Hub; returns the lock and one line per entry.

    Entries already locked are kept as they are (a commit's facts never change); failures are
    reported per entry and do not stop the others.
    """
    from tkf_infra.hub.client import HubError, fetch_facts

    lock = load_lock(lock_path)
    lines: list[str] = []
    for repo, revision in entries:
        if lock.get(repo, revision) is not None:
            lines.append(f"{repo}@{revision}: already locked")
            continue
        try:
            facts = fetch_facts(repo, revision, token=token, endpoint=endpoint)
        except HubError as exc:
            lines.append(f"{repo}@{revision}: FAILED - {exc}")
            continue
        if facts.revision != revision:
            lines.append(
                f"{repo}@{revision}: resolved to commit {facts.revision}; pin that SHA in the catalog"
            )
        if lock.get(repo, facts.revision) is None:
            lock.put(facts)
            lines.append(f"{repo}@{facts.revision}: locked ({facts.total_parameters or 0:,} parameters)")
    return lock, lines


def refresh_adapters(lock: Lock, adapters: list[tuple[str, str]], token: str | None = None,
                     endpoint: str | None = None) -> list[str]:
    """Add missing LoRA adapters' adapter_config.json from the Hub, one line per adapter (as `refresh_lock`)."""
    from tkf_infra.hub.client import HubError, fetch_adapter_facts

    lines: list[str] = []
    for repo, revision in adapters:
        if lock.get_adapter(repo, revision) is not None:
            lines.append(f"{repo}@{revision}: adapter already locked")
            continue
        try:
            facts = fetch_adapter_facts(repo, revision, token=token, endpoint=endpoint)
        except HubError as exc:
            lines.append(f"{repo}@{revision}: FAILED - {exc}")
            continue
        if facts.revision != revision:
            lines.append(f"{repo}@{revision}: resolved to commit {facts.revision}; pin that SHA in the catalog")
        lock.put_adapter(facts)
        lines.append(f"{repo}@{facts.revision}: adapter locked (rank {facts.rank})")
    return lines


def parse_repo_revision(text: str) -> tuple[str, str]:
    """``org/name@sha`` → (repo, revision); the revision is required so the lock stays immutable."""
    repo, sep, revision = text.partition("@")
    if not sep or not repo or not revision or repo.count("/") != 1:
        raise ValueError(f"{text!r} is not REPO@REVISION, e.g. Qwen/Qwen2.5-0.5B-Instruct@7ae5576…")
    return repo, revision


def lock_command(
    repos_revisions: list[tuple[str, str]],
    lock_path: Path | str | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    adapters: list[tuple[str, str]] | None = None,
) -> tuple[str, int]:
    """Body of ``python -m tkf_infra lock``: returns (report text, exit code 0/1)."""
    lock, lines = refresh_lock(repos_revisions, token=token, endpoint=endpoint, lock_path=lock_path)
    lines += refresh_adapters(lock, adapters or [], token=token, endpoint=endpoint)
    saved = lock.save(lock_path)
    failed = any(": FAILED" in line for line in lines)
    lines.append(f"wrote {saved}")
    return "\n".join(lines), 1 if failed else 0
