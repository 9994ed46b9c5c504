"""The committed table of `vllm serve`'s option strings is what the installed vLLM's parser has.

`tkf_infra.config.extra_args.owned_flags()` refuses in `extraArgs` every spelling whose dest is an owned
flag's dest, read from tkf_infra/config/data/vllm_serve_options-<release>.json. This regenerates that
file with scripts/vllm_serve_options.py in the vLLM virtualenv and compares: an upgrade that adds an
alias (another `-q`) fails here, naming it, until the file is regenerated and committed. It also runs
spellings through vLLM's own parser to show they set the dest the table says.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.vllm.argv import run_oracle, vllm_version
from tests.vllm.server import NO_TELEMETRY_ENV
from tkf_infra.config import extra_args

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "scripts" / "vllm_serve_options.py"


def generate(vllm_venv: Path, home: Path) -> dict[str, Any]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), **NO_TELEMETRY_ENV}
    proc = subprocess.run([str(vllm_venv / "bin" / "python"), str(GENERATOR)], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def test_the_committed_option_table_is_the_installed_parsers(vllm_venv: Path, tier_dir: Path) -> None:
    fresh = generate(vllm_venv, tier_dir / "options-home")
    committed = json.loads(extra_args.SERVE_OPTIONS_FILE.read_text())
    assert fresh["vllm"] == vllm_version() == extra_args.SERVE_OPTIONS_VLLM
    added = sorted(set(fresh["options"]) - set(committed["options"]))
    dropped = sorted(set(committed["options"]) - set(fresh["options"]))
    moved = sorted(o for o in set(fresh["options"]) & set(committed["options"])
                   if fresh["options"][o] != committed["options"][o])
    assert not (added or dropped or moved), (
        f"vLLM {fresh['vllm']}'s parser differs from {extra_args.SERVE_OPTIONS_FILE.name}: added {added}, dropped "
        f"{dropped}, other dest {moved}; regenerate it with scripts/vllm_serve_options.py and commit it")
    assert fresh == committed


def test_each_refused_spelling_sets_the_owned_dest_in_vllms_parser(vllm_venv: Path, tier_dir: Path) -> None:
    """What the mock tier refuses (`-q awq`, `--quant awq` …) really sets the owned flag in vLLM 0.32."""
    cases = {"q": (["-q", "awq"], "quantization", "awq"), "q-attached": (["-qawq"], "quantization", "awq"),
             "equals": (["--quantization=awq"], "quantization", "awq"),
             "tp": (["-tp", "2"], "tensor_parallel_size", 2),
             "underscores": (["--tensor_parallel_size", "2"], "tensor_parallel_size", 2),
             "prefix": (["--max-model", "512"], "max_model_len", 512),
             "dotted": (["--speculative_config.method", "ngram"], "speculative_config", None)}
    argv = {k: ["vllm", "serve", "/m", *words] for k, (words, _, _) in cases.items()}
    argv["quant"] = ["vllm", "serve", "/m", "--quant", "awq"]
    shown = tuple(sorted({dest for _, dest, _ in cases.values()}))
    result = run_oracle(vllm_venv, tier_dir / "options-home", argv, show=shown)["results"]
    # At 0.32 `--quant` also prefixes --quantization-config: vLLM fails at start-up, the platform at preview.
    assert result["quant"]["stage"] == "parse" and "ambiguous option: --quant" in result["quant"]["error"]
    assert "it abbreviates several options" in extra_args.extra_args_problems(["--quant", "awq"])[0]
    for key, (words, dest, value) in cases.items():
        assert extra_args.extra_args_problems(words), words
        got = result[key]
        assert got["stage"] != "parse", (key, got)
        if value is not None and got["ok"]:
            assert got["values"][dest] == value, (key, got)


def test_the_words_refused_as_no_option_are_the_ones_vllms_parser_refuses(vllm_venv: Path, tier_dir: Path) -> None:
    """What `unknown_option_problems` refuses at preview, vLLM 0.32's own parser refuses at start-up; what it lets
    through, the parser takes (tests/test_careless_input.py has the messages)."""
    refused = {"two-in-one": ["--disable-log-stats --enable-log-requests"], "value-in-flag": ["--seed 3"],
               "typo": ["--enable-log-requestz"], "underscore-typo": ["--disable_log_statz"], "dash": ["-x"]}
    passed = {"exact": ["--disable-log-stats"], "value": ["--seed", "3"], "equals": ["--seed=3"],
              "underscores": ["--disable_log_stats"], "prefix": ["--disable-log-stat"], "negative": ["--seed", "-3"],
              "no-form": ["--no-enable-log-requests"]}
    cases = {k: ["vllm", "serve", "/m", *words] for k, words in {**refused, **passed}.items()}
    result = run_oracle(vllm_venv, tier_dir / "options-home", cases)["results"]
    for key, words in refused.items():
        assert extra_args.unknown_option_problems(words), words
        assert result[key]["stage"] == "parse" and "unrecognized arguments" in result[key]["error"], (key, result[key])
    for key, words in passed.items():
        assert not extra_args.unknown_option_problems(words), words
        assert result[key]["stage"] != "parse", (key, result[key])
