"""A protected weight cache through the real engine in render mode: a second replica, or a new storage class,
plans no replace.

Why: under `serving.protect` (prod) the engine refuses to replace a protected resource, and the Kubernetes
provider replaces a claim whose `spec.accessModes` change; a cache used to turn ReadWriteMany with its second
replica, so that routine edit failed the preview and `up`. Render mode reads no cluster: the claim's mode comes
back through the last run's `endpoints[…].footprint.weightCacheAccess` (`tkf_infra.plan.cache_modes`).
`spec.storageClassName` is force-new too: a change of `serving.storageClass` applies to new caches only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pulumi import automation as auto

from tests.engine_fixtures import EngineStack, dev_config

PVC_TYPE = "kubernetes:core/v1:PersistentVolumeClaim"
MODEL = dev_config()["config"]["tkf-infra:models"][0]


def claim_ops(es: EngineStack) -> list[str]:
    """Every step a preview plans for the weight cache's claim (`same`, `update`, `replace`, …)."""
    events: list[auto.events.EngineEvent] = []
    es.stack.preview(on_event=events.append)
    ops = []
    for ev in events:
        meta = ev.resource_pre_event or ev.res_outputs_event
        if meta is not None and meta.metadata.type == PVC_TYPE:
            op = meta.metadata.op
            ops.append(op.value if hasattr(op, "value") else str(op))
    return ops


def claim_modes(es: EngineStack, field: str = "accessModes") -> list[Any]:
    return [doc["spec"].get(field) for (kind, _), doc in es.manifests().items() if kind == "PersistentVolumeClaim"]


def test_a_second_replica_of_a_protected_cache_plans_no_replace(make_stack: Callable[..., EngineStack]) -> None:
    es = make_stack()

    def catalog(replicas: int) -> Callable[[dict[str, Any]], None]:
        def change(cfg: dict[str, Any]) -> None:
            cfg["tkf-infra:serving"]["protect"] = True
            cfg["tkf-infra:models"] = [dict(MODEL, replicas=replicas)]
        return change

    es.edit_config(catalog(1))
    assert es.stack.up().summary.result == "succeeded"
    assert claim_modes(es) == [["ReadWriteOnce"]], "one pod reads it"

    es.edit_config(catalog(2))
    ops = claim_ops(es)  # before the fix: "unable to replace resource … as it is currently marked for protection"
    assert ops and set(ops) <= {"same", "update"}, f"the protected claim would be {ops}"
    assert es.stack.up().summary.result == "succeeded"
    assert claim_modes(es) == [["ReadWriteOnce"]]
    endpoints = es.stack.outputs()["endpoints"].value
    assert [ep["footprint"]["weightCacheAccess"] for ep in endpoints.values()] == ["ReadWriteOnce"]

    before = claim_modes(es, "storageClassName")
    es.edit_config(lambda cfg: cfg["tkf-infra:serving"].update(storageClass="fast-nvme"))
    ops = claim_ops(es)  # before: "unable to replace resource … as it is currently marked for protection"
    assert ops and set(ops) <= {"same", "update"}, f"a class change would {ops} the protected claim"
    assert es.stack.up().summary.result == "succeeded"
    assert claim_modes(es, "storageClassName") == before, "the existing claim keeps its class"
