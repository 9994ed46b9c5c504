"""KEDA as a platform piece (`platform.keda`): opt-in, its vendored install, the settings' checks, the plan.

Mocks echo a YAML group's inputs without rendering it, so the objects KEDA's group creates are read
from the file it is given: what the provider would apply, object for object.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from components.platform_charts import KEDA_URL, VENDORED
from components.prerequisites import ServingPrerequisites, ServingPrerequisitesArgs
from tests.mocks import SINGLE_GPU, run, stack_doc
from tests.test_admission import SERVED, h100_pool, kube, live, planned, refused
from tkf_infra import platform_contract
from tkf_infra.config import Backend, Namespaces, Platform, SettingsError, validate_catalog
from tkf_infra.config.charts import KEDA_NAMESPACE
from tkf_infra.plan.admission import ClusterState
from tkf_infra.plan.scaling import KEDA_API, WVA_API

ROOT = Path(__file__).resolve().parents[1]
KEDA_FILE = VENDORED / "keda-v2.18.0" / "keda-2.18.0.yaml"
GROUP = "kubernetes:yaml/v2:ConfigGroup"
PROM = "http://prometheus.monitoring.svc:9090"
WITH_KEDA = Platform.model_validate({"keda": {"version": "v2.18.0"}})


def prereqs(platform: Platform, **kw: Any) -> Any:
    return run(lambda: ServingPrerequisites("prereq", ServingPrerequisitesArgs(platform, Namespaces(), **kw)))


def keda_group(h: Any) -> Any:
    groups = [r for r in h.resources if r.name == "prereq-keda"]
    assert len(groups) <= 1
    return groups[0] if groups else None


def objects() -> list[dict[str, Any]]:
    return [d for d in yaml.load_all(KEDA_FILE.read_text(), Loader=yaml.CSafeLoader) if d]


# -- the default: not installed ----------------------------------------------------------------


def test_keda_is_not_installed_unless_set() -> None:
    """The dev stack (and every stack that does not set platform.keda) registers exactly what it did."""
    assert Platform().keda is None and "keda" not in Platform().pieces()
    dev = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())["config"]["tkf-infra:platform"]
    assert "keda" not in dev
    for backend in Backend:
        assert keda_group(prereqs(Platform(), backend=backend, source="vendored")) is None
    assert validate_catalog({}).settings.platform.keda is None


# -- installed: the vendored file, for either backend ------------------------------------------


@pytest.mark.parametrize("backend", list(Backend))
def test_keda_set_installs_the_vendored_release_on_either_backend(backend: Backend) -> None:
    h = prereqs(WITH_KEDA, backend=backend, source="vendored", render=True)
    group = keda_group(h)
    assert group is not None and group.type == GROUP
    assert group.inputs["files"] == [str(KEDA_FILE)]
    # Its own chain: it waits on nothing, and ModelServing (a ScaledObject needs its CRD) waits on it.
    assert group.depends_on == []
    assert h.result.charts["keda"] in h.result.dependencies


def test_keda_from_upstream_is_the_release_asset_and_from_a_chart_path_that_folder() -> None:
    h = prereqs(WITH_KEDA, source="upstream")
    assert keda_group(h).inputs["files"] == [KEDA_URL.format(version="2.18.0")]
    assert KEDA_URL.format(version="2.18.0") == \
        "https://github.com/kedacore/keda/releases/download/v2.18.0/keda-2.18.0.yaml"
    own = Platform.model_validate({"keda": {"version": "v2.18.0", "chartPath": str(KEDA_FILE.parent)}})
    assert keda_group(prereqs(own, source="upstream")).inputs["files"] == [str(KEDA_FILE)]
    others = Platform.model_validate({"keda": {"alreadyInstalled": True}})
    assert keda_group(prereqs(others, source="vendored")) is None


def test_the_vendored_install_is_keda_2_18_0_with_its_crds_operator_and_namespace() -> None:
    docs = objects()
    by_kind: dict[str, set[str]] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], set()).add(d["metadata"]["name"])
    assert by_kind["CustomResourceDefinition"] == {
        "scaledobjects.keda.sh", "scaledjobs.keda.sh", "triggerauthentications.keda.sh",
        "clustertriggerauthentications.keda.sh", "cloudeventsources.eventing.keda.sh",
        "clustercloudeventsources.eventing.keda.sh"}
    scaled = next(d for d in docs if d["metadata"]["name"] == "scaledobjects.keda.sh")
    assert [v["name"] for v in scaled["spec"]["versions"] if v["served"]] == [KEDA_API.split("/")[1]]
    assert by_kind["Namespace"] == {KEDA_NAMESPACE}
    assert by_kind["Deployment"] == {"keda-operator", "keda-metrics-apiserver", "keda-admission"}
    images = {c["image"] for d in docs if d["kind"] == "Deployment"
              for c in d["spec"]["template"]["spec"]["containers"]}
    assert images == {"ghcr.io/kedacore/keda:2.18.0", "ghcr.io/kedacore/keda-metrics-apiserver:2.18.0",
                      "ghcr.io/kedacore/keda-admission-webhooks:2.18.0"}
    assert ":main" not in KEDA_FILE.read_text() and "version: main" not in KEDA_FILE.read_text()
    # Every namespaced object is in `keda` (but the auth-reader RoleBinding, which kube-system must hold).
    spaces = {(d["kind"], d["metadata"]["name"]): d["metadata"].get("namespace") for d in docs}
    assert {k for k, ns in spaces.items() if ns not in (None, KEDA_NAMESPACE)} == {("RoleBinding", "keda-auth-reader")}
    assert all(d["metadata"]["labels"].get("app.kubernetes.io/version") == "2.18.0" for d in docs
               if d["kind"] in ("CustomResourceDefinition", "Namespace"))


def test_the_webhook_and_metrics_api_fail_open_where_keda_does_not_run() -> None:
    """KEDA's webhook validates ScaledObjects: `Ignore` with a 10 s timeout, so a cluster where its pods
    are not (yet) running still accepts them — and pays up to that timeout per write if its Service
    cannot be reached. The APIService makes external metrics (the HPA's) depend on the metrics server."""
    docs = objects()
    hooks = next(d for d in docs if d["kind"] == "ValidatingWebhookConfiguration")["webhooks"]
    assert {h["failurePolicy"] for h in hooks} == {"Ignore"} and {h["timeoutSeconds"] for h in hooks} == {10}
    api = next(d for d in docs if d["kind"] == "APIService")
    assert api["metadata"]["name"] == "v1beta1.external.metrics.k8s.io"
    assert api["spec"]["service"] == {"name": "keda-metrics-apiserver", "namespace": KEDA_NAMESPACE}


# -- the settings' checks ----------------------------------------------------------------------


def problems(doc: dict[str, Any]) -> str:
    with pytest.raises(SettingsError) as err:
        validate_catalog(doc)
    return err.value.render()


def pinned(doc: dict[str, Any]) -> str | None:
    keda = validate_catalog(doc).settings.platform.keda
    return keda.pinned if keda is not None else None


def test_keda_settings_are_checked_at_load() -> None:
    assert "version 'main' is not pinned" in problems({"platform": {"keda": {"version": "main"}}})
    text = problems({"platform": {"keda": {"version": "v2.17.0"}}})
    assert "platform.keda.version is 'v2.17.0' but the vendored chart is v2.18.0" in text
    kube_doc = {"cluster": {"mode": "kubeconfig", "kubeconfig": "k"}, "platform": {"keda": {"version": "v2.17.0"}}}
    assert pinned(kube_doc) == "v2.17.0"  # upstream: any release
    lws = "components/data/charts/lws-v0.8.0/lws"
    text = problems({"platform": {"keda": {"version": "v2.18.0", "chartPath": lws}}})
    assert f"platform.keda.chartPath {lws!r}" in text and "KEDA's install YAML" in text
    assert pinned({"platform": {"keda": {}}}) == "v2.18.0"  # `keda: {}` installs the default release


# -- the plan: what tkf-infra installs is served -----------------------------------------------


def vllm_doc(keda: dict[str, Any] | None) -> dict[str, Any]:
    doc = stack_doc(dict(SINGLE_GPU, scaling={"minReplicas": 1, "maxReplicas": 2}), cluster=kube(),
                    nodePools=[h100_pool(1)], backend="vllm", prometheusUrl=PROM)
    if keda is not None:
        doc["platform"]["keda"] = keda
    return doc


def test_a_scaled_model_is_planned_when_tkf_infra_installs_keda_and_refused_when_nobody_does() -> None:
    bare = ClusterState("the test cluster", (live("n1"),), api_versions=SERVED)
    assert planned(vllm_doc({"version": "v2.18.0"}), bare).deployed == {"qwen3-8b"}
    for keda in (None, {"alreadyInstalled": True}):
        stage, reason = refused(planned(vllm_doc(keda), bare))["qwen3-8b"]
        assert stage == "topology" and f"needs {KEDA_API} on the cluster" in reason
        assert "set platform.keda (tkf-infra then installs KEDA)" in reason
    # KServe still needs WVA, which tkf-infra installs only with platform.wva (tests/test_wva_platform.py).
    doc = stack_doc(dict(SINGLE_GPU, scaling={"minReplicas": 1, "maxReplicas": 2}), cluster=kube(),
                    nodePools=[h100_pool(1)], prometheusUrl=PROM)
    doc["platform"]["keda"] = {"version": "v2.18.0"}
    reason = refused(planned(doc, bare))["qwen3-8b"][1]
    assert f"needs {WVA_API} on the cluster" in reason and KEDA_API not in reason.split("(")[0]
    assert "set platform.wva (tkf-infra then installs llm-d's Workload Variant Autoscaler" in reason


def test_render_mode_does_not_warn_about_a_keda_it_installs() -> None:
    doc = vllm_doc({"version": "v2.18.0"})
    doc["cluster"] = {"mode": "render", "renderDir": "rendered/test"}
    assert not [w for w in planned(doc).warnings if "was not checked" in w]
    doc = vllm_doc(None)
    doc["cluster"] = {"mode": "render", "renderDir": "rendered/test"}
    assert [w for w in planned(doc).warnings if "was not checked" in w and "set platform.keda" in w]


def test_the_platform_contract_carries_keda_to_the_fleet() -> None:
    catalog = validate_catalog(vllm_doc({"version": "v2.18.0"}))
    contract = platform_contract.publish(catalog, "env")
    assert contract["pieces"]["keda"] == {"version": "v2.18.0", "installedBy": "tkf-infra"}
    fleet = platform_contract.fleet_settings({}, platform_contract.read(contract, "env-platform"))
    assert fleet["platform"]["keda"] == {"alreadyInstalled": True, "version": "v2.18.0"}
    without = platform_contract.publish(validate_catalog(vllm_doc(None)), "env")
    assert "keda" not in without["pieces"]
    assert "keda" not in platform_contract.fleet_settings({}, platform_contract.read(without, "e"))["platform"]


def test_the_platform_refuses_to_drop_keda_while_a_fleet_has_scaled_objects() -> None:
    """Deleting KEDA's CRDs deletes every ScaledObject with them: the fleet's autoscalers would vanish silently."""
    from components.autoscaling import KEDA_API_VERSION, SCALED_OBJECT_KIND

    assert platform_contract.PLATFORM_KINDS[SCALED_OBJECT_KIND] == ("keda", KEDA_API_VERSION)
    before = platform_contract.publish(validate_catalog(vllm_doc({"version": "v2.18.0"})), "env")
    assert before["apis"][SCALED_OBJECT_KIND] == KEDA_API_VERSION
    for keda, change in ((None, "no longer set"), ({"alreadyInstalled": True}, "marked alreadyInstalled")):
        after = platform_contract.publish(validate_catalog(vllm_doc(keda)), "env")
        problems = platform_contract.crd_removal_problems(before, after, {"fleet": {"ScaledObject": 3.0}})
        assert len(problems) == 1 and f"platform.keda: this run would delete keda's CRDs (keda is now {change})" \
            in problems[0] and "fleet stack fleet has 3 ScaledObject" in problems[0]
        assert platform_contract.crd_removal_problems(before, after, {"fleet": {"ScaledObject": 0}}) == []
    plan = planned(vllm_doc({"version": "v2.18.0"}),
                   ClusterState("c", (live("n1"),), api_versions=SERVED | {KEDA_API}))
    assert platform_contract.platform_use(plan)["ScaledObject"] == 1
