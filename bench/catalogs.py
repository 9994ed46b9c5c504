"""Generated catalogs for the benchmarks: N CPU models over the dev stack's two locked repos."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]


def dev_stack_config(platform: bool = True) -> dict[str, Any]:
    """The dev stack file; ``platform=False`` marks each platform piece alreadyInstalled (its charts,
    a fixed cost of about 145 resources measured in docs/platform.md, are then not in the preview)."""
    doc: dict[str, Any] = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())
    doc["config"].pop("tkf-infra:layer", None)  # one stack holding both (bench/fleet_stack.py splits it)
    if not platform:
        for piece in doc["config"]["tkf-infra:platform"].values():
            if isinstance(piece, dict):
                piece["alreadyInstalled"] = True
    return doc


def generated_models(n: int) -> list[dict[str, Any]]:
    base = dev_stack_config()["config"]["tkf-infra:models"]
    out = []
    for i in range(n):
        src = base[i % len(base)]
        out.append({**src, "name": f"m{i:04d}-{src['name']}"[:36], "servedName": f"{src['servedName']}-{i:04d}"})
    return out
