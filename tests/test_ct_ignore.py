"""A compressed-tensors checkpoint's `ignore` list keeps layers in the activation dtype (issue 29): sizing
them at the config groups' bit width says "fits" for a model vLLM cannot load.

The configs are real (tests/data/SOURCES.md): Laguna XS.2 FP8 keeps every attention projection in bf16;
a Qwen3 MoE w4a16 ignores only its routers (`re:.*mlp.gate$`), which are counted unquantized anyway.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tkf_infra.sizing.arch import parse_arch
from tkf_infra.sizing.ct_ignore import Ignored, ignored_share
from tkf_infra.sizing.estimate import estimate
from tkf_infra.sizing.facts import ModelFacts
from tkf_infra.sizing.gpus import lookup_gpu
from tkf_infra.sizing.params import SizingParams

DATA = Path(__file__).parent / "data"
H100 = lookup_gpu("H100-80GB")
PARAMS = SizingParams(vllm_version="0.19.0", max_model_len=4096)


def load(rel: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / rel).read_text())
    return data


def weights_gib(config: dict[str, Any]) -> float:
    return estimate(ModelFacts(repo="org/model", revision="0" * 40, config=config), H100, PARAMS).weights_gib


def with_ignore(config: dict[str, Any], ignore: list[str]) -> dict[str, Any]:
    out = copy.deepcopy(config)
    out["quantization_config"]["ignore"] = ignore
    return out


def test_laguna_fp8_keeps_its_attention_in_bf16() -> None:
    cfg = load("configs/poolside__Laguna-XS.2-FP8.json")
    arch = parse_arch(cfg)
    kept = ignored_share(cfg["quantization_config"]["ignore"], arch.layers)
    assert kept == Ignored(attention=1.0, mlp=0.0, experts=0.0)
    # Quantizing the attention after all (ignore only lm_head) saves one byte per attention element.
    quantized_attention = with_ignore(cfg, ["lm_head"])
    assert weights_gib(cfg) > weights_gib(quantized_attention)


def test_an_ignored_share_of_layers_costs_that_share_at_16_bits() -> None:
    cfg = load("configs/poolside__Laguna-XS.2-FP8.json")
    n = parse_arch(cfg).layers
    none = weights_gib(with_ignore(cfg, ["lm_head"]))
    every = weights_gib(cfg)
    half = [f"model.layers.{i}.self_attn.{p}_proj" for i in range(0, n, 2) for p in "qkvo"]
    share = weights_gib(with_ignore(cfg, ["lm_head", *half]))
    expected = ignored_share(half, n).attention
    assert expected == pytest.approx(((n + 1) // 2) / n)
    assert share - none == pytest.approx((every - none) * expected, rel=1e-6)


def test_a_router_only_ignore_list_changes_nothing() -> None:
    cfg = load("calibration/configs/nytopop__Qwen3-30B-A3B.w4a16.composed.json")
    text = cfg.get("text_config", cfg)
    ignore = text["quantization_config"]["ignore"]
    assert ignored_share(ignore, parse_arch(text).layers) == Ignored()


def test_expert_and_mlp_patterns_are_told_apart() -> None:
    assert ignored_share(["re:.*mlp\\.experts\\..*"], 4) == Ignored(experts=1.0)
    assert ignored_share(["re:model\\.layers\\.0\\.mlp\\..*"], 4) == Ignored(mlp=0.25, experts=0.25)
    assert ignored_share(["model.layers.3.self_attn.o_proj"], 4) == Ignored(attention=0.25)
    # Unknown depth: a matching class is counted whole; a pattern vLLM could not compile matches nothing.
    assert ignored_share(["re:.*self_attn.*"], 0) == Ignored(attention=1.0)
    assert ignored_share(["re:(", "lm_head"], 8) == Ignored()
