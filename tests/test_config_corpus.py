"""Every architecture transformers knows, as config.json (issue 29): sized or refused by name, never a crash.

The corpus is each architecture's default config from transformers' CONFIG_MAPPING (713 model types,
tests/data/transformers_configs.json.gz, written by scripts/dump_transformers_configs.py; tests/data/SOURCES.md):
the real field layouts users bring — vision and audio towers, nested text models, per-layer lists, MoE and
hybrid keys — far beyond the few dozen checkpoints tests/test_config_reader.py carries. Each one is sized
as it is, then every top-level and nested field of a spread of them is mutated the ways real configs
differ (tests/test_config_reader.py's `_mutations`), and every outcome must be a size or the product's
named refusal.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

from tests.test_config_reader import H100, PARAMS, REV, _sizes_or_refuses, mutate_every_field
from tkf_infra.sizing.config_fields import UNREAD_SHAPE
from tkf_infra.sizing.contract import FitInputs, evaluate
from tkf_infra.sizing.facts import ModelFacts

CORPUS = Path(__file__).parent / "data" / "transformers_configs.json.gz"
#: Every how-many-th architecture gets the field-by-field mutation pass (all of them would take minutes).
MUTATION_STRIDE = 12


@cache
def corpus() -> dict[str, dict[str, Any]]:
    with gzip.open(CORPUS, "rt") as f:
        configs: dict[str, dict[str, Any]] = json.load(f)["configs"]
    return configs


def test_every_architecture_is_sized_or_refused_by_name() -> None:
    outcomes: Counter[str] = Counter()
    for model_type, config in corpus().items():
        outcomes[_sizes_or_refuses(config)] += 1
        message = evaluate(FitInputs(model=model_type, repo=f"org/{model_type}", revision=REV,
                                     facts=ModelFacts(repo=f"org/{model_type}", revision=REV, config=config),
                                     gpu=H100, params=PARAMS)).message
        assert message is None or (model_type in message and UNREAD_SHAPE not in message), (model_type, message)
    assert sum(outcomes.values()) == len(corpus()) > 700
    # The decoder families a fleet serves are among them and size (llama, qwen2/3, mistral, gemma, ...).
    for model_type in ("llama", "qwen2", "qwen3", "qwen3_moe", "mistral", "mixtral", "gemma2", "deepseek_v3"):
        assert _sizes_or_refuses(corpus()[model_type]) == "sized", model_type


def test_every_field_of_a_spread_of_architectures_mutated_sizes_or_refuses_by_name() -> None:
    runs = sum(mutate_every_field(corpus()[model_type]) for model_type in sorted(corpus())[::MUTATION_STRIDE])
    assert runs > 10_000
