"""A GPU Operator namespace absent while the operator is `alreadyInstalled` (tkf_infra/plan/piece_namespaces.py).

The program writes the MIG layout's ConfigMap into that namespace; absent, `up` used to fail there after a
clean preview. The reader asks the API server for the namespace (httpx MockTransport here, a real
kube-apiserver in tests/kube/platform/test_admission_mig_live.py); the plan refuses the models on MIG
pools by name and leaves the others, and registers nothing in the missing namespace.
"""

from __future__ import annotations

from typing import Any

import httpx

from tests.mocks import run, stack_doc
from tests.sharing_fixtures import CODER05, POOL, QWEN05, mig_settings
from tkf_infra.config import validate_catalog
from tkf_infra.config.api_keys import ApiKeys
from tkf_infra.hub.lock import load_lock
from tkf_infra.live.cluster import read_cluster
from tkf_infra.names import GPU_SHARING_TYPE, MIG_CONFIG_NAME
from tkf_infra.plan import plan_fleet
from tkf_infra.plan.admission import ClusterState
from tkf_infra.plan.piece_namespaces import written_namespaces
from tkf_infra.program import Edge, footprints
from tkf_infra.program import run as run_program

LOCK = load_lock()
SOURCE = "the test cluster"


def doc(*, installed: bool = True, whole: bool = True, mig_models: bool = True) -> dict[str, Any]:
    """A MIG pool with two small models, and an H100 pool with one whole-GPU model."""
    d = stack_doc(backend="vllm")
    small = [{"name": n, **ref, "servedName": n, "replicas": 1, "gpuShare": "mig:1g.10gb", "maxModelLen": 4096}
             for n, ref in (("qwen05", QWEN05), ("coder05", CODER05))]
    extra = mig_settings(small if mig_models else [])
    d["platform"]["gpuOperator"].update(migStrategy="mixed", alreadyInstalled=installed)
    extra.pop("platform")
    extra["nodePools"].append(d["nodePools"][0])
    if whole:
        extra["models"].append({"name": "plain", **QWEN05, "servedName": "plain", "nodePool": "h100",
                                "gpuShare": "whole", "maxModelLen": 4096})
    d.update(extra)
    return d


def state(**namespaces: bool) -> ClusterState:
    return ClusterState(SOURCE, namespaces=namespaces)


def plan(d: dict[str, Any], cluster: ClusterState | None) -> Any:
    catalog = validate_catalog(d)
    return plan_fleet(catalog, lock=LOCK, footprints=footprints(catalog), cluster=cluster)


def refused(p: Any) -> dict[str, tuple[str, str]]:
    return {x.name: (x.stage.value, " ".join(x.reasons)) for x in p.excluded}


def test_the_reader_asks_for_each_namespace_once_and_a_404_is_an_answer() -> None:
    asked: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        if request.url.path == "/api/v1/namespaces/gpu-operator":
            return httpx.Response(404, json={"kind": "Status", "message": 'namespaces "gpu-operator" not found'})
        if request.url.path == "/api/v1/namespaces/other-ns":
            return httpx.Response(200, json={"kind": "Namespace", "metadata": {"name": "other-ns"}})
        return httpx.Response(200, json={"items": []})

    with httpx.Client(transport=httpx.MockTransport(answer), base_url="https://k") as client:
        got = read_cluster(client, SOURCE, "llm-serving", ["gpu-operator", "other-ns"])
        assert got.namespaces == {"gpu-operator": False, "other-ns": True} and got.namespaces_error is None
        assert [p for p in asked if p.startswith("/api/v1/namespaces/") and p.count("/") == 4] == [
            "/api/v1/namespaces/gpu-operator", "/api/v1/namespaces/other-ns"]
        asked.clear()
        assert read_cluster(client, SOURCE, "llm-serving").namespaces == {}
        assert not any(p.count("/") == 4 and p.startswith("/api/v1/namespaces/") for p in asked), "none asked"


