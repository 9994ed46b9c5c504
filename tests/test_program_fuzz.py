"""The whole program on stack files a careless hand or a bad merge would write: every leaf of two full stacks
(prod's, and a MIG fleet with autoscaled models) swapped for a value of the wrong size or type, alone or two at
a time, and run end to end under mocks (settings, catalog, fit check, plan, layout, components, outputs).

Why beside tests/test_settings_property.py: that one shows a *document* either validates or is refused; this one
shows what passes validation never crashes further down either — a value at an edge that the settings allow
(a huge count, a tiny utilization, a float where an int was) reaching the plan or a component — and that a
refusal is the product's own (RunError / SettingsError), never another exception or a traceback in the log.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pulumi
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.mocks import program, stack_doc
from tests.sharing_fixtures import mig_settings
from tkf_infra.config import SettingsError

ROOT = Path(__file__).resolve().parents[1]
QWEN = {"repo": "Qwen/Qwen2.5-0.5B-Instruct", "revision": "7ae557604adf67be50417f59c2c2f167def9a775"}


def prod_doc() -> dict[str, Any]:
    """Pulumi.prod.yaml's settings, rendered instead of applied, its first model autoscaled."""
    raw = yaml.safe_load((ROOT / "Pulumi.prod.yaml").read_text())["config"]
    doc = {k.split(":", 1)[1]: v for k, v in raw.items() if k.startswith("tkf-infra:")}
    doc["cluster"] = {"mode": "render", "renderDir": "rendered/test-fuzz"}
    doc["modelDefaults"].pop("replicas", None)
    first, *rest = doc["models"]
    first.pop("replicas", None)
    first["scaling"] = {"minReplicas": 1, "maxReplicas": 3, "metric": "waitingRequests", "cooldownSeconds": 300}
    for m in rest:
        m.setdefault("replicas", 1)
    return doc


def mig_doc() -> dict[str, Any]:
    doc = stack_doc(**mig_settings([
        {"name": "a", **QWEN, "servedName": "a", "maxModelLen": 4096, "scaling": {"minReplicas": 1, "maxReplicas": 4}},
        {"name": "b", **QWEN, "servedName": "b", "maxModelLen": 4096, "gpuShare": "mig:2g.20gb", "replicas": 2},
        {"name": "c", **QWEN, "servedName": "c", "maxModelLen": 4096, "gpuShare": "whole"}]))
    doc["cluster"] = {"mode": "render", "renderDir": "rendered/test-fuzz"}
    return doc


BASES = [prod_doc(), mig_doc()]


def leaves(d: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    if isinstance(d, dict):
        return [x for k, v in d.items() for x in leaves(v, (*path, k))]
    if isinstance(d, list):
        return [x for i, v in enumerate(d) for x in leaves(v, (*path, i))]
    return [(path, d)]


LEAVES = [leaves(b) for b in BASES]
INTS = [0, -1, 1, 2, 7, 2**31, 2**53 + 1, 10**30]
FLOATS = [0.0, -0.0, 1e-12, 0.5, 0.999999, 1.0000001, 1e308, float("inf"), float("nan")]
STRS = ["", " ", "x" * 300, "0", "1e3", "true", "null", "NaN", "-1", "é", "a" * 64]


def wrong(v: Any) -> st.SearchStrategy[Any]:
    """Values of the wrong size or type for a leaf holding `v`."""
    other = st.sampled_from([None, [v], {"v": v}])
    if isinstance(v, bool):
        return st.one_of(st.sampled_from([not v, 0, 1, "yes"]), other)
    if isinstance(v, int):
        return st.one_of(st.sampled_from([*INTS, v + 0.5, str(v)]), other)
    if isinstance(v, float):
        return st.one_of(st.sampled_from([*FLOATS, str(v), int(v)]), other)
    if isinstance(v, str):
        return st.one_of(st.sampled_from([*STRS, v.upper(), v + v, v[:-1], 1]), other)
    return st.sampled_from([None, 0, ""])


@st.composite
def edited_stacks(draw: st.DrawFn) -> tuple[dict[str, Any], list[tuple[Any, ...]]]:
    which = draw(st.sampled_from(range(len(BASES))))
    doc = copy.deepcopy(BASES[which])
    edits = []
    for _ in range(draw(st.integers(1, 2))):
        path, value = draw(st.sampled_from(LEAVES[which]))
        new = draw(wrong(value))
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = new
        edits.append((*path, new))
    return doc, edits


def test_both_bases_deploy_untouched() -> None:
    for doc in BASES:
        h = program(copy.deepcopy(doc), preview=True)
        assert h.error is None and not h.errors(), (h.error, h.errors())


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(edited_stacks())
def test_an_edited_stack_is_deployed_or_refused_by_the_product_never_crashed(
        case: tuple[dict[str, Any], list[tuple[Any, ...]]]) -> None:
    doc, edits = case
    h = program(doc, preview=True)
    assert h.error is None or isinstance(h.error, (pulumi.RunError, SettingsError)), (edits, repr(h.error))
    for line in h.errors():
        assert "Traceback" not in line and "object has no attribute" not in line, (edits, line)
