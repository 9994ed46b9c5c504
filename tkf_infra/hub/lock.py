"""The model facts lock: ``models.lock.json`` at the project root, keyed by ``repo@revision``.

A revision is a commit SHA, so an entry is valid forever and ``pulumi preview`` / CI can size
models without network access. ``python -m tkf_infra lock REPO@REV …`` adds entries by reading the
Hub (``tkf_infra.hub.client``); existing entries are never re-fetched or rewritten, except a model
entry locked before the lock recorded its safetensors headers (`tensor_bytes`), which is re-read once.
The format is described in docs/sizing.md ("The lock").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tkf_infra.names import PROJECT_ROOT
from tkf_infra.sizing.adapter_facts import AdapterFacts
from tkf_infra.sizing.facts import ModelFacts

DEFAULT_LOCK_PATH = PROJECT_ROOT / "models.lock.json"
LOCK_VERSION = 1


class LockMissError(LookupError):
    """The model is not in the lock and the Hub could not be asked."""


@dataclass(frozen=True)
class Broken:
    """A lock entry that does not validate: why, and the entry as the file has it."""

    why: str
    raw: Any
    section: str  # "models" or "adapters"


@dataclass
class Lock:
    """In-memory lock; ``about`` is the free-text header kept when saving."""

    entries: dict[str, ModelFacts] = field(default_factory=dict)
    about: str = ""
    adapters: dict[str, AdapterFacts] = field(default_factory=dict)
    """LoRA adapters' adapter_config.json, keyed like models (the file's `adapters` list)."""
    broken: dict[str, Broken] = field(default_factory=dict)
    """Entries of the file that do not validate, by ``repo@revision``: each is left out of sizing (its model is
    refused naming why) while the rest load, and is written back as it was until `lock` re-reads it."""

    def get(self, repo: str, revision: str) -> ModelFacts | None:
        return self.entries.get(f"{repo}@{revision}")

    def put(self, facts: ModelFacts) -> None:
        self.entries[facts.key] = facts

    def get_adapter(self, repo: str, revision: str) -> AdapterFacts | None:
        return self.adapters.get(f"{repo}@{revision}")

    def put_adapter(self, facts: AdapterFacts) -> None:
        self.adapters[facts.key] = facts

    def problem(self, repo: str, revision: str) -> str | None:
        """Why the file's entry for this model cannot be used (None: it is fine, or there is none)."""
        bad = self.broken.get(f"{repo}@{revision}")
        return None if bad is None else f"the lock entry of {repo}@{revision} is not valid ({bad.why})"

    def _kept(self, section: str, valid: dict[str, Any]) -> list[tuple[str, Any]]:
        """Valid entries as stored, and broken ones as the file had them unless a valid one replaced them."""
        rows = [(k, _stored(v) if section == "models" else v.model_dump(mode="json")) for k, v in valid.items()]
        rows += [(k, b.raw) for k, b in self.broken.items() if b.section == section and k not in valid]
        return sorted(rows, key=lambda row: row[0])

    def to_json(self) -> dict[str, Any]:
        adapters = self._kept("adapters", self.adapters)
        return {
            "_about": self.about,
            "version": LOCK_VERSION,
            "models": [raw for _, raw in self._kept("models", self.entries)],
            # Only when there are adapters: a lock without them stays byte for byte what it was.
            **({"adapters": [raw for _, raw in adapters]} if adapters else {}),
        }

    def save(self, path: Path | str | None = None) -> Path:
        target = Path(path) if path else DEFAULT_LOCK_PATH
        target.write_text(json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n")
        return target


def _stored(facts: ModelFacts) -> dict[str, Any]:
    data = facts.model_dump(mode="json")
    data["param_counts"] = dict(sorted(data["param_counts"].items()))
    if data["tensor_bytes"] is None:  # not read yet: absent, so an entry locked before it stays as it was
        del data["tensor_bytes"]
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
    readers: dict[str, Callable[[Any], None]] = {
        "models": lambda raw: lock.put(ModelFacts.model_validate(raw)),
        "adapters": lambda raw: lock.put_adapter(AdapterFacts.model_validate(raw)),
    }
    for section, read in readers.items():
        for raw in data.get(section, []):
            try:
                read(raw)
            except ValidationError as err:
                lock.broken[_entry_key(raw)] = Broken(_why(err), raw, section)
    return lock


def _entry_key(raw: Any) -> str:
    named = raw if isinstance(raw, dict) else {}
    return f"{named.get('repo', '?')}@{named.get('revision', '?')}"


def _why(err: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'entry'}: {e['msg']}" for e in err.errors())


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
        raise LockMissError(f"{current.problem(repo, revision) or f'{repo}@{revision} is not in models.lock.json'}; "
                            f"{hint}")
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


@dataclass(frozen=True)
class _EntryKind:
    """How `lock` refreshes one kind of entry (models, LoRA adapters): the one refresh loop reads these."""

    label: str  # "" for models, "adapter " for adapters (in each report line)
    get: Callable[[Lock, str, str], ModelFacts | AdapterFacts | None]
    put: Callable[[Lock, Any], None]
    fetch: Callable[..., ModelFacts | AdapterFacts]
    done: Callable[[Any], str]  # what the report says of a fresh entry
    stale: Callable[[Any], bool] = lambda _: False
    """An entry locked before the lock recorded something this code reads (re-read once, then kept)."""


def _model_kind() -> _EntryKind:
    from tkf_infra.hub.client import fetch_facts

    return _EntryKind("", Lock.get, Lock.put, fetch_facts,
                      lambda f: f"locked ({f.total_parameters or 0:,} parameters"
                                f"{', safetensors headers by layer kind' if f.tensor_bytes is not None else ''})",
                      stale=lambda f: f.tensor_bytes is None)


def _adapter_kind() -> _EntryKind:
    from tkf_infra.hub.client import fetch_adapter_facts

    return _EntryKind("adapter ", Lock.get_adapter, Lock.put_adapter, fetch_adapter_facts,
                      lambda f: f"locked (rank {f.rank})")


def _refresh(lock: Lock, kind: _EntryKind, entries: list[tuple[str, str]], token: str | None,
             endpoint: str | None) -> list[str]:
    """Add each missing `(repo, revision)` of `kind` from the Hub, one report line per entry.

    A commit's facts never change, so a locked entry is kept as it is — unless it lacks facts this code
    reads (`stale`: a model locked before the lock recorded its safetensors headers), which is re-read once.
    A failure is reported on its entry's line and never stops the others."""
    from tkf_infra.hub.client import HubError

    lines: list[str] = []
    for repo, revision in entries:
        old = kind.get(lock, repo, revision)
        if old is not None and not kind.stale(old):
            lines.append(f"{repo}@{revision}: {kind.label}already locked")
            continue
        try:
            facts = kind.fetch(repo, revision, token=token, endpoint=endpoint)
        except HubError as exc:
            lines.append(f"{repo}@{revision}: FAILED - {exc}")
            continue
        if facts.revision != revision:
            lines.append(f"{repo}@{revision}: resolved to commit {facts.revision}; pin that SHA in the catalog")
        known = kind.get(lock, repo, facts.revision)
        if known is None or kind.stale(known):
            kind.put(lock, facts)
            again = " (re-read: the entry lacked the safetensors headers' facts)" if known is not None else ""
            lines.append(f"{repo}@{facts.revision}: {kind.label}{kind.done(facts)}{again}")
    return lines


def refresh_lock(
    entries: list[tuple[str, str]],
    token: str | None = None,
    endpoint: str | None = None,
    lock_path: Path | str | None = None,
) -> tuple[Lock, list[str]]:
    """Add missing ``(repo, revision)`` model entries from the Hub; returns the lock and one line per entry."""
    lock = load_lock(lock_path)
    return lock, _refresh(lock, _model_kind(), entries, token, endpoint)


def refresh_adapters(lock: Lock, adapters: list[tuple[str, str]], token: str | None = None,
                     endpoint: str | None = None) -> list[str]:
    """Add missing LoRA adapters' adapter_config.json from the Hub, one line per adapter (as `refresh_lock`)."""
    return _refresh(lock, _adapter_kind(), adapters, token, endpoint)


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
