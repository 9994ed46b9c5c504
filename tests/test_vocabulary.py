"""One vocabulary across the seams (issue 31): a name one package writes and another reads is spelled once.

Component type tokens, label and annotation keys, the pipeline-parallel preset and the project root live
in `tkf_infra/names.py`; output keys in `tkf_infra/outputs.py`. These tests fail when a name changes on
one side only: the registered type tokens are the constants, the CLI's per-model attribution finds the
models through them, the exported keys are the constants and the example gateway reads no other, the
guardrails read the labels the components write, and no other file spells one of these names again.
"""

from __future__ import annotations

import ast
import re
from typing import Any

import pytest
import yaml

from components.prerequisites import PIPELINE_PARALLEL_PRESET_FILE
from policy.guardrails.objects import K8sObject
from tests.mocks import CPU, MULTI_NODE, SINGLE_GPU, TP4, Harness, Registered, program, stack_doc
from tests.sharing_fixtures import QWEN05, mig_settings
from tkf_infra import names, outputs
from tkf_infra.ops import policy_report, summary

ROOT = names.PROJECT_ROOT
STACK, PROJECT = "unit", "tkf-infra"


#: What each component passed to `register_outputs`, by `type::name`.
ComponentOutputs = dict[str, dict[str, Any]]


@pytest.fixture(scope="module")
def fleet() -> tuple[Harness[Any], ComponentOutputs]:
    import pulumi

    registered: ComponentOutputs = {}
    real = pulumi.ComponentResource.register_outputs

    def record(self: pulumi.ComponentResource, outs: Any) -> None:
        registered[f"{self._type}::{self._name}"] = dict(outs or {})
        real(self, outs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pulumi.ComponentResource, "register_outputs", record)
        h = program(stack_doc(SINGLE_GPU, MULTI_NODE, TP4, CPU), api_key="k")
    assert h.error is None, h.error
    return h, registered


@pytest.fixture(scope="module")
def shared() -> Harness[Any]:
    doc = stack_doc(backend="kserve")
    extra = mig_settings([{"name": "tiny", **QWEN05, "servedName": "tiny", "maxModelLen": 4096}])
    doc["platform"]["gpuOperator"].update({k: v for k, v in extra.pop("platform")["gpuOperator"].items()
                                           if k != "alreadyInstalled"})
    doc.update(extra)
    doc["platform"]["dashboards"] = {}  # the Observability component too
    h = program(doc)
    assert h.error is None, h.error
    return h


def urns(h: Harness[Any]) -> dict[str, str]:
    """Each registered resource's engine URN (`urn:pulumi:<stack>::<project>::<parent types>$<type>::<name>`)."""
    by_key = {r.urn: r for r in h.resources}
    out: dict[str, str] = {}

    def urn(r: Registered) -> str:
        if r.urn not in out:
            chain = [r.type]
            parent = by_key.get(r.parent or "")
            while parent is not None:
                chain.insert(0, parent.type)
                parent = by_key.get(parent.parent or "")
            out[r.urn] = f"urn:pulumi:{STACK}::{PROJECT}::{'$'.join(chain)}::{r.name}"
        return out[r.urn]

    for r in h.resources:
        urn(r)
    return out


# ---------------------------------------------------------------------------------------------
# Component type tokens
# ---------------------------------------------------------------------------------------------


def test_the_registered_component_types_are_the_constants(
        fleet: tuple[Harness[Any], ComponentOutputs], shared: Harness[Any]) -> None:
    registered = {r.type for h in (fleet[0], shared) for r in h.resources if r.type.startswith("tkf:")}
    assert registered == names.COMPONENT_TYPES, (
        "a component's type token and tkf_infra/names.py disagree: rename it there (ops/summary.py and "
        "ops/policy_report.py attribute engine events to models by these tokens)")


