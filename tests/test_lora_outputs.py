"""LoRA adapters once planned: the weight cache, both backends' pods, the gateway outputs, and keeping a refused
model at its last settings (catalog rules and sizing: tests/test_lora.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.mocks import CPU, stack_doc
from tests.test_lora import SHA, adapter, adapter_facts, lock_with, with_lora
from tkf_infra.config import ModelEntry, validate_catalog
from tkf_infra.plan import Stage, plan_fleet

# --------------------------------------------------------------------------------------------
# Serving: the weight cache downloads adapters beside the base, never the base again
# --------------------------------------------------------------------------------------------


def run_download(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, adapters: tuple[tuple[str, str], ...]) -> list[str]:
    """Run the download Job's script for real, with a stand-in `hf` that records each download."""
    import os
    import subprocess

    from components import pod_meta
    from components.weight_cache import download_script

    monkeypatch.setattr(pod_meta, "CACHE_MOUNT", str(tmp_path / "cache"))
    bin_dir, log = tmp_path / "bin", tmp_path / "downloads.log"
    bin_dir.mkdir(exist_ok=True)
    hf = bin_dir / "hf"
    hf.write_text(f'#!/bin/sh\necho "$2 $4" >> {log}\nmkdir -p "$6" && touch "$6/weights"\n')
    hf.chmod(0o755)
    script = download_script(str(CPU["repo"]), str(CPU["revision"]), adapters)
    before = log.read_text().splitlines() if log.exists() else []
    subprocess.run(["/bin/sh", "-c", script], check=True, capture_output=True,
                   env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    return log.read_text().splitlines()[len(before):]


def test_adding_an_adapter_downloads_only_that_adapter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = ("org/qwen-sql", SHA), ("org/qwen-chat", "2" * 40)
    first = run_download(tmp_path, monkeypatch, (a,))
    assert first == [f"{CPU['repo']} {CPU['revision']}", f"org/qwen-sql {SHA}"]
    assert (tmp_path / "cache" / str(CPU["revision"]) / ".lora" / "org--qwen-sql" / SHA / "weights").exists()
    assert run_download(tmp_path, monkeypatch, (a, b)) == [f"org/qwen-chat {'2' * 40}"]
    assert run_download(tmp_path, monkeypatch, (b,)) == []


def test_a_cache_without_adapters_keeps_its_download_script() -> None:
    from components.weight_cache import download_script

    script = download_script("org/m", SHA)
    assert ".lora" not in script and "exit 0" in script  # the script every stack without LoRA already runs


@pytest.mark.parametrize("backend", ["kserve", "vllm"])
def test_both_backends_serve_the_adapters_from_the_cache_and_wait_for_them(backend: str) -> None:
    from tests.mocks import program

    lock = lock_with(adapter_facts("org/qwen-sql", str(CPU["repo"])))
    h = program(stack_doc(with_lora(CPU, adapter("sql")), backend=backend), lock=lock)
    assert h.error is None, h.error
    kinds = {"LLMInferenceService", "Deployment"}
    work = next(r for r in h.resources if r.custom and r.inputs.get("kind") in kinds)
    pod = work.spec["template"] if backend == "kserve" else work.spec["template"]["spec"]
    main = next(c for c in pod["containers"] if c["name"] == "main")
    words = " ".join(main.get("command") or []) + " " + " ".join(main.get("args") or [])
    path = f"/mnt/models/.lora/org--qwen-sql/{SHA}"
    assert "--enable-lora" in words and "--max-loras" in words and f"sql-served={path}" in words
    wait = next(c for c in pod["initContainers"] if c["name"] == "wait-for-weights")
    assert f"/weight-cache/{CPU['revision']}/.lora/org--qwen-sql/{SHA}/.tkf-download-complete" in wait["command"][2]
    job = next(r for r in h.resources if r.type == "kubernetes:batch/v1:Job")
    script = job.inputs["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert f"org/qwen-sql --revision {SHA}" in script


# --------------------------------------------------------------------------------------------
# Gateway: one model_list entry per adapter; endpoints list adapters under their base
# --------------------------------------------------------------------------------------------


def test_the_gateway_gets_one_entry_per_adapter_at_the_base_url_and_the_base_price_unless_its_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import pulumi

    from tests.mocks import program

    exported: dict[str, Any] = {}
    monkeypatch.setattr(pulumi, "export", lambda name, value: exported.__setitem__(name, value))
    priced = adapter("chat", repo="org/qwen-chat", revision="2" * 40,
                     cost={"inputPerToken": 3e-6, "outputPerToken": 4e-6})
    base = {**with_lora(CPU, adapter("sql"), priced), "cost": {"inputPerToken": 1e-6, "outputPerToken": 2e-6}}
    lock = lock_with(adapter_facts("org/qwen-sql", str(CPU["repo"])),
                     adapter_facts("org/qwen-chat", str(CPU["repo"]), revision="2" * 40))
    h = program(stack_doc(base), lock=lock)
    assert h.error is None, h.error
    models = {m["model_name"]: m for m in exported["gatewayModelList"]}
    assert list(models) == ["qwen2.5-0.5b", "sql-served", "chat-served"]
    url = models["qwen2.5-0.5b"]["litellm_params"]["api_base"]
    for served, price in (("sql-served", (1e-6, 2e-6)), ("chat-served", (3e-6, 4e-6))):
        m = models[served]
        assert m["litellm_params"] == {"model": f"openai/{served}", "api_base": url,
                                       "api_key": models["qwen2.5-0.5b"]["litellm_params"]["api_key"]}
        assert (m["model_info"]["input_cost_per_token"], m["model_info"]["output_cost_per_token"]) == price
        assert set(m["model_info"]) == set(models["qwen2.5-0.5b"]["model_info"])
    assert models["sql-served"]["model_info"]["id"] == "tiny/sql"
    ep = exported["endpoints"]["qwen2.5-0.5b"]
    assert ep["adapters"] == [{"name": "sql", "servedName": "sql-served", "model": f"org/qwen-sql@{SHA}"},
                              {"name": "chat", "servedName": "chat-served", "model": f"org/qwen-chat@{'2' * 40}"}]
    assert set(exported["endpoints"]) == {"qwen2.5-0.5b"}  # adapters are listed under their base, not beside it


def test_a_refused_model_is_not_kept_at_its_last_settings_when_its_adapter_name_is_now_anothers() -> None:
    """Keeping a refused model at its last deployed settings (plan._keep_last_good) must not publish an
    adapter's served name that a model of the new catalog now serves: the gateway would get two of it."""
    lock = lock_with(adapter_facts("org/qwen-sql", str(CPU["repo"])))
    last = ModelEntry.model_validate(with_lora(CPU, adapter("sql")))
    previous = {"tiny": last.model_dump(by_alias=True, mode="json", exclude_none=True)}
    refused = {**with_lora(CPU, adapter("sql", servedName="sql-v2")), "maxModelLen": 65536}  # beyond its positions
    taker = {**CPU, "name": "other", "servedName": "sql-served"}
    fleet = plan_fleet(validate_catalog(stack_doc(refused, taker)), lock=lock, previous=previous)
    assert fleet.deployed == {"other"}
    (x,) = fleet.excluded
    assert x.name == "tiny" and x.stage is Stage.FIT and not x.kept
    # Without the clash it is kept, adapters and all.
    fleet = plan_fleet(validate_catalog(stack_doc(refused, {**taker, "servedName": "free"})), lock=lock,
                       previous=previous)
    assert fleet.deployed == {"tiny", "other"} and fleet.excluded[0].kept
