"""The objects the components register, as the policy pack sees them, and the committed pack configs.

Why build the committed stacks: the pack's limits must hold for what the program really registers for
dev and prod, on both backends — so the unit tests build those fleets under mocks and feed every
registered object to the guardrails, exactly as the engine does.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from policy.guardrails import BY_NAME, GUARDRAILS, Violation
from policy.guardrails.objects import K8sObject
from tests.mocks import Harness, program
from tkf_infra.config import read_stack_file

ROOT = Path(__file__).resolve().parents[1]
API_KEY = "sk-policy-test-0b7e-not-a-real-key"


def pack_config(stack: str) -> dict[str, dict[str, Any]]:
    """``policy/config/<stack>.json`` as each policy receives it (enforcementLevel is the engine's)."""
    doc: dict[str, dict[str, Any]] = json.loads((ROOT / "policy" / "config" / f"{stack}.json").read_text())
    return {name: {k: v for k, v in cfg.items() if k != "enforcementLevel"} for name, cfg in doc.items()}


def stack_settings(stack: str, backend: str | None = None) -> dict[str, Any]:
    """A committed stack's settings, rendered instead of applied and without a live Prometheus."""
    doc = read_stack_file(ROOT / f"Pulumi.{stack}.yaml")
    doc.pop("layer", None)  # one stack holding both layers (tests/test_layers.py splits one)
    doc["cluster"] = {"mode": "render", "renderDir": f"rendered/{stack}"}
    doc.pop("prometheusUrl", None)
    if backend:
        doc["serving"] = {**doc["serving"], "backend": backend}
    return doc


def build(doc: dict[str, Any], api_key: str | None = API_KEY) -> Harness[Any]:
    """The whole program on the document, under mocks; the committed stacks leave nothing out."""
    h = program(doc, api_key=api_key)
    assert h.error is None, h.error
    return h


def objects(h: Harness[Any]) -> list[K8sObject]:
    """Every custom resource the program registered, with its inputs and ``protect`` option."""
    return [K8sObject(type=r.type, props=r.manifest() if r.type.startswith("kubernetes:") else r.inputs,
                      urn=r.urn, protect=bool(r.options.get("protect")))
            for r in h.resources if r.custom]


@cache
def _stack_objects(stack: str, backend: str) -> tuple[K8sObject, ...]:
    return tuple(objects(build(stack_settings(stack, backend))))


def stack_objects(stack: str, backend: str) -> list[K8sObject]:
    """The committed stack's objects (built once per session; deep copies, so tests may edit them)."""
    return copy.deepcopy(list(_stack_objects(stack, backend)))


def run_guardrail(name: str, objs: list[K8sObject], config: dict[str, Any]) -> list[Violation]:
    g = BY_NAME[name]
    if g.scope == "stack":
        return g.check(objs, config)
    return [v for o in objs for v in g.check(o, config)]


def run_all(objs: list[K8sObject], configs: dict[str, dict[str, Any]]) -> dict[str, list[Violation]]:
    return {g.name: run_guardrail(g.name, objs, configs.get(g.name, {})) for g in GUARDRAILS}


def workload(objs: list[K8sObject], model: str) -> K8sObject:
    found = [o for o in objs if o.is_model_server and o.model == model]
    assert len(found) == 1, [o.ref for o in objs]
    return found[0]


def edited(obj: K8sObject, path: str, value: Any) -> K8sObject:
    """A copy of the object with the dotted ``path`` of its props set (list indexes as numbers)."""
    props = copy.deepcopy(dict(obj.props))
    node: Any = props
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    last = keys[-1]
    if isinstance(node, list):
        node[int(last)] = value
    elif value is None:
        node.pop(last, None)
    else:
        node[last] = value
    return K8sObject(type=obj.type, props=props, urn=obj.urn, protect=obj.protect)


def with_main(obj: K8sObject, change: Callable[[dict[str, Any]], object]) -> K8sObject:
    """A copy of a workload whose (leader) container ``main`` went through ``change``."""
    props = copy.deepcopy(dict(obj.props))
    node: Any = props
    for key in template_path(obj).split("."):
        node = node[key]
    change(next(c for c in node["containers"] if c["name"] == "main"))
    return K8sObject(type=obj.type, props=props, urn=obj.urn, protect=obj.protect)


def template_path(obj: K8sObject) -> str:
    """Dotted path of the (leader) pod spec of a workload, per kind."""
    return {
        "LLMInferenceService": "spec.template",
        "Deployment": "spec.template.spec",
        "LeaderWorkerSet": "spec.leaderWorkerTemplate.leaderTemplate.spec",
    }[obj.kind]
