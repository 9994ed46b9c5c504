"""`python -m tkf_infra` under the real engine: blast radius per model, the gateway's model list,
summaries CI can trust, and one-line errors for bad input."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.engine_fixtures import copy_project, dev_config

DEV_API_KEY = "tkf-dev-api-key"


@dataclass
class CliProject:
    root: Path
    render_dir: Path
    env: dict[str, str]

    def run(self, *args: str, check_json: bool = False) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(self.root / ".venv" / "bin" / "python"), "-m", "tkf_infra", *args],
                              cwd=self.root, env=self.env, capture_output=True, text=True, timeout=600)
        return proc

    def set_models(self, models: list[dict[str, Any]]) -> None:
        path = self.root / "Pulumi.dev.yaml"
        doc = yaml.safe_load(path.read_text())
        doc["config"]["tkf-infra:models"] = models
        path.write_text(yaml.safe_dump(doc, sort_keys=False))


@pytest.fixture
def cli(engine_ready: None, tmp_path: Path) -> Iterator[CliProject]:
    root = copy_project(tmp_path / "project")
    doc = dev_config()
    render = tmp_path / "rendered"
    doc["config"]["tkf-infra:cluster"]["renderDir"] = str(render)
    (root / "Pulumi.dev.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    (tmp_path / "state").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_CONFIG_PASSPHRASE")}
    env["PULUMI_BACKEND_URL"] = f"file://{tmp_path / 'state'}"
    yield CliProject(root, render, env)


def rendered_kinds(render: Path) -> set[tuple[str, str]]:
    out = set()
    for path in render.rglob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out.add((doc["kind"], doc["metadata"]["name"]))
    return out


def test_up_deploys_good_models_and_names_the_one_that_does_not_fit(cli: CliProject) -> None:
    good, bad = dev_config()["config"]["tkf-infra:models"]
    bad = dict(bad, maxModelLen=32768, cpuKvCacheGiB=0.01)
    cli.set_models([good, bad])
    proc = cli.run("up", "--stack", "dev", "--json")
    assert proc.returncode == 1, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["failedModels"] == [bad["name"]]
    assert summary["models"][good["name"]]["status"] == "created"
    reasons = " ".join(summary["models"][bad["name"]]["reasons"])
    assert "needs 0.38 GiB KV cache for maxModelLen 32768 but cpuKvCacheGiB is 0.01" in reasons
    assert summary["preview"]["failedModels"] == [bad["name"]]
    objs = rendered_kinds(cli.render_dir)
    assert ("LLMInferenceService", good["name"]) in objs
    assert ("LLMInferenceService", bad["name"]) not in objs

    # the gateway is never handed a route to the model that was not deployed
    outs = json.loads(cli.run("outputs", "--stack", "dev").stdout)
    assert [m["model_name"] for m in outs["gatewayModelList"]] == [good["servedName"]]
    assert list(outs["endpoints"]) == [good["servedName"]]

    # a second up changes nothing for the good model
    again = cli.run("up", "--stack", "dev", "--json")
    assert again.returncode == 1
    assert json.loads(again.stdout)["models"][good["name"]]["status"] == "unchanged"


def test_gateway_config_is_a_litellm_model_list_without_secrets(cli: CliProject, tmp_path: Path) -> None:
    assert cli.run("up", "--stack", "dev", "--json").returncode == 0
    out = tmp_path / "litellm.yaml"
    proc = cli.run("gateway-config", "--stack", "dev", "--format", "litellm", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert DEV_API_KEY not in text
    doc = yaml.safe_load(text)
    names = [m["model_name"] for m in doc["model_list"]]
    assert names == [m["servedName"] for m in dev_config()["config"]["tkf-infra:models"]]
    for entry in doc["model_list"]:
        params = entry["litellm_params"]
        assert params["api_base"].endswith(".svc.cluster.local:8000/v1")
        assert params["api_key"] == "os.environ/TKF_VLLM_API_KEY"
        assert params["model"] == f"openai/{entry['model_name']}"
        assert entry["model_info"]["input_cost_per_token"] >= 0
    as_json = json.loads(cli.run("gateway-config", "--stack", "dev", "--format", "json").stdout)
    assert as_json == doc


def test_preview_json_summary_matches_what_happened(cli: CliProject) -> None:
    proc = cli.run("preview", "--stack", "dev", "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert set(summary) >= {"stack", "operation", "ok", "models", "counts", "failedModels", "errors"}
    assert summary["ok"] is True and summary["failedModels"] == []
    assert {m: s["status"] for m, s in summary["models"].items()} == {"qwen-0-5b": "created",
                                                                      "qwen-coder-0-5b": "created"}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["preview", "--stack", "staging"], "unknown stack 'staging': there is no Pulumi.staging.yaml"),
        (["gateway-config", "--format", "xml"], "'xml' is not one of 'litellm', 'json'"),
        (["outputs", "--stack", "prod"], "passphrase secrets provider: set PULUMI_CONFIG_PASSPHRASE"),
        (["refresh", "--stack", "dev"], "there is no cluster to compare against"),
    ],
)
def test_bad_input_gets_one_line_and_exit_2(cli: CliProject, args: list[str], expected: str) -> None:
    if args[0] == "outputs":  # make prod look like a passphrase stack, as it would be once its key is set
        path = cli.root / "Pulumi.prod.yaml"
        path.write_text((Path(__file__).resolve().parents[2] / "Pulumi.prod.yaml").read_text()
                        + "encryptionsalt: v1:abc=:v1:def:ghi==\n")
    if args[0] == "refresh":
        assert cli.run("up", "--stack", "dev").returncode == 0
    proc = cli.run(*args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert expected in " ".join(proc.stderr.split())