def test_a_forbidden_namespace_read_is_carried_as_its_error() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/namespaces/gpu-operator":
            return httpx.Response(403, json={"message": "namespaces \"gpu-operator\" is forbidden"})
        return httpx.Response(200, json={"items": []})

    with httpx.Client(transport=httpx.MockTransport(answer), base_url="https://k") as client:
        got = read_cluster(client, SOURCE, "llm-serving", ["gpu-operator"])
    assert got.namespaces == {} and got.namespaces_error is not None and "HTTP 403" in got.namespaces_error


def test_only_the_operator_already_installed_with_a_mig_pool_needs_its_namespace() -> None:
    (w,) = written_namespaces(validate_catalog(doc()))
    assert (w.namespace, w.setting, w.piece) == ("gpu-operator", "namespaces.gpuOperator", "gpuOperator")
    assert written_namespaces(validate_catalog(doc(installed=False))) == ()  # this run creates it
    no_mig = stack_doc({"name": "plain", **QWEN05, "servedName": "plain", "maxModelLen": 4096}, backend="vllm")
    assert written_namespaces(validate_catalog(no_mig)) == ()  # nothing is written there


def test_the_models_on_mig_pools_are_refused_by_name_and_the_others_deploy() -> None:
    p = plan(doc(), state(**{"gpu-operator": False}))
    got = refused(p)
    assert set(got) == {"qwen05", "coder05"} and p.deployed == {"plain"}
    stage, why = got["qwen05"]
    assert stage == "topology" and f"on MIG pool {POOL}" in why
    for part in (f"{SOURCE} has no namespace 'gpu-operator'", "namespaces.gpuOperator: gpu-operator",
                 "platform.gpuOperator.alreadyInstalled is true", MIG_CONFIG_NAME,
                 "install the GPU Operator in namespace 'gpu-operator'",
                 "set namespaces.gpuOperator to the namespace where it is installed",
                 "remove platform.gpuOperator.alreadyInstalled so tkf-infra installs it"):
        assert part in why, part
    assert POOL not in p.layouts, "no layout: nothing may be written into the missing namespace"


def test_the_namespace_present_changes_nothing() -> None:
    p = plan(doc(), state(**{"gpu-operator": True}))
    assert not p.excluded and p.deployed == {"qwen05", "coder05", "plain"} and POOL in p.layouts
    assert not any("gpu-operator" in w or "namespace-absent" in w for w in p.warnings)


def test_render_mode_and_an_operator_this_run_installs_are_not_checked() -> None:
    assert not plan(doc(), None).excluded  # render mode: no cluster read, nothing refused
    assert not plan(doc(installed=False), state(**{"gpu-operator": False})).excluded


def test_a_namespace_that_could_not_be_read_is_a_named_warning_not_a_refusal() -> None:
    p = plan(doc(), ClusterState(SOURCE, namespaces_error="GET /api/v1/namespaces/gpu-operator answered HTTP 403"))
    assert not p.excluded
    (w,) = [w for w in p.warnings if "gpu-operator" in w]
    assert w.startswith("[topology-unreadable]") and "HTTP 403" in w and "namespaces.gpuOperator" in w


def test_an_idle_mig_pool_is_not_laid_out_and_says_so() -> None:
    p = plan(doc(mig_models=False), state(**{"gpu-operator": False}))
    assert not p.excluded and p.deployed == {"plain"} and POOL not in p.layouts
    (w,) = [w for w in p.warnings if w.startswith("[namespace-absent]")]
    assert f"nodePool {POOL}: no MIG layout is written" in w and "namespaces.gpuOperator" in w


def test_the_whole_program_registers_nothing_in_the_missing_namespace() -> None:
    """The refused models' objects and the sharing component are absent; the good model's are there."""
    def build() -> Any:
        edge = Edge(settings=doc(), lock=LOCK, api_keys=ApiKeys("unit-test-api-key", None, None),
                    read_api_key=False, cluster=state(**{"gpu-operator": False}))
        return run_program(edge)

    h = run(build, expect_error=True)
    assert not [r for r in h.resources if r.type == GPU_SHARING_TYPE or (r.inputs.get("metadata") or {}).get(
        "namespace") == "gpu-operator"]
    text = " ".join(h.errors())
    assert "qwen05 was left out of this deployment (topology)" in text and "no namespace 'gpu-operator'" in text
    assert any("plain" in r.name for r in h.resources) and not any("qwen05" in r.name for r in h.resources)
