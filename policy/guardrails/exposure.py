"""Who can reach a model, and how its API key travels.

Model servers are internal: only the LLM gateway may call them (it holds the API keys, quotas and
audit log) and only monitoring may scrape them. So no Service of a model opens a node port or a cloud
load balancer, every model-server pod is selected by a NetworkPolicy that admits only those
namespaces, and the runtime API key reaches vLLM only through a Secret reference — never as a
literal in a pod spec, where it would sit in the Pulumi state, `kubectl get -o yaml` and the
rendered manifests. On the command line (a key rotation passes two keys with `--api-key`) only
references to such variables are allowed: `$(VAR)` (expanded by the kubelet) or `"$VAR"` (a shell).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from tkf_infra.names import MODEL_LABEL

from .base import Guardrail, Violation, owner_fix, violation
from .objects import K8sObject, as_list, as_map, as_str, command_words, containers, pod_groups

DEFAULT_FORBIDDEN_TYPES = ("LoadBalancer", "NodePort")
#: A command-line word that names an env variable instead of holding a value.
_VAR_REFERENCE = re.compile(r'"?\$(?:\((\w+)\)|\{(\w+)\}|(\w+))"?')


def _api_key_words(words: Sequence[str]) -> list[str]:
    """The values following each `--api-key` (nargs "+": up to the next flag)."""
    out: list[str] = []
    for i, w in enumerate(words):
        if w.startswith("--api-key="):
            out.append(w.split("=", 1)[1])
        elif w == "--api-key":
            for value in words[i + 1 :]:
                if value.startswith("-"):
                    break
                out.append(value)
    return out


def _literal_api_keys(words: Sequence[str], secret_vars: set[str]) -> bool:
    """Whether any `--api-key` value is something other than a reference to a Secret-backed variable."""
    for value in _api_key_words(words):
        m = _VAR_REFERENCE.fullmatch(value)
        if not m or next(g for g in m.groups() if g) not in secret_vars:
            return True
    return False


def check_services(obj: K8sObject, config: Mapping[str, Any]) -> list[Violation]:
    if obj.kind != "Service":
        return []
    selector = as_map(obj.spec.get("selector"))
    model = obj.model or as_str(selector.get(MODEL_LABEL))
    if model is None:
        return []
    forbidden = [str(t) for t in as_list(config.get("forbiddenTypes"))] or list(DEFAULT_FORBIDDEN_TYPES)
    svc_type = as_str(obj.spec.get("type")) or "ClusterIP"
    out: list[Violation] = []
    fix = "make it type ClusterIP and reach the model through the LLM gateway"
    if svc_type in forbidden:
        out.append(
            violation(
                [model],
                obj.ref,
                f"is of type {svc_type}, which exposes the model outside the cluster "
                f"(forbidden: {', '.join(forbidden)})",
                fix,
            )
        )
    if as_list(obj.spec.get("externalIPs")):
        out.append(violation([model], obj.ref, f"sets externalIPs {as_list(obj.spec.get('externalIPs'))}", fix))
    return out


def check_api_key(obj: K8sObject, config: Mapping[str, Any]) -> list[Violation]:
    if not obj.is_model_server:
        return []
    model = obj.model or "?"
    env_name = as_str(config.get("envName")) or "VLLM_API_KEY"
    required = bool(config.get("required", False))
    out: list[Violation] = []
    for group in pod_groups(obj):
        for c in containers(group.spec):
            where = f"{obj.ref} container {c.get('name')!r}"
            secret_vars = {
                str(e.get("name"))
                for e in as_list(c.get("env"))
                if isinstance(e, Mapping) and as_map(as_map(e.get("valueFrom")).get("secretKeyRef")).get("name")
            }
            if _literal_api_keys(command_words(c), secret_vars):
                out.append(
                    violation(
                        [model],
                        where,
                        "passes an API key on the command line (--api-key) other than as a reference to a "
                        "variable set from a Secret",
                        f"remove --api-key; the key reaches vLLM as {env_name} from the apiKey Secret",
                    )
                )
            env = [e for e in as_list(c.get("env")) if isinstance(e, Mapping) and e.get("name") == env_name]
            for e in env:
                ref = as_map(as_map(e.get("valueFrom")).get("secretKeyRef"))
                if "value" in e or not ref.get("name"):
                    # Never echo the value: it is the secret.
                    out.append(
                        violation(
                            [model],
                            where,
                            f"sets {env_name} from "
                            f"{'a literal value' if 'value' in e else 'something other than a Secret'}",
                            f"set {env_name} with valueFrom.secretKeyRef (the stack's apiKey secret)",
                        )
                    )
            if required and not env and c.get("name") == "main" and group.role != "worker":
                out.append(
                    violation(
                        [model],
                        where,
                        f"serves without an API key ({env_name} is not set)",
                        f"set the stack's apiKey secret (`pulumi config set --secret apiKey ...`), {owner_fix()}",
                    )
                )
    return out


def _selects(policy: K8sObject, labels: Mapping[str, Any]) -> bool:
    sel = as_map(policy.spec.get("podSelector"))
    match = as_map(sel.get("matchLabels"))
    if as_list(sel.get("matchExpressions")):
        return False  # not evaluated here: a policy for model pods selects them by label
    return all(labels.get(k) == v for k, v in match.items())


def _ports(rule: Mapping[str, Any]) -> list[Any]:
    """The ports an ingress rule opens; ["every port"] for a rule without `ports`."""
    ports = [as_map(p).get("port") for p in as_list(rule.get("ports"))]
    return ports or ["every port"]


def _admits_only(policy: K8sObject, allowed: Sequence[str], model: str,
                 metrics_only: Mapping[str, Any] | None = None) -> list[str]:
    """Ingress sources of the policy beyond the allowed namespaces and the model's own pods, and a
    metrics-only namespace (monitoring) admitted to a port other than the metrics port."""
    extra: list[str] = []
    scrapers = {str(n) for n in as_list((metrics_only or {}).get("namespaces"))}
    metrics_port = (metrics_only or {}).get("port")
    for rule in as_list(policy.spec.get("ingress")):
        rule = as_map(rule)
        sources = as_list(rule.get("from"))
        if not sources:
            extra.append("every source (an ingress rule without `from`)")
        for src in sources:
            src = as_map(src)
            ns_sel = as_map(as_map(src.get("namespaceSelector")).get("matchLabels"))
            pod_sel = as_map(as_map(src.get("podSelector")).get("matchLabels"))
            if src.get("ipBlock"):
                extra.append(f"ipBlock {as_map(src.get('ipBlock')).get('cidr')}")
            elif "namespaceSelector" in src:
                ns = ns_sel.get("kubernetes.io/metadata.name")
                if ns not in allowed:
                    extra.append(f"namespace {ns!r}" if ns else f"namespaces matching {dict(ns_sel) or 'anything'}")
                elif ns in scrapers and (other := [p for p in _ports(rule) if p != metrics_port]):
                    extra.append(f"namespace {ns!r} on {', '.join(map(str, other))} (it may reach only the metrics "
                                 f"port {metrics_port}: vLLM's API port answers inference routes its key does not "
                                 "guard)")
            elif pod_sel.get(MODEL_LABEL) != model:
                extra.append(f"pods matching {dict(pod_sel) or 'anything'}")
    return extra


def check_isolation(objects: Sequence[K8sObject], config: Mapping[str, Any]) -> list[Violation]:
    allowed = [str(n) for n in as_list(config.get("allowedSourceNamespaces"))]
    metrics_only = as_map(config.get("metricsOnly"))
    policies = [o for o in objects if o.kind == "NetworkPolicy"]
    out: list[Violation] = []
    for obj in objects:
        if not obj.is_model_server:
            continue
        model = obj.model or "?"
        for group in pod_groups(obj):
            labels = dict(group.labels) or dict(obj.labels)
            covering = [
                p
                for p in policies
                if p.namespace == obj.namespace
                and _selects(p, labels)
                and "Ingress" in [str(t) for t in as_list(p.spec.get("policyTypes")) or ["Ingress"]]
            ]
            if not covering:
                out.append(
                    violation(
                        [model],
                        f"{obj.ref} ({group.role} pods)",
                        f"no NetworkPolicy in namespace {obj.namespace!r} selects its pods "
                        f"(labels {labels}), so anything in the cluster can call the model",
                        "keep the model's NetworkPolicy (ModelServing creates <name>-netpol)",
                        urn=obj.urn or None,
                    )
                )
                continue
            for pol in covering:
                extra = _admits_only(pol, allowed, model, metrics_only)
                if extra:
                    out.append(
                        violation(
                            [model],
                            pol.ref,
                            f"admits {', '.join(extra)} to the model's pods; only "
                            f"{', '.join(allowed) or 'none'} may reach them",
                            f"remove those sources, {owner_fix()}",
                            urn=pol.urn or None,
                        )
                    )
    # Leader and worker pods usually share one policy: report each finding once.
    return list({v.message: v for v in out}.values())


NO_EXTERNAL_SERVICES = Guardrail(
    name="no-external-model-services",
    description=(
        "No Service of a model is reachable from outside the cluster (no LoadBalancer, NodePort or "
        "externalIPs): clients go through the LLM gateway."
    ),
    scope="resource",
    check=check_services,
    config_schema={
        "forbiddenTypes": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Service types a model's Service may not have.",
        }
    },
)

API_KEY_BY_SECRET = Guardrail(
    name="api-key-by-secret-ref",
    description=(
        "The runtime API key reaches vLLM only as an environment variable from a Secret reference, "
        "never as a literal; on the command line only as a reference to such a variable."
    ),
    scope="resource",
    check=check_api_key,
    config_schema={
        "envName": {"type": "string", "description": "The variable vLLM reads the key from."},
        "required": {"type": "boolean", "description": "Every model server must have an API key."},
    },
)

MODEL_PODS_ISOLATED = Guardrail(
    name="model-pods-isolated",
    description=(
        "Every model-server pod is selected by a NetworkPolicy that admits only the gateway and "
        "monitoring namespaces (and the model's own pods, for multi-node); monitoring only to the metrics port."
    ),
    scope="stack",
    check=check_isolation,
    config_schema={
        "allowedSourceNamespaces": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Namespaces that may call or scrape models.",
        },
        "metricsOnly": {
            "type": "object",
            "properties": {"namespaces": {"type": "array", "items": {"type": "string"}}, "port": {"type": "integer"}},
            "description": "Namespaces that may reach only the metrics port (the monitoring namespace: port "
            "8000 also answers inference routes vLLM's key does not guard).",
        },
    },
    required=("allowedSourceNamespaces",),
)
