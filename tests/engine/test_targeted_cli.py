"""`python -m tkf_infra preview|up --models` under the real engine (tkf_infra/targeted.py): the engine steps the named
models' objects and the shared ones, the rendered manifests and the outputs end where a full run would (a full
preview after each targeted `up` has nothing to do), and the two refusals: an unknown name (usage, exit 2) and a
model left out of `--models` that changed (exit 1, nothing changed).

The API-server tier compares a sequence of targeted edits with full runs object by object
(tests/kube/platform/test_targeted_on_apiserver.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.engine_fixtures import cli_project, dev_config, rendered_manifests, set_dev_models

pytestmark = pytest.mark.engine

MODELS: list[dict[str, Any]] = dev_config()["config"]["tkf-infra:models"]
A, B = MODELS[0]["name"], MODELS[1]["name"]
C = {**MODELS[1], "name": "coder-copy", "servedName": "coder-copy"}


class Project:
    def __init__(self, root: Path, render: Path, env: dict[str, str]) -> None:
        self.root, self.render, self.env = root, render, env

    def run(self, *args: str) -> tuple[int, dict[str, Any], str]:
        proc = subprocess.run([str(self.root / ".venv" / "bin" / "python"), "-m", "tkf_infra", *args, "--stack", "dev",
                               "--json"], cwd=self.root, env=self.env, capture_output=True, text=True, timeout=600)
        try:
            summary = json.loads(proc.stdout)
        except json.JSONDecodeError:
            summary = {}
        return proc.returncode, summary, proc.stderr

    def edit(self, models: list[dict[str, Any]]) -> None:
        set_dev_models(self.root, models)

    def manifests(self) -> dict[tuple[str, str], Any]:
        return rendered_manifests(self.render)


@pytest.fixture
def project(engine_ready: None, tmp_path: Path) -> Project:
    root, render, env = cli_project(tmp_path)
    return Project(root, render, env)


def changed(summary: dict[str, Any]) -> dict[str, int]:
    return {k: v for k, v in summary["changeSummary"].items() if k != "same"}


def test_targeted_edits_end_where_full_runs_would_and_refuse_what_they_would_leave_stale(project: Project) -> None:
    code, _, err = project.run("up")
    assert code == 0, err

    # 1. One model edited, one added: only their objects (and the shared ones) are stepped.
    project.edit([{**MODELS[0], "maxNumSeqs": 4}, MODELS[1], C])
    code, up, err = project.run("up", "--models", f"{A},{C['name']}")
    assert code == 0, err + json.dumps(up)
    assert up["models"][A]["status"] == "updated", json.dumps(up, indent=1)
    # C's component, workload, Service and NetworkPolicy; its weights are B's, so their cache becomes shared and
    # B is reported with it: its claim keeps its access mode (never replaced: tkf_infra/plan/cache_modes.py), and
    # the claim's `tkf.io/models` annotation and the component's `models` output name C too; none of B's own
    assert up["models"][C["name"]]["changes"].get("create", 0) >= 4, json.dumps(up, indent=1)
    b_changes = {k: v for k, v in up["models"][B]["changes"].items() if k != "same"}
    assert set(b_changes) <= {"update"} and b_changes.get("update", 0) <= 2, b_changes
    assert "--max-num-seqs" in json.dumps(project.manifests()[("LLMInferenceService", A)])
    code, full, err = project.run("preview")
    assert code == 0 and changed(full) == {}, (err, full["changeSummary"])
    outs = json.loads(subprocess.run([str(project.root / ".venv" / "bin" / "python"), "-m", "tkf_infra", "outputs",
                                      "--stack", "dev"], cwd=project.root, env=project.env, capture_output=True,
                                     text=True, check=True).stdout)
    assert sorted(outs["deployed"]) == sorted([A, B, C["name"]])
    assert sorted(m["model_name"] for m in outs["gatewayModelList"]) == sorted(
        m["servedName"] for m in (*MODELS, C))

    # 2. A model removed by a targeted run: its objects go, the others stay.
    edited_a = {**MODELS[0], "maxNumSeqs": 4}
    project.edit([edited_a, MODELS[1]])
    code, up, err = project.run("up", "--models", C["name"])
    assert code == 0, err + json.dumps(up, indent=1)
    assert up["models"][C["name"]]["status"] == "deleted", up["models"]
    assert ("LLMInferenceService", C["name"]) not in project.manifests()
    code, full, err = project.run("preview")
    assert code == 0 and changed(full) == {}, (err, full["changeSummary"])

    # 3. An unknown name is a usage error naming it and the names there are.
    code, _, err = project.run("preview", "--models", "nope")
    assert code == 2 and "no model named 'nope'" in err and A in err and B in err, err

    # 4. Another model changed: a targeted run would leave it as it was, so it stops before registering anything.
    project.edit([edited_a, {**MODELS[1], "maxNumSeqs": 2}])
    code, up, err = project.run("up", "--models", A)
    text = err + json.dumps(up)
    assert code == 1 and f"model {B} changed since the last run (maxNumSeqs)" in text, text
    assert f"--models {','.join(sorted([A, B]))}" in text
    assert "--max-num-seqs\", \"2" not in json.dumps(project.manifests()[("LLMInferenceService", B)])
