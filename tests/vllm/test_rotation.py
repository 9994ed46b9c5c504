"""A runtime-key rotation on real vLLM, through the real gateway, with traffic all along (docs/operations.md).

The dev stack (vllm backend) goes through the rotation's three steps as an operator runs them —
``pulumi config set --secret`` / ``config rm``, then ``python -m tkf_infra up`` — and each step's
rendered pod runs for real (tests/vllm/conftest.py). The cluster's part is played as a rolling
update plays it: the new pod starts beside the old one and joins the model's Service once ready,
then the old one leaves the Service, finishes its requests and stops (tests/vllm/service.py). The
gateway is the LiteLLM proxy holding the key ``runtimeApiKey`` names at each step, and it too is
replaced by a new one when that output changes.

What must hold: while both pods serve, each answers the gateway's key (so the old gateway key
reaches the step-1 pod, the new one the step-1 pod and the step-3 pod); not one request through the
gateway fails from the first pod to the last; mid-rotation the pod accepts both keys, afterwards the
old key gets 401; step 2 changes no workload (no restart) and steps 1 and 3 do; no key is in a pod
spec, a non-secret output or the state in plaintext. The kserve backend's pod and a multi-node
leader hand vLLM both keys too: their shells (KServe's preset runs ours through ``eval``) run for
real and vLLM's own parser reads what they pass.

Cost: two vLLM starts (the step-0 pod is the tier's running vllm pod: same stack, same spec), four
``up``s (three here, one for the kserve stack), two LiteLLM starts; two vLLM run at once while a
new pod starts beside the old one (~10 GB).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from components.fleet import API_KEY_SECRET
from components.vllm_args import API_KEY_ENV, API_KEY_EXTRA_ENV, lws_command
from tests.vllm.argv import run_recorded
from tests.vllm.conftest import TOOL_MODEL, PodServers, RunningPod, Stacks
from tests.vllm.gateway import run_gateway
from tests.vllm.pod import kserve_command, load_manifests
from tests.vllm.server import shm_objects
from tests.vllm.service import RollingService, Traffic
from tests.vllm.stacks import RenderedStack, apply_step, render_stack, snapshot
from tkf_infra.config.api_keys import keys_digest
from tkf_infra.config.reader import read_stack_file
from tkf_infra.config.validate import validate_catalog
from tkf_infra.names import API_KEYS_ANNOTATION, MODEL_MOUNT, workload

ROOT = Path(__file__).resolve().parents[2]
NEW_KEY = "sk-rotated-" + secrets.token_hex(16)
#: A key using every character a key may hold besides letters and digits: it must reach vLLM intact
#: through KServe's `eval`.
ODD_KEY = "sk.rot+ated/key=0_9-" + secrets.token_hex(4)
NOT_A_KEY = "sk-never-issued-" + secrets.token_hex(8)
STEPS = ("before", "next-accepted", "previous-accepted", "after")
#: Requests each pod must serve while it shares the Service with the other (so both keys are exercised).
OVERLAP_REQUESTS = 3


@pytest.fixture(scope="module")
def steps(stacks: Stacks, tier_dir: Path) -> dict[str, RenderedStack]:
    """The vllm backend's dev stack at each step: ``before`` is the tier's stack (one key, the dev
    key); the others are a copy of it taken through docs/operations.md's steps."""
    before = stacks.get("vllm")
    old = before.outputs["runtimeApiKey"]
    rotating = render_stack("vllm", tier_dir / "rotation", secrets={"apiKeyNext": NEW_KEY})  # step 1
    out = {"before": before, "next-accepted": snapshot(rotating, "next-accepted")}
    out["previous-accepted"] = apply_step(rotating, "previous-accepted", remove=("apiKeyNext",),
                                          set_secrets={"apiKey": NEW_KEY, "apiKeyPrevious": old})
    out["after"] = apply_step(rotating, "after", remove=("apiKeyPrevious",))
    return out


def _deployments(stack: RenderedStack) -> dict[str, dict[str, Any]]:
    """The models' Deployments (the dev stack also renders the platform's)."""
    return {name: doc for (kind, name), doc in load_manifests(stack.render_dir).items()
            if kind == "Deployment" and "tkf.io/model" in doc["metadata"].get("labels", {})}