def test_every_component_registers_its_type_through_names() -> None:
    """`super().__init__(<token>, …)` of every ComponentResource names a constant of tkf_infra/names.py."""
    seen: dict[str, str] = {}
    for path in sorted((ROOT / "components").glob("*.py")):
        tree = ast.parse(path.read_text())
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            if not any(ast.unparse(b).endswith("ComponentResource") for b in cls.bases):
                continue
            for call in (n for n in ast.walk(cls) if isinstance(n, ast.Call)):
                if ast.unparse(call.func) == "super().__init__":
                    token = call.args[0]
                    name = token.attr if isinstance(token, ast.Attribute) else getattr(token, "id", None)
                    assert name is not None and isinstance(getattr(names, name, None), str), (
                        f"{path.name}: {cls.name} registers {ast.unparse(token)}, not a tkf_infra.names constant")
                    seen[cls.name] = getattr(names, name)
    assert set(seen.values()) == names.COMPONENT_TYPES, seen


def test_the_cli_attributes_each_models_resources_through_the_same_tokens(
        fleet: tuple[Harness[Any], ComponentOutputs]) -> None:
    """What the program registers under a ModelServing is that model's, for the run summary and the
    policy report alike; a WeightCache's resources belong to the models its `models` output lists."""
    h, registered = fleet
    by_urn = urns(h)
    parents = {by_urn[r.urn]: by_urn[r.parent] for r in h.resources if r.parent in by_urn}
    caches = {by_urn[r.urn]: list(registered[r.urn][names.WEIGHT_CACHE_MODELS_OUTPUT])
              for r in h.resources if r.type == names.WEIGHT_CACHE_TYPE}
    by_key = {r.urn: r for r in h.resources}
    attributed: set[str] = set()
    for r in h.resources:
        serving: Registered | None = r
        while serving is not None and serving.type != names.MODEL_SERVING_TYPE:
            serving = by_key.get(serving.parent or "")
        if serving is None or serving is r:
            continue
        assert summary.models_of(by_urn[r.urn], parents, caches) == [serving.name], r.urn
        assert policy_report._serving_ancestor(by_urn[r.urn], parents) == by_urn[serving.urn], r.urn
        attributed.add(serving.name)
    assert attributed == {SINGLE_GPU["name"], MULTI_NODE["name"], TP4["name"], CPU["name"]}
    assert caches
    for urn, models in caches.items():
        assert models and summary.models_of(urn, parents, caches) == models


def test_the_pipeline_parallel_preset_is_the_name_the_workloads_reference() -> None:
    doc = yaml.safe_load(PIPELINE_PARALLEL_PRESET_FILE.read_text())
    assert doc["metadata"]["name"] == names.PIPELINE_PARALLEL_PRESET


# ---------------------------------------------------------------------------------------------
# Stack output keys
# ---------------------------------------------------------------------------------------------


def test_the_exported_outputs_are_the_constants(monkeypatch: pytest.MonkeyPatch) -> None:
    import pulumi

    exported: dict[str, Any] = {}
    monkeypatch.setattr(pulumi, "export", lambda name, value: exported.__setitem__(name, value))
    h = program(stack_doc(SINGLE_GPU), api_key="k")
    assert h.error is None, h.error
    from tkf_infra.platform_contract import PLATFORM_CONTRACT_OUTPUT

    # One stack holds both layers: the gateway's contract, and the platform contract its next run checks.
    assert sorted(exported) == sorted((*outputs.OUTPUT_KEYS, PLATFORM_CONTRACT_OUTPUT))
    assert len(set(outputs.OUTPUT_KEYS)) == len(outputs.OUTPUT_KEYS)


def test_the_example_gateway_reads_only_outputs_the_stack_exports() -> None:
    """examples/gateway is copied into another project, so it spells the keys itself: they must exist."""
    text = (ROOT / "examples" / "gateway" / "__main__.py").read_text()
    read = set(re.findall(r"\.(?:require_output|get_output)\(\"([^\"]+)\"\)", text))
    assert read and read <= set(outputs.OUTPUT_KEYS), read - set(outputs.OUTPUT_KEYS)


