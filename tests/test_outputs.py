"""The outputs contract (docs/outputs.md), pinned without the engine.

Why pin shapes here: the gateway's deploy and CI read these outputs as data. A renamed key, a lost
`api_base` or a second entry with the same `model_name` would not fail any Pulumi run — LiteLLM
accepts all three silently (the last tests below show it does) and routes traffic or bills wrongly.
So every shape is asserted key for key, and the LiteLLM pinned in requirements-dev.txt is run on
the generated list: it must accept it, send rerank to the model's Service with our key, and bill it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pulumi
import pytest

from tests.mocks import CPU, SINGLE_GPU, TP4, program, stack_doc
from tkf_infra import outputs
from tkf_infra.config import Catalog, Mode, validate_catalog
from tkf_infra.hub.lock import Lock, load_lock
from tkf_infra.outputs import CONTRACT_VERSION, endpoint, gateway_model_list
from tkf_infra.plan import Exclusion, Stage, plan_fleet
from tkf_infra.sizing.contract import FitFigures, wire_name

DOCS = Path(__file__).resolve().parents[1] / "docs" / "outputs.md"

RERANK_PRICE = 0.00000002  # USD per token
# Real models from models.lock.json, one per serving mode.
EMBED = {"name": "e5-large", "repo": "intfloat/multilingual-e5-large",
         "revision": "3d7cfbdacd47fdda877c5cd8a79fbcc4f2a574f3", "servedName": "multilingual-e5-large",
         "nodePool": "h100", "maxModelLen": 512, "mode": "embedding",
         "cost": {"inputPerToken": 0.00000001}}
RERANK = {"name": "bge-reranker", "repo": "BAAI/bge-reranker-v2-m3",
          "revision": "953dc6f6f85a1b2dbfca4c34a2796e7dde08d41e", "servedName": "bge-reranker-v2-m3",
          "nodePool": "h100", "maxModelLen": 8192, "mode": "rerank",
          "cost": {"inputPerToken": RERANK_PRICE}}
CHAT = {**SINGLE_GPU, "enableAutoToolChoice": True, "toolCallParser": "hermes",
        "cost": {"inputPerToken": 0.0000001, "outputPerToken": 0.0000004}}

ENDPOINT_KEYS = {"name", "servedName", "baseUrl", "model", "mode", "profile", "gpus", "nodePool", "replicas",
                 "maxContext", "namespace"}
FIT_KEYS = {wire_name(f) for f in FitFigures.model_fields}
GATEWAY_KEYS = {"model_name", "litellm_params", "model_info"}
PARAMS_KEYS = {"model", "api_base", "api_key"}
INFO_KEYS = {"id", "mode", "input_cost_per_token", "output_cost_per_token", "max_input_tokens",
             "supports_function_calling"}
REJECTED_KEYS = {"index", "name", "stage", "reasons", "refusals", "kept"}
EXPORTED = {"contractVersion", "endpoints", "gatewayModelList", "rejected", "problems", "deployed", "apiKeyEnv",
            "gpuLayout", "poolHeadroom", "runtimeApiKey", "apiKeyRotation", "platformContract"}
ROTATION_KEYS = {"step", "acceptedKeys", "acceptedKeysDigest", "gatewayKeyDigest"}


def catalog(*models: dict[str, Any], **overrides: Any) -> Catalog:
    return validate_catalog(stack_doc(*models, **overrides))


# ---------------------------------------------------------------------------------------------
# Shapes
# ---------------------------------------------------------------------------------------------


def test_endpoint_has_exactly_the_documented_keys_and_values() -> None:
    cat = catalog(TP4, namespaces={"serving": "inference"})
    ep = endpoint(cat.models[0], "inference")
    assert set(ep) == ENDPOINT_KEYS
    assert ep == {
        "name": "qwen-72b",
        "servedName": "qwen2.5-72b",
        "baseUrl": "http://qwen-72b-openai.inference.svc.cluster.local:8000/v1",
        "model": "Qwen/Qwen2.5-72B-Instruct@495f39366efef23836d0cfae4fbe635880d2be31",
        "mode": "chat",
        "profile": "tensor-parallel",
        "gpus": 4,
        "nodePool": "h100",
        "replicas": 1,
        "maxContext": 16384,
        "namespace": "inference",
    }


def test_gateway_entry_has_exactly_the_documented_keys() -> None:
    for entry in gateway_model_list(catalog(CHAT, EMBED, RERANK, CPU)):
        assert set(entry) == GATEWAY_KEYS
        assert set(entry["litellm_params"]) == PARAMS_KEYS
        assert set(entry["model_info"]) == INFO_KEYS


def test_api_base_is_the_alias_service_of_the_serving_namespace_ending_in_v1() -> None:
    cat = catalog(CHAT, EMBED, RERANK, namespaces={"serving": "team-llm"})
    by_id = {e["model_info"]["id"]: e["litellm_params"]["api_base"] for e in gateway_model_list(cat)}
    assert by_id == {name: f"http://{name}-openai.team-llm.svc.cluster.local:8000/v1"
                     for name in ("qwen3-8b", "e5-large", "bge-reranker")}


def test_api_key_is_always_an_environment_reference_to_api_key_env() -> None:
    cat = catalog(CHAT, EMBED, RERANK, serving={"allowCpu": True, "apiKeyEnv": "LLM_FLEET_KEY"})
    keys = {e["litellm_params"]["api_key"] for e in gateway_model_list(cat)}
    assert keys == {"os.environ/LLM_FLEET_KEY"}


@pytest.mark.parametrize(("entry", "model"), [
    (CHAT, "openai/qwen3-8b"),
    (EMBED, "openai/multilingual-e5-large"),
    (RERANK, "jina_ai/bge-reranker-v2-m3"),
])
def test_provider_prefix_follows_the_mode(entry: dict[str, Any], model: str) -> None:
    (out,) = gateway_model_list(catalog(entry))
    assert out["litellm_params"]["model"] == model
    assert out["model_info"]["mode"] == entry.get("mode", "chat")


def test_every_mode_has_a_provider() -> None:
    assert set(outputs.LITELLM_PROVIDER) == set(Mode)


def test_costs_context_and_tool_support_are_carried_from_the_catalog() -> None:
    info = {e["model_name"]: e["model_info"] for e in gateway_model_list(catalog(CHAT, RERANK))}
    assert info["qwen3-8b"] == {"id": "qwen3-8b", "mode": "chat", "input_cost_per_token": 0.0000001,
                                "output_cost_per_token": 0.0000004, "max_input_tokens": 8192,
                                "supports_function_calling": True}
    assert info["bge-reranker-v2-m3"]["input_cost_per_token"] == RERANK_PRICE
    assert info["bge-reranker-v2-m3"]["supports_function_calling"] is False


def test_only_deployed_entries_reach_the_gateway() -> None:
    cat = catalog(CHAT, EMBED, RERANK)
    assert [e["model_info"]["id"] for e in gateway_model_list(cat, {"e5-large"})] == ["e5-large"]
    assert gateway_model_list(cat, set()) == []


def test_duplicate_model_name_is_never_published() -> None:
    cat = catalog(CHAT, TP4)
    clash = cat.models[1].model_copy(update={"served_name": cat.models[0].served_name})
    with pytest.raises(ValueError, match="duplicate model_name"):
        gateway_model_list(dataclasses.replace(cat, models=(cat.models[0], clash)))


def test_the_catalog_refuses_a_duplicate_served_name_before_outputs_see_it() -> None:
    cat = catalog(CHAT, {**TP4, "servedName": CHAT["servedName"]})
    assert [m.name for m in cat.models] == ["qwen3-8b"]
    assert [e["model_name"] for e in gateway_model_list(cat)] == ["qwen3-8b"]
    (rej,) = [x.as_output() for x in plan_fleet(cat, lock=load_lock()).excluded]
    assert rej["name"] == "qwen-72b" and "servedName must be unique" in rej["reasons"][0]


def test_rejected_lists_every_left_out_model_with_its_index_stage_and_reasons() -> None:
    bad = {**TP4, "revision": "main"}
    too_long = {**CHAT, "name": "too-long", "servedName": "too-long", "maxModelLen": 10_000_000}
    lock = load_lock()
    lock = Lock(entries={k: v for k, v in lock.entries.items() if not k.startswith(f"{EMBED['repo']}@")})
    out = [x.as_output() for x in plan_fleet(catalog(CHAT, bad, EMBED, too_long), lock=lock).excluded]
    assert all(set(r) == REJECTED_KEYS for r in out)
    assert [(r["index"], r["name"], r["stage"]) for r in out] == [
        (1, "qwen-72b", "catalog"), (2, "e5-large", "lock"), (3, "too-long", "fit")]
    assert "is a branch, which can move" in out[0]["reasons"][0]
    assert "is not in models.lock.json" in out[1]["reasons"][0] and "python -m tkf_infra lock" in out[1]["reasons"][0]
    assert "longer than the model's" in out[2]["reasons"][0]
    # Each reason with the field to change, as data (the summary and the gateway's CI read it, not the words).
    assert [[f["field"] for f in r["refusals"]] for r in out] == [["revision"], ["revision"], [None]]
    assert all([f["reason"] for f in r["refusals"]] == r["reasons"] for r in out)
    assert [Exclusion.from_output(r).as_output() for r in out] == out


def test_every_stage_is_documented() -> None:
    text = DOCS.read_text()
    for stage in Stage:
        assert f"`{stage.value}`" in text, f"docs/outputs.md does not document stage {stage.value!r}"


def test_export_outputs_publishes_the_contract_and_marks_the_key_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    exported: dict[str, Any] = {}
    monkeypatch.setattr(pulumi, "export", lambda name, value: exported.__setitem__(name, value))
    h = program(stack_doc(CHAT, {**TP4, "revision": "main"}), api_key="k",
                outputs=lambda _: {"secret": pulumi.Output.is_secret(exported["runtimeApiKey"])})
    assert set(exported) == EXPORTED
    assert exported["contractVersion"] == CONTRACT_VERSION
    assert set(exported["endpoints"]) == {"qwen3-8b"}
    assert set(exported["endpoints"]["qwen3-8b"]) == ENDPOINT_KEYS | {"fit", "footprint"}
    footprint = exported["endpoints"]["qwen3-8b"]["footprint"]
    assert footprint["pod"] == {"cpuMillis": 4010, "memoryMiB": 22560, "gpus": 1} and footprint["weightCacheGiB"] == 20
    fit = exported["endpoints"]["qwen3-8b"]["fit"]
    assert set(fit) == FIT_KEYS and fit["fits"] is True and fit["kvCacheTokens"] > 0, "known at preview"
    assert h.values["secret"] is True
    assert [e["model_name"] for e in exported["gatewayModelList"]] == ["qwen3-8b"]
    assert [r["name"] for r in exported["rejected"]] == ["qwen-72b"]
    assert exported["apiKeyEnv"] == "TKF_VLLM_API_KEY"
    assert set(exported["apiKeyRotation"]) == ROTATION_KEYS and exported["apiKeyRotation"]["step"] == "none"


def test_docs_document_every_key_and_the_current_version() -> None:
    text = DOCS.read_text()
    assert f"`contractVersion`: {CONTRACT_VERSION}" in text
    documented = ENDPOINT_KEYS | FIT_KEYS | GATEWAY_KEYS | PARAMS_KEYS | INFO_KEYS | REJECTED_KEYS | EXPORTED
    for key in documented | ROTATION_KEYS:
        assert f"`{key}`" in text, f"docs/outputs.md does not document {key!r}"
    for mode, provider in outputs.LITELLM_PROVIDER.items():
        assert f"| {mode.value} | `{provider}/` |" in text


# ---------------------------------------------------------------------------------------------
# LiteLLM itself (pinned in requirements-dev.txt) on the generated list
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def litellm() -> Any:
    # Without this, importing litellm fetches its price map from GitHub (and waits ~10 s offline).
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    return importlib.import_module("litellm")


class FakeVllm(BaseHTTPRequestHandler):
    """Answers /v1/rerank like vLLM: `results` with index, document and relevance_score, and `usage.total_tokens`."""

    seen: ClassVar[list[tuple[str, str | None, dict[str, Any]]]] = []
    total_tokens = 120

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        FakeVllm.seen.append((self.path, self.headers.get("authorization"), body))
        docs = body.get("documents", [])
        data = json.dumps({
            "id": "rerank-1", "model": body.get("model"), "usage": {"total_tokens": self.total_tokens},
            "results": [{"index": i, "document": {"text": d}, "relevance_score": 1.0 / (i + 1)}
                        for i, d in enumerate(docs)],
        }).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def vllm() -> Iterator[str]:
    """A stand-in vLLM on loopback; yields its base URL in the contract's form (ending in /v1)."""
    FakeVllm.seen = []
    server = HTTPServer(("127.0.0.1", 0), FakeVllm)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()
    server.server_close()


