"""Weights from the checkpoint itself (issue 40): `lock` records each tensor kind's bytes per dtype from the
safetensors headers, and the fit check weighs each GPU rank from them before any config-derived guess.

End to end through the real `huggingface_hub` against the Hub-compatible test server (tests/hub_server.py),
on checkpoints the tests write with the safetensors library: FP8 block-quantized attention beside MXFP4
experts (U8-packed values, E8M0 scales), int4 pack-quantized experts of a compressed-tensors checkpoint
whose config names no weight scheme, sharded with an index, each with a multi-token-prediction layer vLLM
does not load. lock -> models.lock.json -> the program under mocks (preview) -> the figure a user reads
in the pod's `tkf.io/fit-weights-gib` annotation and the stack's outputs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.hub_server import SHA, Hub, Tensors, nbytes, write_checkpoint
from tests.mocks import program, stack_doc
from tkf_infra.hub.lock import Lock, load_lock, lock_command
from tkf_infra.sizing.arch import parse_arch
from tkf_infra.sizing.estimate import estimate
from tkf_infra.sizing.facts import ModelFacts
from tkf_infra.sizing.gpus import lookup_gpu
from tkf_infra.sizing.params import GIB, SizingParams
from tkf_infra.sizing.rank_weights import deployment_weights, loaded_bytes
from tkf_infra.sizing.tensor_kinds import tally, tensor_kind

H100 = lookup_gpu("H100-80GB")
HIDDEN, LAYERS, EXPERTS, MOE_INTER, HEADS, KV_HEADS, HEAD_DIM, VOCAB, MAX_POS = 1024, 6, 32, 512, 8, 4, 128, 4096, 4096
BASE = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": HIDDEN,
    "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
    "vocab_size": VOCAB, "moe_intermediate_size": MOE_INTER, "num_experts": EXPERTS, "num_experts_per_tok": 4,
    "intermediate_size": 2048, "max_position_embeddings": MAX_POS, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "rope_theta": 1_000_000,
}
FP8 = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128], "activation_scheme": "dynamic"}
#: FP8 linears and FP4 experts, the experts' dtype declared in the config (DeepSeek V4's `expert_dtype`).
FP4_DECLARED = {**BASE, "quantization_config": FP8, "expert_dtype": "fp4"}
#: The same checkpoint whose config says FP8 only: only the headers know the experts are FP4.
FP4_UNDECLARED = {**BASE, "quantization_config": FP8}
#: compressed-tensors int4 pack-quantized experts, attention and routers in bf16, no weight scheme in the config.
CT_NO_SCHEME = {**BASE, "quantization_config": {
    "quant_method": "compressed-tensors", "format": "pack-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": None}},
    "ignore": ["lm_head", "re:.*self_attn.*", "re:.*mlp.gate$"]}}


def linear(prefix: str, out: int, inp: int, fmt: str) -> Tensors:
    """One linear layer's tensors as each format stores them on the Hub."""
    if fmt == "bf16":
        return {f"{prefix}.weight": ("BF16", [out, inp])}
    if fmt == "fp8-block":  # FP8 E4M3 + one float32 scale per 128 x 128 block
        return {f"{prefix}.weight": ("F8_E4M3", [out, inp]),
                f"{prefix}.weight_scale_inv": ("F32", [-(-out // 128), -(-inp // 128)])}
    if fmt == "mxfp4":  # two FP4 values per byte + one E8M0 scale per 32
        return {f"{prefix}.weight": ("U8", [out, inp // 2]), f"{prefix}.weight_scale": ("F8_E8M0", [out, inp // 32])}
    if fmt == "int4-pack":  # compressed-tensors pack-quantized: eight int4 per int32 + a bf16 scale per 32
        return {f"{prefix}.weight_packed": ("I32", [out, inp // 8]),
                f"{prefix}.weight_scale": ("BF16", [out, inp // 32]), f"{prefix}.weight_shape": ("I64", [2])}
    raise AssertionError(fmt)


def decoder_layer(i: int, attn: str, experts: str) -> dict[str, Tensors]:
    """Layer `i` of the test MoE, by the kind the test says each tensor is (not read from tkf_infra)."""
    p = f"model.layers.{i}"
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    attention: Tensors = {**linear(f"{p}.self_attn.q_proj", q, HIDDEN, attn), **linear(f"{p}.self_attn.k_proj", kv,
                          HIDDEN, attn), **linear(f"{p}.self_attn.v_proj", kv, HIDDEN, attn),
                          **linear(f"{p}.self_attn.o_proj", HIDDEN, q, attn)}
    expert: Tensors = {}
    for e in range(EXPERTS):
        expert |= linear(f"{p}.mlp.experts.{e}.gate_proj", MOE_INTER, HIDDEN, experts)
        expert |= linear(f"{p}.mlp.experts.{e}.up_proj", MOE_INTER, HIDDEN, experts)
        expert |= linear(f"{p}.mlp.experts.{e}.down_proj", HIDDEN, MOE_INTER, experts)
    norms: Tensors = {f"{p}.input_layernorm.weight": ("BF16", [HIDDEN]),
                      f"{p}.post_attention_layernorm.weight": ("BF16", [HIDDEN]),
                      f"{p}.self_attn.q_norm.weight": ("BF16", [HEAD_DIM]),
                      f"{p}.self_attn.k_norm.weight": ("BF16", [HEAD_DIM]),
                      f"{p}.mlp.gate.weight": ("BF16", [EXPERTS, HIDDEN])}  # the router
    return {"attention": attention, "experts": expert, "norms": norms}


def moe_checkpoint(attn: str, experts: str) -> dict[str, Tensors]:
    """The whole checkpoint by kind, with one multi-token-prediction layer past `num_hidden_layers`."""
    kinds: dict[str, Tensors] = {"attention": {}, "experts": {}, "norms": {"model.norm.weight": ("BF16", [HIDDEN])},
                                 "embeddings": {"model.embed_tokens.weight": ("BF16", [VOCAB, HIDDEN]),
                                                "lm_head.weight": ("BF16", [VOCAB, HIDDEN])}, "mtp": {}}
    for i in range(LAYERS):
        for kind, tensors in decoder_layer(i, attn, experts).items():
            kinds[kind] |= tensors
    for tensors in decoder_layer(LAYERS, attn, experts).values():
        kinds["mtp"] |= tensors
    kinds["mtp"][f"model.layers.{LAYERS}.eh_proj.weight"] = ("BF16", [HIDDEN, 2 * HIDDEN])
    return kinds


def flat(kinds: dict[str, Tensors]) -> Tensors:
    return {name: t for tensors in kinds.values() for name, t in tensors.items()}


def kind_bytes(tensors: Tensors) -> int:
    return sum(nbytes(d, s) for d, s in tensors.values())


def per_dtype(tensors: Tensors) -> dict[str, int]:
    out: dict[str, int] = {}
    for dtype, shape in tensors.values():
        out[dtype] = out.get(dtype, 0) + nbytes(dtype, shape)
    return out


def expected_gib_per_rank(kinds: dict[str, Tensors], tp: int) -> float:
    """What each of `tp` ranks loads, by vLLM's rules stated plainly: attention (KV heads >= TP), experts and the
    (64-aligned) vocabulary split by TP; norms and routers whole on every rank; the MTP layer not loaded; plus the
    rotary cos/sin cache (max positions x head size in bf16). Every tensor here is stored as it loads (bf16
    model, quantized storage kept as stored)."""
    split = kind_bytes(kinds["attention"]) + kind_bytes(kinds["experts"]) + kind_bytes(kinds["embeddings"])
    rotary = MAX_POS * HEAD_DIM * 2
    return (split / tp + kind_bytes(kinds["norms"]) + rotary) / GIB


FP4_KINDS = moe_checkpoint("fp8-block", "mxfp4")
CT_KINDS = moe_checkpoint("bf16", "int4-pack")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Written once per module: about 180 MB each on disk (zero data), read by `lock` through the headers only."""
    root = tmp_path_factory.mktemp("checkpoints")
    out = {}
    for repo, config, kinds, shards in (("org/fp4-declared", FP4_DECLARED, FP4_KINDS, 3),
                                        ("org/fp4-undeclared", FP4_UNDECLARED, FP4_KINDS, 2),
                                        ("org/ct-int4", CT_NO_SCHEME, CT_KINDS, 1)):
        folder = root / repo.replace("/", "--")
        write_checkpoint(folder, config, flat(kinds), shards=shards)
        out[repo] = folder
    return out


@pytest.fixture()
def locked(hub: Hub, checkpoints: dict[str, Path], tmp_path: Path) -> Path:
    """`python -m tkf_infra lock` of the three checkpoints against the test Hub: the lock file it wrote."""
    for repo, folder in checkpoints.items():
        hub.add(repo, folder)
    path = tmp_path / "models.lock.json"
    text, code = lock_command([(repo, SHA) for repo in checkpoints], path, hub.endpoint, None)
    assert code == 0, text
    assert text.count("safetensors headers by layer kind") == 3, text
    return path


def entry(name: str, repo: str, tp: int = 2) -> dict[str, Any]:
    return {"name": name, "repo": repo, "revision": SHA, "servedName": name, "nodePool": "h100",
            "gpusPerNode": tp, "tensorParallelSize": tp, "maxModelLen": 4096}


def fit_weights(h: Any, name: str) -> float:
    """The weights per GPU a user reads on the model's pod (`kubectl describe`: tkf.io/fit-weights-gib)."""
    found = [r for r in h.resources if r.custom and r.metadata.get("name") == name
             and r.inputs.get("kind") == "LLMInferenceService"]
    assert len(found) == 1, h.mocks.dump()
    return float(found[0].metadata["annotations"]["tkf.io/fit-weights-gib"])


def without_headers(lock: Lock) -> Lock:
    """The same lock as an entry locked before the lock recorded the headers."""
    return Lock(entries={k: v.model_copy(update={"tensor_bytes": None}) for k, v in lock.entries.items()})


# --- lock: what it records ----------------------------------------------------------------------------------


def test_lock_records_each_kinds_bytes_per_dtype_from_the_sharded_headers(locked: Path, hub: Hub) -> None:
    raw = json.loads(locked.read_text())
    stored = {m["repo"]: m for m in raw["models"]}["org/fp4-declared"]
    expected = {kind: per_dtype(tensors) for kind, tensors in FP4_KINDS.items() if tensors}
    assert stored["tensor_bytes"] == expected
    assert expected["experts"].keys() == {"U8", "F8_E8M0"} and expected["attention"].keys() == {"F8_E4M3", "F32"}
    assert stored["weight_bytes"] == kind_bytes(flat(FP4_KINDS))
    # Three shards, each read through Range requests for its header, never downloaded whole.
    shard_gets = [r for r in hub.requests if "org/fp4-declared" in r and ".safetensors " in r and r.startswith("GET")]
    assert len({r.split()[1] for r in shard_gets}) == 3 and all("range=bytes=" in r for r in shard_gets)
    ct = {m["repo"]: m for m in raw["models"]}["org/ct-int4"]["tensor_bytes"]
    assert ct["experts"] == per_dtype(CT_KINDS["experts"]) and set(ct["experts"]) == {"I32", "BF16", "I64"}


# --- preview: what the fit check weighs ---------------------------------------------------------------------


def test_preview_weighs_fp4_experts_from_the_headers_where_the_config_says_fp8(locked: Path) -> None:
    lock = load_lock(locked)
    doc = stack_doc(entry("declared", "org/fp4-declared"), entry("undeclared", "org/fp4-undeclared"))
    want = expected_gib_per_rank(FP4_KINDS, tp=2)
    h = program(doc, lock=lock)
    assert h.error is None, h.errors()
    assert fit_weights(h, "declared") == pytest.approx(want, abs=0.006)
    assert fit_weights(h, "undeclared") == pytest.approx(want, abs=0.006)
    # An entry locked before the headers were recorded: the config's own word decides. Declared FP4 experts are
    # priced as MXFP4 (values + E8M0 scales); undeclared ones as the FP8 the config says, one byte each.
    old = program(doc, lock=without_headers(lock))
    assert fit_weights(old, "declared") == pytest.approx(want, abs=0.006)
    expert_elements = LAYERS * EXPERTS * 3 * HIDDEN * MOE_INTER
    overcount = (expert_elements * 1.0 - kind_bytes(FP4_KINDS["experts"])) / 2 / GIB  # one byte each, per rank
    assert overcount > 0.05
    assert fit_weights(old, "undeclared") == pytest.approx(want + overcount, abs=0.006)


def test_compressed_tensors_without_a_weight_scheme_is_sized_from_the_headers(locked: Path) -> None:
    lock = load_lock(locked)
    doc = stack_doc(entry("ct", "org/ct-int4"))
    h = program(doc, lock=lock)
    assert h.error is None, h.errors()
    assert fit_weights(h, "ct") == pytest.approx(expected_gib_per_rank(CT_KINDS, tp=2), abs=0.006)
    # Without the headers, config.json cannot say the bit width: refused, naming the command that fixes it.
    old = program(doc, lock=without_headers(lock))
    errors = " ".join(old.errors())
    assert "ct was left out of this deployment (fit)" in errors
    assert "without config_groups[].weights" in errors and "python -m tkf_infra lock" in errors


def test_the_mtp_layer_and_expert_parallelism_follow_vllms_split(locked: Path) -> None:
    facts = load_lock(locked).get("org/fp4-declared", SHA)
    assert facts is not None and facts.tensor_bytes is not None
    assert facts.tensor_bytes["mtp"] == per_dtype(FP4_KINDS["mtp"])  # recorded apart, not weighed
    arch = parse_arch(facts.text_config(), facts.config)
    base = SizingParams(vllm_version="0.32.0", max_model_len=4096)
    tp2 = deployment_weights(facts, arch, base.model_copy(update={"tensor_parallel_size": 2}))
    ep = deployment_weights(facts, arch, base.model_copy(update={"tensor_parallel_size": 2,
                                                                 "enable_expert_parallel": True}))
    pp = deployment_weights(facts, arch, base.model_copy(update={"pipeline_parallel_size": 2}))
    assert tp2.source == "checkpoint headers" and not tp2.doubts
    # 32 experts over 2 ranks: whole experts or half of each, the same bytes on each rank.
    assert ep.stages[0] == pytest.approx(tp2.stages[0], rel=1e-9)
    # PP 2: three layers a stage, the embedding on the first stage and lm_head on the last.
    layer = (kind_bytes(FP4_KINDS["attention"]) + kind_bytes(FP4_KINDS["experts"])) / LAYERS
    norms = (kind_bytes(FP4_KINDS["norms"]) - 2 * HIDDEN) / LAYERS
    embed = nbytes("BF16", [VOCAB, HIDDEN])
    rotary = MAX_POS * HEAD_DIM * 2
    assert pp.stages[0] == pytest.approx(3 * (layer + norms) + embed + rotary, rel=1e-6)
    assert pp.stages[1] == pytest.approx(3 * (layer + norms) + embed + 2 * HIDDEN + rotary, rel=1e-6)


# --- lock: refresh and bad entries --------------------------------------------------------------------------


def test_an_entry_locked_before_the_headers_is_reread_once(locked: Path, hub: Hub) -> None:
    raw = json.loads(locked.read_text())
    for m in raw["models"]:
        del m["tensor_bytes"]  # as the committed lock's entries are
    locked.write_text(json.dumps(raw))
    assert all(f.tensor_bytes is None for f in load_lock(locked).entries.values())
    text, code = lock_command([("org/ct-int4", SHA), ("org/fp4-declared", SHA)], locked, hub.endpoint, None)
    assert code == 0 and text.count("re-read: the entry lacked the safetensors headers' facts") == 2, text
    again = load_lock(locked)
    reread, untouched = again.get("org/ct-int4", SHA), again.get("org/fp4-undeclared", SHA)
    assert reread is not None and reread.tensor_bytes == {k: per_dtype(t) for k, t in CT_KINDS.items() if t}
    assert untouched is not None and untouched.tensor_bytes is None  # not asked for
    text, _ = lock_command([("org/ct-int4", SHA)], locked, hub.endpoint, None)
    assert "already locked" in text


def test_a_lock_entry_that_does_not_validate_is_named_and_the_others_load(locked: Path) -> None:
    raw = json.loads(locked.read_text())
    bad = next(m for m in raw["models"] if m["repo"] == "org/ct-int4")
    bad["tensor_bytes"]["expert_weights"] = bad["tensor_bytes"].pop("experts")  # a kind this code does not know
    locked.write_text(json.dumps(raw, indent=2))
    lock = load_lock(locked)
    assert lock.get("org/fp4-declared", SHA) is not None and lock.get("org/ct-int4", SHA) is None
    h = program(stack_doc(entry("ct", "org/ct-int4"), entry("declared", "org/fp4-declared")), lock=lock)
    errors = " ".join(h.errors())
    assert "ct was left out of this deployment (lock)" in errors
    assert "the lock entry of org/ct-int4@" in errors and "['expert_weights']" in errors
    assert fit_weights(h, "declared") > 0
    # Saving the lock keeps the bad entry as it was, for a person or `lock` to fix.
    lock.save(locked)
    assert "expert_weights" in {k for m in json.loads(locked.read_text())["models"] for k in m.get("tensor_bytes", {})}


# --- sizing rules without the Hub ---------------------------------------------------------------------------


def dense_llama(layers: int = 4, hidden: int = 512, heads: int = 8, kv: int = 2, inter: int = 1536,
                vocab: int = 1000) -> tuple[dict[str, Any], list[tuple[str, str, int]]]:
    """A Llama config and its bf16 tensors (name, dtype, bytes), as a checkpoint of it has them."""
    hd = hidden // heads
    config = {"model_type": "llama", "hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
              "num_key_value_heads": kv, "intermediate_size": inter, "vocab_size": vocab,
              "max_position_embeddings": 2048, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
    shapes = {"model.embed_tokens.weight": vocab * hidden, "lm_head.weight": vocab * hidden,
              "model.norm.weight": hidden}
    for i in range(layers):
        p = f"model.layers.{i}"
        shapes |= {f"{p}.self_attn.q_proj.weight": hidden * hidden, f"{p}.self_attn.k_proj.weight": kv * hd * hidden,
                   f"{p}.self_attn.v_proj.weight": kv * hd * hidden, f"{p}.self_attn.o_proj.weight": hidden * hidden,
                   f"{p}.mlp.gate_proj.weight": inter * hidden, f"{p}.mlp.up_proj.weight": inter * hidden,
                   f"{p}.mlp.down_proj.weight": inter * hidden, f"{p}.input_layernorm.weight": hidden,
                   f"{p}.post_attention_layernorm.weight": hidden}
    return config, [(name, "BF16", 2 * n) for name, n in shapes.items()]


@pytest.mark.parametrize(("tp", "pp"), [(1, 1), (2, 1), (4, 1), (8, 1), (2, 2), (1, 4)])
def test_headers_of_a_checkpoint_the_config_describes_exactly_weigh_what_the_config_counts(tp: int, pp: int) -> None:
    """The headers change the bytes per element, never which rank holds what: on a bf16 checkpoint (where the config's
    count is exact) both give the same rank figures, KV projections replicated at TP 4 and 8 (2 KV heads) included."""
    config, tensors = dense_llama()
    params = SizingParams(vllm_version="0.32.0", max_model_len=2048, tensor_parallel_size=tp, pipeline_parallel_size=pp)
    with_headers = ModelFacts(repo="org/llama", revision=SHA, config=config, tensor_bytes=tally(tensors, 4))
    arch = parse_arch(config)
    from_headers = deployment_weights(with_headers, arch, params)
    from_config = deployment_weights(ModelFacts(repo="org/llama", revision=SHA, config=config), arch, params)
    assert (from_headers.source, from_config.source) == ("checkpoint headers", "config.json")
    assert from_headers.stages == pytest.approx(from_config.stages, rel=1e-9)


def test_float_weights_load_in_the_model_dtype_and_quantized_storage_as_stored() -> None:
    # A float32 checkpoint served in bf16 loads at half its size; an fp16 one at its size.
    assert loaded_bytes({"F32": 4000}, 2.0) == 2000 and loaded_bytes({"F16": 4000}, 2.0) == 4000
    # Served in float32, bf16 weights double.
    assert loaded_bytes({"BF16": 4000}, 4.0) == 8000
    # Beside quantized storage, float32 tensors are scales, kept in float32; bf16 scales follow the dtype.
    assert loaded_bytes({"F8_E4M3": 1000, "F32": 40}, 2.0) == 1040
    assert loaded_bytes({"I32": 1000, "BF16": 64, "I64": 16}, 4.0) == 1000 + 128 + 16


def test_a_16_bit_checkpoint_quantized_at_load_is_priced_by_the_method() -> None:
    config, tensors = dense_llama()
    facts = ModelFacts(repo="org/llama", revision=SHA, config=config, tensor_bytes=tally(tensors, 4))
    arch = parse_arch(config)
    bf16 = deployment_weights(facts, arch, SizingParams(vllm_version="0.32.0", max_model_len=2048))
    fp8 = deployment_weights(facts, arch, SizingParams(vllm_version="0.32.0", max_model_len=2048, quantization="fp8"))
    linears = sum(n for name, _, n in tensors if name.endswith("_proj.weight"))
    assert bf16.stages[0] - fp8.stages[0] == pytest.approx(linears / 2, rel=1e-9)  # linears 2 -> 1 byte


def test_the_checkpoint_size_of_a_lock_entry_with_only_the_headers_is_their_sum() -> None:
    from tkf_infra.sizing.weights import checkpoint_bytes

    _, tensors = dense_llama()
    facts = ModelFacts(repo="org/llama", revision=SHA, config={}, tensor_bytes=tally(tensors, 4))
    assert checkpoint_bytes(facts) == sum(n for _, _, n in tensors)


# --- the config's own word where the lock has no headers (calibration cases, old entries) --------------------


def _gib(config: dict[str, Any], **flags: Any) -> float:
    params = SizingParams(vllm_version="0.32.0", max_model_len=4096, **flags)
    return estimate(ModelFacts(repo="org/m", revision=SHA, config=config), H100, params).weights_gib


def test_declared_fp4_experts_weigh_about_half_of_fp8_ones() -> None:
    """The issue's example: experts stored in FP4 (`expert_dtype`) were weighed as the FP8 the quantization_config
    names, 137 GiB per GPU where vLLM loaded 74; MXFP4 is 0.53 byte per element (values + E8M0 scale per 32)."""
    experts = LAYERS * EXPERTS * 3 * HIDDEN * MOE_INTER
    gap = _gib(FP4_UNDECLARED) - _gib(FP4_DECLARED)
    assert gap == pytest.approx(experts * (1 - 0.5 - 1 / 32) / GIB, rel=1e-6)
    nvfp4 = {**FP4_DECLARED, "quantization_config": {**FP8, "moe_quant_algo": "NVFP4"}}
    assert _gib(FP4_UNDECLARED) - _gib(nvfp4) == pytest.approx(experts * (1 - 0.5 - 1 / 16) / GIB, rel=1e-6)


def test_mxfp8_and_nvfp4_moe_configs_are_sized_with_their_exclusions() -> None:
    bf16 = _gib(BASE)
    attention = LAYERS * (2 * HIDDEN * HEADS * HEAD_DIM + 2 * HIDDEN * KV_HEADS * HEAD_DIM)
    linears = LAYERS * EXPERTS * 3 * HIDDEN * MOE_INTER + attention
    # MiniMax-style MXFP8: FP8 values + one E8M0 scale per 32; its ignored_layers stay bf16.
    mxfp8 = {**BASE, "quantization_config": {"quant_method": "mxfp8", "ignored_layers": []}}
    assert bf16 - _gib(mxfp8) == pytest.approx(linears * (2 - 1 - 1 / 32) / GIB, rel=1e-6)
    kept = {**BASE, "quantization_config": {"quant_method": "mxfp8",
                                             "ignored_layers": ["model.layers.*.self_attn*"]}}
    assert _gib(kept) - _gib(mxfp8) == pytest.approx(attention * (2 - 1 - 1 / 32) / GIB, rel=1e-6)
    assert _gib(BASE, quantization="mxfp8") == pytest.approx(_gib(mxfp8), rel=1e-6)  # the online shorthand
    # ModelOpt NVFP4 with `exclude_modules` wildcards (vLLM's fnmatch): attention excluded stays bf16.
    nvfp4 = {**BASE, "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4",
                                              "exclude_modules": ["lm_head", "model.layers.*.self_attn*"]}}
    experts = LAYERS * EXPERTS * 3 * HIDDEN * MOE_INTER
    assert bf16 - _gib(nvfp4) == pytest.approx(experts * (2 - 0.5 - 1 / 16) / GIB, rel=1e-6)


def test_a_dense_width_named_apart_from_the_experts_is_read_for_the_dense_layers() -> None:
    """MiniMax M3: `intermediate_size` is the experts' width, `dense_intermediate_size` the first dense layers'."""
    cfg = {**BASE, "first_k_dense_replace": 2, "intermediate_size": MOE_INTER, "dense_intermediate_size": 4096}
    del cfg["moe_intermediate_size"]
    arch = parse_arch(cfg)
    assert (arch.intermediate, arch.moe_intermediate, arch.moe_layers[:3]) == (4096, MOE_INTER, (False, False, True))


def test_the_sparse_attention_indexer_is_counted_on_every_rank() -> None:
    """DeepSeek V3.2 / GLM-5: each layer's indexer (`wq_b` quantized like the attention, `wk` and `weights_proj`
    in bf16) is replicated, not split by TP: GLM-5.1-FP8 printed 89.34 GiB per GPU at TP 8 where the count without
    it said 88.00."""
    mla = {"model_type": "deepseek_v32", "hidden_size": 2048, "num_hidden_layers": 4, "num_attention_heads": 16,
           "num_key_value_heads": 16, "vocab_size": 4096, "max_position_embeddings": 4096, "kv_lora_rank": 512,
           "q_lora_rank": 768, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
           "intermediate_size": 4096, "torch_dtype": "bfloat16", "quantization_config": FP8}
    dsa = {**mla, "index_topk": 2048, "index_n_heads": 32, "index_head_dim": 128}
    per_layer = 768 * 32 * 128 * 1 + 2048 * (128 + 32) * 2 + 2 * 128 * 2
    for tp in (1, 2, 4):
        assert _gib(dsa, tensor_parallel_size=tp) - _gib(mla, tensor_parallel_size=tp) == pytest.approx(
            4 * per_layer / GIB, rel=1e-6)
    every_other = {**dsa, "index_topk_pattern": ["F", "S", "F", "S"]}
    assert parse_arch(every_other).indexer_layers == (True, False, True, False)


# --- which kind a tensor is ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "kind"), [
    ("model.layers.3.mlp.experts.17.down_proj.weight_packed", "experts"),
    ("model.layers.0.mlp.experts.gate_up_proj_blocks", "experts"),  # gpt-oss MXFP4
    ("model.layers.0.block_sparse_moe.experts.0.w1.weight", "experts"),
    ("model.layers.3.mlp.shared_experts.down_proj.weight", "mlp"),
    ("model.layers.0.feed_forward.shared_expert.down_proj.weight", "mlp"),
    ("model.layers.3.mlp.gate.weight", "norms"),  # the router
    ("model.layers.3.mlp.gate.e_score_correction_bias", "norms"),
    ("model.layers.0.self_attn.q_proj.weight_scale_inv", "attention"),
    ("model.layers.0.self_attn.kv_a_layernorm.weight", "norms"),
    ("model.layers.0.linear_attn.in_proj_qkvz.weight", "attention"),
    ("backbone.layers.0.mixer.in_proj.weight", "attention"),
    ("transformer.h.0.attn.c_attn.weight", "attention"),
    ("transformer.h.0.ln_1.weight", "norms"),
    ("transformer.wte.weight", "embeddings"),
    ("model.language_model.embed_tokens.weight", "embeddings"),
    ("model.visual.blocks.0.attn.qkv.weight", "vision"),
    ("vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight", "vision"),
    ("multi_modal_projector.linear_1.weight", "vision"),
    ("model.layers.61.shared_head.head.weight", "mtp"),  # past num_hidden_layers (DeepSeek V3)
    ("mtp.layers.0.mlp.experts.1.up_proj.weight", "mtp"),  # Qwen3-Next
    ("some.tensor.no.rule.knows", "norms"),  # replicated: never undercounted on a rank
])
def test_each_tensor_is_the_kind_vllm_splits_it_as(name: str, kind: str) -> None:
    assert tensor_kind(name, 61) == kind


def test_the_committed_lock_stays_valid_without_the_headers() -> None:
    lock = load_lock()
    assert lock.entries and not lock.broken
    assert all(f.tensor_bytes is None for f in lock.entries.values())  # not read yet: `lock` fills them
