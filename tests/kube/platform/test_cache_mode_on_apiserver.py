"""A weight cache's access mode through the real engine and a real kube-apiserver: never flipped by an edit.

Why: the Kubernetes provider replaces a PersistentVolumeClaim whose `spec.accessModes` change (pulumi-kubernetes
`provider/pkg/provider/diff.go`, the claim's force-new fields), and a replace of a weight cache either fails `up`
(`serving.protect`), collides with the retained claim of the same name, or deletes the weights
(`serving.pruneWeightCache`). A cache used to become ReadWriteMany when a second reader or replica appeared.

A vllm-backend stack in kubeconfig mode against four tainted 8-GPU Nodes (names read live, so pins are real) and
no StorageClass (the class is not known: new caches are sized by their readers). One `up` with one model of one
replica creates its cache ReadWriteOnce; then a second model on the same weights and a second replica are added:
each preview plans no replace or delete of the claim, the `up` leaves it as the API server stored it, and every
reader is pinned to the node the claim's first reader runs on (a ReadWriteOnce volume is one node's).

The server runs no scheduler or controllers (the cluster tier does): `skipAwait`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pulumi import automation as auto

from tests.engine_fixtures import EngineStack
from tests.kube.apiserver import KubeAPIServer
from tests.kube.platform.test_pins_on_apiserver import configure, model, pinned, pod_spec, pool_apiserver
from tkf_infra.names import weight_cache

pytestmark = [pytest.mark.apiserver, pytest.mark.engine]

NS = "llm-pins"  # test_pins_on_apiserver.configure's namespace
PVC_TYPE = "kubernetes:core/v1:PersistentVolumeClaim"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPIServer]:
    with pool_apiserver(tmp_path_factory.mktemp("cache-mode-apiserver")) as srv:
        yield srv


def claim_ops(es: EngineStack) -> list[str]:
    """Every step the engine plans for a weight-cache claim in a preview (`same`, `update`, `replace`, …)."""
    events: list[auto.events.EngineEvent] = []
    es.stack.preview(on_event=events.append)
    ops = []
    for ev in events:
        meta = (ev.resource_pre_event or ev.res_outputs_event)
        if meta is not None and meta.metadata.type == PVC_TYPE:
            op = meta.metadata.op
            ops.append(op.value if hasattr(op, "value") else str(op))
    return ops


def test_a_second_reader_and_a_second_replica_keep_the_claim(server: KubeAPIServer,
                                                             lean_engine_env: dict[str, str],
                                                             make_stack: Callable[..., EngineStack]) -> None:
    es = make_stack(extra_env=lean_engine_env)
    a = model("a", 1)
    configure(es, server, [a])
    assert es.stack.up().summary.result == "succeeded"
    pvc_name = weight_cache(a["repo"], a["revision"])
    with server.client() as kube:
        pvc = kube.get("v1", "PersistentVolumeClaim", pvc_name, NS)
        assert pvc is not None and pvc["spec"]["accessModes"] == ["ReadWriteOnce"], "one pod reads it"
        uid = pvc["metadata"]["uid"]
        a_spec, _ = pod_spec(kube, "Deployment", "a")
        home = pinned(a_spec)
        assert len(home) == 1

    steps: list[dict[str, Any]] = [
        {"models": [a, model("b", 1)], "why": "a second model on the same weights"},
        {"models": [model("a", 2), model("b", 1)], "why": "a second replica of a"},
    ]
    for step in steps:
        configure(es, server, step["models"])
        ops = claim_ops(es)
        # `update`: its `tkf.io/models` annotation names the new reader; never a replace or a delete.
        assert ops and set(ops) <= {"same", "update"}, f"{step['why']}: the claim would be {ops}"
        assert es.stack.up().summary.result == "succeeded"
        with server.client() as kube:
            pvc = kube.get("v1", "PersistentVolumeClaim", pvc_name, NS)
            assert pvc is not None and pvc["metadata"]["uid"] == uid, f"{step['why']}: the claim was recreated"
            assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
            for name in ("a", "b"):
                spec, _ = pod_spec(kube, "Deployment", name)
                assert pinned(spec) == home, f"{step['why']}: {name} is not on the claim's node {home}"