def test_the_summary_reads_left_out_models_from_the_rejected_output() -> None:
    row = {"index": 0, "name": "m", "stage": "fit", "reasons": ["too big"], "kept": False}
    tracker = summary.RunTracker("preview")
    got = summary.summarize("s", "preview", tracker, ok=False, outputs={outputs.REJECTED_OUTPUT: [row]})
    assert got["models"]["m"]["status"] == "rejected"


# ---------------------------------------------------------------------------------------------
# Label and annotation keys
# ---------------------------------------------------------------------------------------------


def test_the_guardrails_read_the_labels_the_components_write(fleet: tuple[Harness[Any], ComponentOutputs]) -> None:
    h, _ = fleet
    objs = [K8sObject(type=r.type, props=r.manifest() if r.type.startswith("kubernetes:") else r.inputs, urn=r.urn)
            for r in h.resources if r.custom]
    models = {SINGLE_GPU["name"], MULTI_NODE["name"], TP4["name"], CPU["name"]}
    servers = {o.model for o in objs if o.is_model_server}
    assert servers == models, "policy/guardrails/objects.py finds every model's pods by names.MODEL_LABEL"
    services = [o for o in objs if o.kind == "Service" and o.name.endswith("-openai")]
    assert {o.props["spec"]["selector"][names.MODEL_LABEL] for o in services} == models
    caches = [o for o in objs if o.kind == "PersistentVolumeClaim"]
    assert caches and all(o.labels[names.COMPONENT_LABEL] == names.WEIGHT_CACHE_COMPONENT for o in caches)
    served = {m for o in caches for m in o.annotations[names.CACHE_MODELS_ANNOTATION].split(",")}
    assert served == models


#: Files that still spell a shared name, and why (each should move to tkf_infra/names.py when free).
SPELLED_ELSEWHERE = {
    "tkf_infra/names.py": "the one place",
    "tkf_infra/sizing/contract.py": "`tkf.io/fit-*`: sizing imports nothing outside sizing",
    "tkf_infra/sizing/mig.py": "`nvidia.com/mig-<profile>`: sizing imports nothing outside sizing",
    "examples/gateway/__main__.py": "copied into the gateway's own project: imports nothing of ours",
}
SHARED = re.compile(r"[\"'](?:tkf\.io/|app\.kubernetes\.io/|tkf:(?:serving|platform):|"
                    r"kserve-config-llm-worker-pipeline-parallel[\"'])|name: nvidia\.com/|"
                    r"[\"']nvidia\.com/(?:gpu|mig)")


def test_no_other_file_spells_a_shared_name() -> None:
    offenders = []
    for folder in ("components", "tkf_infra", "providers", "policy", "examples", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if ".venv" in path.parts or rel in SPELLED_ELSEWHERE:
                continue
            offenders += [f"{rel}:{n}: {line.strip()}" for n, line in enumerate(path.read_text().splitlines(), 1)
                          if SHARED.search(line)]
    assert not offenders, "spell these through tkf_infra/names.py:\n" + "\n".join(offenders)


#: Where output keys may be spelled: their definitions, and the gateway example (copied into another project).
OUTPUT_KEYS_DEFINED = {"tkf_infra/outputs.py", "tkf_infra/platform_contract.py", "examples/gateway/__main__.py"}
#: Calls whose first argument names an output: reading it back, exporting it.
_KEYED_CALLS = {"get", "pop", "setdefault", "export", "require_output", "get_output"}


def keys_used(path: Any) -> list[tuple[int, str]]:
    """String literals used as a key: `x["k"]`, `x.get("k")`, `pulumi.export("k", …)`, `"k" in x`
    (a model status such as `"rejected"` elsewhere in a set or a return is not a key)."""
    found: list[tuple[int, str]] = []
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.Subscript):
            key: Any = n.slice
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _KEYED_CALLS and n.args:
            key = n.args[0]
        elif isinstance(n, ast.Compare) and isinstance(n.ops[0], ast.In | ast.NotIn):
            key = n.left
        else:
            continue
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            found.append((key.lineno, key.value))
    return found


