"""`status` holds each model's predicted KV tokens against what its running vLLM reports.

The fixture exporters serve `vllm:cache_config_info` in the label shape of three vLLM releases
(0.32.0 with `kv_cache_size_tokens`, 0.10.2 with blocks only, 0.8.5 with `num_gpu_blocks="None"`),
so the join and every fallback run through a real Prometheus.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tkf_infra.exit_codes import ExitCode
from tkf_infra.live.status_view import status_command
from tkf_infra.sizing.contract import KV_DEVIATION_LIMIT

from .conftest import PromServer
from .metrics_fixtures import MODELS, UNSCRAPED_ENDPOINT, FakeModel

pytestmark = pytest.mark.prometheus

BY_RELEASE = {m.vllm_release: m for m in MODELS}
CURRENT, BLOCKS_ONLY, NO_BLOCKS = BY_RELEASE["0.32.0"], BY_RELEASE["0.10.2"], BY_RELEASE["0.8.5"]


def _status(prom: PromServer, endpoints: list[dict[str, Any]]) -> tuple[dict[str, Any], ExitCode]:
    text, code = status_command(endpoints, prom.url, as_json=True)
    data: dict[str, Any] = json.loads(text)
    return data, code


def _check(data: dict[str, Any], model: FakeModel) -> dict[str, Any]:
    record: dict[str, Any] = next(m for m in data["models"] if m["name"] == model.name)
    check: dict[str, Any] = record["kvCacheCheck"]
    return check


def test_each_release_reports_its_kv_cache(prom: PromServer) -> None:
    data, code = _status(prom, [m.endpoint() for m in MODELS])

    assert code == ExitCode.OK and data["warnings"] == []
    current = _check(data, CURRENT)
    assert current["observedTokens"] == CURRENT.kv.tokens and current["source"] == "vLLM's kv_cache_size_tokens label"
    assert current["deviation"] == pytest.approx(CURRENT.kv.tokens / CURRENT.predicted_kv_tokens - 1, abs=1e-4)
    assert current["deviates"] is False and current["unavailable"] is None
    # both replicas, joined to their model through the scrape target, not through a model_name label
    assert sorted(e["instance"] for e in current["engines"]) == sorted(r.instance for r in CURRENT.replicas)
    assert all(e["numGpuBlocks"] == CURRENT.kv.num_gpu_blocks and e["blockSize"] == 16 for e in current["engines"])

    blocks = _check(data, BLOCKS_ONLY)
    assert blocks["observedTokens"] == BLOCKS_ONLY.kv.tokens
    assert blocks["source"] == "num_gpu_blocks × block_size" and blocks["engines"][0]["reportedTokens"] is None

    unknown = _check(data, NO_BLOCKS)
    assert unknown["observedTokens"] is None and unknown["deviation"] is None and unknown["deviates"] is False
    assert 'num_gpu_blocks="None"' in unknown["unavailable"]


@pytest.mark.parametrize(("model", "factor"), [(CURRENT, 1.08), (BLOCKS_ONLY, 0.9)], ids=["over", "under"])
def test_deviation_over_the_limit_refuses_and_names_model_and_size(prom: PromServer, model: FakeModel,
                                                                    factor: float) -> None:
    """The prediction is off by the factor: vLLM got 1/factor of it."""
    observed = model.kv.tokens
    predicted = round(observed * factor)
    endpoints = [m.endpoint(predicted if m is model else None) for m in MODELS]

    data, code = _status(prom, endpoints)
    text, text_code = status_command(endpoints, prom.url, as_json=False)

    assert code == text_code == ExitCode.REFUSED
    deviation = observed / predicted - 1
    assert _check(data, model)["deviates"] is True
    assert _check(data, model)["deviation"] == pytest.approx(deviation, abs=1e-4)
    assert [m["name"] for m in data["models"] if m["kvCacheCheck"]["deviates"]] == [model.name]
    (warning,) = data["warnings"]
    assert f"model '{model.name}'" in warning
    assert f"vLLM reports {observed:,} KV-cache tokens" in warning and f"predicted {predicted:,}" in warning
    assert f"{deviation:+.1%}" in warning and "±5%" in warning
    assert ("over-estimates" if deviation < 0 else "under-estimates") in warning
    assert "python -m tkf_infra calibrate" in warning
    row = next(line for line in text.splitlines() if f" {model.name} " in line)
    assert f"{observed:,} ({deviation:+.1%}) !" in row


def test_deviation_at_the_limit_is_not_flagged(prom: PromServer) -> None:
    predicted = round(CURRENT.kv.tokens / (1 + KV_DEVIATION_LIMIT * 0.98))
    data, code = _status(prom, [CURRENT.endpoint(predicted)])
    assert code == ExitCode.OK and _check(data, CURRENT)["deviates"] is False


def test_deviation_outranks_a_model_without_data(prom: PromServer) -> None:
    """Both problems are reported; the exit code is the one that is a finding, not a gap."""
    endpoints = [CURRENT.endpoint(CURRENT.kv.tokens * 2), UNSCRAPED_ENDPOINT]
    data, code = _status(prom, endpoints)
    assert code == ExitCode.REFUSED
    assert len(data["warnings"]) == 2 and any("no data" in w for w in data["warnings"])


def test_endpoint_without_a_prediction_is_shown_but_not_judged(prom: PromServer) -> None:
    endpoint = CURRENT.endpoint()
    endpoint["fit"] = {"kvCacheTokens": None}  # what a first preview publishes before the check ran
    data, code = _status(prom, [endpoint])
    check = _check(data, CURRENT)
    assert code == ExitCode.OK and check["observedTokens"] == CURRENT.kv.tokens
    assert check["deviation"] is None and check["unavailable"] == "no prediction in the stack outputs"
