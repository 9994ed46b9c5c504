"""LoRA adapters: the catalog block, what vLLM 0.32 reserves for them, and each bad adapter refused by name."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest

from components.vllm_args import serve_command
from tests.mocks import CPU, QWEN3_8B, SINGLE_GPU, stack_doc
from tkf_infra.config import ModelEntry, validate_catalog
from tkf_infra.config.extra_args import extra_args_problems
from tkf_infra.config.lora import lora_argv
from tkf_infra.hub.lock import Lock, load_lock
from tkf_infra.plan import Stage, plan_fleet
from tkf_infra.sizing.adapter_facts import AdapterFacts
from tkf_infra.sizing.arch import parse_arch
from tkf_infra.sizing.contract import FitInputs, evaluate
from tkf_infra.sizing.estimate import estimate
from tkf_infra.sizing.gpus import lookup_gpu
from tkf_infra.sizing.lora import reserve
from tkf_infra.sizing.params import GIB, LoraSlots, SizingParams

LOCK = load_lock()
QWEN3 = str(QWEN3_8B["repo"])
LLAMA_8B = ("meta-llama/Llama-3.1-8B-Instruct", "0e9e39f249a16976918f6564b8830bc894c89659")
SHA = "1" * 40


def adapter(name: str, repo: str = "org/qwen-sql", revision: str = SHA, **extra: Any) -> dict[str, Any]:
    return {"name": name, "repo": repo, "revision": revision, "servedName": f"{name}-served", **extra}


def with_lora(model: dict[str, Any], *adapters: dict[str, Any], **lora: Any) -> dict[str, Any]:
    return {**model, "lora": {"maxAdapters": 2, "maxRank": 16, **lora, "adapters": list(adapters)}}


def adapter_facts(repo: str, base: str, revision: str = SHA, **config: Any) -> AdapterFacts:
    cfg = {"base_model_name_or_path": base, "r": 8, "lora_alpha": 16, "bias": "none",
           "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], **config}
    return AdapterFacts(repo=repo, revision=revision, config=cfg, source="test")


def lock_with(*facts: AdapterFacts) -> Lock:
    lock = copy.deepcopy(LOCK)
    for f in facts:
        lock.put_adapter(f)
    return lock


# --------------------------------------------------------------------------------------------
# Sizing: vLLM's own tensors, shape by shape
# --------------------------------------------------------------------------------------------


def vllm_slot_shapes(cfg: dict[str, Any], n: int, r: int, tp: int, embedding: bool) -> list[tuple[int, ...]]:
    """The tensors vLLM 0.32's LoRA layers allocate on one TP rank, written as its source writes them.

    MergedQKVParallelLinearWithLoRA (column_parallel_linear.py:453-497 over 207-245): three A of
    (n, 1, r, hidden), B of (n, 1, q_shard, r), (n, 1, kv_shard, r) x 2. RowParallelLinearWithLoRA
    (row_parallel_linear.py:22-30, base_linear.py:104-155): A (n, 1, r, input/tp), B (n, 1, output, r).
    MergedColumnParallelLinearWithLoRA (gate_up): two A (n, 1, r, hidden), two B (n, 1, inter/tp, r).
    VocabParallelEmbeddingWithLoRA (vocab_parallel_embedding.py:25-49): (n, vocab, r), (n, 1, hidden, r).
    LogitsProcessorWithLoRA (logits_processor.py:84-111): (n, 1, r, hidden), (n, 1, vocab, r)."""
    h, heads, kv = int(cfg["hidden_size"]), int(cfg["num_attention_heads"]), int(cfg["num_key_value_heads"])
    d = int(cfg.get("head_dim") or h // heads)
    inter, vocab, layers = int(cfg["intermediate_size"]), int(cfg["vocab_size"]), int(cfg["num_hidden_layers"])
    q_shard, kv_shard = heads // tp * d, max(1, kv // tp) * d
    Shape = tuple[int, int, int, int]
    per_layer: list[Shape] = [(n, 1, r, h)] * 3 + [(n, 1, q_shard, r), (n, 1, kv_shard, r), (n, 1, kv_shard, r)]
    per_layer += [(n, 1, r, heads * d // tp), (n, 1, h, r)]
    per_layer += [(n, 1, r, h)] * 2 + [(n, 1, inter // tp, r)] * 2
    per_layer += [(n, 1, r, inter // tp), (n, 1, h, r)]
    shapes = per_layer * layers
    if embedding:
        return [*shapes, (n, vocab, r), (n, 1, h, r), (n, 1, r, h), (n, 1, vocab, r)]
    return list(shapes)


@pytest.mark.parametrize("repo_rev, embedding", [(LLAMA_8B, True), ((QWEN3_8B["repo"], QWEN3_8B["revision"]), True),
                                                 ((CPU["repo"], CPU["revision"]), False)])
@pytest.mark.parametrize("n, r, tp", [(1, 8, 1), (4, 16, 1), (8, 64, 2), (3, 32, 4)])
def test_slots_are_vllms_tensors_at_max_loras_and_max_rank(repo_rev: tuple[str, str], embedding: bool,
                                                           n: int, r: int, tp: int) -> None:
    facts = LOCK.get(*repo_rev)
    assert facts is not None
    cfg = facts.text_config()
    if cfg["num_attention_heads"] % tp:
        pytest.skip("TP must divide the heads")
    arch = parse_arch(cfg, facts.config)
    res = reserve(arch, cfg["architectures"][0], LoraSlots(max_adapters=n, max_rank=r), tp, 1, 256, 8192, 2.0)
    expected = sum(math.prod(s) for s in vllm_slot_shapes(cfg, n, r, tp, embedding)) * 2
    assert res.slots == (expected,)
    # Punica: 4 x tokens int64 + 3 x seqs int64, two kernel metas of 2 x tokens int32 and 3 short int32 tensors.
    assert res.metadata == 4 * 8192 * 8 + 3 * 256 * 8 + 2 * (2 * 8192 * 4 + ((n + 1) * 2 + (n + 2)) * 4)
    assert res.workspace == 3 * 8192 * r * 4
    # Host memory: max_cpu_loras (= max_loras) whole adapters, unsharded.
    assert res.host == n * sum(math.prod(s) for s in vllm_slot_shapes(cfg, 1, r, 1, embedding)) * 2


def test_pipeline_stages_hold_their_layers_the_embedding_first_and_the_head_last() -> None:
    facts = LOCK.get(*LLAMA_8B)
    assert facts is not None
    cfg = facts.text_config()
    arch = parse_arch(cfg, facts.config)
    one = reserve(arch, "LlamaForCausalLM", LoraSlots(max_adapters=2, max_rank=16), 1, 1, 256, 8192, 2.0)
    two = reserve(arch, "LlamaForCausalLM", LoraSlots(max_adapters=2, max_rank=16), 1, 2, 256, 8192, 2.0)
    embed = (cfg["vocab_size"] * 16 + 4096 * 16) * 2 * 2
    head = (16 * 4096 + cfg["vocab_size"] * 16) * 2 * 2
    layers = (one.slots[0] - embed - head) / 32
    assert two.slots == (16 * layers + embed, 16 * layers + head)


def test_size_with_and_without_adapters_differs_by_exactly_the_reservation() -> None:
    facts = LOCK.get(*LLAMA_8B)
    assert facts is not None
    gpu = lookup_gpu("H100-80GB")
    base = SizingParams(vllm_version="0.32.0", max_model_len=8192)
    lora = base.model_copy(update={"lora": LoraSlots(max_adapters=4, max_rank=64)})
    without, with_ = estimate(facts, gpu, base), estimate(facts, gpu, lora)
    arch = parse_arch(facts.text_config(), facts.config)
    res = reserve(arch, "LlamaForCausalLM", LoraSlots(max_adapters=4, max_rank=64), 1, 1, with_.max_num_seqs,
                  with_.max_num_batched_tokens, 2.0)
    reserved = (res.slots[0] + res.metadata + res.workspace) / GIB
    assert with_.lora_gib == pytest.approx(reserved, abs=1e-9) and without.lora_gib == 0.0
    assert without.available_kv_gib - with_.available_kv_gib == pytest.approx(reserved, abs=1e-9)
    assert without.available_kv_gib_bound - with_.available_kv_gib_bound == pytest.approx(reserved, abs=1e-9)
    assert with_.weights_gib == without.weights_gib and with_.activation_gib == without.activation_gib
    assert with_.kv_cache_tokens < without.kv_cache_tokens
    assert with_.lora_host_gib == pytest.approx(res.host / GIB)


def test_a_base_that_fits_alone_but_not_with_its_adapters_is_refused_with_the_lora_line_and_a_way_out() -> None:
    facts = LOCK.get(QWEN3_8B["repo"], QWEN3_8B["revision"])
    assert facts is not None
    base = SizingParams(vllm_version="0.32.0", max_model_len=8192)
    inputs = FitInputs(model="qwen", repo=facts.repo, revision=facts.revision, facts=facts,
                       gpu=lookup_gpu("A100-40GB"), params=base)
    assert evaluate(inputs).fits
    heavy = base.model_copy(update={"lora": LoraSlots(max_adapters=16, max_rank=256)})
    result = evaluate(inputs.model_copy(update={"params": heavy}))
    assert not result.fits and result.lora_gib > 3
    assert result.message is not None
    assert f"it fits without its LoRA adapters, which reserve {result.lora_gib:.2f} GiB per GPU" in result.message
    assert "lower lora.maxAdapters or lora.maxRank" in result.message
    assert result.published()["loraGiB"] == result.lora_gib


def test_lora_on_an_architecture_the_fit_check_does_not_size_is_refused_by_name() -> None:
    moe = next(f for f in LOCK.entries.values() if (f.config.get("architectures") or [""])[0] == "Qwen3MoeForCausalLM")
    params = SizingParams(vllm_version="0.32.0", max_model_len=4096, tensor_parallel_size=4,
                          lora=LoraSlots(max_adapters=1, max_rank=8))
    result = evaluate(FitInputs(model="moe", repo=moe.repo, revision=moe.revision, facts=moe,
                                gpu=lookup_gpu("H100-80GB"), params=params))
    assert not result.fits and "Qwen3MoeForCausalLM" in (result.message or "")


# --------------------------------------------------------------------------------------------
# Catalog: the block's shape, served names across models and adapters
# --------------------------------------------------------------------------------------------


def rejected(doc: dict[str, Any]) -> dict[str, str]:
    catalog = validate_catalog(doc)
    return {r.name: " | ".join(str(p) for p in r.problems) for r in catalog.rejected}


def test_an_unpinned_adapter_revision_is_refused_by_adapter_name_and_its_base_deploys_with_the_others() -> None:
    chat = adapter("chat", repo="org/qwen-chat", revision="2" * 40)
    doc = stack_doc(with_lora(CPU, adapter("sql", revision="main"), chat), SINGLE_GPU)
    catalog = validate_catalog(doc)
    assert [m.name for m in catalog.models] == ["tiny", "qwen3-8b"] and not catalog.rejected
    tiny = catalog.models[0]
    assert tiny.lora is not None and [a.name for a in tiny.lora.adapters] == ["chat"]
    (problem,) = catalog.adapter_problems
    assert str(problem) == ("models[0] tiny: lora.adapters sql: revision 'main' is a branch, which can move; pin the "
                            "40-character commit SHA")
    fleet = plan_fleet(catalog, lock=lock_with(adapter_facts("org/qwen-chat", str(CPU["repo"]), revision="2" * 40)))
    assert fleet.deployed == {"tiny", "qwen3-8b"} and f"{problem}; deployed without that adapter" in fleet.errors


def test_a_bad_adapter_is_reported_with_its_entry_when_the_entry_is_refused_anyway() -> None:
    text = rejected(stack_doc(with_lora({**CPU, "revision": "main"}, adapter("sql", revision="v1"))))["tiny"]
    assert "revision 'main' is a branch" in text and "lora.adapters sql: revision 'v1' is a tag" in text


@pytest.mark.parametrize("lora, expected", [
    ({"maxRank": 12}, "maxRank 12 is not a rank vLLM 0.32 accepts"),
    ({"maxAdapters": 4, "maxCpuAdapters": 2}, "maxCpuAdapters 2 is below maxAdapters 4"),
    ({"maxAdapters": 0}, "maxAdapters"),
])
def test_bad_lora_limits_are_refused_with_what_vllm_allows(lora: dict[str, Any], expected: str) -> None:
    assert expected in rejected(stack_doc(with_lora(CPU, adapter("sql"), **lora)))["tiny"]


def test_a_served_name_used_by_a_model_and_an_adapter_is_refused_on_the_later_one() -> None:
    clash = adapter("sql", servedName=SINGLE_GPU["servedName"])
    catalog = validate_catalog(stack_doc(SINGLE_GPU, with_lora(CPU, clash)))
    assert [m.name for m in catalog.models] == ["qwen3-8b", "tiny"]  # the adapter is left out, not its base
    (text,) = [str(p) for p in catalog.adapter_problems]
    assert "lora.adapters sql.servedName" in text and "'qwen3-8b' is already served by models[0] qwen3-8b" in text
    twice = rejected(stack_doc(with_lora(CPU, adapter("a"), adapter("b", servedName="a-served"))))["tiny"]
    assert "adapter 'b': servedName 'a-served' is already used by adapter 'a'" in twice


def test_extra_args_cannot_set_any_lora_flag() -> None:
    for flag in ("--enable-lora", "--max-loras", "--max-lora-rank=64", "--max-cpu-loras", "--lora-modules",
                 "--fully-sharded-loras", "--lora-target-modules", "--lora_dtype"):
        assert extra_args_problems([flag]), flag


def test_the_lora_row_renders_every_flag_with_adapters_at_their_cached_path() -> None:
    entry = ModelEntry.model_validate(with_lora(CPU, adapter("sql"), adapter("chat", repo="org/other"),
                                                maxAdapters=2, maxRank=32, maxCpuAdapters=4))
    cmd = serve_command(entry, "/mnt/models")
    i = cmd.index("--enable-lora")
    assert cmd[i:] == ["--enable-lora", "--max-loras", "2", "--max-lora-rank", "32", "--max-cpu-loras", "4",
                       "--lora-modules", f"sql-served=/mnt/models/.lora/org--qwen-sql/{SHA}",
                       f"chat-served=/mnt/models/.lora/org--other/{SHA}"]


# --------------------------------------------------------------------------------------------
# Plan: each adapter against its base, from the lock
# --------------------------------------------------------------------------------------------


def plan(lock: Lock, *models: dict[str, Any]) -> tuple[set[str], dict[str, tuple[Stage, str]]]:
    fleet = plan_fleet(validate_catalog(stack_doc(*models)), lock=lock)
    return fleet.deployed, {x.name: (x.stage, " | ".join(x.reasons)) for x in fleet.excluded}


def test_a_good_adapter_deploys_with_its_base_sized_with_the_slots() -> None:
    lock = lock_with(adapter_facts("org/qwen-sql", QWEN3))
    fleet = plan_fleet(validate_catalog(stack_doc(with_lora(SINGLE_GPU, adapter("sql")))), lock=lock)
    assert fleet.deployed == {"qwen3-8b"} and not fleet.excluded
    assert fleet.models[0].fit.lora_gib > 0


@pytest.mark.parametrize("config, expected", [
    ({"base_model_name_or_path": "meta-llama/Llama-3.1-8B-Instruct"},
     "it was trained on meta-llama/Llama-3.1-8B-Instruct (adapter_config.json base_model_name_or_path), not on "
     "Qwen/Qwen3-8B"),
    ({"r": 64}, "rank 64 is above lora.maxRank 16"),
    ({"rank_pattern": {"q_proj": 32}}, "rank 32 is above lora.maxRank 16"),
    ({"target_modules": ["q_proj", "w_pack"]}, "target module 'w_pack': Qwen3ForCausalLM has no LoRA-capable module"),
    ({"target_modules": ["qkv_proj"]}, "qkv_proj is vLLM's packed layer"),
    ({"modules_to_save": ["lm_head"]}, "modules_to_save ['lm_head']"),
    ({"use_dora": True}, "it uses DoRA (use_dora), which vLLM 0.32 does not serve"),
    ({"bias": "all"}, "bias 'all'"),
    ({"target_modules": ".*proj"}, "is the pattern '.*proj'"),
])
def test_a_bad_adapter_is_refused_by_name_and_its_base_deploys_with_the_others(config: dict[str, Any],
                                                                              expected: str) -> None:
    lock = lock_with(adapter_facts("org/qwen-sql", QWEN3, **config),
                     adapter_facts("org/qwen-chat", QWEN3, revision="2" * 40))
    chat = adapter("chat", repo="org/qwen-chat", revision="2" * 40)
    other = with_lora({**SINGLE_GPU, "name": "other", "servedName": "other"}, {**chat, "servedName": "other-chat"})
    fleet = plan_fleet(validate_catalog(stack_doc(with_lora(SINGLE_GPU, adapter("sql"), chat), other)), lock=lock)
    assert fleet.deployed == {"qwen3-8b", "other"} and not fleet.excluded
    base = fleet.model("qwen3-8b").entry
    assert base.lora is not None and [a.name for a in base.lora.adapters] == ["chat"]
    argv = lora_argv(base.lora)
    assert not any("sql" in w for w in argv) and any(w.startswith(f"{chat['servedName']}=") for w in argv)
    # The run still ends non-zero, naming the adapter, the field and the fix.
    (error,) = [e for e in fleet.errors if "lora.adapters sql" in e]
    assert error.startswith(f"model qwen3-8b: lora.adapters sql (org/qwen-sql@{SHA}): ") and expected in error
    assert error.endswith("deployed without that adapter") and fleet.verdict() is not None


def test_a_base_whose_every_adapter_is_bad_deploys_with_lora_on_and_no_lora_modules() -> None:
    lock = lock_with(adapter_facts("org/qwen-sql", QWEN3, r=64))
    fleet = plan_fleet(validate_catalog(stack_doc(with_lora(SINGLE_GPU, adapter("sql")))), lock=lock)
    base = fleet.model("qwen3-8b").entry
    assert base.lora is not None and base.lora.adapters == []
    argv = lora_argv(base.lora)
    assert "--enable-lora" in argv and "--lora-modules" not in argv  # vLLM's nargs='+' refuses it empty
    assert any("rank 64 is above lora.maxRank 16" in e for e in fleet.errors)


def test_embedding_targets_are_refused_on_a_base_vllm_wraps_no_embedding_of() -> None:
    lock = lock_with(adapter_facts("org/qwen-sql", str(CPU["repo"]), target_modules=["q_proj", "embed_tokens"]))
    fleet = plan_fleet(validate_catalog(stack_doc(with_lora(CPU, adapter("sql")))), lock=lock)
    assert any("vLLM 0.32 serves no LoRA on embed_tokens of Qwen2ForCausalLM" in e for e in fleet.errors)
    # Qwen3 wraps them (embedding_modules), so the same adapter there is fine.
    lock = lock_with(adapter_facts("org/qwen-sql", QWEN3, target_modules=["q_proj", "embed_tokens"]))
    deployed, _ = plan(lock, with_lora(SINGLE_GPU, adapter("sql")))
    assert deployed == {"qwen3-8b"}


def test_an_adapter_missing_from_the_lock_is_refused_with_the_command_that_fixes_it() -> None:
    fleet = plan_fleet(validate_catalog(stack_doc(with_lora(CPU, adapter("sql")), SINGLE_GPU)), lock=LOCK)
    assert fleet.deployed == {"tiny", "qwen3-8b"}
    assert any(e.startswith("model tiny: lora.adapters sql") and
               f"python -m tkf_infra lock --adapter org/qwen-sql@{SHA}" in e for e in fleet.errors)


def test_the_lock_keeps_adapters_beside_models_and_a_lock_without_them_is_unchanged(tmp_path: Any) -> None:
    path = tmp_path / "models.lock.json"
    LOCK.save(path)
    assert "adapters" not in path.read_text()
    lock = lock_with(adapter_facts("org/qwen-sql", QWEN3))
    lock.save(path)
    again = load_lock(path)
    assert again.get_adapter("org/qwen-sql", SHA) == lock.get_adapter("org/qwen-sql", SHA)
    assert again.entries == lock.entries


def test_the_size_command_shows_the_lora_line_and_its_host_memory() -> None:
    from tkf_infra.ops.size import size_command

    facts = LOCK.get(*LLAMA_8B)
    assert facts is not None
    params = SizingParams(vllm_version="0.32.0", max_model_len=8192, lora=LoraSlots(max_adapters=4, max_rank=64))
    est = estimate(facts, lookup_gpu("H100-80GB"), params)
    text, code = size_command("@".join(LLAMA_8B), "H100-80GB", params)
    assert code == 0
    assert f"LoRA slots (4 x rank 64)        │  {est.lora_gib:.2f} GiB" in text
    assert f"keeps up to 4 adapter(s) loaded in host memory: at most {est.lora_host_gib:.2f} GiB" in text


def test_the_pod_asks_host_memory_for_each_ranks_cpu_adapter_cache() -> None:
    """vLLM keeps up to maxCpuAdapters whole adapters on the CPU in every GPU rank's worker
    (vllm/lora/worker_manager.py@v0.32.0:106-145): the pod's memory request holds them, TP ranks each."""
    from components.pod import resources
    from components.pod_sizes import memory_gib
    from tests.mocks import TP4

    lock = lock_with(adapter_facts("org/qwen-sql", str(TP4["repo"]), r=64))
    big = with_lora(TP4, adapter("sql"), maxAdapters=2, maxRank=64, maxCpuAdapters=16)
    plan = plan_fleet(validate_catalog(stack_doc(big)), lock=lock).model("qwen-72b")
    host = plan.fit.lora_host_gib
    assert host == pytest.approx(estimate(plan.facts, lookup_gpu("H100-80GB"), plan.fit_inputs.params).lora_host_gib)
    assert host > 4  # 16 whole rank-64 adapters of a 72B base: GiBs a worker holds beside its buffers
    entry, wb = plan.entry, plan.weight_bytes
    assert memory_gib(entry, wb, host) == math.ceil(16 + wb / 4 / GIB + 4 * host) + 8  # 4 ranks, /dev/shm 8
    asked = resources(entry, wb, lora_host_gib=host).requests
    assert isinstance(asked, dict) and asked["memory"] == f"{memory_gib(entry, wb, host)}Gi"
    assert memory_gib(entry, wb, host) > memory_gib(entry, wb)
