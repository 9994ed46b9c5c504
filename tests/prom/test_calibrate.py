"""`calibrate`: running deployments written as calibration cases the sizing bench can score.

The stack side is real (a validated catalog, endpoints from tkf_infra.outputs, models.lock.json);
the vLLM side is the fixture exporters' cache_config_info, read through a real Prometheus.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tkf_infra.config import Catalog, validate_catalog
from tkf_infra.exit_codes import ExitCode
from tkf_infra.hub.lock import load_lock
from tkf_infra.live.calibrate import CASE_KEYS, calibrate_command
from tkf_infra.outputs import endpoint

from .conftest import PromServer
from .metrics_fixtures import DEV_MODEL, MODELS, FakeModel

pytestmark = pytest.mark.prometheus

ROOT = Path(__file__).resolve().parents[2]
STACK = "live-test"
IMAGE_VERSION = "0.32.0"
GPU_MODELS = [m for m in MODELS if m is not DEV_MODEL]  # DEV_MODEL is calibrated through the CLI, on its stack
BY_RELEASE = {m.vllm_release: m for m in GPU_MODELS}
CURRENT, BLOCKS_ONLY, NO_BLOCKS = BY_RELEASE["0.32.0"], BY_RELEASE["0.10.2"], BY_RELEASE["0.8.5"]


def _catalog() -> Catalog:
    """The stack that deployed the fixture models: one H100 pool, the fixtures' serving settings."""
    return validate_catalog({
        "namespaces": {"serving": "models"},
        "serving": {"vllmImage": f"vllm/vllm-openai:v{IMAGE_VERSION}"},
        "nodePools": [{"name": "h100", "gpuProduct": "H100-80GB", "gpusPerNode": 1}],
        "models": [{"name": m.name, "repo": m.repo, "revision": m.revision, "servedName": m.served_name,
                    "nodePool": "h100", "maxModelLen": m.kv.max_model_len,
                    "gpuMemoryUtilization": m.kv.gpu_memory_utilization} for m in GPU_MODELS],
    })


def _endpoints(catalog: Catalog) -> list[dict[str, Any]]:
    """`endpoints` as the program exports them, with the fixtures' predictions as the fit."""
    predicted = {m.name: m.predicted_kv_tokens for m in GPU_MODELS}
    namespace = catalog.settings.namespaces.serving
    return [{**endpoint(e, namespace), "fit": {"kvCacheTokens": predicted[e.name]}} for e in catalog.models]


def _calibrate(prom_url: str, output: Path, append: bool = False) -> tuple[str, ExitCode]:
    catalog = _catalog()
    assert catalog.ok, catalog.rejected
    return calibrate_command(_endpoints(catalog), prom_url, output, stack=STACK, catalog=catalog, lock=load_lock(),
                             append=append)


def _case(cases: list[dict[str, Any]], model: FakeModel) -> dict[str, Any]:
    (case,) = [c for c in cases if c["model"] == model.repo]
    return case


