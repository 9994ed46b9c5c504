"""The dev stack rendered through the real engine and CLI, once per serving backend, for the vLLM tier.

Exactly what a user runs (``python -m tkf_infra up --stack dev``, then ``outputs`` and
``gateway-config``) on a private copy of the project, with the dev catalog changed in two ways
only: non-zero prices (so the gateway's cost arithmetic is checked, not 0 == 0) and the backend.
A key rotation changes secrets with ``pulumi config set --secret`` / ``config rm`` and runs ``up``
again (:func:`apply_step`), keeping each step's rendered manifests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.engine_fixtures import add_adapters, copy_project, dev_config
from tkf_infra.ops.stacks import DEV_PASSPHRASE, pulumi_home
from tkf_infra.sizing.adapter_facts import AdapterFacts

#: A model served in embedding mode (same weights as the dev chat model): the dev catalog has none.
EMBEDDING_MODEL = "qwen-embed-0-5b"
#: USD per token, distinct per model and per direction so a swapped price cannot pass.
PRICES = {
    "qwen-0-5b": {"inputPerToken": 0.000001, "outputPerToken": 0.000003},
    "qwen-coder-0-5b": {"inputPerToken": 0.000002, "outputPerToken": 0.000005},
    EMBEDDING_MODEL: {"inputPerToken": 0.0000007, "outputPerToken": 0.0},
}


@dataclass
class RenderedStack:
    backend: str
    root: Path
    render_dir: Path
    env: dict[str, str]
    summary: dict[str, Any]
    outputs: dict[str, Any]
    gateway_config: Path

    def cli(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return run_cli(self.root, self.env, *args, timeout=timeout)

    def endpoint(self, model: str) -> dict[str, Any]:
        (ep,) = [e for e in self.outputs["endpoints"].values() if e["name"] == model]
        return dict(ep)


def run_cli(root: Path, env: dict[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(root / ".venv" / "bin" / "python"), "-m", "tkf_infra", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=timeout)


def priced_catalog() -> list[dict[str, Any]]:
    """The dev catalog with prices, plus an embedding-mode entry."""
    models: list[dict[str, Any]] = dev_config()["config"]["tkf-infra:models"]
    chat = models[0]
    embed = {"name": EMBEDDING_MODEL, "repo": chat["repo"], "revision": chat["revision"],
             "servedName": "qwen2.5-0.5b-embed", "mode": "embedding"}
    return [dict(m, cost=PRICES[m["name"]]) for m in [*models, embed]]


def render_stack(backend: str, workdir: Path, secrets: dict[str, str] | None = None,
                 models: list[dict[str, Any]] | None = None, adapters: Sequence[AdapterFacts] = ()) -> RenderedStack:
    """``up`` the dev stack (render mode) with ``serving.backend`` set; read outputs and gateway config.
    ``secrets``: stack secrets set (``pulumi config set --secret``) before the first ``up``. ``models``:
    another catalog (default `priced_catalog`); ``adapters``: LoRA adapter facts added to the copy's lock."""
    root = copy_project(workdir / "project")
    add_adapters(root, adapters)
    doc = dev_config()
    config = doc["config"]
    config["tkf-infra:cluster"]["renderDir"] = str(workdir / "rendered")
    config["tkf-infra:serving"]["backend"] = backend
    config["tkf-infra:models"] = models if models is not None else priced_catalog()
    (root / "Pulumi.dev.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    (workdir / "state").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_CONFIG_PASSPHRASE")}
    env["PULUMI_BACKEND_URL"] = f"file://{workdir / 'state'}"
    stack = RenderedStack(backend, root, workdir / "rendered", env, {}, {}, workdir / "litellm.yaml")
    if secrets:
        init = _pulumi(stack, "stack", "init")  # the CLI's `up` would create it; `config set` needs it first
        assert init.returncode == 0, init.stderr
        for name, value in secrets.items():
            _config(stack, "set", "--secret", name, value)
    return _up(stack)


def _up(stack: RenderedStack) -> RenderedStack:
    """``up``, then ``outputs --show-secrets`` and ``gateway-config``, as a user would."""
    up = stack.cli("up", "--stack", "dev", "--json")
    assert up.returncode == 0, f"`up` of the dev stack ({stack.backend} backend) failed:\n{up.stdout}\n{up.stderr}"
    outs = stack.cli("outputs", "--stack", "dev", "--show-secrets")
    assert outs.returncode == 0, outs.stderr
    gw = stack.cli("gateway-config", "--stack", "dev", "--format", "litellm", "-o", str(stack.gateway_config))
    assert gw.returncode == 0, gw.stderr
    stack.summary, stack.outputs = json.loads(up.stdout), json.loads(outs.stdout)
    return stack


def _pulumi(stack: RenderedStack, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**stack.env, "PULUMI_CONFIG_PASSPHRASE": DEV_PASSPHRASE, "PULUMI_SKIP_UPDATE_CHECK": "true"}
    return subprocess.run([str(pulumi_home() / "bin" / "pulumi"), *args, "--stack", "dev", "--non-interactive"],
                          cwd=stack.root, env=env, capture_output=True, text=True, timeout=120)


def _config(stack: RenderedStack, *args: str) -> None:
    done = _pulumi(stack, "config", *args)
    assert done.returncode == 0, f"pulumi config {args[0]} failed: {done.stderr}"


def apply_step(stack: RenderedStack, name: str, *, set_secrets: dict[str, str] | None = None,
               remove: tuple[str, ...] = ()) -> RenderedStack:
    """One step of a key rotation on ``stack``: its secrets changed as an operator does, then ``up``.
    Returns the stack as of this step, its manifests copied aside (the next ``up`` rewrites them)."""
    for key, value in (set_secrets or {}).items():
        _config(stack, "set", "--secret", key, value)
    for key in remove:
        _config(stack, "rm", key)
    return snapshot(_up(stack), name)


def snapshot(stack: RenderedStack, name: str) -> RenderedStack:
    """``stack`` as it is now, its manifests and gateway config copied aside (the next ``up`` rewrites them)."""
    rendered = stack.render_dir.parent / f"rendered-{name}"
    shutil.copytree(stack.render_dir, rendered)
    gateway = stack.gateway_config.with_name(f"litellm-{name}.yaml")
    shutil.copy(stack.gateway_config, gateway)
    return RenderedStack(stack.backend, stack.root, rendered, stack.env, stack.summary, stack.outputs, gateway)
