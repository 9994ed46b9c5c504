"""Several models per GPU through the real engine: a prod-like stack packing ten small models (and a
whole-GPU one) on one 8 x H100 node previews to a proven layout, renders valid manifests and a MIG
config mig-parted parses, shows every model's budget in its outputs; an overfull catalog is refused
naming the models and the slices missing, while the rest deploys."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.engine.test_cli import CliProject
from tests.engine_fixtures import copy_project, dev_config
from tests.mig_format import check
from tests.sharing_fixtures import NODE, POOL, QWEN3_8B, TEN_SMALL, WHOLE_TP2, mig_settings
from tkf_infra.names import MIG_CONFIG_KEY, MIG_CONFIG_LABEL, MIG_CONFIG_NAME
from tkf_infra.ops.stacks import DEV_PASSPHRASE

ALL = [*TEN_SMALL, WHOLE_TP2]


def prod_like(render: Path, models: list[dict[str, Any]]) -> dict[str, Any]:
    """The dev stack file turned prod-like: a MIG pool of one 8 x H100 node, GPU images, no CPU models."""
    doc = dev_config()
    cfg = doc["config"]
    cfg["tkf-infra:cluster"]["renderDir"] = str(render)
    settings = mig_settings(models)
    cfg["tkf-infra:nodePools"] = settings["nodePools"]
    cfg["tkf-infra:platform"]["gpuOperator"].update(settings["platform"]["gpuOperator"])
    cfg["tkf-infra:serving"]["allowCpu"] = False
    cfg["tkf-infra:modelDefaults"] = settings["modelDefaults"]
    cfg["tkf-infra:models"] = settings["models"]
    return doc


STACK = "mig"


def project(tmp_path: Path, doc: dict[str, Any]) -> CliProject:
    """A project copy with the stack file and the platform owner's limits for it (prod's, on the MIG pool)."""
    root = copy_project(tmp_path / "project")
    (root / f"Pulumi.{STACK}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    limits = json.loads((root / "policy" / "config" / "prod.json").read_text())
    limits["serving-node-pools"]["pools"] = {POOL: {"nodeSelector": {"tkf.io/pool": POOL}, "maxGpusPerModel": 8}}
    limits["serving-node-pools"]["namespaces"] = {"llm-serving": [POOL]}
    limits["weight-cache-protected"]["requireProtect"] = False
    limits["fleet-budget"].update({"maxModels": 16})
    (root / "policy" / "config" / f"{STACK}.json").write_text(json.dumps(limits))
    (tmp_path / "state").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_CONFIG_PASSPHRASE")}
    # The stack file is the dev one's, whose one secret (a dev API key) is under the dev-only passphrase.
    env.update({"PULUMI_BACKEND_URL": f"file://{tmp_path / 'state'}", "PULUMI_CONFIG_PASSPHRASE": DEV_PASSPHRASE})
    return CliProject(root, Path(doc["config"]["tkf-infra:cluster"]["renderDir"]), env)


@pytest.fixture
def mig_cli(engine_ready: None, tmp_path: Path) -> Iterator[CliProject]:
    yield project(tmp_path, prod_like(tmp_path / "rendered", ALL))


def rendered(render: Path) -> dict[tuple[str, str], dict[str, Any]]:
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(render.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out[(doc["kind"], doc["metadata"]["name"])] = doc
    return out


def test_ten_small_models_on_one_node_preview_render_and_publish_their_budgets(
        mig_cli: CliProject, tmp_path: Path) -> None:
    preview = mig_cli.run("preview", "--stack", STACK, "--json")
    assert preview.returncode == 0, preview.stdout + preview.stderr
    summary = json.loads(preview.stdout)
    assert summary["failedModels"] == [] and summary["errors"] == []
    assert summary.get("policyPack"), "the platform owner's guardrails ran on the MIG pods"
    assert {summary["models"][m["name"]]["status"] for m in ALL} == {"created"}

    up = mig_cli.run("up", "--stack", STACK, "--json")
    assert up.returncode == 0, up.stdout + up.stderr
    objs = rendered(mig_cli.render_dir)
    outs = json.loads(mig_cli.run("outputs", "--stack", STACK).stdout)
    layout = outs["gpuLayout"][POOL]["nodes"][NODE]
    # The MIG config the node is labelled with, as mig-manager will read it (the v1 format's rules).
    cm = objs[("ConfigMap", MIG_CONFIG_NAME)]
    result = check(cm["data"][MIG_CONFIG_KEY], "all-disabled", layout["migConfig"])
    assert result["valid"], result
    slices = {i: d["migDevices"] or {} for d in result["configs"][layout["migConfig"]] for i in d["devices"]}
    assert slices == {g["index"]: g.get("mig", {}) for g in layout["gpus"]}
    node = next(d for (kind, _), d in objs.items() if kind == "Node" and
                d["metadata"].get("labels", {}).get(MIG_CONFIG_LABEL))
    assert node["metadata"]["name"] == NODE and node["metadata"]["labels"][MIG_CONFIG_LABEL] == layout["migConfig"]

    claimed: dict[str, int] = {}
    for m in ALL:
        isvc = objs[("LLMInferenceService", m["name"])]
        main = next(c for c in isvc["spec"]["template"]["containers"] if c["name"] == "main")
        endpoint = outs["endpoints"][m["name"]]
        share = endpoint.get("share")
        if m is WHOLE_TP2:
            assert share is None and main["resources"]["limits"]["nvidia.com/gpu"] == "2"
            continue
        assert main["resources"]["limits"] == {**main["resources"]["limits"], share["resource"]: "1"}
        assert "nvidia.com/gpu" not in main["resources"]["limits"]
        assert share["budgetGiB"] > 0 and endpoint["fit"]["fits"] and endpoint["fit"]["kvCacheTokensBound"] > 0
        for p in share["placement"]:
            claimed[p["profile"]] = claimed.get(p["profile"], 0) + 1
    carved: dict[str, int] = {}
    for g in layout["gpus"]:
        for profile, n in g.get("mig", {}).items():
            carved[profile] = carved.get(profile, 0) + n
    assert carved == claimed  # exactly the slices the pods ask for
    print(json.dumps({m["name"]: outs["endpoints"][m["name"]].get("share", {}).get("share", "whole")
                      for m in ALL}, indent=1))


def test_an_overfull_catalog_is_refused_naming_the_models_and_the_missing_slices(mig_cli: CliProject) -> None:
    big = [{"name": f"big-{i}", **QWEN3_8B, "servedName": f"big-{i}", "maxModelLen": 8192,
            "gpuShare": "mig:7g.80gb", "replicas": 2} for i in range(3)]
    path = mig_cli.root / f"Pulumi.{STACK}.yaml"
    path.write_text(yaml.safe_dump(prod_like(mig_cli.render_dir, [*ALL, *big]), sort_keys=False))
    preview = mig_cli.run("preview", "--stack", STACK, "--json")
    assert preview.returncode == 1, preview.stderr
    summary = json.loads(preview.stdout)
    # The small models are admitted first; of the four asks of 2 whole GPUs' worth each (admitted by
    # name) big-0 and big-1 take what the small models leave, and neither of the other two finds its two GPUs.
    assert summary["failedModels"] == ["big-2", "qwen32-tp2"]
    for name in summary["failedModels"]:
        assert summary["models"][name]["stage"] == "placement"
    big2 = " ".join(summary["models"]["big-2"]["reasons"])
    assert f"model big-2: cannot place 2 x MIG 7g.80gb in node pool {POOL}" in big2
    # How many 7g instances the small models' slices leave free follows their sizes (the fit check's figures);
    # the refusal's arithmetic must hold whatever it is: room for N of the 2 asked, the rest named as missing.
    room = re.search(r"room for (\d+) after", big2)
    assert room is not None and int(room[1]) < 2, big2
    short = 2 - int(room[1])
    assert f"missing {short} x 7g.80gb = {8 * short} memory slice(s)" in big2
    whole = " ".join(summary["models"]["qwen32-tp2"]["reasons"])
    assert "model qwen32-tp2: cannot place 1 replica(s) of 2 whole GPU(s) on one node" in whole
    assert {summary["models"][m["name"]]["status"] for m in TEN_SMALL} == {"created"}
    assert {summary["models"][f"big-{i}"]["status"] for i in (0, 1)} == {"created"}


def test_a_time_sliced_stack_renders_each_budget_on_the_vllm_command_line(engine_ready: None,
                                                                          tmp_path: Path) -> None:
    render = tmp_path / "rendered"
    doc = prod_like(render, [{**m, "gpuShare": "slice:1", "maxNumSeqs": 16} for m in TEN_SMALL[:4]])
    cfg = doc["config"]
    cfg["tkf-infra:nodePools"] = [{"name": POOL, "gpuProduct": "H100-80GB", "gpusPerNode": 8, "nodeCount": 1,
                                   "labels": {"tkf.io/pool": POOL}}]
    cfg["tkf-infra:platform"]["gpuOperator"].update({"migStrategy": "none", "timeSlicingReplicas": 4})
    cfg["tkf-infra:serving"]["backend"] = "vllm"
    sliced = project(tmp_path, doc)
    up = sliced.run("up", "--stack", STACK, "--json")
    assert up.returncode == 0, up.stdout + up.stderr
    outs = json.loads(sliced.run("outputs", "--stack", STACK).stdout)
    objs = rendered(render)
    for m in TEN_SMALL[:4]:
        share = outs["endpoints"][m["name"]]["share"]
        cmd = objs[("Deployment", m["name"])]["spec"]["template"]["spec"]["containers"][0]["command"]
        assert cmd[cmd.index("--gpu-memory-utilization") + 1] == f"{share['gpuMemoryUtilization']:g}"
        assert cmd[cmd.index("--kv-cache-memory-bytes") + 1] == str(share["kvCacheMemoryBytes"])
    assert "any 4 of the 4 pod(s)" in outs["gpuLayout"][POOL]["proof"]
