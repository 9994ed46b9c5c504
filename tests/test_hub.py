"""tkf_infra.hub / tkf_infra.lock against a local Hub-compatible HTTP server (real huggingface_hub)."""

from __future__ import annotations

import json
import struct
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.ports import refused_port
from tkf_infra.hub.client import HubError, fetch_adapter_facts, fetch_facts
from tkf_infra.hub.lock import LockMissError, load_lock, lock_command, refresh_adapters, resolve_facts
from tkf_infra.sizing.facts import ModelFacts

SHA = "a" * 40
GATED_SHA = "b" * 40
CONFIG = {
    "model_type": "qwen2",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
    "tie_word_embeddings": True,
    "max_position_embeddings": 4096,
}


def safetensors_blob(tensors: dict[str, tuple[str, list[int]]]) -> bytes:
    """A real safetensors file: 8-byte header length, JSON header, zero-filled data."""
    size = {"BF16": 2, "F32": 4, "I32": 4}
    header: dict[str, Any] = {}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = size[dtype]
        for dim in shape:
            n *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + b"\0" * offset


SHARD1 = safetensors_blob(
    {"model.embed_tokens.weight": ("BF16", [1000, 64]), "model.norm.weight": ("F32", [64])}
)
SHARD2 = safetensors_blob({"model.layers.0.mlp.up_proj.qweight": ("I32", [64, 16])})
INDEX = {
    "metadata": {"total_size": 128000 + 256 + 4096},
    "weight_map": {
        "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
        "model.norm.weight": "model-00001-of-00002.safetensors",
        "model.layers.0.mlp.up_proj.qweight": "model-00002-of-00002.safetensors",
    },
}
FILES: dict[str, bytes] = {
    "config.json": json.dumps(CONFIG).encode(),
    "model.safetensors.index.json": json.dumps(INDEX).encode(),
    "model-00001-of-00002.safetensors": SHARD1,
    "model-00002-of-00002.safetensors": SHARD2,
}
#: A LoRA adapter repo over org/tiny: what `lock --adapter` reads (its adapter_config.json only).
ADAPTER = "org/tiny-lora"
ADAPTER_CONFIG = {"peft_type": "LORA", "base_model_name_or_path": "org/tiny", "r": 8, "lora_alpha": 16,
                  "target_modules": ["q_proj", "v_proj"], "bias": "none"}
ADAPTER_FILES: dict[str, bytes] = {"adapter_config.json": json.dumps(ADAPTER_CONFIG).encode(),
                                   "adapter_model.safetensors": safetensors_blob({"x": ("BF16", [8, 64])})}


def _files(repo: str) -> dict[str, bytes]:
    return ADAPTER_FILES if repo == ADAPTER else FILES


class FakeHub(BaseHTTPRequestHandler):
    """Just enough of the Hub API: model info, resolve (HEAD/GET with Range), gated and 404 errors."""

    requests: list[str] = []  # noqa: RUF012 - shared log across handler instances

    def log_message(self, *args: Any) -> None:
        pass

    def _error(self, status: int, code: str) -> None:
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _route(self, head: bool) -> None:
        FakeHub.requests.append(f"{self.command} {self.path} range={self.headers.get('Range')}")
        path = self.path.split("?")[0]
        authed = self.headers.get("Authorization") == "Bearer good-token"
        if path.startswith("/api/models/"):
            rest = path[len("/api/models/") :]
            repo, _, rev = rest.partition("/revision/")
            if repo == "org/gated" and not authed:
                return self._error(401, "GatedRepo")
            if repo not in ("org/tiny", "org/gated", ADAPTER):
                return self._error(404, "RepoNotFound")
            if rev not in (SHA, "main", GATED_SHA):
                return self._error(404, "RevisionNotFound")
            sha = GATED_SHA if repo == "org/gated" else SHA
            body = json.dumps({
                "id": repo, "sha": sha, "gated": "manual" if repo == "org/gated" else False, "private": False,
                "siblings": [{"rfilename": f, "size": len(b)} for f, b in _files(repo).items()],
            }).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head:
                self.wfile.write(body)
            return None
        parts = path.strip("/").split("/")
        if len(parts) >= 5 and parts[2] == "resolve":
            repo, rev, filename = "/".join(parts[:2]), parts[3], "/".join(parts[4:])
            if repo == "org/gated" and not authed:
                return self._error(401, "GatedRepo")
            if rev not in (SHA, GATED_SHA):
                return self._error(404, "RevisionNotFound")
            if filename not in _files(repo):
                return self._error(404, "EntryNotFound")
            data = _files(repo)[filename]
            status = 200
            rng = self.headers.get("Range")
            if rng and rng.startswith("bytes="):
                start_s, _, end_s = rng[6:].partition("-")
                start, end = int(start_s), min(int(end_s or len(data) - 1), len(data) - 1)
                data, status = data[start : end + 1], 206
            self.send_response(status)
            self.send_header("X-Repo-Commit", rev)
            self.send_header("ETag", f'"{abs(hash(filename))}"')
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if not head:
                self.wfile.write(data)
            return None
        return self._error(404, "RepoNotFound")

    def do_GET(self) -> None:
        self._route(head=False)

    def do_HEAD(self) -> None:
        self._route(head=True)


