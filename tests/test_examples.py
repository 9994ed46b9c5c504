"""The copyable examples stay true to the project: the CI workflow parses and calls only real
commands and options of `python -m tkf_infra`, and the gateway program turns the contract into the
proxy's ConfigMap and Secret — and refuses outputs that would trip LiteLLM's silent traps."""

from __future__ import annotations

import importlib
import re
import shlex
from pathlib import Path
from typing import Any

import pulumi
import pytest
import typer
import yaml

from tests.mocks import SINGLE_GPU, RecordingMocks, run, stack_doc
from tkf_infra.config import validate_catalog
from tkf_infra.ops.cli import app
from tkf_infra.outputs import CONTRACT_VERSION, gateway_model_list

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "examples" / "ci" / "github-actions.yml"
gateway: Any = importlib.import_module("examples.gateway.__main__")


def _workflow() -> dict[Any, Any]:
    doc = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(doc, dict)
    return doc


def _run_lines() -> list[str]:
    lines: list[str] = []
    for job in _workflow()["jobs"].values():
        for step in job.get("steps", []):
            lines += [ln.strip() for ln in str(step.get("run", "")).splitlines() if ln.strip()]
    return lines


def test_workflow_parses_with_preview_on_pr_and_up_on_main_behind_prod_approval() -> None:
    doc = _workflow()
    triggers: dict[str, Any] = doc[True] if True in doc else doc["on"]  # YAML 1.1 reads `on` as True
    assert set(triggers) == {"pull_request", "push"} and triggers["push"]["branches"] == ["main"]
    jobs = doc["jobs"]
    assert jobs["preview"]["strategy"]["matrix"]["stack"] == ["dev", "prod"]
    assert jobs["up-prod"]["needs"] == "up-dev" and jobs["up-prod"]["environment"] == "prod"
    uploads = [s for j in ("up-dev", "up-prod") for s in jobs[j]["steps"]
               if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    assert [u["with"]["path"] for u in uploads] == ["litellm-models.yaml"] * 2


def test_workflow_uses_only_real_cli_commands_and_options() -> None:
    group: Any = typer.main.get_command(app)  # typer's own click: duck-typed
    calls = [ln for ln in _run_lines() if "python -m tkf_infra" in ln]
    assert calls, "the workflow should drive the CLI"
    for line in calls:
        argv = shlex.split(line.split("python -m tkf_infra", 1)[1].split(">")[0])
        command = group.commands[argv[0]]  # KeyError: not a command of the CLI
        options = {o for p in command.params for o in getattr(p, "opts", [])}
        used = {a for a in argv[1:] if a.startswith("-")}
        assert used <= options, f"{line!r}: unknown options {used - options}"
    other = [ln for ln in _run_lines() if re.search(r"\b(pulumi|tkf_infra|scripts/)", ln)
             and "python -m tkf_infra" not in ln and ln != "run: scripts/setup.sh"]
    assert all(ln == "scripts/setup.sh" for ln in other), other


def test_workflow_tells_refused_apart_from_usage_errors_and_crashes() -> None:
    text = WORKFLOW.read_text()
    for code in ("1)", "2)", "*)"):
        assert text.count(f"            {code}") == 3, code  # one verdict per job, one branch per code


def _outputs(**over: Any) -> dict[str, Any]:
    cat = validate_catalog(stack_doc(SINGLE_GPU))
    outs = {"contractVersion": CONTRACT_VERSION, "gatewayModelList": gateway_model_list(cat),
            "apiKeyEnv": "TKF_VLLM_API_KEY", "runtimeApiKey": "the-key",
            "apiKeyRotation": {"step": "none", "acceptedKeys": 1, "acceptedKeysDigest": "scrypt:aa",
                               "gatewayKeyDigest": "scrypt:bb"}}
    return {**outs, **over}


class StackRefMocks(RecordingMocks):
    """Answers `pulumi:pulumi:StackReference` with given outputs (pulumi-practices.md 3.1)."""

    def __init__(self, outputs: dict[str, Any]) -> None:
        super().__init__()
        self.stack_outputs = outputs

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        if args.typ == "pulumi:pulumi:StackReference":
            return args.name, {"name": args.name, "outputs": self.stack_outputs,
                               "secretOutputNames": ["runtimeApiKey"]}
        return super().new_resource(args)


def _gateway(outputs: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> RecordingMocks:
    mocks = StackRefMocks(outputs)
    monkeypatch.setattr("tests.mocks.RecordingMocks", lambda: mocks)
    run(lambda: gateway.build("organization/tkf-infra/prod", "llm-gateway"))
    return mocks


def test_gateway_program_builds_the_proxy_config_and_key_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    mocks = _gateway(_outputs(), monkeypatch)
    config = mocks.named(gateway.CONFIG_MAP)
    doc = yaml.safe_load(config.inputs["data"]["config.yaml"])
    assert doc == {"model_list": _outputs()["gatewayModelList"]}
    assert "the-key" not in config.inputs["data"]["config.yaml"]
    secret = mocks.named(gateway.KEY_SECRET)
    data = secret.inputs["stringData"]
    assert "TKF_VLLM_API_KEY" in str(data) and "the-key" in str(data)
    assert data != {"TKF_VLLM_API_KEY": "the-key"}, "the key travels wrapped as a secret, never plaintext"
    assert secret.metadata["namespace"] == "llm-gateway"
    # The proxy's pods restart on a new key by this digest (the rotation's step 2), never by the key.
    assert secret.metadata["annotations"] == {gateway.KEY_DIGEST_ANNOTATION: "scrypt:bb"}
    assert gateway.key_digest(None) == ""


def test_gateway_checks_refuse_what_litellm_would_accept_silently() -> None:
    (entry,) = _outputs()["gatewayModelList"]
    no_base = {**entry, "litellm_params": {**entry["litellm_params"], "api_base": None}}
    with pytest.raises(ValueError, match="no api_base"):
        gateway.litellm_config([no_base], "TKF_VLLM_API_KEY")
    with pytest.raises(ValueError, match="appears twice"):
        gateway.litellm_config([entry, entry], "TKF_VLLM_API_KEY")
    with pytest.raises(ValueError, match=r"api_key must be os\.environ/OTHER"):
        gateway.litellm_config([entry], "OTHER")
    with pytest.raises(ValueError, match="no runtimeApiKey"):
        gateway.key_data("TKF_VLLM_API_KEY", None)
    with pytest.raises(ValueError, match="contractVersion is 2"):
        gateway.check_contract(2)
