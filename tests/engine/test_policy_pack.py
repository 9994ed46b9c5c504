"""The guardrails through the real engine: `python -m tkf_infra` runs the pack on preview and up.

- dev with a catalog entry on a pool dev does not allow, with more GPUs than dev's ceiling: refused at
  preview by the pack, the model and the policies named; `up` deploys its siblings and leaves it out;
- an advisory violation warns in the summary and the models deploy;
- the committed dev and prod stacks pass their packs (prod in a project copy with a throwaway
  passphrase and API key, rendered instead of applied, its platform declared installed: the charts
  cannot be fetched here; its catalog, pools and serving settings as committed).
"""

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

ROOT = Path(__file__).resolve().parents[2]
H100_POOL = {"name": "h100", "kind": "existing", "gpuProduct": "H100-80GB", "gpusPerNode": 8, "nodeCount": 1,
             "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}
# The dev model's weights, asked for on two H100s: dev's owner allows only the CPU pool and no GPUs.
GPU_ENTRY = {**dev_config()["config"]["tkf-infra:models"][0], "name": "qwen-gpu", "servedName": "qwen-gpu",
             "nodePool": "h100", "gpusPerNode": 2, "tensorParallelSize": 2}


@dataclass
class Project:
    root: Path
    render_dir: Path
    env: dict[str, str]

    def cli(self, *args: str) -> tuple[int, dict[str, Any], str]:
        proc = subprocess.run([str(self.root / ".venv" / "bin" / "python"), "-m", "tkf_infra", *args, "--json"],
                              cwd=self.root, env=self.env, capture_output=True, text=True, timeout=900)
        try:
            return proc.returncode, json.loads(proc.stdout), proc.stderr
        except json.JSONDecodeError:
            raise AssertionError(f"exit {proc.returncode}, no JSON summary:\n{proc.stdout}\n{proc.stderr}") from None

    def edit_stack(self, stack: str, change: Any) -> None:
        path = self.root / f"Pulumi.{stack}.yaml"
        doc = yaml.safe_load(path.read_text())
        change(doc["config"])
        path.write_text(yaml.safe_dump(doc, sort_keys=False))

    def edit_pack_config(self, stack: str, change: Any) -> None:
        path = self.root / "policy" / "config" / f"{stack}.json"
        doc = json.loads(path.read_text())
        change(doc)
        path.write_text(json.dumps(doc))

    def rendered(self) -> set[tuple[str, str]]:
        out = set()
        for path in self.render_dir.rglob("*.yaml"):
            for doc in yaml.safe_load_all(path.read_text()):
                if doc:
                    out.add((doc["kind"], doc["metadata"]["name"]))
        return out


@pytest.fixture
def project(engine_ready: None, tmp_path: Path) -> Iterator[Project]:
    root = copy_project(tmp_path / "project")
    if not (root / "policy" / ".venv").exists():
        pytest.fail("the policy pack's virtualenv policy/.venv is missing: run scripts/setup.sh")
    render = tmp_path / "rendered"
    doc = dev_config()
    doc["config"]["tkf-infra:cluster"]["renderDir"] = str(render)
    (root / "Pulumi.dev.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    (tmp_path / "state").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_CONFIG_PASSPHRASE")}
    env["PULUMI_BACKEND_URL"] = f"file://{tmp_path / 'state'}"
    yield Project(root, render, env)


def add_gpu_entry(cfg: dict[str, Any]) -> None:
    cfg["tkf-infra:nodePools"].append(H100_POOL)
    cfg["tkf-infra:models"].append(GPU_ENTRY)


def test_dev_refuses_a_disallowed_pool_and_gpu_count_and_deploys_the_siblings(project: Project) -> None:
    project.edit_stack("dev", add_gpu_entry)
    siblings = [m["name"] for m in dev_config()["config"]["tkf-infra:models"]]

    code, preview, _ = project.cli("preview", "--stack", "dev")
    assert code == 1
    assert preview["failedModels"] == ["qwen-gpu"]
    bad = preview["models"]["qwen-gpu"]
    assert bad["status"] == "failed"
    by_policy = {v["policy"]: v["message"] for v in bad["policy"]}
    assert set(by_policy) == {"serving-node-pools", "model-gpu-ceiling"}
    assert by_policy["serving-node-pools"].startswith("model qwen-gpu: LLMInferenceService llm-serving/qwen-gpu")
    # dev's owner defines only the cpu pool: the H100 nodes the entry asks for are not dev's to use
    assert "nodeSelector {nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3} selects no node pool the platform owner " \
        "defined (pools: cpu {kubernetes.io/os=linux}). Fix: set the entry's nodePool to one of cpu" \
        in by_policy["serving-node-pools"]
    assert "takes 2 GPUs (replicas x GPUs per replica); the default ceiling (defaultMaxGpus) is 0" \
        in by_policy["model-gpu-ceiling"]
    assert any(r.startswith("policy serving-node-pools (mandatory): model qwen-gpu:") for r in bad["reasons"])
    assert all(preview["models"][m]["status"] == "created" for m in siblings)

    code, up, _ = project.cli("up", "--stack", "dev")
    assert code == 1
    assert up["failedModels"] == ["qwen-gpu"]
    assert up["models"]["qwen-gpu"]["stage"] == "policy"
    assert all(up["models"][m]["status"] == "created" for m in siblings)
    objs = project.rendered()
    for m in siblings:
        assert ("LLMInferenceService", m) in objs
    assert not {o for o in objs if o[1].startswith("qwen-gpu")}, "nothing of the refused model is deployed"
    # the gateway is never handed a route to the refused model: the program was told and left it out
    proc = subprocess.run([str(project.root / ".venv" / "bin" / "python"), "-m", "tkf_infra", "outputs", "--stack",
                           "dev"], cwd=project.root, env=project.env, capture_output=True, text=True, timeout=300)
    outs = json.loads(proc.stdout)
    assert sorted(m["model_info"]["id"] for m in outs["gatewayModelList"]) == sorted(siblings)
    assert [(r["name"], r["stage"]) for r in outs["rejected"]] == [("qwen-gpu", "policy")]


