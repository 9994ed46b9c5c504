"""`python -m tkf_infra` under the real engine: blast radius per model, the gateway's model list,
summaries CI can trust, and one-line errors for bad input."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.engine_fixtures import cli_project, dev_config, set_dev_models
from tkf_infra.ops.stacks import engine_env

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
        set_dev_models(self.root, models)


@pytest.fixture
def cli(engine_ready: None, tmp_path: Path) -> Iterator[CliProject]:
    root, render, env = cli_project(tmp_path)
    yield CliProject(root, render, env)


def rendered_kinds(render: Path) -> set[tuple[str, str]]:
    out = set()
    for path in render.rglob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out.add((doc["kind"], doc["metadata"]["name"]))
    return out


GATED = {"name": "gated", "repo": "meta-llama/Llama-3.1-8B-Instruct",
         "revision": "0e9e39f249a16976918f6564b8830bc894c89659", "servedName": "gated"}


def refused_catalog() -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Two healthy dev models and three refused ones (two by the fit check, one gated): name → stage."""
    good, other = dev_config()["config"]["tkf-infra:models"]
    too_long = dict(other, name="too-long", servedName="too-long", maxModelLen=1_000_000)
    no_kv = {"name": "no-kv", "repo": "Qwen/Qwen3-8B", "revision": "b968826d9c46dd6066d109eabc6255188de91218",
             "servedName": "no-kv", "maxModelLen": 32768}
    return [good, too_long, other, no_kv, GATED], {"too-long": "fit", "no-kv": "fit", "gated": "access"}


def test_k_refused_models_are_all_named_and_every_healthy_one_deploys(cli: CliProject) -> None:
    models, refused = refused_catalog()
    healthy = [m["name"] for m in models if m["name"] not in refused]
    cli.set_models(models)

    preview = cli.run("preview", "--stack", "dev", "--json")
    assert preview.returncode == 1, preview.stderr
    summary = json.loads(preview.stdout)
    assert summary["failedModels"] == sorted(refused)
    assert {n: summary["models"][n]["stage"] for n in refused} == refused
    assert {n: summary["models"][n]["status"] for n in healthy} == dict.fromkeys(healthy, "created")
    reasons = {n: " ".join(summary["models"][n]["reasons"]) for n in refused}
    assert "longer than the model's 32768 positions" in reasons["too-long"]
    assert "KV cache for maxModelLen 32768 but cpuKvCacheGiB is 2; raise cpuKvCacheGiB to" in reasons["no-kv"]
    assert "hfTokenSecret" in reasons["gated"]
    assert summary["errors"] == [], "what the program logged per model is not repeated as stack errors"

    up = cli.run("up", "--stack", "dev", "--json")
    assert up.returncode == 1, up.stderr
    summary = json.loads(up.stdout)
    assert summary["failedModels"] == sorted(refused)
    assert {n: summary["models"][n]["status"] for n in healthy} == dict.fromkeys(healthy, "created")
    objs = rendered_kinds(cli.render_dir)
    assert {name for kind, name in objs if kind == "LLMInferenceService"} == set(healthy)

    # the gateway is never handed a route to a model that was not deployed
    outs = json.loads(cli.run("outputs", "--stack", "dev").stdout)
    assert sorted(m["model_info"]["id"] for m in outs["gatewayModelList"]) == sorted(healthy)
    assert {r["name"]: r["stage"] for r in outs["rejected"]} == refused

    # a second up changes nothing for the healthy models and still names the refused ones
    again = json.loads(cli.run("up", "--stack", "dev", "--json").stdout)
    assert {n: again["models"][n]["status"] for n in healthy} == dict.fromkeys(healthy, "unchanged")
    assert again["failedModels"] == sorted(refused)


def test_plain_pulumi_up_deploys_the_healthy_models_and_names_every_refused_one(cli: CliProject) -> None:
    models, refused = refused_catalog()
    cli.set_models(models)
    env = {**cli.env, **engine_env("dev", cli.root, backend_url=cli.env["PULUMI_BACKEND_URL"])}

    def pulumi(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["pulumi", *args, "--non-interactive", "--stack", "dev"], cwd=cli.root, env=env,
                              capture_output=True, text=True, timeout=600, check=False)

    subprocess.run(["pulumi", "stack", "init", "dev", "--non-interactive"], cwd=cli.root, env=env, check=True,
                   capture_output=True)
    preview = pulumi("preview")
    for name, stage in refused.items():
        assert f"{name} was left out of this deployment ({stage})" in preview.stdout + preview.stderr
    proc = pulumi("up", "--yes")
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text
    for name, stage in refused.items():
        assert f"{name} was left out of this deployment ({stage})" in text
    assert "3 catalog entries were refused (too-long, no-kv, gated); the other 2 were deployed" in text
    healthy = {m["name"] for m in models if m["name"] not in refused}
    assert {name for kind, name in rendered_kinds(cli.render_dir) if kind == "LLMInferenceService"} == healthy


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


def test_a_refused_edit_of_a_deployed_model_keeps_it_serving_as_it_was(cli: CliProject) -> None:
    models = dev_config()["config"]["tkf-infra:models"]
    assert cli.run("up", "--stack", "dev").returncode == 0
    before = {p.name: p.read_text() for p in cli.render_dir.rglob("*.yaml")}
    edited = [dict(models[0], maxModelLen=1_000_000), models[1]]  # a typo: far past the model's positions
    cli.set_models(edited)
    proc = cli.run("up", "--stack", "dev", "--json")
    assert proc.returncode == 1, proc.stderr
    summary = json.loads(proc.stdout)
    first = summary["models"][models[0]["name"]]
    assert first["status"] == "rejected" and first["stage"] == "fit" and first["kept"] is True
    assert summary["models"][models[1]["name"]]["status"] == "unchanged"
    after = {p.name: p.read_text() for p in cli.render_dir.rglob("*.yaml")}
    assert after == before, "nothing of the running model changed"
    outs = json.loads(cli.run("outputs", "--stack", "dev").stdout)
    assert models[0]["servedName"] in outs["endpoints"], "the gateway keeps its route to the running model"
    assert outs["endpoints"][models[0]["servedName"]]["maxContext"] == models[0].get("maxModelLen", 4096)
    assert [(r["name"], r["kept"]) for r in outs["rejected"]] == [(models[0]["name"], True)]
