"""The MIG configs tkf-infra emits, checked against the mig-parted v1 format mig-manager reads.

tests/mig_format.py holds the format's documented rules; NVIDIA's own default config (from the GPU
Operator v26.7.0 chart, tests/data/mig) is the control that they accept real configs, and broken
configs are the control that they refuse.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from components.gpu_sharing import mig_parted_document, mig_parted_yaml, node_labels
from tests.mig_format import check
from tests.sharing_fixtures import NODE, TEN_SMALL, WHOLE_TP2, mig_pool
from tests.test_gpu_sharing import mig_doc
from tkf_infra.config import validate_catalog
from tkf_infra.hub.lock import load_lock
from tkf_infra.plan import plan_fleet
from tkf_infra.plan.pool_layout import ALL_DISABLED

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = ROOT / "tests" / "data" / "mig" / "gpu-operator-v26.7.0-default-config.yaml"


def test_nvidias_default_config_is_valid_and_a_broken_one_is_refused() -> None:
    assert check(DEFAULT_CONFIG.read_text(), "all-balanced")["valid"]
    broken = {"version": "v1", "mig-configs": {"x": [{"devices": [0], "mig-enabled": False,
                                                      "mig-devices": {"1g.10gb": 1}}]}}
    result = check(yaml.safe_dump(broken))
    assert not result["valid"] and "mig-devices given while mig-enabled is false" in result["error"]
    typo = {"version": "v1", "mig-configs": {"x": [{"devices": "all", "mig-enabled": True,
                                                    "mig-devices": {"1g.10gbb": 1}}]}}
    assert "'1g.10gbb' is not a MIG profile name" in check(yaml.safe_dump(typo))["error"]
    twice = {"version": "v1", "mig-configs": {"x": [{"devices": [0], "mig-enabled": False},
                                                    {"devices": [0, 1], "mig-enabled": False}]}}
    assert "GPU(s) [0] configured twice" in check(yaml.safe_dump(twice))["error"]


def test_the_packed_fleet_config_is_valid_and_says_what_was_planned() -> None:
    plan = plan_fleet(validate_catalog(mig_doc([*TEN_SMALL, WHOLE_TP2])), lock=load_lock())
    assert not plan.excluded
    text = mig_parted_yaml(plan.layouts)
    names = node_labels(plan.layouts)
    result = check(text, ALL_DISABLED, *names.values())
    assert result["valid"], result
    parsed = result["configs"][names[NODE]]
    per_gpu = {i: (d["migEnabled"], d["migDevices"] or {}) for d in parsed for i in d["devices"]}
    layout = plan.layouts[mig_pool()["name"]]
    assert per_gpu == {c.index: (bool(c.instances), c.geometry()) for c in layout.cards}  # what was planned
    assert mig_parted_document(plan.layouts)["mig-configs"][ALL_DISABLED] == [{"devices": "all", "mig-enabled": False}]


def test_a_two_node_pool_gets_one_valid_config_per_distinct_geometry() -> None:
    doc = mig_doc([*TEN_SMALL, *TEN_SMALL[:4]], nodes=["gpu-a", "gpu-b"])
    doc["models"] = [{**m, "name": f"{m['name']}-{i}", "servedName": f"{m['name']}-{i}", "replicas": 3}
                     for i, m in enumerate(doc["models"])]
    plan = plan_fleet(validate_catalog(doc), lock=load_lock())
    names = node_labels(plan.layouts)
    assert set(names) == {"gpu-a", "gpu-b"}
    assert check(mig_parted_yaml(plan.layouts), *set(names.values()))["valid"]
