"""`python -m tkf_infra status` and `calibrate` on a real stack: the dev stack deployed through the engine,
its outputs read by the CLI, its first model's vLLM served by a fixture exporter through real Prometheus."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.engine_fixtures import copy_project, dev_config
from tkf_infra.exit_codes import ExitCode

from .conftest import PromServer
from .metrics_fixtures import DEV_MODEL

pytestmark = [pytest.mark.prometheus, pytest.mark.engine]


def test_status_and_calibrate_read_the_deployed_stack(prom: PromServer, engine_ready: None, tmp_path: Path) -> None:
    root = copy_project(tmp_path / "project")
    doc = dev_config()
    doc["config"]["tkf-infra:cluster"]["renderDir"] = str(tmp_path / "rendered")
    doc["config"]["tkf-infra:prometheusUrl"] = prom.url
    (root / "Pulumi.dev.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    (tmp_path / "state").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_CONFIG_PASSPHRASE")}
    env["PULUMI_BACKEND_URL"] = f"file://{tmp_path / 'state'}"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(root / ".venv" / "bin" / "python"), "-m", "tkf_infra", *args], cwd=root, env=env,
                              capture_output=True, text=True, timeout=600)

    assert run("up", "--stack", "dev").returncode == 0
    endpoints = json.loads(run("outputs", "--stack", "dev").stdout)["endpoints"]
    predicted = endpoints[DEV_MODEL.served_name]["fit"]["kvCacheTokens"]
    others = [e["name"] for e in endpoints.values() if e["name"] != DEV_MODEL.name]  # not scraped by the fixture

    status = run("status", "--stack", "dev", "--json")
    assert status.returncode == ExitCode.NO_DATA, status.stderr  # the dev model is within 5 %; the others are absent
    record = next(m for m in json.loads(status.stdout)["models"] if m["name"] == DEV_MODEL.name)
    check = record["kvCacheCheck"]
    assert check["predictedTokens"] == predicted and check["observedTokens"] == DEV_MODEL.kv.tokens
    assert check["deviates"] is False, check

    output = tmp_path / "calibration" / "cases.json"
    output.parent.mkdir()
    calibrate = run("calibrate", "--stack", "dev", "-o", str(output))
    assert calibrate.returncode == ExitCode.OK, calibrate.stderr
    assert all(f"model '{name}': no case written" in " ".join(calibrate.stderr.split()) for name in others)
    (case,) = json.loads(output.read_text())
    assert (case["model"], case["model_revision"]) == (DEV_MODEL.repo, DEV_MODEL.revision)
    assert (case["gpu"], case["vllm_version"], case["kv_cache_tokens"]) == ("CPU", "0.32.0", DEV_MODEL.kv.tokens)
    assert case["max_num_seqs"] == doc["config"]["tkf-infra:modelDefaults"]["maxNumSeqs"]
    assert (output.parent / case["model_facts"]["config_file"]).is_file()

    missing = run("calibrate", "--stack", "dev")
    assert missing.returncode == ExitCode.USAGE and "output" in missing.stderr and "Traceback" not in missing.stderr
