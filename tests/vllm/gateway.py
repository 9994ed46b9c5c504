"""The gateway for real: the LiteLLM proxy, started from the file ``gateway-config`` wrote.

The one substitution: the model's ``api_base`` (a cluster DNS name) becomes the local vLLM's URL, or a
stand-in for the alias Service in front of several pods. Everything else — the provider prefix,
``os.environ/<apiKeyEnv>`` for the key, the model name, the prices in ``model_info`` — is the program's
output, so a wrong prefix, key reference or price fails.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.vllm.conftest import RunningPod
from tests.vllm.server import Service, start_litellm


@dataclass
class Gateway:
    service: Service
    master_key: str
    config: dict[str, Any]

    def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        return httpx.post(f"{self.service.url}{path}", json=body, timeout=120,
                          headers={"Authorization": f"Bearer {self.master_key}"})


@contextmanager
def run_gateway(pod: RunningPod, workdir: Path, *, api_base: str | None = None,
                api_key: str | None = None, settings: dict[str, Any] | None = None) -> Iterator[Gateway]:
    """The LiteLLM proxy on the gateway config of ``pod``'s stack, the model's api_base on ``pod``
    (or on ``api_base``: a stand-in for the alias Service), holding the pod's key (or ``api_key``)
    in the variable the stack's ``apiKeyEnv`` names, as the gateway's Secret would."""
    config = {**yaml.safe_load(pod.stack.gateway_config.read_text()), **(settings or {})}  # settings: e.g. callbacks
    # The model's entry and its LoRA adapters' (same base URL): all point at this pod.
    ours = [m for m in config["model_list"] if m["litellm_params"]["api_base"] == pod.endpoint["baseUrl"]]
    assert pod.endpoint["servedName"] in [m["model_name"] for m in ours]
    for m in ours:
        m["litellm_params"]["api_base"] = api_base or f"{pod.server.url}/v1"
    workdir.mkdir(parents=True)
    (workdir / "litellm.yaml").write_text(yaml.safe_dump(config))
    master_key = "sk-" + secrets.token_hex(32)
    env = {
        pod.stack.outputs["apiKeyEnv"]: api_key or pod.command.env["VLLM_API_KEY"],  # the gateway's copy of the key
        "LITELLM_MASTER_KEY": master_key,
        "HOME": str(workdir / "home"),
        "TMPDIR": str(workdir),
    }
    service = start_litellm("litellm", workdir / "litellm.yaml", env, workdir=workdir)
    try:
        yield Gateway(service, master_key, config)
    finally:
        service.stop()
