"""Reading a real vLLM's ``/metrics`` page with Prometheus' own text-format parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

#: sample name -> [(labels, value)], e.g. "vllm:prompt_tokens_total" -> [({"model_name": ...}, 12.0)]
Samples = dict[str, list[tuple[dict[str, str], float]]]


def parse_metrics(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    return out


def sample(metrics: Samples, name: str, **labels: str) -> float:
    """The one sample of ``name`` whose labels include ``labels`` (fails on none or several)."""
    matches = [v for lbl, v in metrics.get(name, []) if all(lbl.get(k) == want for k, want in labels.items())]
    assert len(matches) == 1, f"expected one {name}{labels} sample, found {len(matches)}: {metrics.get(name)}"
    return matches[0]
