"""Gateway side: feed a LiteLLM proxy from tkf-infra's stack outputs (docs/outputs.md).

Copy this into the gateway's own Pulumi project. It reads the contract through a StackReference and
creates the two objects the proxy needs:

- ConfigMap `litellm-config` with `config.yaml` = `{"model_list": gatewayModelList}` — no key in it,
  only `os.environ/<apiKeyEnv>` references;
- Secret `litellm-upstream-key` holding the runtime key under the name `apiKeyEnv`, for the proxy's
  Deployment to load with `envFrom: [{secretRef: {name: litellm-upstream-key}}]` and to start with
  `--config /etc/litellm/config.yaml` (ConfigMap mounted at /etc/litellm).

Key rotation (tkf-infra's docs/operations.md): `runtimeApiKey` is always a key every model server
accepts, and it changes only in the rotation's step 2. Run this program after that step, and make
the proxy's pods restart when the key changes — env from a Secret is read at start only: put the
exported `upstreamKeyDigest` (a digest, not the key; also on the Secret as annotation
`tkf.io/upstream-key-digest`) on the proxy Deployment's pod template annotations.

Why check here and not trust the producer: the gateway is where LiteLLM's silent traps bite (an
entry without `api_base` calls OpenAI with the key, duplicate names are load-balanced, an unset key
variable falls back to another provider's variable). So the deploy fails — with the reason — on an
unknown `contractVersion`, on any entry that would trigger a trap, and when the key is missing.

Config (`pulumi config set …` in the gateway project):
  infraStack   the tkf-infra stack to read (default organization/tkf-infra/<this stack's name>;
               `organization` is the literal org of self-managed backends, use <org> on Pulumi Cloud)
  namespace    where the proxy runs (default llm-gateway: the only namespace tkf-infra lets in)
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

SUPPORTED_CONTRACT = 1
CONFIG_MAP = "litellm-config"
KEY_SECRET = "litellm-upstream-key"
KEY_DIGEST_ANNOTATION = "tkf.io/upstream-key-digest"


def check_contract(version: Any) -> None:
    """Refuse outputs written for another contract version rather than misread them."""
    if version != SUPPORTED_CONTRACT:
        raise ValueError(f"tkf-infra contractVersion is {version!r}; this gateway program reads "
                         f"version {SUPPORTED_CONTRACT} (docs/outputs.md says what changed)")


def litellm_config(model_list: list[dict[str, Any]], api_key_env: str) -> str:
    """The proxy's config.yaml, after checking every entry against LiteLLM's silent traps."""
    names: set[str] = set()
    for entry in model_list:
        name = entry.get("model_name")
        params = entry.get("litellm_params") or {}
        if not params.get("api_base"):
            raise ValueError(f"model {name!r} has no api_base: LiteLLM would send it to the provider's "
                             "public API with our key")
        if params.get("api_key") != f"os.environ/{api_key_env}":
            raise ValueError(f"model {name!r}: api_key must be os.environ/{api_key_env}, "
                             f"got {params.get('api_key')!r}")
        if name in names:
            raise ValueError(f"model_name {name!r} appears twice: LiteLLM would load-balance them silently")
        names.add(str(name))
    return yaml.safe_dump({"model_list": model_list}, sort_keys=False)


def key_data(api_key_env: str, api_key: Any) -> dict[str, str]:
    """The Secret's data: the key under the variable name the model list references."""
    if not api_key:
        raise ValueError("the tkf-infra stack exports no runtimeApiKey (set its `apiKey` config): without "
                         f"{api_key_env} LiteLLM would fall back to another provider's key variable")
    return {api_key_env: str(api_key)}


def key_digest(rotation: Any) -> str:
    """The digest of `runtimeApiKey` tkf-infra publishes in `apiKeyRotation` ("" from a stack without keys)."""
    return str((rotation or {}).get("gatewayKeyDigest") or "")


def build(infra_stack: str, namespace: str) -> tuple[k8s.core.v1.ConfigMap, k8s.core.v1.Secret]:
    """Read the contract from `infra_stack` and declare the proxy's ConfigMap and Secret."""
    infra = pulumi.StackReference(infra_stack)
    version = infra.require_output("contractVersion")
    model_list = infra.require_output("gatewayModelList")
    api_key_env = infra.require_output("apiKeyEnv")
    api_key = pulumi.Output.secret(infra.get_output("runtimeApiKey"))
    digest = infra.get_output("apiKeyRotation").apply(key_digest)

    def config_text(args: list[Any]) -> str:
        check_contract(args[0])
        return litellm_config(list(args[1]), str(args[2]))

    config = k8s.core.v1.ConfigMap(
        CONFIG_MAP,
        metadata=k8s.meta.v1.ObjectMetaArgs(name=CONFIG_MAP, namespace=namespace),
        data={"config.yaml": pulumi.Output.all(version, model_list, api_key_env).apply(config_text)},
    )
    secret = k8s.core.v1.Secret(
        KEY_SECRET,
        metadata=k8s.meta.v1.ObjectMetaArgs(name=KEY_SECRET, namespace=namespace,
                                            annotations={KEY_DIGEST_ANNOTATION: digest}),
        type="Opaque",
        string_data=pulumi.Output.all(api_key_env, api_key).apply(lambda a: key_data(str(a[0]), a[1])),
    )
    return config, secret


def main() -> None:
    cfg = pulumi.Config()
    infra_stack = cfg.get("infraStack") or f"organization/tkf-infra/{pulumi.get_stack()}"
    config, secret = build(infra_stack, cfg.get("namespace") or "llm-gateway")
    pulumi.export("litellmConfigMap", config.metadata.name)
    pulumi.export("litellmKeySecret", secret.metadata.name)
    # For the proxy Deployment's pod template: its pods restart when the upstream key changes.
    pulumi.export("upstreamKeyDigest",
                  secret.metadata.apply(lambda m: (m.annotations or {}).get(KEY_DIGEST_ANNOTATION)))


if __name__ == "__main__":  # Pulumi runs a program's __main__.py as __main__
    main()