def test_running_models_become_cases_in_the_shared_format(prom: PromServer, tmp_path: Path) -> None:
    output = tmp_path / "cases.json"
    text, code = _calibrate(prom.url, output)

    assert code == ExitCode.OK, text
    cases = json.loads(output.read_text())
    shared_keys = list(json.loads((ROOT / "tests/data/calibration/cases.json").read_text())[0])
    assert all(list(c) == shared_keys == list(CASE_KEYS) for c in cases)
    assert sorted(c["model"] for c in cases) == sorted([CURRENT.repo, BLOCKS_ONLY.repo])

    current = _case(cases, CURRENT)
    assert (current["status"], current["model_revision"], current["engine"]) == ("ok", CURRENT.revision, "v1")
    assert current["kv_cache_tokens"] == CURRENT.kv.tokens and current["gpu_blocks"] == CURRENT.kv.num_gpu_blocks
    assert current["block_size"] == CURRENT.kv.block_size
    assert current["gpu_memory_utilization"] == CURRENT.kv.gpu_memory_utilization
    assert current["max_concurrency"] == pytest.approx(CURRENT.kv.tokens / CURRENT.kv.max_model_len)
    assert current["max_concurrency_for_tokens"] == CURRENT.kv.max_model_len
    assert (current["gpu"], current["gpu_memory_nominal"], current["vllm_version"]) == ("H100-80GB", "80GB",
                                                                                      IMAGE_VERSION)
    assert {f.split()[0] for f in current["inferred_fields"]} >= {"gpu", "vllm_version", "max_model_len", "dtype"}
    # what Prometheus cannot show stays null, and the notes say so
    assert all(current[k] is None for k in ("weights_gib", "available_kv_cache_gib", "activation_peak_gib",
                                            "non_torch_gib", "cuda_graph_gib", "gpu_total_memory_gib_printed"))
    assert "weights_gib" in current["notes"]
    # both replicas reported the same start-up: one case naming both
    assert current["source"]["instances"] == [f"{r.instance} engine 0" for r in CURRENT.replicas]
    assert current["source"]["stack"] == STACK and current["source"]["prometheus_url"] == prom.url
    assert f'num_gpu_blocks="{CURRENT.kv.num_gpu_blocks}"' in current["log_quote"][0]
    assert "instance=" not in current["log_quote"][0] and "model_name=" not in current["log_quote"][0]
    assert current["derived"]["predicted_kv_cache_tokens"] == CURRENT.predicted_kv_tokens

    # the served model's config, as tkf-infra sized it, beside the case file
    facts = current["model_facts"]
    config = json.loads((output.parent / facts["config_file"]).read_text())
    assert config == load_lock().get(CURRENT.repo, CURRENT.revision).config  # type: ignore[union-attr]
    assert facts["num_hidden_layers"] == config["num_hidden_layers"]

    blocks = _case(cases, BLOCKS_ONLY)
    assert blocks["kv_cache_tokens"] == BLOCKS_ONLY.kv.tokens and blocks["max_concurrency"] is None
    assert any(f.startswith("kv_cache_tokens = num_gpu_blocks × block_size") for f in blocks["inferred_fields"])

    # the release that exports no blocks is named, not written as a guess
    assert f"model '{NO_BLOCKS.name}': no case written" in text and 'num_gpu_blocks="None"' in text


def test_the_sizing_bench_scores_the_written_cases(prom: PromServer, tmp_path: Path) -> None:
    output = tmp_path / "live" / "cases.json"
    output.parent.mkdir()
    _, code = _calibrate(prom.url, output)
    assert code == ExitCode.OK

    bench = subprocess.run([sys.executable, str(ROOT / "bench/sizing_accuracy.py"), "--cases", str(output)],
                           capture_output=True, text=True, timeout=120, cwd=ROOT)

    assert bench.returncode == 0, bench.stderr
    lines = bench.stdout.splitlines()
    assert not [line for line in lines if "skipped" in line], bench.stdout
    # One summary line per case file (the line the project tracks), then its breakdowns, indented: the
    # written cases are of the running release, so both count among the releases from 0.17 on.
    (summary,) = [line for line in lines if line.startswith("cases=")]
    assert summary.startswith("cases=2 ") and lines[-1].startswith("  releases>=0.17 (known): cases=2 "), bench.stdout
    assert any("tokens " in line and f"/{CURRENT.kv.tokens}" in line for line in lines), bench.stdout


def test_append_replaces_the_same_observation(prom: PromServer, tmp_path: Path) -> None:
    output = tmp_path / "cases.json"
    output.write_text(json.dumps([{"case_id": "from-elsewhere"}]))
    assert _calibrate(prom.url, output, append=True)[1] == ExitCode.OK
    assert _calibrate(prom.url, output, append=True)[1] == ExitCode.OK
    ids = [c["case_id"] for c in json.loads(output.read_text())]
    assert ids[0] == "from-elsewhere" and len(ids) == 3 and len(set(ids)) == 3


def test_prometheus_down_writes_nothing(dead_prometheus_url: str, tmp_path: Path) -> None:
    output = tmp_path / "cases.json"
    text, code = _calibrate(dead_prometheus_url, output)
    assert code == ExitCode.UNAVAILABLE
    assert dead_prometheus_url in text and "could not connect" in text and not output.exists()


def test_missing_output_folder_is_a_usage_error(prom: PromServer, tmp_path: Path) -> None:
    text, code = _calibrate(prom.url, tmp_path / "nowhere" / "cases.json")
    assert code == ExitCode.USAGE and "does not exist" in text
