"""`serving.prometheusAuth`: KEDA reaching a Prometheus behind a private CA or credentials, on both backends
(tkf_infra/config/prometheus_auth.py). The vllm backend's triggers are checked against KEDA v2.18.0's CRD; the
kserve backend's inferenceservice-config keys are the ones KServe's controller copies into its trigger
(tests/controllers/test_reconcile.py shows the real controller doing it)."""

from __future__ import annotations

import json
from typing import Any, cast

import pulumi
import pytest

from components.prerequisites import KSERVE_CONFIG_MAP, WVA_CONFIG_KEY, kserve_wva_config
from tests.mocks import SINGLE_GPU, program, prune_nulls, stack_doc, unwrap_secrets
from tests.test_crd_schemas import pruned_fields
from tests.test_scaling_render import PROM, keda_validator, of_kind, rendered
from tkf_infra.config import SettingsError, validate_catalog
from tkf_infra.config.prometheus_auth import PrometheusAuth

BEARER = {"authModes": ["bearer"], "triggerAuthentication": "prometheus-reader",
          "kind": "ClusterTriggerAuthentication", "insecureSkipVerify": True}


def refusal(auth: dict[str, Any]) -> str:
    with pytest.raises(SettingsError) as err:
        validate_catalog(stack_doc(SINGLE_GPU, serving={"prometheusAuth": auth}))
    (problem,) = err.value.problems
    return str(problem)


def test_every_trigger_of_the_vllm_backend_names_the_credentials_and_passes_kedas_schema() -> None:
    zero = dict(SINGLE_GPU, scaling={"minReplicas": 0, "maxReplicas": 3})
    h = program(stack_doc(zero, backend="vllm", installed=False, prometheusUrl="https://prom.monitoring:9091",
                          serving={"prometheusAuth": BEARER}), api_key="k")
    assert h.error is None, h.error
    objects = [prune_nulls(unwrap_secrets(r.manifest())) for r in h.resources if r.custom
               and r.type.startswith("kubernetes:") and "helm.sh" not in r.type and "yaml/v2" not in r.type]
    (so,) = of_kind(objects, "ScaledObject").values()
    triggers = so["spec"]["triggers"]
    assert [t["name"] for t in triggers] == ["waitingrequests", "gatewayrequests"], "the wake trigger too"
    for t in triggers:
        assert t["authenticationRef"] == {"name": "prometheus-reader", "kind": "ClusterTriggerAuthentication"}
        assert (t["metadata"]["authModes"], t["metadata"]["unsafeSsl"]) == ("bearer", "true")
        assert t["metadata"]["serverAddress"] == "https://prom.monitoring:9091"
    keda_validator().validate(so)
    assert pruned_fields(so, keda_validator().schema) == []


def test_without_the_setting_the_triggers_are_as_before() -> None:
    (so,) = of_kind(rendered("vllm", dict(SINGLE_GPU, scaling={"maxReplicas": 3})), "ScaledObject").values()
    (trigger,) = so["spec"]["triggers"]
    assert "authenticationRef" not in trigger and set(trigger["metadata"]) == {"serverAddress", "query", "threshold"}


def test_kserves_config_carries_the_keys_its_prometheus_config_reads() -> None:
    auth = PrometheusAuth.model_validate({"authModes": "bearer,tls", "triggerAuthentication": "prom-creds"})
    args = pulumi.ResourceTransformArgs(True, "kubernetes:core/v1:ConfigMap", "kserve/x",
                                        {"metadata": {"name": KSERVE_CONFIG_MAP}, "data": {}}, pulumi.ResourceOptions())

    def written(access: PrometheusAuth) -> Any:
        result = kserve_wva_config(PROM, access)(args)
        assert result is not None
        return json.loads(cast(dict[str, str], result.props["data"])[WVA_CONFIG_KEY])

    # config_loader.go's PrometheusConfig json tags at v0.20.0; the kind defaults as KServe's and KEDA's do.
    assert written(auth) == {"prometheus": {"url": PROM, "authModes": "bearer,tls", "triggerAuthName": "prom-creds",
                                            "triggerAuthKind": "TriggerAuthentication"}}
    skip_only = PrometheusAuth.model_validate({"insecureSkipVerify": True})
    assert written(skip_only) == {"prometheus": {"url": PROM, "tlsInsecureSkipVerify": True}}


@pytest.mark.parametrize(("auth", "said"), [
    ({"authModes": ["bearer"]}, "authModes is set but triggerAuthentication is not"),
    ({"triggerAuthentication": "prom"}, "triggerAuthentication is set but authModes is not"),
    ({"authModes": "bearer,basic", "triggerAuthentication": "prom"}, "['bearer', 'basic'] are exclusive"),
    ({"authModes": ["tls", "tls"], "triggerAuthentication": "prom"}, "names a mode twice"),
    ({"authModes": ["token"], "triggerAuthentication": "prom"}, "authModes[0]: Input should be 'apiKey'"),
    ({"authModes": ["bearer"], "triggerAuthentication": "Prom_Reader"}, "'prom-reader'"),
    ({"kind": "Secret"}, "'TriggerAuthentication' or 'ClusterTriggerAuthentication'; got 'Secret'"),
])
def test_each_mistake_is_refused_at_load_by_name(auth: dict[str, Any], said: str) -> None:
    problem = refusal(auth)
    assert "serving.prometheusAuth" in problem and said in problem, problem


def test_a_kserve_stack_that_does_not_install_kserve_is_told_where_the_setting_must_go() -> None:
    h = program(stack_doc(dict(SINGLE_GPU, scaling={"maxReplicas": 3}), prometheusUrl=PROM,
                          serving={"prometheusAuth": BEARER}), api_key="k", preview=True)
    assert h.error is None, h.error
    assert any("serving.prometheusAuth is not written anywhere" in w and "autoscaling-wva-controller-config" in w
               for w in h.warnings()), h.warnings()
    installed = program(stack_doc(dict(SINGLE_GPU, scaling={"maxReplicas": 3}), installed=False, prometheusUrl=PROM,
                                  serving={"prometheusAuth": BEARER}), api_key="k", preview=True)
    assert not [w for w in installed.warnings() if "prometheusAuth" in w], "ours: written into KServe's config"
