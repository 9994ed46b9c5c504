"""Where settings come from: the engine's config (the program), a committed stack file (tools),
and the JSON Schema editors validate stack files against.

`read_pulumi_config` is the only function in the project that reads `pulumi.Config`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tkf_infra.config.api_keys import CONFIG_KEYS as API_KEY_CONFIG_KEYS
from tkf_infra.config.api_keys import ApiKeys, key_problems
from tkf_infra.config.base import Problem, SecretValue, SettingsError, keys_of
from tkf_infra.config.catalog import ModelEntry
from tkf_infra.config.node_pool import NodePool
from tkf_infra.config.stack import StackSettings

#: The settings keys of the project namespace: the stack settings model's fields, in its order (the
#: secrets, `apiKey*`, are read apart by `read_api_keys`).
CONFIG_KEYS: tuple[str, ...] = keys_of(StackSettings)


def catalog_json_schema() -> dict[str, Any]:
    """JSON Schema of a stack's `tkf-infra:` settings, with pools and entries typed, for editors."""
    schema = StackSettings.model_json_schema(by_alias=True)
    defs = schema.setdefault("$defs", {})
    for key, model, text in (("models", ModelEntry, "The model catalog: one served model per entry."),
                             ("nodePools", NodePool, "GPU node pools.")):
        sub = model.model_json_schema(by_alias=True)
        defs.update(sub.pop("$defs", {}))
        defs[model.__name__] = sub
        schema["properties"][key] = {"type": "array", "items": {"$ref": f"#/$defs/{model.__name__}"},
                                     "description": text}
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "tkf-infra stack settings"
    return schema


def read_stack_file(path: Path) -> dict[str, Any]:
    """The `tkf-infra:` settings of a committed `Pulumi.<stack>.yaml`, without secrets.

    For tools that work from the stack file itself (the lock command, tests), not from the engine.
    """
    import yaml

    cfg = (yaml.safe_load(path.read_text()) or {}).get("config", {}) or {}
    return {k.split(":", 1)[1]: v for k, v in cfg.items()
            if k.startswith("tkf-infra:") and not (isinstance(v, dict) and "secure" in v)}


def read_pulumi_config() -> dict[str, Any]:
    """The stack's `tkf-infra:*` keys as one document, ready for `validate_catalog`.

    A malformed structured value (bad JSON/YAML shape) becomes a SettingsError naming the key,
    never a traceback.
    """
    import pulumi  # local: the rest of the package must stay importable without the engine

    config = pulumi.Config()
    doc: dict[str, Any] = {}
    problems: list[Problem] = []
    for key in CONFIG_KEYS:
        try:
            value: Any
            if key in ("prometheusUrl", "layer"):  # plain strings
                value = config.get(key) or None
            elif key == "strict":
                value = config.get_bool(key)
            else:
                value = config.get_object(key)
        except Exception as err:  # ConfigTypeError and JSON errors carry the reason
            problems.append(Problem(f"tkf-infra:{key}", "", f"cannot be read as structured config: {err}"))
            continue
        if value is not None:
            doc[key] = value
    for key, secret in _other_keys():  # a misspelt key must not be ignored: StackSettings refuses it by name
        if secret:  # refused all the same (a misspelt apiKeyNext is a rotation that never happens), never shown
            doc[key] = SecretValue()
            continue
        raw = config.get(key)
        try:
            doc[key] = json.loads(raw) if raw is not None else None
        except ValueError:
            doc[key] = raw
    if problems:
        raise SettingsError(problems, headline="the stack file has malformed settings")
    return doc


def _other_keys() -> list[tuple[str, bool]]:
    """The stack's `tkf-infra:` keys that are neither settings nor the runtime API keys, each with whether
    it is a secret."""
    import pulumi
    from pulumi import runtime
    from pulumi.runtime import config as runtime_config

    keys = set(runtime_config.CONFIG.get()) | set(runtime.get_config_env())
    prefix = f"{pulumi.get_project()}:"  # the namespace pulumi.Config() reads
    ours = {k.removeprefix(prefix): k for k in keys if k.startswith(prefix)}
    known = {*CONFIG_KEYS, *API_KEY_CONFIG_KEYS}  # a plaintext apiKey is refused by read_api_keys, by name
    return sorted((name, runtime.is_config_secret(key)) for name, key in ours.items() if name not in known)


def read_api_keys() -> ApiKeys | None:
    """The runtime API keys (`apiKey`, `apiKeyNext`, `apiKeyPrevious`), checked; None when `apiKey` is unset.

    Read as plaintext so every problem is reported at once before anything is registered (pulumi's
    `get_secret` would hand back Outputs, checkable only inside an apply). The values are wrapped as
    secrets wherever they are used (components/fleet.py, tkf_infra/outputs.py).
    """
    import pulumi.runtime

    full = {name: f"tkf-infra:{name}" for name in API_KEY_CONFIG_KEYS}
    values: dict[str, str | None] = {}
    for name, key in full.items():
        value = pulumi.runtime.get_config(key)
        values[name] = None if value in (None, "") else str(value)
    problems = key_problems(values, is_secret=lambda name: pulumi.runtime.is_config_secret(full[name]))
    if problems:
        raise SettingsError(problems, headline="the runtime API keys cannot be used")
    current = values["apiKey"]
    if current is None:
        return None
    return ApiKeys(current, values["apiKeyNext"], values["apiKeyPrevious"])