def test_pods_roll_only_when_the_accepted_keys_change_and_no_key_is_in_plaintext(
        steps: dict[str, RenderedStack]) -> None:
    old = steps["before"].outputs["runtimeApiKey"]
    accepted = {"before": (old,), "next-accepted": (old, NEW_KEY), "previous-accepted": (NEW_KEY, old),
                "after": (NEW_KEY,)}
    deployments = {step: _deployments(s) for step, s in steps.items()}
    assert len(deployments["before"]) == 3
    # The roll tests/vllm/service.py plays is the one these (CPU) Deployments ask for: surge, none down.
    for step, by_name in deployments.items():
        for name, dep in by_name.items():
            assert dep["spec"]["strategy"] == {"type": "RollingUpdate",
                                               "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}, (step, name)
    for step, by_name in deployments.items():
        for name, dep in by_name.items():
            annotations = dep["spec"]["template"]["metadata"]["annotations"]
            assert annotations[API_KEYS_ANNOTATION] == keys_digest(accepted[step]), (step, name)
    # Step 2 (the gateway switches) leaves every workload as it was: no pod restarts. Steps 1, 3 roll them.
    assert deployments["previous-accepted"] == deployments["next-accepted"]
    models = {step: {m: r["status"] for m, r in steps[step].summary["models"].items()} for step in STEPS[2:]}
    assert set(models["previous-accepted"].values()) == {"unchanged"}, models
    assert set(models["after"].values()) == {"updated"}, models
    # The gateway's key: the old one until step 2, the new one from then on.
    assert [steps[s].outputs["runtimeApiKey"] for s in STEPS] == [old, old, NEW_KEY, NEW_KEY]
    assert [steps[s].outputs["apiKeyRotation"]["step"] for s in STEPS] == [
        "none", "next-accepted", "previous-accepted", "none"]
    for step, stack in steps.items():
        for (kind, name), doc in load_manifests(stack.render_dir).items():
            if kind != "Secret":
                assert NEW_KEY not in json.dumps(doc) and old not in json.dumps(doc), (step, kind, name)
        shown = {k: v for k, v in stack.outputs.items() if k != "runtimeApiKey"}
        assert NEW_KEY not in json.dumps(shown) and old not in json.dumps(shown), step
    state = "".join(p.read_text(errors="replace") for p in (steps["after"].root.parent / "state").rglob("*.json"))
    assert state and NEW_KEY not in state, "the state holds the new key in plaintext"


def _assert_keys(pod: RunningPod, accepted: tuple[str, ...], refused: tuple[str, ...]) -> None:
    url = f"{pod.server.url}/v1/models"
    for key, want in [*((k, 200) for k in accepted), *((k, 401) for k in refused)]:
        got = httpx.get(url, headers={"Authorization": f"Bearer {key}"}, timeout=10).status_code
        assert got == want, f"the {pod.stack.render_dir.name} pod answered {got} to a key it should answer {want}"


@pytest.mark.vllm_solo
def test_no_request_through_the_gateway_fails_during_the_rotation(steps: dict[str, RenderedStack], pods: PodServers,
                                                                  tier_dir: Path) -> None:
    old = steps["before"].outputs["runtimeApiKey"]
    first = pods.get("vllm", TOOL_MODEL)  # step 0: the tier's pod (same stack, same spec)
    assert first.command.env[API_KEY_ENV] == old and API_KEY_EXTRA_ENV not in first.command.env
    assert steps["next-accepted"].gateway_config.read_text() == steps["previous-accepted"].gateway_config.read_text()
    served = first.endpoint["servedName"]
    service = RollingService()
    shm_at_start = shm_objects()  # the first pod's objects, which go when it stops
    with ExitStack() as cleanup:
        cleanup.callback(service.close)
        service.add("before", first.server.url)
        gateway = cleanup.enter_context(run_gateway(first, tier_dir / "rotation-gateway-1", api_key=old,
                                                    api_base=f"{service.url}/v1"))
        traffic = Traffic(("gateway-1", gateway.service.url, gateway.master_key), served).start()
        cleanup.callback(traffic.stop)
        traffic.wait_until(lambda: service.served["before"] >= OVERLAP_REQUESTS, "traffic through the first pod")

        # Step 1 rolls out: the pod accepting both keys joins the Service, then the first one leaves it.
        second = pods.start(steps["next-accepted"], TOOL_MODEL, "rotation-next-accepted")
        cleanup.callback(second.stop, check_shm=False)
        _assert_keys(second, accepted=(old, NEW_KEY), refused=(NOT_A_KEY,))
        _overlap(service, traffic, ("before", first), ("next-accepted", second))
        pods.close(check_shm=False)  # the first pod's turn to stop (the tier's vllm pod has served its last test)

        # Step 2: the gateway is redeployed with the new runtimeApiKey; no pod restarts.
        gateway2 = cleanup.enter_context(run_gateway(second, tier_dir / "rotation-gateway-2", api_key=NEW_KEY,
                                                     api_base=f"{service.url}/v1"))
        traffic.switch("gateway-2", gateway2.service.url, gateway2.master_key)
        gateway.service.stop(check_shm=False)
        through = sum(o.gateway == "gateway-2" for o in traffic.outcomes)
        traffic.wait_until(lambda: sum(o.gateway == "gateway-2" for o in traffic.outcomes) >= through + 3,
                           "traffic through the new gateway")

        # Step 3 rolls out: the pod accepting the new key only joins, then the step-1 pod leaves.
        third = pods.start(steps["after"], TOOL_MODEL, "rotation-after")
        cleanup.callback(third.stop, check_shm=False)
        _assert_keys(third, accepted=(NEW_KEY,), refused=(old, NOT_A_KEY))
        _overlap(service, traffic, ("next-accepted", second), ("after", third))
        n = service.served["after"]
        traffic.wait_until(lambda: service.served["after"] >= n + OVERLAP_REQUESTS, "traffic after the rotation")
        traffic.stop()
    # Every process of the rotation has stopped: whatever it put in /dev/shm must be gone.
    leaked = shm_objects() - shm_at_start
    assert not leaked, f"the rotation's servers left shared-memory objects in /dev/shm: {sorted(leaked)}"
    failures = traffic.failures()
    assert not failures, f"{len(failures)} of {len(traffic.outcomes)} requests failed: {failures[:5]}"
    assert {status for (_, status) in service.statuses} == {200}, service.statuses
    assert {o.gateway for o in traffic.outcomes} == {"gateway-1", "gateway-2"}
    print(f"rotation: {len(traffic.outcomes)} requests through the gateway, none failed; per pod "
          f"{dict(service.served)}")


def _overlap(service: RollingService, traffic: Traffic, old: tuple[str, RunningPod],
             new: tuple[str, RunningPod]) -> None:
    """The new pod joins the Service; both serve the gateway's requests; the old one leaves and stops."""
    (old_name, old_pod), (new_name, new_pod) = old, new
    service.add(new_name, new_pod.server.url)
    floor = service.served[old_name]
    traffic.wait_until(lambda: service.served[new_name] >= OVERLAP_REQUESTS
                       and service.served[old_name] >= floor + OVERLAP_REQUESTS,
                       f"traffic to both the {old_name} and the {new_name} pod")
    service.remove(old_name)
    if old_name != "before":  # the tier's own pod is stopped by its owner (PodServers)
        old_pod.stop(check_shm=False)  # the new pod runs: /dev/shm is checked after the rotation


@pytest.fixture(scope="module")
def kserve_rotating(tier_dir: Path) -> Iterator[RenderedStack]:
    """The kserve backend's dev stack in step 1 of a rotation, with a key of every allowed character."""
    yield render_stack("kserve", tier_dir / "rotation-kserve", secrets={"apiKeyNext": ODD_KEY})


def test_kserve_and_multi_node_pods_hand_vllm_both_keys(kserve_rotating: RenderedStack, oracle: Any,
                                                        fake_bin: Path) -> None:
    old = kserve_rotating.outputs["runtimeApiKey"]
    kserve = kserve_command(load_manifests(kserve_rotating.render_dir), workload(TOOL_MODEL))
    assert kserve.env[API_KEY_ENV] == old and kserve.env[API_KEY_EXTRA_ENV] == ODD_KEY
    argv = {"kserve": run_recorded(kserve.argv, kserve.env, fake_bin)}  # KServe's bash preset, eval and all
    prod = validate_catalog(read_stack_file(ROOT / "Pulumi.prod.yaml"))
    (multi,) = [e for e in prod.models if e.is_multi_node]
    leader = lws_command(multi, MODEL_MOUNT, leader=True, two_keys=True)
    env = {"LWS_LEADER_ADDRESS": "leader.invalid", "LWS_GROUP_SIZE": str(multi.node_count), "LWS_WORKER_INDEX": "0",
           API_KEY_ENV: old, API_KEY_EXTRA_ENV: ODD_KEY}
    argv["lws-leader"] = run_recorded(leader, env, fake_bin)
    results = oracle(argv, show=("api_key",))["results"]
    for pod, r in results.items():
        assert r["ok"], (pod, r)
        assert r["values"]["api_key"] == [old, ODD_KEY], pod
    assert API_KEY_SECRET in {name for (kind, name) in load_manifests(kserve_rotating.render_dir) if kind == "Secret"}
