"""A Hub-compatible HTTP server for the real `huggingface_hub` client, and checkpoints the tests write.

Why a server and not mocks: `python -m tkf_infra lock` must work against the Hub's own protocol — model
info at a revision, `resolve` with HEAD and Range requests, the error codes gated and missing repos
answer with — so the tests drive the real client (huggingface_hub, pinned) over HTTP. Just enough of
the API is served for what `tkf_infra.hub.client` asks; each repo is a folder of files on disk.

The checkpoints are real safetensors files, written by the `safetensors` library itself (`serialize_file`):
FP8 and FP4 tensors, E8M0 scales, packed integers, sharded with an index, as a quantized checkpoint on
the Hub has them. Their data is zero and mapped from an anonymous mmap, so a checkpoint of a few
hundred MB costs disk, not memory; `lock` reads only the headers (one Range request per shard).
"""

from __future__ import annotations

import ctypes
import json
import mmap
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from safetensors import TensorSpec, serialize_file

SHA = "a" * 40
GATED_SHA = "b" * 40

#: safetensors' dtype names for the tests' header dtypes (its writer takes torch's names), and bytes per element.
ST_DTYPES = {"BF16": ("bfloat16", 2), "F16": ("float16", 2), "F32": ("float32", 4), "I32": ("int32", 4),
             "I64": ("int64", 8), "U8": ("uint8", 1), "I8": ("int8", 1), "F8_E4M3": ("float8_e4m3fn", 1),
             "F8_E8M0": ("float8_e8m0fnu", 1), "F4": ("float4_e2m1fn_x2", 0.5)}

Tensors = dict[str, tuple[str, list[int]]]


def nbytes(dtype: str, shape: list[int]) -> int:
    n = ST_DTYPES[dtype][1]
    for dim in shape:
        n *= dim
    return int(n)


def write_safetensors(path: Path, tensors: Tensors) -> None:
    """One safetensors file written by the safetensors library (zero data from an anonymous mapping)."""
    total = sum(nbytes(d, s) for d, s in tensors.values())
    buf = mmap.mmap(-1, max(total, 1))
    base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    specs: dict[str, TensorSpec] = {}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = nbytes(dtype, shape)
        # F4 is passed with its storage shape (two values per byte); the header records the logical one.
        storage = [*shape[:-1], shape[-1] // 2] if dtype == "F4" else shape
        specs[name] = TensorSpec(dtype=ST_DTYPES[dtype][0], shape=storage, data_ptr=base + offset, data_len=n)
        offset += n
    try:
        serialize_file(specs, str(path), metadata={"format": "pt"})
    finally:
        del specs
        buf.close()


def write_checkpoint(folder: Path, config: dict[str, Any], tensors: Tensors, shards: int = 1,
                     extra: dict[str, bytes] | None = None) -> None:
    """config.json and the tensors as one model.safetensors or `shards` shards with their index."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    for name, data in (extra or {}).items():
        (folder / name).write_bytes(data)
    if shards == 1:
        write_safetensors(folder / "model.safetensors", tensors)
        return
    names = list(tensors)
    weight_map: dict[str, str] = {}
    for i in range(shards):
        part = {n: tensors[n] for n in names[i::shards]}
        filename = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(folder / filename, part)
        weight_map.update(dict.fromkeys(part, filename))
    index = {"metadata": {"total_size": sum(nbytes(d, s) for d, s in tensors.values())}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))


@dataclass
class Repo:
    folder: Path
    sha: str = SHA
    gated: bool = False


@dataclass
class Hub:
    """The running server: its endpoint, the repos it serves, and every request it answered."""

    endpoint: str
    repos: dict[str, Repo]
    requests: list[str] = field(default_factory=list)

    def add(self, repo: str, folder: Path, sha: str = SHA, gated: bool = False) -> None:
        self.repos[repo] = Repo(folder, sha, gated)


class _HubHandler(BaseHTTPRequestHandler):
    """Model info, resolve (HEAD/GET with Range), and the Hub's error codes for gated and missing repos."""

    hub: Hub  # set per server by _handler

    def log_message(self, *args: Any) -> None:
        pass

    def _error(self, status: int, code: str) -> None:
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _repo(self, name: str, rev: str) -> Repo | None:
        repo = self.hub.repos.get(name)
        if repo is not None and repo.gated and self.headers.get("Authorization") != "Bearer good-token":
            self._error(401, "GatedRepo")
            return None
        if repo is None:
            self._error(404, "RepoNotFound")
            return None
        if rev not in (repo.sha, "main"):
            self._error(404, "RevisionNotFound")
            return None
        return repo

    def _info(self, rest: str, head: bool) -> None:
        name, _, rev = rest.partition("/revision/")
        repo = self._repo(name, rev or "main")
        if repo is None:
            return
        files = sorted(p for p in repo.folder.iterdir() if p.is_file())
        body = json.dumps({"id": name, "sha": repo.sha, "gated": "manual" if repo.gated else False,
                           "private": False,
                           "siblings": [{"rfilename": p.name, "size": p.stat().st_size} for p in files]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _resolve(self, name: str, rev: str, filename: str, head: bool) -> None:
        repo = self._repo(name, rev)
        if repo is None:
            return
        if rev != repo.sha:  # files are served at a commit only, as the client asks for them
            self._error(404, "RevisionNotFound")
            return
        path = repo.folder / filename
        if not path.is_file():
            self._error(404, "EntryNotFound")
            return
        size = path.stat().st_size
        start, end, status = 0, size - 1, 200
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            lo, _, hi = rng[6:].partition("-")
            start, end, status = int(lo), min(int(hi or size - 1), size - 1), 206
        self.send_response(status)
        self.send_header("X-Repo-Commit", rev)
        self.send_header("ETag", f'"{repo.sha[:8]}-{filename}"')
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        if not head:
            with path.open("rb") as f:
                f.seek(start)
                self.wfile.write(f.read(end - start + 1))

    def _route(self, head: bool) -> None:
        self.hub.requests.append(f"{self.command} {self.path} range={self.headers.get('Range')}")
        path = self.path.split("?")[0]
        if path.startswith("/api/models/"):
            return self._info(path[len("/api/models/"):], head)
        parts = path.strip("/").split("/")
        if len(parts) >= 5 and parts[2] == "resolve":
            return self._resolve("/".join(parts[:2]), parts[3], "/".join(parts[4:]), head)
        return self._error(404, "RepoNotFound")

    def do_GET(self) -> None:
        self._route(head=False)

    def do_HEAD(self) -> None:
        self._route(head=True)


def _handler(hub: Hub) -> type[BaseHTTPRequestHandler]:
    """The handler class of one server: its own Hub's repos and request log."""
    return type("HubHandler", (_HubHandler,), {"hub": hub})


@pytest.fixture()
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Hub]:
    """A Hub-compatible server on a port of its own choosing, with huggingface_hub's cache and token isolated."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    state = Hub(endpoint="", repos={})
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    state.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
