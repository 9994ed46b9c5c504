"""The plan report's data and page without a browser (the browser test: tests/test_report_browser.py): what holds
each GPU — whole GPUs on the nodes the plan packed each pod onto, MIG instances at their planned positions —
the figures as the outputs publish them, and the command's errors."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

from tests.mocks import stack_doc
from tests.sharing_fixtures import TEN_SMALL, WHOLE_TP2, mig_settings
from tkf_infra.config import validate_catalog
from tkf_infra.hub.lock import load_lock
from tkf_infra.names import PROJECT_ROOT
from tkf_infra.ops.report import offline_plan, report_data
from tkf_infra.ops.report_html import layout_svg, page
from tkf_infra.outputs import endpoints_output
from tkf_infra.plan import plan_fleet


def test_prod_is_four_nodes_of_eight_h100_holding_its_four_models() -> None:
    plan, warnings = offline_plan("prod")
    data = report_data(plan, "prod", warnings)
    (pool,) = data["pools"]
    assert (pool["name"], pool["gpu"], pool["nodeCount"], pool["gpusPerNode"]) == ("h100", "H100-80GB", 4, 8)
    assert [len(n["gpus"]) for n in pool["nodes"]] == [8, 8, 8, 8]
    held = Counter(h["model"] for n in pool["nodes"] for g in n["gpus"] for h in g["holders"])
    assert held == {"llama-3-1-8b": 2, "qwen-2-5-72b": 4, "gpt-oss-120b": 2, "llama-3-1-405b": 16}
    # The multi-node model's two pods on the two nodes the plan packed them onto, eight GPUs each.
    by_node = {n["name"]: Counter(h["model"] for g in n["gpus"] for h in g["holders"]) for n in pool["nodes"]}
    (pods,) = next(m["nodes"] for m in data["models"] if m["name"] == "llama-3-1-405b")
    assert all(by_node[node]["llama-3-1-405b"] == 8 for node in pods)
    endpoints = endpoints_output(plan)
    assert {m["name"]: m["fit"] for m in data["models"]} == {e["name"]: e["fit"] for e in endpoints.values()}
    assert any("nodeResources" in w for w in data["warnings"]), "the page says what was not read live"


def test_a_bar_adds_up_to_the_gpu_and_marks_the_bound() -> None:
    plan, _ = offline_plan("prod")
    for m in report_data(plan, "prod")["models"]:
        bar = m["bar"]
        assert sum(bar["terms"].values()) + bar["headroomGiB"] <= bar["totalGiB"] + 0.05, m["name"]
        assert bar["terms"]["weights"] == m["fit"]["weightsGiB"] and bar["terms"]["kvCache"] == m["fit"]["kvCacheGiB"]
        assert bar["kvBoundGiB"] == m["fit"]["kvCacheGiBBound"] <= bar["terms"]["kvCache"]


def test_mig_instances_are_drawn_where_the_layout_put_them() -> None:
    doc = stack_doc(**mig_settings([*TEN_SMALL, WHOLE_TP2]))
    plan = plan_fleet(validate_catalog(doc), lock=load_lock())
    data = report_data(plan, "mig")
    (pool,) = data["pools"]
    assert pool["kind"] == "mig" and pool["migSlots"] == 8
    drawn = sorted((n["name"], g["index"], h["model"], h["start"], h["size"]) for n in pool["nodes"]
                   for g in n["gpus"] for h in g["holders"] if h["kind"] == "mig")
    layout = plan.layouts[pool["name"]].published()
    planned = sorted((node, g["index"], i["model"], i["start"], i["size"]) for node, spec in layout["nodes"].items()
                     for g in spec["gpus"] for i in g.get("instances", []))
    assert drawn == planned and planned
    svg = layout_svg(data)
    assert svg.count('class="holder mig"') == len(planned) and svg.count('class="holder whole"') == 2
    assert 'class="model' in page(data, svg)


def test_refusals_are_listed_with_their_reasons() -> None:
    doc = stack_doc({"name": "too-big", "repo": "meta-llama/Llama-3.1-405B-Instruct",
                     "revision": "be673f326cab4cd22ccfef76109faf68e41aa5f1", "servedName": "too-big",
                     "nodePool": "h100", "gpusPerNode": 1, "hfTokenSecret": "hf",
                     "maxModelLen": 8192})
    plan = plan_fleet(validate_catalog(doc), lock=load_lock())
    data = report_data(plan, "t")
    (refused,) = data["rejected"]
    assert refused["name"] == "too-big" and refused["stage"] == "fit"
    html = page(data, layout_svg(data))
    assert "data-model='too-big' data-stage='fit'" in html and refused["reasons"][0][:40] in html


def test_the_command_names_an_unknown_stack(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "tkf_infra", "report", "--stack", "nope", "-o",
                          str(tmp_path / "x.html")], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "unknown stack 'nope'" in run.stderr and "prod" in run.stderr
    assert not (tmp_path / "x.html").exists()