def test_no_other_module_spells_an_output_key() -> None:
    """The CLI, the program and the layers read the stack outputs through the constants: a key spelled as
    a literal would keep reading the old name after a rename in tkf_infra/outputs.py."""
    from tkf_infra import platform_contract as pc

    keys = {*outputs.OUTPUT_KEYS, pc.PLATFORM_CONTRACT_OUTPUT, pc.LAYER_OUTPUT, pc.PLATFORM_USE_OUTPUT}
    offenders = []
    for folder in ("components", "tkf_infra", "providers", "policy", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel not in OUTPUT_KEYS_DEFINED:
                offenders += [f"{rel}:{n}: {v!r}" for n, v in keys_used(path) if v in keys]
    assert not offenders, "read these through tkf_infra/outputs.py (or platform_contract.py):\n" + "\n".join(offenders)


def test_the_policy_subject_is_written_and_read_by_one_definition() -> None:
    """The pack writes `model a: …` / `models a, b: …` with names.subject; the CLI reads it back with
    names.subject_models — a guardrail that wrote its own prefix would no longer be attributed."""
    from policy.guardrails import base

    assert "from tkf_infra.names import subject" in (ROOT / "policy" / "guardrails" / "base.py").read_text()
    for models in (["qwen-0-5b"], ["b-model", "a-model", "b-model"], ["m1", "m-2", "m3"]):
        line = base.violation(models, "Deployment llm-serving/x", "runs on pool 'h100'", "use cpu").message
        assert names.subject_models(line) == tuple(sorted(set(models))), line
    assert names.subject_models(base.violation([], "fleet", "needs 9 GPUs", "lower replicas").message) is None
    assert names.subject_models("model Not-A-Name: x") is None


#: Modules that must find the checkout before they can import tkf_infra (the policy pack's entry point).
CLIMBS_BEFORE_IMPORT = {"policy/__main__.py"}


def test_the_project_root_is_computed_once() -> None:
    """Only names.PROJECT_ROOT climbs from a module's own path to the checkout: `parents[n]` or
    `.parent.parent` anywhere else in the program would break silently when that module moves."""
    assert (ROOT / "Pulumi.yaml").is_file() and (ROOT / "models.lock.json").is_file()
    climbs = re.compile(r"Path\(__file__\)(?:\.resolve\(\))?\.(?:parents\[\d\]|parent\.parent)")
    offenders = [rel for folder in ("tkf_infra", "components", "providers", "policy")
                 for p in sorted((ROOT / folder).rglob("*.py"))
                 if (rel := p.relative_to(ROOT).as_posix()) not in {"tkf_infra/names.py", *CLIMBS_BEFORE_IMPORT}
                 and climbs.search(p.read_text())]
    assert not offenders, f"use tkf_infra.names.PROJECT_ROOT in {offenders}"
    assert climbs.search((ROOT / "tkf_infra" / "names.py").read_text()), "the pattern still finds the one definition"


def test_the_weight_cache_models_output_is_the_shared_key(fleet: tuple[Harness[Any], ComponentOutputs]) -> None:
    h, registered = fleet
    caches = [r for r in h.resources if r.type == names.WEIGHT_CACHE_TYPE]
    assert caches and all(isinstance(registered[r.urn].get(names.WEIGHT_CACHE_MODELS_OUTPUT), list) for r in caches)


def test_the_policy_pack_reads_the_fit_verdict_under_the_key_the_sizing_contract_writes() -> None:
    """The `fit-verdict` guardrail reads `names.FIT_VERDICT_ANNOTATION`; the contract writes its figures' annotations
    from their field names (sizing imports nothing outside sizing), so the two spellings are held together here."""
    from tkf_infra.sizing.contract import FitFigures

    written = FitFigures(fits=True, verdict="tight", weights_gib=1.0, kv_cache_gib=1.0, kv_cache_tokens=1,
                         max_concurrency=1.0).annotations()
    assert written[names.FIT_VERDICT_ANNOTATION] == "tight"
