"""How `status` shows its result: a plain-text table for people and CI logs, or JSON for scripts."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from tkf_infra.exit_codes import ExitCode
from tkf_infra.live.model_status import ModelStatus, StatusResult
from tkf_infra.live.status import read_model_status


def _num(value: float | None) -> str:
    if value is None:
        return "—"
    return str(int(value)) if float(value).is_integer() else f"{value:.1f}"


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f}%"


def _kv(m: ModelStatus) -> str:
    if m.kv_cache_usage is None:
        return "—"
    if m.kv_cache_usage_max is not None and m.ready_replicas > 1:
        return f"{_pct(m.kv_cache_usage)} (max {_pct(m.kv_cache_usage_max)})"
    return _pct(m.kv_cache_usage)


def _kv_tokens(m: ModelStatus) -> str:
    """Observed tokens and their deviation from the fit check's prediction; '!' past the limit."""
    check = m.kv_check
    worst = check.worst
    if worst is None or worst.tokens is None:
        return "—"
    deviation = check.deviation(worst)
    flag = " !" if check.deviates else ""
    return f"{worst.tokens:,} ({deviation:+.1%}){flag}" if deviation is not None else f"{worst.tokens:,}"


def _ttft(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value * 1000:.0f} ms" if value < 0.9995 else f"{value:.2f} s"


def _replicas(m: ModelStatus) -> str:
    if m.scrape_targets is not None:
        return f"{m.ready_replicas}/{m.scrape_targets}"
    return str(m.ready_replicas)


_COLUMNS = ("model", "namespace", "served name", "ready", "waiting", "running", "KV cache", "prefix hit",
            "TTFT p95", "tokens/s in/out", "KV tokens vs fit")
_LEFT = ("model", "namespace", "served name")


def render_table(result: StatusResult, width: int = 180) -> str:
    """Plain-text table (no colour codes) followed by warnings; suits terminals, CI logs and pipes."""
    if not result.reachable:
        return "\n".join(f"warning: {w}" for w in result.warnings)
    table = Table(title=f"Model status (Prometheus {result.prometheus_url})", title_justify="left")
    for header in _COLUMNS:
        table.add_column(header, justify="left" if header in _LEFT else "right")
    for m in result.models:
        if not m.has_data:
            table.add_row(m.name, m.namespace, m.served_name, _replicas(m), "no data", "", "", "", "", "", "")
            continue
        table.add_row(
            m.name,
            m.namespace,
            m.served_name,
            _replicas(m),
            _num(m.requests_waiting),
            _num(m.requests_running),
            _kv(m),
            _pct(m.prefix_cache_hit_rate),
            _ttft(m.ttft_p95_seconds),
            f"{_num(m.prompt_tokens_per_second)}/{_num(m.generation_tokens_per_second)}",
            _kv_tokens(m),
        )
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None, force_terminal=False).print(table)
    lines = [line.rstrip() for line in buffer.getvalue().rstrip("\n").splitlines()]
    lines += [f"footprint: {m.name}: {text}" for m in result.models if (text := m.footprint_text())]
    lines += [f"adapters: {m.name}: {m.lora.text()}" for m in result.models if m.lora is not None]
    lines += [f"warning: {w}" for w in result.warnings]
    return "\n".join(lines)


def render_json(result: StatusResult) -> str:
    return json.dumps(result.to_json(), indent=2)


def status_command(
    endpoints: Sequence[Mapping[str, Any]],
    prometheus_url: str,
    as_json: bool,
    *,
    timeout_s: float = 5,
    rate_window: str = "5m",
) -> tuple[str, ExitCode]:
    """Text to print and the exit code (tkf_infra.exit_codes): OK; REFUSED when a model's KV cache
    deviates from the fit check; UNAVAILABLE when Prometheus does not answer; NO_DATA when a model
    has no series."""
    result = read_model_status(endpoints, prometheus_url, timeout_s=timeout_s, rate_window=rate_window)
    text = render_json(result) if as_json else render_table(result)
    return text, result.exit_code
