"""Pins through the real engine and a real kube-apiserver: accepted, read back from real outputs, stable.

A vllm-backend stack in kubeconfig mode against four tainted 8-GPU Nodes the test writes (the plan reads them
live, so it knows their names). One `up`: every Deployment's pods carry the required node affinity and the
spread (docs/admission.md, "Why pinned"), the download Jobs the pool's toleration and a pin beside their first
reader — all accepted and stored by the API server. A second `up` plans nothing: the pins came back through
the engine's `readStackOutputs` (numbers as floats) unchanged. Adding a higher-priority model ahead of them
in the catalog leaves the running models' Deployments untouched (their `generation` does not move).

The server runs no scheduler or controllers (the cluster tier, tests/cluster, runs them): `skipAwait`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.engine_fixtures import EngineStack
from tests.kube.apiserver import KubeAPIServer, own_apiserver
from tests.kube.client import KubeClient
from tests.kube.platform.test_admission_live import GPU_TAINT, POOL_LABELS, node
from tests.mocks import QWEN3_8B

pytestmark = [pytest.mark.apiserver, pytest.mark.engine]

NS = "llm-pins"
NODES = ("gpu-a", "gpu-b", "gpu-c", "gpu-d")


def model(name: str, replicas: int, **kw: Any) -> dict[str, Any]:
    return {"name": name, **QWEN3_8B, "servedName": name, "nodePool": "h100", "maxModelLen": 8192,
            "replicas": replicas, **kw}


@contextmanager
def pool_apiserver(tmp: Path) -> Iterator[KubeAPIServer]:
    """A kube-apiserver of its own holding the pool's `NODES` (the pins and cache-mode tests pack onto them)."""
    with own_apiserver(tmp) as srv:
        with srv.client() as kube:
            for name in NODES:
                node(kube, name)
        yield srv


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPIServer]:
    with pool_apiserver(tmp_path_factory.mktemp("pins-apiserver")) as srv:
        yield srv


def configure(es: EngineStack, server: KubeAPIServer, models: list[dict[str, Any]]) -> None:
    def change(cfg: dict[str, Any]) -> None:
        cfg["tkf-infra:cluster"] = {"mode": "kubeconfig", "kubeconfig": str(server.kubeconfig), "skipAwait": True}
        cfg["tkf-infra:namespaces"] = {**cfg.get("tkf-infra:namespaces", {}), "serving": NS}
        cfg["tkf-infra:serving"].update(backend="vllm", allowCpu=False)
        cfg["tkf-infra:nodePools"] = [{"name": "h100", "kind": "existing", "gpuProduct": "H100-80GB",
                                       "gpusPerNode": 8, "nodeCount": 4, "labels": POOL_LABELS,
                                       "taints": [GPU_TAINT]}]
        cfg["tkf-infra:modelDefaults"] = {}
        cfg["tkf-infra:models"] = models

    es.edit_config(change)


def pod_spec(kube: KubeClient, kind: str, name: str) -> tuple[dict[str, Any], int]:
    api = "apps/v1" if kind == "Deployment" else "batch/v1"
    obj = kube.get(api, kind, name, NS)
    assert obj is not None, (kind, name)
    return obj["spec"]["template"]["spec"], int(obj["metadata"].get("generation", 0))


def pinned(spec: dict[str, Any]) -> list[str]:
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return [str(v) for term in terms for v in term["matchFields"][0]["values"]]


def test_pins_are_accepted_read_back_from_the_engine_and_kept(server: KubeAPIServer,
                                                              lean_engine_env: dict[str, str],
                                                              make_stack: Callable[..., EngineStack]) -> None:
    es = make_stack(extra_env=lean_engine_env)
    first = [model("a", 3), model("b", 2)]
    configure(es, server, first)
    up = es.stack.up()
    assert up.summary.result == "succeeded"
    with server.client() as kube:
        a, a_gen = pod_spec(kube, "Deployment", "a")
        b, b_gen = pod_spec(kube, "Deployment", "b")
        assert pinned(a) == pinned(b) == ["gpu-a"], "5 one-GPU pods packed on one node, as stored by the server"
        assert a["topologySpreadConstraints"] == [{
            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"tkf.io/model": "a"}}, "nodeAffinityPolicy": "Honor",
            "nodeTaintsPolicy": "Ignore"}]
        jobs = kube.request("GET", f"/apis/batch/v1/namespaces/{NS}/jobs")["items"]
        (job,) = jobs
        spec = job["spec"]["template"]["spec"]
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
        assert pinned(spec) == ["gpu-a"]

    again = es.stack.preview()
    changes = {k: v for k, v in (again.change_summary or {}).items() if k != "same"}
    assert not changes, f"the second run moved something: {changes}"

    newcomer = model("c", 8, priority=100)
    configure(es, server, [newcomer, *first])
    up = es.stack.up()
    assert up.summary.result == "succeeded"
    with server.client() as kube:
        a2, a2_gen = pod_spec(kube, "Deployment", "a")
        _, b2_gen = pod_spec(kube, "Deployment", "b")
        c, _ = pod_spec(kube, "Deployment", "c")
        assert (a2_gen, b2_gen) == (a_gen, b_gen) and pinned(a2) == ["gpu-a"], "a and b were not touched"
        assert pinned(c) == ["gpu-b"], "the newcomer went around them"