def _pointed_at(entry: dict[str, Any], api_base: str) -> dict[str, Any]:
    """The generated entry, unchanged except that the cluster DNS name becomes the stand-in server."""
    return {**entry, "litellm_params": {**entry["litellm_params"], "api_base": api_base}}


def _deployments(router: Any) -> list[dict[str, Any]]:
    return list(router.registry().all())


def _rerank(litellm: Any, entry: dict[str, Any]) -> Any:
    router = litellm.Router(model_list=[entry])
    return asyncio.run(router.arerank(model=entry["model_name"], query="which is a reranker?",
                                      documents=["bge", "llama", "e5"]))


def test_litellm_router_accepts_the_generated_model_list(litellm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TKF_VLLM_API_KEY", "runtime-key")
    model_list = gateway_model_list(catalog(CHAT, EMBED, RERANK))
    router = litellm.Router(model_list=model_list)
    deployed = {d["model_name"]: d["litellm_params"] for d in _deployments(router)}
    assert set(deployed) == {"qwen3-8b", "multilingual-e5-large", "bge-reranker-v2-m3"}
    for entry in model_list:
        params = deployed[entry["model_name"]]
        assert params["api_base"] == entry["litellm_params"]["api_base"]
        assert params["api_key"] == "runtime-key"  # `os.environ/…` resolved by LiteLLM, never stored


def test_rerank_reaches_vllm_with_our_key_and_is_billed_per_token(
    litellm: Any, vllm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TKF_VLLM_API_KEY", "runtime-key")
    (entry,) = gateway_model_list(catalog(RERANK))
    resp = _rerank(litellm, _pointed_at(entry, vllm))
    path, auth, body = FakeVllm.seen[-1]
    assert (path, auth) == ("/v1/rerank", "Bearer runtime-key")
    assert body == {"model": "bge-reranker-v2-m3", "query": "which is a reranker?", "documents": ["bge", "llama", "e5"]}
    assert [r["index"] for r in resp.results] == [0, 1, 2]
    cost = resp._hidden_params["response_cost"]
    assert cost == pytest.approx(FakeVllm.total_tokens * RERANK_PRICE)
    assert cost > 0


def test_hosted_vllm_would_bill_rerank_zero_which_is_why_we_do_not_use_it(
    litellm: Any, vllm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If LiteLLM starts billing hosted_vllm rerank, this fails: reconsider the mapping (docs/outputs.md)."""
    monkeypatch.setenv("TKF_VLLM_API_KEY", "runtime-key")
    (entry,) = gateway_model_list(catalog({**RERANK, "servedName": "bge-hosted"}))
    entry = _pointed_at(entry, vllm)
    entry["litellm_params"]["model"] = "hosted_vllm/bge-hosted"
    entry["model_info"] = {**entry["model_info"], "id": "bge-hosted", "input_cost_per_query": 0.001}
    resp = _rerank(litellm, entry)
    assert FakeVllm.seen[-1][0] == "/v1/rerank"  # it does reach vLLM ...
    assert resp._hidden_params["response_cost"] == 0.0  # ... but per-token and per-query prices are ignored


def test_litellm_traps_the_contract_avoids_are_real(litellm: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """LiteLLM accepts, without a word: no api_base, a duplicate model_name, an unset key variable."""
    monkeypatch.delenv("TKF_UNSET_KEY", raising=False)
    router = litellm.Router(model_list=[
        {"model_name": "m", "litellm_params": {"model": "openai/m", "api_key": "os.environ/TKF_UNSET_KEY"}},
        {"model_name": "m", "litellm_params": {"model": "openai/m", "api_base": "http://x:8000/v1"}},
    ])
    params = [d["litellm_params"] for d in _deployments(router)]
    assert len(params) == 2  # one load-balanced group, not an error
    assert params[0].get("api_base") is None  # would go to api.openai.com
    assert params[0].get("api_key") is None  # the provider then falls back to its own env variable
