"""Generated fleets (issue 39, "at fleet scale"): whatever mix the plan admits, the rendered pins hold.

Fleets of 20 to 150 models — 1, 2, 4 and 8 GPUs, multi-node, fixed and autoscaled replicas — on two tainted
pools, rendered through the whole program under mocks; `tests.placement_check` then bounds every placement
the rendered constraints allow and runs the scheduler in random orders. Every replica the plan admits is
placed in every run, and every model it does not is refused by name at preview (`capacity`).
(The real kube-scheduler runs the same fleets in the cluster tier, tests/cluster.)
"""

from __future__ import annotations

import pytest

from tests.fleets import fleet, pools
from tests.mocks import program, stack_doc
from tests.placement_check import binding, node, workloads
from tests.test_admission import planned, refused
from tkf_infra.hub.lock import load_lock

LOCK = load_lock()
@pytest.mark.parametrize(("size", "seed"), [(20, 1), (20, 2), (60, 3), (150, 4)])
def test_every_admitted_pod_of_a_generated_fleet_is_placed_in_every_order(size: int, seed: int) -> None:
    doc = stack_doc(*fleet(size, seed), nodePools=pools(size))
    plan = planned(doc)
    assert len(plan.deployed) >= size // 2, "most of it is admitted"
    for name, (stage, reason) in refused(plan).items():
        assert stage == "capacity" and reason.startswith(f"model {name}: replica "), reason
    h = program(doc, lock=LOCK)
    objs = [r.manifest() for r in h.resources if r.custom and r.type.startswith("kubernetes:")]
    nodes = [node(n, {**plan.pools[p["name"]].node_labels, **plan.pools[p["name"]].node_selector},
                  plan.pools[p["name"]].taints, str(p["nodeResources"]["cpu"]), str(p["nodeResources"]["memory"]),
                  p["gpusPerNode"]) for p in doc["nodePools"] for n in p["nodes"]]
    assert binding(workloads(objs), nodes, runs=8) == []
