"""What a platform engineer sees of each model on a cluster (issue 39), through the CLI's own `up` (waiting
for real) and `status`, on the real scheduler and controllers with kwok's nodes shaped like the prod pool:

- `status` shows a model pass Pending → Downloading → Loading → Ready while `up` runs (the weights take
  their size / bandwidth to download, the serving pod's init container waits for them, vLLM takes its time
  to load: ``fleet.Kubelets``), and the model list comes from the catalog before the first `up` has written
  any output;
- a model whose pods crash-loop or never turn Ready is named by `up` (after ``cluster.readyTimeoutSeconds``)
  with the others deployed and Ready, and `status` gives each its phase in the kubelet's words;
- a node lost under a model leaves it waiting for its pinned node (the plan's pins hold: no other model's
  room is taken), `status` says an `up` re-plans it, and the next `up` brings it back Ready on another node.

The vllm backend (the project's own Deployments) keeps these runs short; both backends reach Ready in
test_issue39_placement.py.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.cluster.fleet import Fleet, Kubelets, assert_all_ready, small
from tests.cluster.harness import pod_ready
from tests.cluster.nodes import mark_not_ready
from tkf_infra.exit_codes import ExitCode

pytestmark = [pytest.mark.apiserver, pytest.mark.engine, pytest.mark.cluster]


@contextmanager
def watching(fleet: Fleet, model: str) -> Iterator[list[str]]:
    """`status` run again and again (as a person would watch it) while the block runs: the phases of
    ``model``, each change once."""
    seen: list[str] = []
    done = threading.Event()
    errors: list[BaseException] = []

    def watch() -> None:
        while not done.is_set():
            try:
                _, rows = fleet.status()
            except BaseException as exc:  # re-raised in the test's thread
                errors.append(exc)
                return
            phase = (rows.get(model) or {}).get("phase")
            if phase and (not seen or seen[-1] != phase):
                seen.append(phase)
            done.wait(0.5)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        done.set()
        thread.join(timeout=180)
    if errors:
        raise errors[0]


def test_status_shows_a_model_pass_downloading_and_loading_on_its_way_to_ready(fleet: Fleet) -> None:
    """Qwen3-8B's cache at 0.5 GiB/s (about 35 s) and 20 s of loading: long enough for `status` (a few
    seconds a call) to see each phase; the order is what the cluster wrote, never backwards."""
    fleet.aim([small("qwen3-8b", 1)], backend="vllm", platform=False)
    with watching(fleet, "qwen3-8b") as seen:
        run = fleet.again(Kubelets(gib_per_s=0.5, load_s=20))
    assert_all_ready(run, pods=1)
    assert run.summary["readiness"]["models"] == ["qwen3-8b"], run.explain()
    order = ["Pending", "Downloading", "Loading", "Ready"]
    assert {"Downloading", "Loading", "Ready"} <= set(seen), seen
    assert [order.index(p) for p in seen] == sorted(order.index(p) for p in seen), seen
    code, rows = fleet.status()
    assert code == ExitCode.OK and rows["qwen3-8b"]["phase"] == "Ready", rows
    assert rows["qwen3-8b"]["weightCache"] == "complete", rows


def test_a_model_that_cannot_become_ready_is_named_and_the_others_deploy(fleet: Fleet) -> None:
    """Three models; one crash-loops, one runs but never passes its readiness probe. `up` waits
    readyTimeoutSeconds for them, ends naming both (exit non-zero) with the third Ready, and `status` gives
    the crash-looping one Failed and the other Loading, each in the kubelet's words."""
    models = [small("good", 1), small("crashing", 1), small("stalled", 1)]
    kubelets = Kubelets(faults={"crashing": "crash-loop", "stalled": "never-ready"})
    run = fleet.up(models, backend="vllm", platform=False, kubelets=kubelets,
                   cluster_settings={"readyTimeoutSeconds": 60})
    assert run.returncode != 0 and not run.stopped, run.explain()
    assert run.summary["failedModels"] == ["crashing", "stalled"], run.explain()
    assert run.summary["models"]["good"]["status"] == "created", run.explain()
    for name in ("crashing", "stalled"):
        assert any("timed out" in r or "Timeout" in r or "timeout" in r
                   for r in run.summary["models"][name].get("reasons", [])), run.explain()
    good = [p for p in run.pods if p["metadata"].get("labels", {}).get("tkf.io/model") == "good"
            and pod_ready(p)]
    assert good, run.explain()

    code, rows = fleet.status()
    assert code == ExitCode.REFUSED, rows
    assert rows["good"]["phase"] == "Ready", rows
    assert rows["crashing"]["phase"] == "Failed" and "CrashLoopBackOff" in rows["crashing"]["reason"], rows
    assert rows["stalled"]["phase"] == "Loading" and "Ready=False" in rows["stalled"]["reason"], rows


def test_a_lost_node_leaves_its_model_waiting_until_up_re_plans_it_ready_elsewhere(fleet: Fleet) -> None:
    """Two replicas of an 8-GPU model, one per node (the plan's pins). The node under one replica goes
    NotReady: its pod is evicted and its replacement waits for the pinned node — Degraded in `status`, which
    says to run `up` — rather than taking another node's room behind the plan's back. The next `up` reads the
    node as gone, pins the replica on a Ready node, and ends with both replicas Ready."""
    run = fleet.up([small("wide", 8, replicas=2)], backend="vllm", platform=False)
    assert_all_ready(run, pods=2)
    before = {p["spec"]["nodeName"] for p in run.pods if pod_ready(p) and "wide" in p["metadata"]["name"]}
    assert len(before) == 2, run.explain()
    lost = sorted(before)[0]
    mark_not_ready(fleet.kube, lost)

    def waiting() -> bool:
        _, rows = fleet.status()
        return rows["wide"]["phase"] == "Degraded" and "pinned node(s)" in rows["wide"]["reason"]

    fleet.kube.wait_for(waiting, "the model Degraded, its evicted replica waiting for its pinned node", 120, 2)
    _, rows = fleet.status()
    assert f"waiting for its pinned node(s) {lost}, not Ready or cordoned: run `up`" in rows["wide"]["reason"], rows

    again = fleet.again()
    assert_all_ready(again, pods=2)
    after = {p["spec"]["nodeName"] for p in again.pods if pod_ready(p) and "wide" in p["metadata"]["name"]}
    assert len(after) == 2 and lost not in after, again.explain()
    code, rows = fleet.status()
    assert code == ExitCode.OK and rows["wide"]["phase"] == "Ready", rows