@pytest.fixture()
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    FakeHub.requests = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_reads_config_and_sharded_headers_without_weights(hub: str, tmp_path: Path) -> None:
    facts = fetch_facts("org/tiny", SHA, endpoint=hub, cache_dir=tmp_path / "cache")
    assert facts.revision == SHA
    assert facts.config["num_hidden_layers"] == 2
    assert facts.param_counts == {"BF16": 64000, "F32": 64, "I32": 1024}
    assert facts.weight_bytes == 64000 * 2 + 64 * 4 + 1024 * 4
    assert facts.gated is False
    # Shards were only read through Range requests (headers), never fetched whole.
    shard_gets = [r for r in FakeHub.requests if "safetensors " in r and r.startswith("GET")]
    assert shard_gets and all("range=bytes=" in r for r in shard_gets)


def test_branch_is_resolved_to_commit(hub: str, tmp_path: Path) -> None:
    assert fetch_facts("org/tiny", "main", endpoint=hub, cache_dir=tmp_path).revision == SHA


def test_missing_revision_is_refused_with_reason(hub: str) -> None:
    with pytest.raises(HubError, match=r"revision 'c+' does not exist") as err:
        fetch_facts("org/tiny", "c" * 40, endpoint=hub)
    assert err.value.kind == "revision_not_found"


def test_gated_repo_says_to_set_token(hub: str, tmp_path: Path) -> None:
    with pytest.raises(HubError, match="set the Hugging Face token secret") as err:
        fetch_facts("org/gated", GATED_SHA, endpoint=hub)
    assert err.value.kind == "gated"
    facts = fetch_facts("org/gated", GATED_SHA, endpoint=hub, token="good-token", cache_dir=tmp_path)
    assert facts.gated is True


@pytest.fixture
def unreachable_hub() -> Iterator[str]:
    """An endpoint where every connection is refused for the whole test (tests/ports.py)."""
    with refused_port() as port:
        yield f"http://127.0.0.1:{port}"


def test_unreachable_hub_without_lock_entry_says_run_lock(tmp_path: Path, unreachable_hub: str) -> None:
    empty = load_lock(tmp_path / "none.json")
    with pytest.raises(LockMissError, match="python -m tkf_infra lock org/tiny@"):
        resolve_facts("org/tiny", SHA, lock=empty, endpoint=unreachable_hub)


def test_unreachable_hub_with_lock_entry_answers_offline(tmp_path: Path, unreachable_hub: str) -> None:
    lock = load_lock(tmp_path / "none.json")
    lock.put(ModelFacts(repo="org/tiny", revision=SHA, config=CONFIG))
    assert resolve_facts("org/tiny", SHA, lock=lock, endpoint=unreachable_hub).config == CONFIG


def test_lock_command_writes_entry_and_reports_failures(hub: str, tmp_path: Path) -> None:
    path = tmp_path / "models.lock.json"
    text, code = lock_command([("org/tiny", SHA), ("org/tiny", "d" * 40)], path, hub, None)
    assert code == 1
    assert f"org/tiny@{SHA}: locked" in text
    assert "FAILED" in text and "does not exist" in text
    again = load_lock(path).get("org/tiny", SHA)
    assert again is not None and again.param_counts["BF16"] == 64000
    text2, code2 = lock_command([("org/tiny", SHA)], path, hub, None)
    assert code2 == 0 and "already locked" in text2


def test_committed_lock_has_dev_stack_models() -> None:
    lock = load_lock()
    for repo, rev in (
        ("Qwen/Qwen2.5-0.5B-Instruct", "7ae557604adf67be50417f59c2c2f167def9a775"),
        ("Qwen/Qwen2.5-Coder-0.5B-Instruct", "ea3f2471cf1b1f0db85067f1ef93848e38e88c25"),
    ):
        entry = lock.get(repo, rev)
        assert entry is not None
        assert entry.config["num_key_value_heads"] == 2
        assert "NOT a verbatim copy" in entry.source


def test_an_adapter_is_locked_from_its_adapter_config_alone_at_its_commit(hub: str, tmp_path: Path) -> None:
    facts = fetch_adapter_facts(ADAPTER, "main", endpoint=hub, cache_dir=tmp_path / "cache")
    assert facts.revision == SHA and facts.config == ADAPTER_CONFIG and facts.rank == 8
    assert facts.base_model == "org/tiny" and facts.target_modules == ["q_proj", "v_proj"]
    # Only the config was downloaded: the adapter's weights are the download Job's, never the preview's.
    assert not [r for r in FakeHub.requests if "adapter_model.safetensors" in r]
    lock = load_lock(tmp_path / "models.lock.json")
    lines = refresh_adapters(lock, [(ADAPTER, "main"), (ADAPTER, "d" * 40)], endpoint=hub)
    assert lines[0] == f"{ADAPTER}@main: resolved to commit {SHA}; pin that SHA in the catalog"
    assert lines[1] == f"{ADAPTER}@{SHA}: adapter locked (rank 8)"
    assert lines[2].startswith(f"{ADAPTER}@{'d' * 40}: FAILED - ") and "does not exist" in lines[2]
    locked = lock.get_adapter(ADAPTER, SHA)
    assert locked is not None and (locked.revision, locked.config) == (SHA, ADAPTER_CONFIG)
    assert refresh_adapters(lock, [(ADAPTER, SHA)], endpoint=hub) == [f"{ADAPTER}@{SHA}: adapter already locked"]
