"""The payload floor of `bench/fleet_stack.py`: a bare program that registers the fleet's own objects, as its
state holds them, with no plan, components or checks.

Why: the fleet stack's time over this floor is what the program adds beyond the objects it asks for; over the
ConfigMap floor (`bench/engine_preview.py`) it is what those objects cost the engine. The FitCheck (the dynamic
provider) becomes a ConfigMap of its inputs, so the floor needs no provider of ours.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from bench.engine_preview import Program, bare_program, untimed_up
from tkf_infra.ops.stacks import pulumi_home

#: The payload floor: registers the resources of `tkf-floor:resources` (`dump_resources`) as they are.
PAYLOAD_MAIN = '''
import copy, importlib, json, pulumi, pulumi_kubernetes as k8s
cfg = pulumi.Config()
salt = cfg.get("salt") or ""
with open(cfg.require("resources")) as f:
    resources = json.load(f)
for module in sorted({r["module"] for r in resources if r["module"]}):
    importlib.import_module(module)  # what a typed program registering these kinds imports
prov = k8s.Provider("render", render_yaml_to_directory=cfg.require("renderDir"))

def secrets(v):
    if isinstance(v, dict):
        if len(v) == 1 and "__secret" in v:
            return pulumi.Output.secret(v["__secret"])
        return {k: secrets(x) for k, x in v.items()}
    if isinstance(v, list):
        return [secrets(x) for x in v]
    return v

made = {}
for r in resources:
    inputs = secrets(r["inputs"])
    if r["salted"] and salt:
        inputs = copy.deepcopy(inputs)
        inputs["metadata"].setdefault("annotations", {})["bench.tkf.io/salt"] = salt
    opts = pulumi.ResourceOptions(parent=made.get(r["parent"]), depends_on=[made[d] for d in r["deps"]],
                                  protect=r["protect"], retain_on_delete=r["retainOnDelete"])
    if r["custom"]:
        opts.provider = prov
        made[r["urn"]] = pulumi.CustomResource(r["type"], r["name"], inputs, opts)
    else:
        made[r["urn"]] = pulumi.ComponentResource(r["type"], r["name"], None, opts)
'''

#: The type prefix of the FitCheck (tkf's dynamic provider), and what the payload floor makes of it.
DYNAMIC_TYPE = "pulumi-python:dynamic"
CONFIGMAP_TYPE = "kubernetes:core/v1:ConfigMap"


def _plain(value: Any) -> Any:
    """A state value with `--show-secrets`' secret envelopes as {"__secret": value}."""
    if isinstance(value, dict):
        if "plaintext" in value and len(value) == 2:
            return {"__secret": json.loads(value["plaintext"])}
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def typed_module(rtype: str) -> str | None:
    """The `pulumi_kubernetes` module of a Kubernetes type's typed class (`apiextensions` for custom
    resources), so the payload floor imports what a typed program would; None for other types."""
    if not rtype.startswith("kubernetes:"):
        return None
    group, version = rtype.split(":")[1].split("/")
    package = importlib.util.find_spec("pulumi_kubernetes")
    where = Path(next(iter(package.submodule_search_locations or []))) if package else None
    sub = (group.removesuffix(".k8s.io"), version)
    if where is None or not (where / sub[0] / sub[1] / "__init__.py").exists():
        return "pulumi_kubernetes.apiextensions"
    return "pulumi_kubernetes." + ".".join(sub)


def dump_resources(p: Program, out: Path) -> list[dict[str, Any]]:
    """The fleet's resources as its state holds them (type, name, parent, inputs, dependencies), in state
    order, for the payload floor; the stack and providers are the floor's own."""
    raw = subprocess.run([str(pulumi_home() / "bin" / "pulumi"), "stack", "export", "--show-secrets", "--stack",
                          p.stack.name], cwd=p.stack.workspace.work_dir, env={**os.environ, **p.env}, check=True,
                         capture_output=True).stdout
    state = json.loads(raw)["deployment"]["resources"]
    kept: list[dict[str, Any]] = []
    urns: set[str] = set()
    for r in state:
        rtype = r["type"]
        if rtype == "pulumi:pulumi:Stack" or rtype.startswith("pulumi:providers:"):
            continue
        name = r["urn"].rsplit("::", 1)[1]
        inputs = _plain(r.get("inputs") or {})
        if rtype.startswith(DYNAMIC_TYPE):  # the FitCheck: its inputs, in a ConfigMap
            rtype, inputs = CONFIGMAP_TYPE, {"apiVersion": "v1", "kind": "ConfigMap",
                                             "metadata": {"name": name, "namespace": "bench"},
                                             "data": {"inputs": json.dumps(inputs, sort_keys=True)}}
        kept.append({"urn": r["urn"], "type": rtype, "name": name, "custom": bool(r.get("custom")),
                     "module": typed_module(rtype),
                     "parent": r.get("parent") if r.get("parent") in urns else None,
                     "deps": [d for d in r.get("dependencies") or [] if d in urns],
                     "inputs": inputs, "protect": bool(r.get("protect")),
                     "retainOnDelete": bool(r.get("retainOnDelete")), "salted": rtype == CONFIGMAP_TYPE
                     and r["type"].startswith(DYNAMIC_TYPE)})
        urns.add(r["urn"])
    # The first model's workload: the biggest Kubernetes object under the first component.
    first_component = next(r["urn"] for r in kept if not r["custom"])
    children = [r for r in kept if r["parent"] == first_component and r["custom"]]
    max(children, key=lambda r: len(json.dumps(r["inputs"])))["salted"] = True
    out.write_text(json.dumps(kept))
    return kept


def payload_program(tmp: Path, label: str, fleet: Program) -> Program:
    """The payload floor of `fleet` (module docstring), applied once."""
    dump = tmp / f"{label}-resources.json"
    dump_resources(fleet, dump)
    p = bare_program(tmp, label, PAYLOAD_MAIN, {"resources": str(dump)})
    untimed_up(p.stack)
    return p
