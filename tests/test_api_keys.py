"""Runtime API keys under mocks: how each step of a rotation reaches the pods, the Secret and the outputs.

What a user would notice: pods restart exactly when the set of accepted keys changes (step 1 and
step 3, never step 2, when the gateway switches); the keys are in the Secret only (no value in a pod
spec, an annotation or a non-secret output); both backends and the multi-node leader pass the
second key; bad keys are all reported at once without echoing them. The real-vLLM tier
(tests/vllm/test_rotation.py) runs the rendered pods.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pulumi
import pytest

from components.fleet import API_KEY_EXTRA_SECRET_KEY, API_KEY_SECRET, API_KEY_SECRET_KEY
from components.vllm_args import API_KEY_ENV, API_KEY_EXTRA_ENV
from tests.mocks import CPU, MULTI_NODE, SINGLE_GPU, Harness, Registered, program, stack_doc, unwrap_secrets
from tkf_infra.config import SettingsError
from tkf_infra.config.api_keys import ApiKeys, key_problems, keys_digest
from tkf_infra.config.reader import read_api_keys
from tkf_infra.names import API_KEYS_ANNOTATION

OLD, NEW = "sk-old-3f9a1c7e5b", "sk-new-8d2e4a6c0f"
#: (apiKey, apiKeyNext, apiKeyPrevious) of each step of docs/operations.md, from one key to the other.
STEPS = {"before": (OLD, None, None), "next-accepted": (OLD, NEW, None), "previous-accepted": (NEW, None, OLD),
         "after": (NEW, None, None)}
WORKLOAD_KINDS = ("LLMInferenceService", "Deployment", "LeaderWorkerSet")


def build(step: str, backend: str, *models: dict[str, Any]) -> Harness[Any]:
    current, nxt, prev = STEPS[step]
    h = program(stack_doc(*(models or (SINGLE_GPU, CPU, MULTI_NODE)), backend=backend), api_key=current,
                api_key_next=nxt, api_key_previous=prev)
    assert h.error is None, h.error
    return h


def workloads(h: Harness[Any]) -> dict[str, Registered]:
    return {r.metadata["name"]: r for r in h.resources if r.custom and r.inputs.get("kind") in WORKLOAD_KINDS}


def pod_specs(w: Registered) -> dict[str, dict[str, Any]]:
    """role -> pod spec ("leader" serves the API)."""
    spec = w.spec
    if w.inputs["kind"] == "LLMInferenceService":
        return {"leader": spec["template"], **({"worker": spec["worker"]} if "worker" in spec else {})}
    if w.inputs["kind"] == "Deployment":
        return {"leader": spec["template"]["spec"]}
    t = spec["leaderWorkerTemplate"]
    return {"leader": t["leaderTemplate"]["spec"], "worker": t["workerTemplate"]["spec"]}


def pod_annotations(w: Registered) -> list[dict[str, str]]:
    """The annotations every pod of the workload gets (KServe copies spec.annotations onto its templates)."""
    spec = w.spec
    if w.inputs["kind"] == "LLMInferenceService":
        return [spec.get("annotations", {})]
    if w.inputs["kind"] == "Deployment":
        return [spec["template"]["metadata"].get("annotations", {})]
    t = spec["leaderWorkerTemplate"]
    return [t[role]["metadata"].get("annotations", {}) for role in ("leaderTemplate", "workerTemplate")]


def main(pod: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod["containers"] if c["name"] == "main")


def argv_text(c: dict[str, Any]) -> str:
    return " ".join([*(c.get("command") or []), *(c.get("args") or [])])


def secret(h: Harness[Any]) -> Registered:
    (s,) = [r for r in h.resources if r.type == "kubernetes:core/v1:Secret" and r.metadata["name"] == API_KEY_SECRET]
    return s


@pytest.fixture(scope="module", params=["kserve", "vllm"])
def rotation(request: pytest.FixtureRequest) -> Iterator[dict[str, Harness[Any]]]:
    yield {step: build(step, request.param) for step in STEPS}


def test_pods_roll_when_the_accepted_set_changes_and_only_then(rotation: dict[str, Harness[Any]]) -> None:
    specs = {step: {name: w.spec for name, w in workloads(h).items()} for step, h in rotation.items()}
    assert len(specs["before"]) == 3
    # Step 2 (the gateway switches) leaves every workload exactly as it was: no pod restarts.
    assert specs["previous-accepted"] == specs["next-accepted"]
    for name in specs["before"]:
        digests = {step: {a[API_KEYS_ANNOTATION] for a in pod_annotations(workloads(h)[name])}
                   for step, h in rotation.items()}
        assert all(len(d) == 1 for d in digests.values()), digests
        before, adding, switched, after = (d.pop() for d in digests.values())
        assert len({before, adding, after}) == 3 and switched == adding, name
        assert adding == keys_digest((OLD, NEW)) == keys_digest((NEW, OLD))


def test_the_second_key_reaches_the_serving_container_by_reference_only(rotation: dict[str, Harness[Any]]) -> None:
    for step, h in rotation.items():
        two = step in ("next-accepted", "previous-accepted")
        for name, w in workloads(h).items():
            for role, pod in pod_specs(w).items():
                c = main(pod)
                env = {e["name"]: e for e in c["env"]}
                assert env[API_KEY_ENV]["valueFrom"] == {"secretKeyRef": {"name": API_KEY_SECRET,
                                                                          "key": API_KEY_SECRET_KEY}}
                assert (API_KEY_EXTRA_ENV in env) is two, (step, name, role)
                if two:
                    assert env[API_KEY_EXTRA_ENV]["valueFrom"] == {"secretKeyRef": {
                        "name": API_KEY_SECRET, "key": API_KEY_EXTRA_SECRET_KEY}}
                text = argv_text(c)
                if not two or role == "worker":
                    assert "--api-key" not in text, (step, name, role)
                elif c.get("command", [""])[0] == "/bin/sh":  # the vllm backend's LWS leader: a shell line
                    assert text.endswith(f'--api-key "${API_KEY_ENV}" "${API_KEY_EXTRA_ENV}"'), text
                elif w.inputs["kind"] == "LLMInferenceService" and "worker" not in w.spec:
                    # KServe's single-node preset parses its args again (eval): the shell's own reference
                    # in double quotes, so a key is one word whatever it holds (components/argv_layers.py)
                    assert text.endswith(f'--api-key "${API_KEY_ENV}" "${API_KEY_EXTRA_ENV}"'), text
                else:  # kubelet `$(VAR)` expansion: the Deployment's argv, our pipeline-parallel preset's args
                    assert text.endswith(f"--api-key $({API_KEY_ENV}) $({API_KEY_EXTRA_ENV})"), text
        for r in h.resources:
            if r.type != "kubernetes:core/v1:Secret":
                assert OLD not in json.dumps(r.inputs) and NEW not in json.dumps(r.inputs), (step, r.type, r.name)


def test_the_secret_holds_the_gateways_key_and_a_rotations_second_key(rotation: dict[str, Harness[Any]]) -> None:
    data = {step: unwrap_secrets(secret(h).inputs["stringData"]) for step, h in rotation.items()}
    assert secret(rotation["next-accepted"]).inputs["stringData"] != data["next-accepted"], "sent as a secret"
    assert data["next-accepted"] == {API_KEY_SECRET_KEY: OLD, API_KEY_EXTRA_SECRET_KEY: NEW}
    assert data["previous-accepted"] == {API_KEY_SECRET_KEY: NEW, API_KEY_EXTRA_SECRET_KEY: OLD}
    keys = {step: set(d) for step, d in data.items()}
    assert keys == {"before": {API_KEY_SECRET_KEY}, "next-accepted": {API_KEY_SECRET_KEY, API_KEY_EXTRA_SECRET_KEY},
                    "previous-accepted": {API_KEY_SECRET_KEY, API_KEY_EXTRA_SECRET_KEY},
                    "after": {API_KEY_SECRET_KEY}}
    for h in rotation.values():
        assert set(secret(h).options["additionalSecretOutputs"]) >= {"data", "stringData"}


def test_outputs_tell_the_gateway_which_key_and_where_the_rotation_is(monkeypatch: pytest.MonkeyPatch) -> None:
    for step, (current, nxt, prev) in STEPS.items():
        exported: dict[str, Any] = {}
        monkeypatch.setattr(pulumi, "export", exported.__setitem__)

        def outputs(_: Any, out: dict[str, Any] = exported) -> dict[str, Any]:
            return {"key": out["runtimeApiKey"], "secret": pulumi.Output.is_secret(out["runtimeApiKey"])}

        h = program(stack_doc(CPU, backend="vllm"), api_key=current, api_key_next=nxt, api_key_previous=prev,
                    outputs=outputs)
        assert h.error is None, h.error
        # The gateway's key is `apiKey`: it switches in step 2 only, and every pod accepts it at every step.
        assert h.values == {"key": current, "secret": True}, step
        rotation = exported["apiKeyRotation"]
        assert rotation == {"step": "none" if step in ("before", "after") else step,
                            "acceptedKeys": 2 if nxt or prev else 1,
                            "acceptedKeysDigest": keys_digest(tuple(k for k in (current, nxt, prev) if k)),
                            "gatewayKeyDigest": keys_digest((current,))}
        assert OLD not in json.dumps(rotation) and NEW not in json.dumps(rotation)


def test_key_problems_are_reported_at_once_without_the_values() -> None:
    bad = "has space'$(x)"
    problems = key_problems({"apiKey": None, "apiKeyNext": bad, "apiKeyPrevious": "-leading-dash"},
                            is_secret=lambda name: name != "apiKeyNext")
    text = "\n".join(str(p) for p in problems)
    assert "tkf-infra: apiKeyNext: may contain only letters, digits" in text
    assert "tkf-infra: apiKeyPrevious: may contain only" in text
    assert "apiKeyNext: is stored in plaintext in the stack file" in text and "--secret apiKeyNext" in text
    assert "is set but apiKey is not" in text and "is set together with apiKeyNext" in text
    assert bad not in text and "leading-dash" not in text
    assert [str(p) for p in key_problems({"apiKey": OLD, "apiKeyNext": OLD})] == [
        "tkf-infra: apiKeyNext: equals apiKey: nothing would rotate; set a new key, or remove `apiKeyNext`"]
    assert OLD not in repr(ApiKeys(OLD, NEW))


@pytest.fixture
def engine_config() -> Iterator[None]:
    yield
    pulumi.runtime.set_all_config({}, [])


def test_the_program_reads_the_three_secrets_and_refuses_a_plaintext_one(engine_config: None) -> None:
    pulumi.runtime.set_all_config({"tkf-infra:apiKey": OLD, "tkf-infra:apiKeyNext": NEW},
                                  ["tkf-infra:apiKey", "tkf-infra:apiKeyNext"])
    keys = read_api_keys()
    assert keys is not None and keys.accepted == (OLD, NEW) and keys.rotation.value == "next-accepted"
    pulumi.runtime.set_all_config({"tkf-infra:apiKey": OLD, "tkf-infra:apiKeyPrevious": NEW}, ["tkf-infra:apiKey"])
    with pytest.raises(SettingsError) as err:
        read_api_keys()
    assert "apiKeyPrevious: is stored in plaintext" in err.value.render() and NEW not in err.value.render()
    pulumi.runtime.set_all_config({}, [])
    assert read_api_keys() is None