def test_an_advisory_violation_warns_and_the_models_deploy(project: Project) -> None:
    def pin_newer_vllm(cfg: dict[str, Any]) -> None:
        cfg["approved-images"].update(enforcementLevel="advisory", vllmVersion="v0.12.0")

    project.edit_pack_config("dev", pin_newer_vllm)
    code, up, _ = project.cli("up", "--stack", "dev")
    assert code == 0, up
    assert up["failedModels"] == []
    for m in dev_config()["config"]["tkf-infra:models"]:
        model = up["models"][m["name"]]
        assert model["status"] == "created"
        assert any("approved-images (advisory)" in w and "pinned to vLLM 'v0.12.0'" in w for w in model["warnings"])
        assert ("LLMInferenceService", m["name"]) in project.rendered()


def test_committed_dev_stack_passes_its_pack(project: Project) -> None:
    code, preview, _ = project.cli("preview", "--stack", "dev")
    assert code == 0, preview
    assert preview["policyPack"] == {"name": "tkf-guardrails", "config": "policy/config/dev.json"}
    assert not any("policy" in m for m in preview["models"].values())
    assert "policyWarnings" not in preview


def test_committed_prod_stack_passes_its_pack(project: Project, tmp_path: Path) -> None:
    def runnable_here(cfg: dict[str, Any]) -> None:
        cfg["tkf-infra:cluster"] = {"mode": "render", "renderDir": str(tmp_path / "rendered-prod")}
        cfg.pop("tkf-infra:prometheusUrl", None)
        for piece in cfg["tkf-infra:platform"].values():
            piece["alreadyInstalled"] = True

    (project.root / "Pulumi.prod.yaml").write_text((ROOT / "Pulumi.prod.yaml").read_text())
    project.edit_stack("prod", runnable_here)
    project.env["PULUMI_CONFIG_PASSPHRASE"] = "throwaway-prod-test-passphrase"
    pulumi = ["pulumi", "--non-interactive"]
    for args in (["stack", "init", "prod"], ["config", "set", "--secret", "apiKey", "sk-throwaway", "--stack", "prod"]):
        subprocess.run(pulumi + args, cwd=project.root, env={**project.env, "PATH": _path()}, check=True,
                       capture_output=True)
    code, preview, stderr = project.cli("preview", "--stack", "prod")
    assert code == 0, (preview, stderr[-2000:])
    assert preview["policyPack"] == {"name": "tkf-guardrails", "config": "policy/config/prod.json"}
    committed = yaml.safe_load((ROOT / "Pulumi.prod.yaml").read_text())["config"]["tkf-infra:models"]
    assert {m: s["status"] for m, s in preview["models"].items()} == {m["name"]: "created" for m in committed}
    assert not any("policy" in m for m in preview["models"].values())


def _path() -> str:
    from tkf_infra.ops.stacks import pulumi_home

    return f"{pulumi_home() / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"


PACK_PROBE = """
import json, sys
from pulumi_policy import PolicyCustomTimeouts, PolicyResourceOptions, ResourceValidationArgs
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, unknown_checking_proxy
from policy.pack import policies

served = {p.name: p for p in policies()}
props = json.loads(sys.argv[1])
props["metadata"]["annotations"]["tkf.io/fit-weights-gib"] = UNKNOWN_STRING_VALUE  # as in a preview
opts = PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [], None)
args = ResourceValidationArgs(sys.argv[2], unknown_checking_proxy(props), "urn:x", "x", opts, None,
                              {"defaultMaxGpus": 0})
found = []
served["model-gpu-ceiling"].validate(args, lambda message, urn=None: found.append(message))
print(json.dumps({"names": sorted(served), "found": found}))
"""


def test_pack_process_serves_every_guardrail_and_judges_through_preview_unknowns() -> None:
    """The pack's own virtualenv imports the guardrails and pulumi-policy's proxies hand them plain data:
    a value unknown during preview (the fit annotations) does not stop a check that does not need it."""
    from policy.guardrails import GUARDRAILS
    from tests.policy_helpers import stack_objects, workload

    w = workload(stack_objects("prod", "vllm"), "qwen-2-5-72b")
    python = ROOT / "policy" / ".venv" / "bin" / "python"
    proc = subprocess.run([str(python), "-c", PACK_PROBE, json.dumps(w.props), w.type], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=True)
    out = json.loads(proc.stdout)
    assert out["names"] == sorted(g.name for g in GUARDRAILS)
    assert len(out["found"]) == 1
    assert out["found"][0].startswith("model qwen-2-5-72b: Deployment llm-serving/qwen-2-5-72b: takes 4 GPUs")
