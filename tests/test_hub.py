"""tkf_infra.hub / tkf_infra.lock against the Hub-compatible test server (tests/hub_server.py, real huggingface_hub)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hub_server import GATED_SHA, SHA, Hub, Tensors, write_checkpoint, write_safetensors
from tests.ports import refused_port
from tkf_infra.hub.client import HubError, fetch_adapter_facts, fetch_facts
from tkf_infra.hub.lock import LockMissError, load_lock, lock_command, refresh_adapters, resolve_facts
from tkf_infra.sizing.facts import ModelFacts

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


TINY: Tensors = {"model.embed_tokens.weight": ("BF16", [1000, 64]), "model.norm.weight": ("F32", [64]),
                 "model.layers.0.mlp.up_proj.qweight": ("I32", [64, 16])}
#: A LoRA adapter repo over org/tiny: what `lock --adapter` reads (its adapter_config.json only).
ADAPTER = "org/tiny-lora"
ADAPTER_CONFIG = {"peft_type": "LORA", "base_model_name_or_path": "org/tiny", "r": 8, "lora_alpha": 16,
                  "target_modules": ["q_proj", "v_proj"], "bias": "none"}


@pytest.fixture()
def repos(hub: Hub, tmp_path: Path) -> Hub:
    """org/tiny (two shards and their index), org/gated (one file, gated) and a LoRA adapter, on the test Hub."""
    write_checkpoint(tmp_path / "tiny", CONFIG, TINY, shards=2)
    write_checkpoint(tmp_path / "gated", CONFIG, TINY)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps(ADAPTER_CONFIG))
    write_safetensors(adapter / "adapter_model.safetensors", {"x": ("BF16", [8, 64])})
    hub.add("org/tiny", tmp_path / "tiny")
    hub.add("org/gated", tmp_path / "gated", sha=GATED_SHA, gated=True)
    hub.add(ADAPTER, adapter)
    return hub


def test_reads_config_and_sharded_headers_without_weights(repos: Hub, tmp_path: Path) -> None:
    facts = fetch_facts("org/tiny", SHA, endpoint=repos.endpoint, cache_dir=tmp_path / "cache")
    assert facts.revision == SHA
    assert facts.config["num_hidden_layers"] == 2
    assert facts.param_counts == {"BF16": 64000, "F32": 64, "I32": 1024}
    assert facts.weight_bytes == 64000 * 2 + 64 * 4 + 1024 * 4
    assert facts.gated is False
    # Shards were only read through Range requests (headers), never fetched whole.
    shard_gets = [r for r in repos.requests if ".safetensors " in r and r.startswith("GET")]
    assert shard_gets and all("range=bytes=" in r for r in shard_gets)


def test_branch_is_resolved_to_commit(repos: Hub, tmp_path: Path) -> None:
    assert fetch_facts("org/tiny", "main", endpoint=repos.endpoint, cache_dir=tmp_path).revision == SHA


def test_missing_revision_is_refused_with_reason(repos: Hub) -> None:
    with pytest.raises(HubError, match=r"revision 'c+' does not exist") as err:
        fetch_facts("org/tiny", "c" * 40, endpoint=repos.endpoint)
    assert err.value.kind == "revision_not_found"


def test_gated_repo_says_to_set_token(repos: Hub, tmp_path: Path) -> None:
    with pytest.raises(HubError, match="set the Hugging Face token secret") as err:
        fetch_facts("org/gated", GATED_SHA, endpoint=repos.endpoint)
    assert err.value.kind == "gated"
    facts = fetch_facts("org/gated", GATED_SHA, endpoint=repos.endpoint, token="good-token", cache_dir=tmp_path)
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


def test_lock_command_writes_entry_and_reports_failures(repos: Hub, tmp_path: Path) -> None:
    path = tmp_path / "models.lock.json"
    text, code = lock_command([("org/tiny", SHA), ("org/tiny", "d" * 40)], path, repos.endpoint, None)
    assert code == 1
    assert f"org/tiny@{SHA}: locked" in text
    assert "FAILED" in text and "does not exist" in text
    again = load_lock(path).get("org/tiny", SHA)
    assert again is not None and again.param_counts["BF16"] == 64000
    text2, code2 = lock_command([("org/tiny", SHA)], path, repos.endpoint, None)
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


def test_an_adapter_is_locked_from_its_adapter_config_alone_at_its_commit(repos: Hub, tmp_path: Path) -> None:
    facts = fetch_adapter_facts(ADAPTER, "main", endpoint=repos.endpoint, cache_dir=tmp_path / "cache")
    assert facts.revision == SHA and facts.config == ADAPTER_CONFIG and facts.rank == 8
    assert facts.base_model == "org/tiny" and facts.target_modules == ["q_proj", "v_proj"]
    # Only the config was downloaded: the adapter's weights are the download Job's, never the preview's.
    assert not [r for r in repos.requests if "adapter_model.safetensors" in r]
    lock = load_lock(tmp_path / "models.lock.json")
    lines = refresh_adapters(lock, [(ADAPTER, "main"), (ADAPTER, "d" * 40)], endpoint=repos.endpoint)
    assert lines[0] == f"{ADAPTER}@main: resolved to commit {SHA}; pin that SHA in the catalog"
    assert lines[1] == f"{ADAPTER}@{SHA}: adapter locked (rank 8)"
    assert lines[2].startswith(f"{ADAPTER}@{'d' * 40}: FAILED - ") and "does not exist" in lines[2]
    locked = lock.get_adapter(ADAPTER, SHA)
    assert locked is not None and (locked.revision, locked.config) == (SHA, ADAPTER_CONFIG)
    assert refresh_adapters(lock, [(ADAPTER, SHA)], endpoint=repos.endpoint) == [
        f"{ADAPTER}@{SHA}: adapter already locked"]


def test_packed_and_8_bit_dtypes_are_counted_in_bytes_from_the_header(hub: Hub, tmp_path: Path) -> None:
    """FP4 (two values a byte, safetensors' F4), FP8 and its E8M0 scales: bytes from the data offsets, not elements
    x a guessed size; the elements stay in `param_counts`."""
    tensors: Tensors = {"model.layers.0.mlp.experts.0.down_proj.weight": ("F4", [64, 128]),
                        "model.layers.0.mlp.experts.0.down_proj.weight_scale": ("F8_E8M0", [64, 4]),
                        "model.layers.0.self_attn.o_proj.weight": ("F8_E4M3", [64, 64]),
                        "model.embed_tokens.weight": ("BF16", [1000, 64])}
    write_checkpoint(tmp_path / "fp4", CONFIG, tensors)
    hub.add("org/fp4", tmp_path / "fp4")
    facts = fetch_facts("org/fp4", SHA, endpoint=hub.endpoint, cache_dir=tmp_path / "cache")
    assert facts.tensor_bytes == {"attention": {"F8_E4M3": 4096}, "experts": {"F4": 4096, "F8_E8M0": 256},
                                  "embeddings": {"BF16": 128000}}
    assert facts.weight_bytes == 4096 + 4096 + 256 + 128000
    assert facts.param_counts == {"F4": 8192, "F8_E8M0": 256, "F8_E4M3": 4096, "BF16": 64000}
