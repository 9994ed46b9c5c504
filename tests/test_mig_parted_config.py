"""The MIG configs tkf-infra emits, validated by NVIDIA mig-parted's own parser (the format mig-manager reads).

tools/mig-parted-check holds mig-parted v0.15.0's config spec and types, copied verbatim with
provenance, behind a small CLI that parses a config exactly as `nvidia-mig-parted assert
--valid-config` does. The fixture builds it with scripts/build_mig_parted_check.sh (instant when
built; scripts/setup.sh --dev builds it too). NVIDIA's own default config is the control that the
validator accepts real configs; a broken one is the control that it can refuse.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.gpu_sharing import mig_parted_document, mig_parted_yaml, node_labels
from tests.sharing_fixtures import NODE, TEN_SMALL, WHOLE_TP2, mig_pool
from tests.test_gpu_sharing import mig_doc
from tkf_infra.config import validate_catalog
from tkf_infra.hub.lock import load_lock
from tkf_infra.plan import plan_fleet
from tkf_infra.plan.layout import ALL_DISABLED

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = ROOT / "tests" / "data" / "mig" / "gpu-operator-v26.7.0-default-config.yaml"


@pytest.fixture(scope="session")
def mig_parted_check() -> Path:
    home = os.environ.get("TKF_TOOLS_HOME") or str(Path.home() / ".cache" / "tkf-infra")
    binary = Path(home) / "bin" / "mig-parted-check"
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "build_mig_parted_check.sh")], capture_output=True,
                          text=True, timeout=900)
    if proc.returncode != 0 or not binary.exists():
        pytest.fail(f"cannot build mig-parted-check (scripts/build_mig_parted_check.sh): {proc.stderr[-2000:]}",
                    pytrace=False)
    return binary


def check(binary: Path, tmp_path: Path, text: str, *configs: str) -> dict[str, Any]:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    proc = subprocess.run([str(binary), str(path), *configs], capture_output=True, text=True, timeout=60)
    result: dict[str, Any] = json.loads(proc.stdout)
    assert (proc.returncode == 0) is result["valid"], proc
    return result


def test_nvidias_default_config_is_valid_and_a_broken_one_is_refused(mig_parted_check: Path, tmp_path: Path) -> None:
    assert check(mig_parted_check, tmp_path, DEFAULT_CONFIG.read_text(), "all-balanced")["valid"]
    broken = {"version": "v1", "mig-configs": {"x": [{"devices": [0], "mig-enabled": False,
                                                      "mig-devices": {"1g.10gb": 1}}]}}
    result = check(mig_parted_check, tmp_path, yaml.safe_dump(broken))
    assert not result["valid"] and "MIG devices included when 'mig-enabled' is false" in result["error"]
    typo = {"version": "v1", "mig-configs": {"x": [{"devices": "all", "mig-enabled": True,
                                                    "mig-devices": {"1g.10gbb": 1}}]}}
    assert "invalid format for '1g.10gbb'" in check(mig_parted_check, tmp_path, yaml.safe_dump(typo))["error"]


def test_the_packed_fleet_config_is_what_mig_parted_parses(mig_parted_check: Path, tmp_path: Path) -> None:
    plan = plan_fleet(validate_catalog(mig_doc([*TEN_SMALL, WHOLE_TP2])), lock=load_lock())
    assert not plan.excluded
    text = mig_parted_yaml(plan.layouts)
    names = node_labels(plan.layouts)
    result = check(mig_parted_check, tmp_path, text, ALL_DISABLED, *names.values())
    assert result["valid"], result
    parsed = result["configs"][names[NODE]]
    per_gpu = {i: (d["migEnabled"], d["migDevices"] or {}) for d in parsed for i in d["devices"]}
    layout = plan.layouts[mig_pool()["name"]]
    assert per_gpu == {c.index: (bool(c.instances), c.geometry()) for c in layout.cards}  # what was planned
    assert mig_parted_document(plan.layouts)["mig-configs"][ALL_DISABLED] == [{"devices": "all", "mig-enabled": False}]


def test_a_two_node_pool_gets_one_valid_config_per_distinct_geometry(mig_parted_check: Path, tmp_path: Path) -> None:
    doc = mig_doc([*TEN_SMALL, *TEN_SMALL[:4]], nodes=["gpu-a", "gpu-b"])
    doc["models"] = [{**m, "name": f"{m['name']}-{i}", "servedName": f"{m['name']}-{i}", "replicas": 3}
                     for i, m in enumerate(doc["models"])]
    plan = plan_fleet(validate_catalog(doc), lock=load_lock())
    names = node_labels(plan.layouts)
    assert set(names) == {"gpu-a", "gpu-b"}
    assert check(mig_parted_check, tmp_path, mig_parted_yaml(plan.layouts), *set(names.values()))["valid"]
