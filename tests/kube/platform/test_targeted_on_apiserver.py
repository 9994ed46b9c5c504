"""Targeted runs (`up --models`, tkf_infra/targeted.py) against a real kube-apiserver: a sequence of catalog edits
applied by targeted runs to one stack and by full runs to another ends, after every step, in the same objects
on the server and the same outputs, and a full preview of the targeted stack then has nothing to do.

The edits: a model's setting changed, a model added (sharing another's weight cache), a model removed, a
model moved to other weights (its old weight cache loses its last consumer and goes, the other gains one).
The two stacks are the dev CPU catalog on the vllm backend, the platform `alreadyInstalled` (no chart: what
is compared is the models' objects), each in a serving namespace of its own on this folder's server.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from tests.engine_fixtures import EngineStack, dev_config
from tests.kube.apiserver import KubeAPIServer
from tests.kube.client import KubeClient
from tests.kube.platform.readback import GATEWAY_NS, MONITORING_NS, read_back, release_pvcs
from tests.kube.platform.test_up_against_apiserver import cli, wait_namespaces_gone
from tkf_infra.ops.stacks import DEV_PASSPHRASE

pytestmark = [pytest.mark.apiserver, pytest.mark.engine]

# Two replicas each: every weight cache is read-write-many from the start. A cache that gains a consumer is
# updated, never replaced, whatever its mode (a claim keeps it: tkf_infra/plan/cache_modes.py, and
# tests/kube/platform/test_cache_mode_on_apiserver.py for a read-write-once one).
MODELS: list[dict[str, Any]] = [{**m, "replicas": 2} for m in dev_config()["config"]["tkf-infra:models"]]
A, B = MODELS[0], MODELS[1]
C = {**B, "name": "coder-copy", "servedName": "coder-copy"}
#: Fields the server or its (absent) controllers set per object: never the program's.
VOLATILE = {"uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "status", "clusterIP",
            "clusterIPs"}


def aim(es: EngineStack, kube_apiserver: KubeAPIServer) -> str:
    serving = f"llm-t-{uuid.uuid4().hex[:6]}"
    path = es.project / f"Pulumi.{es.stack.name}.yaml"
    doc = yaml.safe_load(path.read_text())
    cfg = doc["config"]
    cfg["tkf-infra:cluster"] = {"mode": "kubeconfig", "kubeconfig": str(kube_apiserver.kubeconfig),
                                "skipAwait": True}
    cfg["tkf-infra:namespaces"] = {"serving": serving, "gateway": GATEWAY_NS, "monitoring": MONITORING_NS}
    cfg["tkf-infra:serving"].update(backend="vllm", allowCpu=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return serving


@pytest.fixture
def two_stacks(kube: KubeClient, kube_apiserver: KubeAPIServer, lean_engine_env: dict[str, str],
               make_stack: Callable[..., EngineStack]) -> Iterator[list[tuple[EngineStack, str]]]:
    made = []
    for _ in range(2):
        es = make_stack(extra_env=lean_engine_env)
        made.append((es, aim(es, kube_apiserver)))
    yield made
    for es, serving in made:
        release_pvcs(kube, serving)
        es.stack.destroy(color="never", continue_on_error=True)
        release_pvcs(kube, serving)
        wait_namespaces_gone(kube, (serving,))


def normal(value: Any) -> Any:
    """An object as the program made it: without what the server, the controllers or the random parts add."""
    if isinstance(value, dict):
        return {k: normal(v) for k, v in value.items() if k not in VOLATILE and "controller-uid" not in k}
    if isinstance(value, list):
        return [normal(v) for v in value]
    return value


def cluster(kube: KubeClient, serving: str) -> dict[str, Any]:
    objects = {f"{kind}/{o['metadata']['name']}": normal(o) for kind, found in read_back(kube, serving).items()
               for o in found}
    return dict(json.loads(json.dumps(objects).replace(serving, "NAMESPACE")))


def outputs(es: EngineStack, serving: str) -> dict[str, Any]:
    env = {**os.environ, **es.env, "PULUMI_CONFIG_PASSPHRASE": DEV_PASSPHRASE}
    proc = subprocess.run([str(es.project / ".venv" / "bin" / "python"), "-m", "tkf_infra", "outputs", "--stack",
                           es.stack.name], cwd=es.project, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout.replace(serving, "NAMESPACE").replace(es.stack.name, "STACK")))


def test_targeted_edits_end_in_the_objects_and_outputs_of_full_runs(kube: KubeClient,
                                                                   two_stacks: list[tuple[EngineStack, str]]) -> None:
    (targeted, t_ns), (full, f_ns) = two_stacks
    steps: list[tuple[str, list[dict[str, Any]], str]] = [
        ("first up of both", [A, B], ""),
        ("a setting of A", [{**A, "maxNumSeqs": 4}, B], A["name"]),
        ("C added", [{**A, "maxNumSeqs": 4}, B, C], C["name"]),
        ("B removed", [{**A, "maxNumSeqs": 4}, C], B["name"]),
        ("A on other weights", [{**A, "maxNumSeqs": 4, "repo": C["repo"], "revision": C["revision"]}, C], A["name"]),
    ]
    for label, models, named in steps:
        for es, _ in two_stacks:
            es.set_models(models)
        args = ("up", "--models", named) if named else ("up",)
        code, summary, err = cli(targeted, *args)
        assert code == 0, f"{label}: {err} {json.dumps(summary)[:3000]}"
        code, _, err = cli(full, "up")
        assert code == 0, f"{label}: {err} {json.dumps(summary)[:3000]}"
        if named:
            stepped = {k: v for k, v in summary["preview"]["changeSummary"].items() if k != "same"}
            assert stepped, f"{label}: the targeted preview stepped nothing"
        on_t, on_f = cluster(kube, t_ns), cluster(kube, f_ns)
        assert sorted(on_t) == sorted(on_f), f"{label}: {sorted(set(on_t) ^ set(on_f))}"
        differ = [k for k in on_t if on_t[k] != on_f[k]]
        assert not differ, f"{label}: {differ[0]}: {on_t[differ[0]]} != {on_f[differ[0]]}"
        assert outputs(targeted, t_ns) == outputs(full, f_ns), label
        code, preview, err = cli(targeted, "preview")
        assert code == 0 and {k for k in preview["changeSummary"] if k != "same"} == set(), (label, preview)
