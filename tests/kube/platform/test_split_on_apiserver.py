"""A one-stack environment split in two on a real kube-apiserver (docs/stacks.md): `split` moves the
platform's state to `<env>-platform`; the platform's `up`, then the fleet's, change nothing on the
server (every object keeps its uid and resourceVersion); a catalog edit then updates the fleet's one
model and the platform stack has nothing to do; a platform upgrade (LWS's controller to another release)
then rewrites LWS's objects only, with the fleet running: not one fleet object changes.

The platform here is LeaderWorkerSet from its vendored chart (CRD, controller, RBAC, webhook objects)
on the vllm backend, which needs no other piece; the fleet the two dev CPU models.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi import automation as auto

from components.platform_charts import local_dir
from tests.engine.test_layers import changed, run_up
from tests.engine_fixtures import EngineStack
from tests.kube.apiserver import KubeAPIServer
from tests.kube.client import KubeClient
from tests.kube.platform.readback import CRD_API, release_pvcs
from tests.kube.platform.test_up_against_apiserver import CPU_MODELS, target_config, wait_namespaces_gone
from tkf_infra import names
from tkf_infra.config.platform import Platform
from tkf_infra.ops import split
from tkf_infra.ops.stacks import DEV_PASSPHRASE, pulumi_home

pytestmark = [pytest.mark.apiserver, pytest.mark.engine]

LWS_CRD = "leaderworkersets.leaderworkerset.x-k8s.io"


def edit(es: EngineStack, change: Callable[[dict[str, Any]], None]) -> None:
    path = es.project / f"Pulumi.{es.stack.name}.yaml"
    doc = yaml.safe_load(path.read_text())
    change(doc["config"])
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def identities(kube: KubeClient, serving: str) -> dict[str, tuple[str, str]]:
    """uid and resourceVersion of the platform's and the fleet's objects: a recreated or rewritten one differs."""
    found: dict[str, tuple[str, str]] = {}

    def note(label: str, obj: dict[str, Any] | None) -> None:
        assert obj is not None, f"{label} is not on the server"
        found[label] = (obj["metadata"]["uid"], obj["metadata"]["resourceVersion"])

    note("crd/leaderworkersets", kube.get(CRD_API, "CustomResourceDefinition", LWS_CRD))
    note("namespace/lws-system", kube.get("v1", "Namespace", "lws-system"))
    for d in kube.list_objects("apps/v1", "Deployment", namespace="lws-system"):
        note(f"lws-system/deployment/{d['metadata']['name']}", d)
    note(f"namespace/{serving}", kube.get("v1", "Namespace", serving))
    for m in CPU_MODELS:
        note(f"deployment/{m['name']}", kube.get("apps/v1", "Deployment", names.workload(m["name"]), serving))
    return found


def _lws_object(label: str) -> bool:
    return label.startswith(("crd/leaderworkersets", "namespace/lws-system", "lws-system/"))


def test_a_one_stack_environment_splits_on_a_live_server_with_nothing_recreated(
    kube: KubeClient, kube_apiserver: KubeAPIServer, lean_engine_env: dict[str, str],
    make_stack: Callable[..., EngineStack], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    es = make_stack(extra_env=lean_engine_env)
    serving = target_config(es, kube_apiserver, "vllm", models=CPU_MODELS)
    edit(es, lambda c: c["tkf-infra:platform"]["lws"].update(alreadyInstalled=False))
    platform: auto.Stack | None = None
    try:
        es.stack.up()
        before = identities(kube, serving)
        assert [k for k in before if k.startswith("lws-system/deployment/")], "LWS's controller is installed"

        monkeypatch.setenv("PULUMI_CONFIG_PASSPHRASE", DEV_PASSPHRASE)
        done = split.split(es.stack.name, project_dir=es.project, backend_url=es.env["PULUMI_BACKEND_URL"])
        edit(es, lambda c: c.update({"tkf-infra:layer": "fleet"}))
        opts = auto.LocalWorkspaceOptions(env_vars=es.env,
                                          pulumi_command=auto.PulumiCommand(root=str(pulumi_home())))
        platform = auto.select_stack(done.dest, work_dir=str(es.project), opts=opts)
        assert changed(run_up(platform)) == []
        assert changed(run_up(es.stack)) == []
        assert identities(kube, serving) == before, "no object was recreated or rewritten"

        # A catalog edit touches the fleet's one model; the platform stack has nothing to do.
        model = str(CPU_MODELS[0]["name"])
        edit(es, lambda c: c["tkf-infra:models"][0].update(maxNumSeqs=4))
        steps = changed(run_up(es.stack))
        assert steps and all(name.startswith(model) or name == names.FIT_CHECK for _, _, name in steps), steps
        after = identities(kube, serving)
        assert {k: v for k, v in after.items() if model not in k} == {k: v for k, v in before.items()
                                                                      if model not in k}
        assert after[f"deployment/{model}"][0] == before[f"deployment/{model}"][0], "updated in place"
        assert set(platform.preview().change_summary) <= {auto.events.OpType.SAME}

        # A platform upgrade with the fleet running: LWS's next release (its chart, from a chartPath as an
        # air-gapped site would keep it, pinned to the new image). Only LWS's objects change.
        fleet_before = {k: v for k, v in identities(kube, serving).items() if not _lws_object(k)}
        pieces = Platform()
        chart = local_dir("lws", pieces.lws, "vendored")
        assert chart is not None
        shutil.copytree(chart, tmp_path / "lws")
        edit(es, lambda c: c["tkf-infra:platform"]["lws"].update(version="v0.8.1", chartPath=str(tmp_path / "lws")))
        upgraded = changed(run_up(platform))
        assert upgraded and all("lws" in name for _, _, name in upgraded), upgraded
        lws_ns = "lws-system"
        controller = next(d for d in kube.list_objects("apps/v1", "Deployment", namespace=lws_ns))
        images = [c["image"] for c in controller["spec"]["template"]["spec"]["containers"]]
        assert any(i.endswith(":v0.8.1") for i in images), images
        assert {k: v for k, v in identities(kube, serving).items() if not _lws_object(k)} == fleet_before, \
            "the platform's upgrade rewrote a fleet object"
        assert set(es.stack.preview().change_summary) <= {auto.events.OpType.SAME}, "the fleet has nothing to do"
    finally:
        release_pvcs(kube, serving)
        for st in (es.stack, platform):
            if st is not None:
                with contextlib.suppress(auto.CommandError):
                    st.destroy(color="never", continue_on_error=True)
        release_pvcs(kube, serving)
        wait_namespaces_gone(kube, (serving, "lws-system"))
        for crd in kube.list_objects(CRD_API, "CustomResourceDefinition"):
            kube.delete(CRD_API, "CustomResourceDefinition", crd["metadata"]["name"])
            kube.wait_gone(CRD_API, "CustomResourceDefinition", crd["metadata"]["name"], timeout=120)
