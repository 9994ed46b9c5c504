"""How KEDA authenticates to the stack's Prometheus: `serving.prometheusAuth` (docs/scaling.md).

Why a setting: every autoscaler path reads its signal through KEDA's Prometheus scaler — on the kserve
backend the ScaledObject KServe v0.20.0 writes from its `inferenceservice-config`
(pkg/controller/v1alpha2/llmisvc/scaling.go `prometheusTrigger`, l. 425-452), on the vllm backend ours
(components/autoscaling.py). KEDA verifies an https Prometheus's certificate and sends no credentials
unless told, so a Prometheus behind a private CA or a bearer token (an OpenShift thanos-querier, a
kube-rbac-proxy, the https one WVA v0.7.0 insists on) left every model at its floor: the trigger failed
and the HPA held. The credentials themselves stay in a TriggerAuthentication (or
ClusterTriggerAuthentication) the platform team creates: tkf-infra only names it, as KServe does, so no
secret passes through the stack.

The rules are KServe's and KEDA's own, said at load instead of in a controller's log:
- `authModes` and `triggerAuthentication` both or neither (KServe `validateAutoscalingConfig`, scaling.go
  l. 342: otherwise every reconcile of every autoscaled model fails);
- `authModes` from KEDA v2.18.0's list, at most one of bearer, basic and oauth
  (pkg/scalers/authentication/authentication_types.go l. 104: `enum=apiKey;basic;tls;bearer;custom;oauth,
  exclusiveSet=bearer;basic;oauth`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from tkf_infra.config import kube_syntax as ks
from tkf_infra.config.base import SettingsModel, problem_check


class AuthMode(StrEnum):
    """KEDA v2.18.0's Prometheus `authModes` (authentication_types.go l. 104)."""

    API_KEY = "apiKey"
    BASIC = "basic"
    TLS = "tls"
    BEARER = "bearer"
    CUSTOM = "custom"
    OAUTH = "oauth"


#: At most one of these per trigger (KEDA's `exclusiveSet`): each one sets the Authorization header.
EXCLUSIVE_MODES = (AuthMode.BEARER, AuthMode.BASIC, AuthMode.OAUTH)
TriggerAuthKind = Literal["TriggerAuthentication", "ClusterTriggerAuthentication"]


class PrometheusAuth(SettingsModel):
    """What KEDA needs to read the stack's Prometheus (module docstring)."""

    auth_modes: list[AuthMode] = Field(
        default_factory=list, description="KEDA's Prometheus authModes (bearer, basic, tls, custom, apiKey, oauth), "
                                          "a list or KEDA's comma-separated string; the credentials come from "
                                          "triggerAuthentication.")
    trigger_authentication: str | None = Field(
        None, description="Name of an existing TriggerAuthentication in the serving namespace (or a "
                          "ClusterTriggerAuthentication, with kind) holding the credentials and CA.")
    kind: TriggerAuthKind = Field(
        "TriggerAuthentication", description="TriggerAuthentication (in the serving namespace) or "
                                             "ClusterTriggerAuthentication.")
    insecure_skip_verify: bool = Field(
        False, description="Do not verify the Prometheus certificate (KEDA's unsafeSsl). Prefer a CA in the "
                           "TriggerAuthentication.")

    _name = problem_check("trigger_authentication",
                          check=lambda v: ks.subdomain_problem(v, "TriggerAuthentication name"))

    @field_validator("auth_modes", mode="before")
    @classmethod
    def _comma_separated(cls, v: Any) -> Any:
        """KEDA and KServe spell the modes as one comma-separated string (`bearer,tls`): take that too."""
        return [part.strip() for part in v.split(",")] if isinstance(v, str) else v

    @model_validator(mode="after")
    def _kserve_and_keda_rules(self) -> PrometheusAuth:
        problems = []
        if bool(self.auth_modes) != (self.trigger_authentication is not None):
            given, missing = (("authModes", "triggerAuthentication") if self.auth_modes
                              else ("triggerAuthentication", "authModes"))
            problems.append(f"{given} is set but {missing} is not: KEDA reads the credentials of each mode from the "
                            f"named TriggerAuthentication, and KServe v0.20.0 refuses one without the other (every "
                            f"reconcile of an autoscaled model fails); set both, e.g. authModes: [bearer] and "
                            f"triggerAuthentication: prometheus-reader, or neither")
        if len(set(self.auth_modes)) != len(self.auth_modes):
            problems.append(f"authModes {[m.value for m in self.auth_modes]} names a mode twice; list each once")
        exclusive = [m.value for m in self.auth_modes if m in EXCLUSIVE_MODES]
        if len(set(exclusive)) > 1:
            problems.append(f"authModes {exclusive} are exclusive: each sets the Authorization header, and KEDA "
                            "v2.18.0 takes at most one of bearer, basic and oauth; keep one")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def modes_text(self) -> str:
        """authModes as KEDA's trigger metadata and KServe's config spell them: comma-separated."""
        return ",".join(m.value for m in self.auth_modes)

    def trigger(self, trigger: dict[str, Any]) -> dict[str, Any]:
        """A KEDA Prometheus trigger with this access added, as KServe's `prometheusTrigger` adds it."""
        metadata = dict(trigger["metadata"])
        if self.insecure_skip_verify:
            metadata["unsafeSsl"] = "true"
        if self.auth_modes:
            metadata["authModes"] = self.modes_text
        out = {**trigger, "metadata": metadata}
        if self.trigger_authentication is not None:
            out["authenticationRef"] = {"name": self.trigger_authentication, "kind": self.kind}
        return out

    def kserve_fields(self) -> dict[str, Any]:
        """The keys of KServe's `PrometheusConfig` (config_loader.go l. 117-140) this access sets."""
        out: dict[str, Any] = {}
        if self.insecure_skip_verify:
            out["tlsInsecureSkipVerify"] = True
        if self.auth_modes:
            out["authModes"] = self.modes_text
        if self.trigger_authentication is not None:
            out["triggerAuthName"] = self.trigger_authentication
            out["triggerAuthKind"] = self.kind
        return out
