"""The whole program (the steps of __main__.py) under Pulumi mocks, fed the committed dev and prod
stack files: the expected components and resources, with the right parents; bad entries left out
and reported; the run failing at the end, after the healthy models were registered."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from components.fleet import Fleet
from tests.mocks import Harness, run
from tkf_infra.program import run as run_program

ROOT = Path(__file__).resolve().parents[1]
SHA = "b968826d9c46dd6066d109eabc6255188de91218"
API_KEY = "unit-test-api-key"


def stack_config(stack: str) -> dict[str, Any]:
    cfg: dict[str, Any] = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())["config"]
    cfg.pop("tkf-infra:apiKey", None)
    cfg.pop("tkf-infra:layer", None)  # one stack holding both layers (tests/test_layers.py splits it)
    return cfg


@pytest.fixture
def config() -> Iterator[dict[str, Any]]:
    """Stack config as the engine passes it: every value JSON-encoded; the API key secret."""
    values: dict[str, Any] = {}
    yield values
    pulumi.runtime.set_all_config({}, [])


def program(cfg: dict[str, Any], config: dict[str, Any], *, expect_error: bool = True) -> Harness[Fleet]:
    """`tkf_infra.program.run` exactly as __main__.py calls it, reading the engine's config."""
    encoded = {k: v if isinstance(v, str) else json.dumps(v) for k, v in cfg.items()}
    encoded["tkf-infra:apiKey"] = API_KEY
    pulumi.runtime.set_all_config(encoded, ["tkf-infra:apiKey"])
    config.update(encoded)
    return run(run_program, stack="unit", expect_error=expect_error)


def by_type(h: Harness[Any]) -> Counter[str]:
    return Counter(r.type for r in h.resources)


def test_dev_stack_registers_two_cpu_models_and_no_platform(config: dict[str, Any]) -> None:
    h = program(stack_config("dev"), config)
    types = by_type(h)
    assert types["tkf:serving:ModelServing"] == 2
    assert types["kubernetes:serving.kserve.io/v1alpha2:LLMInferenceService"] == 2
    # dev renders its platform from the vendored charts (render mode: two pieces through their stand-ins)
    charts = {r.inputs["name"]: r.inputs["chart"] for r in h.resources if r.type == "kubernetes:helm.sh/v4:Chart"}
    assert set(charts) == {"gpu-operator", "cert-manager", "lws", "kserve-llmisvc-resources", "kserve-runtime-configs"}
    assert all("version" not in r.inputs for r in h.resources if r.type == "kubernetes:helm.sh/v4:Chart")
    assert types["kubernetes:yaml/v2:ConfigGroup"] == 2  # the KServe CRDs and the Gateway API CRDs
    servings = {r.name: r for r in h.resources if r.type == "tkf:serving:ModelServing"}
    for isvc in (r for r in h.resources if r.type.endswith(":LLMInferenceService")):
        assert isvc.parent == servings[isvc.inputs["metadata"]["name"]].urn, "a workload is its ModelServing's child"
        container = isvc.inputs["spec"]["template"]["containers"][0]
        assert "nvidia.com/gpu" not in json.dumps(container.get("resources", {}))
    ns = next(r for r in h.resources if r.type == "kubernetes:core/v1:Namespace")
    assert ns.options.get("retainOnDelete") is True, "destroy must not take the weight caches with the namespace"
    for isvc in (r for r in h.resources if r.type.endswith(":LLMInferenceService")):
        assert isvc.inputs["spec"]["template"]["nodeSelector"] == {"kubernetes.io/os": "linux"}  # the CPU pool
    for svc in (r for r in h.resources if r.type == "kubernetes:core/v1:Service"):
        owner = svc.inputs["metadata"]["name"].removesuffix("-openai")
        assert svc.parent == servings[owner].urn, f"{svc.name} must be parented to ModelServing {owner}"


