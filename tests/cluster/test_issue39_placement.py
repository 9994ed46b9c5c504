"""Issue 39's three failures, as the CLI's own `up` meets them on a cluster: the real kube-scheduler and
controllers, kwok's nodes shaped like the prod stack's pool (4 x 8 H100, the ``nvidia.com/gpu`` taint),
KServe's and LWS's real managers, `up` waiting for every model (``cluster.skipAwait`` off).

- a prod-like fleet (four small models and the 405B's two 8-GPU pods on 32 GPUs the plan admits) must all
  be Ready: the default scheduler spreads the small pods, and no node keeps 8 GPUs for the 405B;
- a fleet that exactly fills the 32 GPUs (8 single-GPU replicas, 3 eight-GPU models) must all be bound;
- weight-download Jobs on a pool whose every node carries the GPU taint must run.

Each failed on the render before pins (placement left to the default scheduler, issue 39) and passes with
them; a failure
names every pod left Pending with the scheduler's own message and the workloads' conditions
(``fleet.UpRun.explain``). Downloads are paced by their size (``fleet.Kubelets``), so the 405B starts
last, as on a cluster: unpaced, the prod-like test passed in 1 of 2 runs on main's render (its pods were
bound first), and passed again in 1 of 2 paced runs: not strict. On main's render, paced (2026-12-07, 5.2 min
for the first two): the four small models went
one per node and both 405B pods stayed Pending ("0/5 nodes are available: 1 node(s) didn't match Pod's
node affinity/selector, 4 Insufficient nvidia.com/gpu. … 4 No preemption victims found for incoming pod.";
its LLMInferenceService WorkerWorkloadReady=False), `up` waiting until the watchdog stopped it; in the full
pool the eight single-GPU replicas spread and none of the three 8-GPU models was placed (same message);
the download Job stayed Pending ("0/4 nodes are available: 4 node(s) had untolerated taint(s).").
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.cluster.fleet import UpRun, assert_all_ready, committed_stack, small
from tests.kube.platform.test_up_against_apiserver import LLAMA_405B, QWEN_72B

pytestmark = [pytest.mark.apiserver, pytest.mark.engine, pytest.mark.cluster]


def test_a_prod_like_fleet_with_a_multi_node_model_is_all_ready(fleet_up: Callable[..., UpRun]) -> None:
    """24 of 32 GPUs: the 405B's two 8-GPU pods need two nodes left whole by the small models' pods."""
    models = [small("qwen-72b", 4, QWEN_72B), small("qwen3-8b-tp2", 2), small("qwen3-8b-a", 1),
              small("qwen3-8b-b", 1), LLAMA_405B]
    run = fleet_up(models)
    assert_all_ready(run, pods=6)


def test_a_fleet_that_exactly_fills_the_pool_is_all_bound(fleet_up: Callable[..., UpRun]) -> None:
    """8 single-GPU replicas and three 8-GPU models: 32 of 32 GPUs, every one of them admitted by the plan."""
    models = [small("qwen3-8b", 1, replicas=8),
              *(small(f"qwen-72b-{i}", 8, QWEN_72B) for i in range(3))]
    run = fleet_up(models)
    assert not run.stuck, run.explain()
    assert_all_ready(run, pods=11)


def test_weight_downloads_run_on_a_pool_whose_every_node_has_the_gpu_taint(fleet_up: Callable[..., UpRun]) -> None:
    """No node outside the GPU pool: the download Job must tolerate and select it, as its model's pods do."""
    run = fleet_up([small("qwen3-8b", 1)], system_node=False, backend="vllm", platform=False)
    assert not run.stuck, run.explain()
    assert_all_ready(run, pods=1)


@pytest.mark.parametrize(("stack", "backend"), [("prod", "kserve"), ("prod", "vllm"), ("dev", "kserve")])
def test_a_stacks_own_catalog_is_all_ready_on_its_pools(fleet_up: Callable[..., UpRun], stack: str,
                                                         backend: str) -> None:
    """The committed stacks' models on their own pools, `up` waiting for every one and ending with all of them
    Ready: prod's (two 1-GPU replicas, TP 4, TP 2, the 405B over two nodes) on its 4 x 8 H100 pool on both
    backends; dev's two CPU models on its one CPU node (no GPU taint, no system node: the platform runs there
    too) on its own backend."""
    pools, models = committed_stack(stack)
    run = fleet_up(models, pools=pools, backend=backend, system_node=stack == "prod")
    assert not run.stuck, run.explain()
    assert_all_ready(run, pods=sum(int(m.get("replicas", 1)) * int(m.get("nodeCount", 1)) for m in models))
    assert run.summary.get("ok") is True and sorted(run.summary.get("models") or {}) == sorted(
        m["name"] for m in models), run.explain()
