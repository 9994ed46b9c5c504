"""The committed stacks pass their own policy packs, on both backends, and the pack counts GPUs and
reads placement the same way whichever backend rendered the pods."""

from __future__ import annotations

import json

import jsonschema
import pytest

from policy.guardrails import GUARDRAILS
from policy.guardrails.objects import model_gpus, node_selector, pod_groups
from tests.policy_helpers import ROOT, pack_config, run_all, stack_objects, stack_settings
from tkf_infra.config import validate_catalog

STACKS = [(stack, backend) for stack in ("dev", "prod") for backend in ("kserve", "vllm")]


@pytest.mark.parametrize(("stack", "backend"), STACKS)
def test_committed_stack_passes_its_pack(stack: str, backend: str) -> None:
    objs = stack_objects(stack, backend)
    catalog = validate_catalog(stack_settings(stack, backend))
    servers = {o.model for o in objs if o.is_model_server}
    assert servers == {m.name for m in catalog.models}, "every catalog entry is a workload the pack inspects"
    found = {name: [v.message for v in vs] for name, vs in run_all(objs, pack_config(stack)).items() if vs}
    assert found == {}


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_gpus_and_placement_read_the_same_on_both_backends(stack: str) -> None:
    catalog = validate_catalog(stack_settings(stack))
    seen: dict[str, dict[str, tuple[int, list[dict[str, str]]]]] = {}
    for backend in ("kserve", "vllm"):
        seen[backend] = {o.model or "": (model_gpus(o), [node_selector(g.spec) for g in pod_groups(o)])
                         for o in stack_objects(stack, backend) if o.is_model_server}
    for entry in catalog.models:
        expected = entry.replicas * entry.node_count * entry.gpus_per_node
        assert seen["kserve"][entry.name][0] == seen["vllm"][entry.name][0] == expected, entry.name
        assert seen["kserve"][entry.name][1] == seen["vllm"][entry.name][1], entry.name


def test_prod_budget_and_ceilings_are_what_the_committed_catalog_uses() -> None:
    """The owner's prod limits are tight enough to mean something: the catalog sits at the 405B ceiling."""
    gpus = {o.model: model_gpus(o) for o in stack_objects("prod", "kserve") if o.is_model_server}
    assert gpus == {"llama-3-1-8b": 2, "qwen-2-5-72b": 4, "gpt-oss-120b": 2, "llama-3-1-405b": 16}
    cfg = pack_config("prod")
    assert cfg["model-gpu-ceiling"]["maxGpus"]["llama-3-1-405b"] == gpus["llama-3-1-405b"]
    assert sum(gpus.values()) <= cfg["fleet-budget"]["maxGpus"]


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_committed_config_is_valid_for_the_engine(stack: str) -> None:
    """What the engine checks before running the pack (pkg/resource/analyzer/config.go): every policy's
    properties against its schema, enforcement levels among the engine's, no unknown policy."""
    doc = json.loads((ROOT / "policy" / "config" / f"{stack}.json").read_text())
    assert set(doc) == {g.name for g in GUARDRAILS}, "every policy has its level set per stack, and no stray key"
    for g in GUARDRAILS:
        cfg = dict(doc[g.name])
        assert cfg.pop("enforcementLevel") in {"advisory", "mandatory", "disabled"}
        schema = {"type": "object", "properties": g.config_schema, "required": list(g.required)}
        jsonschema.validate(cfg, schema)


def test_a_config_missing_a_required_limit_is_refused_by_its_schema() -> None:
    g = next(g for g in GUARDRAILS if g.name == "serving-node-pools")
    with pytest.raises(jsonschema.ValidationError, match="'namespaces' is a required property"):
        jsonschema.validate({"pools": {}}, {"type": "object", "properties": g.config_schema,
                                            "required": list(g.required)})