def test_prod_stack_renders_every_profile(config: dict[str, Any], tmp_path: Path) -> None:
    cfg = stack_config("prod")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    cfg["tkf-infra:cluster"] = {**cfg["tkf-infra:cluster"], "kubeconfig": str(kubeconfig)}
    h = program(cfg, config)
    assert h.error is None and h.result is not None, h.error
    assert h.result.plan.catalog.ok and not h.result.plan.excluded and not h.result.plan.errors
    types = by_type(h)
    assert types["tkf:serving:ModelServing"] == 4
    charts = {r.inputs["name"]: r.inputs for r in h.resources if r.type == "kubernetes:helm.sh/v4:Chart"}
    assert charts["gpu-operator"]["version"] == "v26.7.0" and charts["kserve-llmisvc-crd"]["version"] == "v0.20.0"
    assert charts["kserve-llmisvc-crd"]["chart"] == "oci://ghcr.io/kserve/charts/kserve-llmisvc-crd"  # upstream
    isvcs = {r.inputs["metadata"]["name"]: r.inputs["spec"] for r in h.resources
             if r.type.endswith(":LLMInferenceService")}
    gpus = {name: spec["template"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
            for name, spec in isvcs.items()}
    assert gpus == {"llama-3-1-8b": "1", "qwen-2-5-72b": "4", "gpt-oss-120b": "2", "llama-3-1-405b": "8"}
    assert "worker" in isvcs["llama-3-1-405b"] and all("worker" not in s for n, s in isvcs.items()
                                                       if n != "llama-3-1-405b")
    assert isvcs["llama-3-1-405b"]["parallelism"] == {"tensor": 8, "pipeline": 2}
    provider = next(r for r in h.resources if r.type == "pulumi:providers:kubernetes")
    assert provider.inputs.get("clusterIdentifier") == "prod-llm-eu-1"
    tolerations = isvcs["llama-3-1-8b"]["template"]["tolerations"]
    assert [t for t in tolerations if t["key"] == "nvidia.com/gpu"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]  # once, though prod lists it
    assert API_KEY not in json.dumps([r.inputs for r in h.resources if r.type != "kubernetes:core/v1:Secret"])


def test_three_bad_entries_two_good_two_registered_three_reported(config: dict[str, Any]) -> None:
    cfg = stack_config("dev")
    good = cfg["tkf-infra:models"]
    cfg["tkf-infra:models"] = [
        good[0],
        {**good[1], "name": "bad-rev", "servedName": "x1", "revision": "main"},
        good[1],
        {**good[1], "name": "bad-dup", "servedName": good[0]["servedName"]},
        {**good[1], "name": "Bad_Name", "servedName": "x3"},
    ]
    h = program(cfg, config)
    servings = sorted(r.name for r in h.resources if r.type == "tkf:serving:ModelServing")
    assert servings == sorted(m["name"] for m in good)
    errors = h.errors()
    assert len(errors) == 3
    assert any("models[1] bad-rev" in e and "revision 'main' is a branch" in e for e in errors)
    assert any("models[3] bad-dup" in e and "servedName" in e for e in errors)
    assert any("models[4] Bad_Name" in e and "DNS-1035" in e for e in errors)
    assert isinstance(h.error, pulumi.RunError)
    assert re.search(r"3 catalog entries were refused .* the other 2 were deployed", str(h.error))


def test_strict_stops_before_anything_is_registered(config: dict[str, Any]) -> None:
    cfg = stack_config("dev")
    cfg["tkf-infra:strict"] = True
    cfg["tkf-infra:models"] = [*cfg["tkf-infra:models"], {**cfg["tkf-infra:models"][0], "revision": "main"}]
    h = program(cfg, config)
    assert "strict: true and the stack has bad entries; nothing was registered" in str(h.error)
    assert h.resources == []


def test_malformed_stack_value_is_a_clear_error(config: dict[str, Any]) -> None:
    cfg = stack_config("dev")
    cfg["tkf-infra:models"] = "{not json"
    h = program(cfg, config)
    assert "tkf-infra:models: cannot be read as structured config" in str(h.error)
    assert h.resources == []


#: Calls that change state for the whole process (the CLI's signal handlers, in tkf_infra/ops/, are the CLI's own).
PROCESS_WIDE = re.compile(r"gc\.(?:set_threshold|disable|freeze)\(|sys\.setrecursionlimit\(|sys\.setswitchinterval\(|"
                          r"os\.environ\[[^]]+\]\s*=|os\.environ\.(?:setdefault|update)\(|"
                          r"record_creation_frame_only\(\)|signal\.signal\(")


def test_the_program_changes_process_wide_state_in_set_process_state_only() -> None:
    """docs/architecture.md, "The edge": one visible place, so nothing else leaves the process changed."""
    import inspect

    from tkf_infra import program

    own = inspect.getsource(program.set_process_state)
    found = [f"{p.relative_to(ROOT)}:{n}" for folder in ("tkf_infra", "components", "providers")
             for p in sorted((ROOT / folder).rglob("*.py")) if "ops" not in p.relative_to(ROOT).parts
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if PROCESS_WIDE.search(line) and not line.lstrip().startswith(("def ", "#"))
             and not (p == ROOT / "tkf_infra" / "program.py" and line.strip() in own)]
    assert not found, f"process-wide state changed outside tkf_infra/program.py set_process_state: {found}"
    assert PROCESS_WIDE.search(own), "set_process_state no longer sets anything: update this guard"
