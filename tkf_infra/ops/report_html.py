"""The plan report drawn: an SVG of every pool's nodes and GPUs (what holds each: a whole GPU, MIG slices at
their planned positions, time-slice shares) and one static HTML page around it with each model's fit bar, the
pools' headroom, the refusals and the plan's warnings.

Why static and self-contained: the page is a CI artifact and a review comment's attachment; it must open from
disk with no server and no network (no script, font or style from elsewhere). Every element a reader looks
for carries its figures as `data-*` attributes too, so the headless-browser test reads what is drawn
(tests/test_report_browser.py). Input: `tkf_infra/ops/report.py` `report_data`.
"""

from __future__ import annotations

from html import escape
from typing import Any

from tkf_infra.outputs import PROBLEMS_OUTPUT, REJECTED_OUTPUT

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac")
TERM_COLORS = {"weights": "#4e79a7", "activation": "#f28e2b", "cudaGraphs": "#edc948", "nonTorch": "#bab0ac",
               "lora": "#b07aa1", "kvCache": "#59a14f", "headroom": "#e8e8e8"}
TERM_NAMES = {"weights": "weights", "activation": "activation peak", "cudaGraphs": "CUDA graphs",
              "nonTorch": "non-torch", "lora": "LoRA", "kvCache": "KV cache", "headroom": "left by the utilization"}
GPU_W, GPU_H, GAP, LABEL_W, PER_ROW = 84, 64, 8, 110, 8


def _a(text: object) -> str:
    return escape(str(text), quote=True)


def colors(data: dict[str, Any]) -> dict[str, str]:
    return {m["name"]: PALETTE[i % len(PALETTE)] for i, m in enumerate(data["models"])}


def _holder_rects(gpu: dict[str, Any], x: float, y: float, pool: dict[str, Any], color: dict[str, str]) -> str:
    out = []
    for h in gpu["holders"]:
        fill = color.get(h["model"], "#999")
        title = f"<title>{_a(h['model'])} replica {_a(h['replica'])} ({_a(h['kind'])})</title>"
        if h["kind"] == "mig":
            w = GPU_W / (pool["migSlots"] or 8)
            out.append(f'<rect class="holder mig" data-model="{_a(h["model"])}" data-profile="{_a(h["profile"])}" '
                       f'data-start="{h["start"]}" data-size="{h["size"]}" x="{x + h["start"] * w:.1f}" y="{y}" '
                       f'width="{h["size"] * w - 1:.1f}" height="{GPU_H}" fill="{fill}">{title}</rect>')
        elif h["kind"] == "slice":
            before = sum(o.get("slices", 0) for o in gpu["holders"][:gpu["holders"].index(h)])
            w = GPU_W / h["of"]
            out.append(f'<rect class="holder slice" data-model="{_a(h["model"])}" data-slices="{h["slices"]}" '
                       f'data-of="{h["of"]}" x="{x + before * w:.1f}" y="{y}" width="{h["slices"] * w - 1:.1f}" '
                       f'height="{GPU_H}" fill="{fill}">{title}</rect>')
        else:
            out.append(f'<rect class="holder whole" data-model="{_a(h["model"])}" x="{x}" y="{y}" width="{GPU_W}" '
                       f'height="{GPU_H}" fill="{fill}">{title}</rect>')
    return "".join(out)


def layout_svg(data: dict[str, Any]) -> str:
    """Every pool, node and GPU; one `<g class="gpu">` per GPU with what holds it."""
    color = colors(data)
    parts: list[str] = []
    y = 10
    for pool in data["pools"]:
        what = f"{pool['gpu']} × {pool['gpusPerNode']} per node" if pool["gpu"] else "CPU only"
        parts.append(f'<text class="pool-title" x="0" y="{y + 16}" font-weight="bold">node pool {_a(pool["name"])}: '
                     f'{pool["nodeCount"]} node(s), {_a(what)} ({_a(pool["kind"])})</text>')
        y += 28
        for node in pool["nodes"]:
            parts.append(f'<g class="node" data-pool="{_a(pool["name"])}" data-node="{_a(node["name"])}">'
                         f'<text x="0" y="{y + GPU_H / 2 + 4}">{_a(node["name"])}</text>')
            for n, gpu in enumerate(node["gpus"]):
                x = LABEL_W + (n % PER_ROW) * (GPU_W + GAP)
                gy = y + (n // PER_ROW) * (GPU_H + GAP)
                holders = ",".join(sorted({h["model"] for h in gpu["holders"]}))
                parts.append(f'<g class="gpu" data-pool="{_a(pool["name"])}" data-node="{_a(node["name"])}" '
                             f'data-index="{gpu["index"]}" data-holders="{_a(holders)}">'
                             f'<rect x="{x}" y="{gy}" width="{GPU_W}" height="{GPU_H}" fill="#f4f4f4" stroke="#666"/>'
                             f'{_holder_rects(gpu, x, gy, pool, color)}'
                             f'<text x="{x + 4}" y="{gy + 14}" font-size="11">GPU {gpu["index"]}</text></g>')
            rows = max(1, -(-len(node["gpus"]) // PER_ROW))
            parts.append("</g>")
            y += rows * (GPU_H + GAP) + 4
        y += 16
    legend_x = 0
    for name, fill in color.items():
        parts.append(f'<rect x="{legend_x}" y="{y}" width="12" height="12" fill="{fill}"/>'
                     f'<text x="{legend_x + 16}" y="{y + 11}" font-size="12">{_a(name)}</text>')
        legend_x += 20 + 8 * len(name)
    width = LABEL_W + PER_ROW * (GPU_W + GAP)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="layout" width="{max(width, legend_x)}" '
            f'height="{y + 24}" font-family="sans-serif" font-size="12">{"".join(parts)}</svg>')


def _bar_svg(bar: dict[str, Any]) -> str:
    """The GPU's memory left to right: each term, what the utilization leaves, the KV bound marked."""
    total, width = bar["totalGiB"] or 1.0, 600
    parts, x = [], 0.0
    for term, gib in [*bar["terms"].items(), ("headroom", bar["headroomGiB"])]:
        w = width * gib / total
        parts.append(f'<rect class="term" data-term="{term}" data-gib="{gib}" x="{x:.1f}" y="0" width="{w:.1f}" '
                     f'height="22" fill="{TERM_COLORS[term]}"><title>{TERM_NAMES[term]}: {gib} GiB</title></rect>')
        x += w
    kv_start = width * sum(v for k, v in bar["terms"].items() if k != "kvCache") / total
    bound_x = kv_start + width * bar["kvBoundGiB"] / total
    parts.append(f'<line class="bound" x1="{bound_x:.1f}" x2="{bound_x:.1f}" y1="-4" y2="26" stroke="#000" '
                 f'stroke-width="2" stroke-dasharray="3,2"><title>KV-cache bound: {bar["kvBoundGiB"]} GiB</title>'
                 '</line>')
    return f'<svg class="bar" width="{width}" height="30" viewBox="0 -4 {width} 34">{"".join(parts)}</svg>'


FIGURES = (("weightsGiB", "weights GiB / GPU"), ("kvCacheGiB", "KV cache GiB"), ("kvCacheTokens", "KV tokens"),
           ("kvCacheTokensBound", "KV tokens (bound)"), ("maxConcurrency", "full-length sequences"),
           ("maxConcurrencyBound", "sequences (bound)"), ("vllmProfile", "vLLM profile"))


def _model_html(m: dict[str, Any], fill: str) -> str:
    fit = m["fit"]
    attrs = " ".join(f'data-{k.lower()}="{_a(fit.get(k))}"' for k, _ in FIGURES)
    rows = "".join(f"<tr><th>{label}</th><td class='figure' data-key='{k}'>{_a(fit.get(k))}</td></tr>"
                   for k, label in FIGURES)
    replicas = m["replicas"]
    where = m["share"] or f"{m['gpusPerReplica']} GPU(s) per replica"
    bar = _bar_svg(m["bar"]) if m["bar"] else "<p>CPU profile: no GPU memory to draw.</p>"
    legend = ('<div class="legend">' + "".join(f'<span class="key"><i style="background:{c}"></i>{TERM_NAMES[t]}</span>'
                                              for t, c in TERM_COLORS.items()) + "</div>") if m["bar"] else ""
    budget = (f"<p>GPU {m['bar']['totalGiB']} GiB, vLLM's budget {m['bar']['budgetGiB']} GiB; the dashed line is the "
              f"KV-cache bound the verdict is taken on ({m['bar']['kvBoundGiB']} GiB).</p>") if m["bar"] else ""
    return (f'<section class="model verdict-{_a(m["verdict"])}" id="model-{_a(m["name"])}" '
            f'data-model="{_a(m["name"])}" data-verdict="{_a(m["verdict"])}" {attrs}>'
            f'<h3><i style="background:{fill}"></i>{_a(m["name"])} '
            f'<small>({_a(m["servedName"])}, pool {_a(m["pool"])}, {_a(where)}, replicas {replicas["min"]}–'
            f'{replicas["max"]})</small> <span class="verdict">{_a(m["verdict"])}</span></h3>{bar}{legend}{budget}'
            f"<table class='figures'>{rows}</table></section>")


def _headroom_html(pool: dict[str, Any]) -> str:
    h = pool["headroom"]
    if not h:
        return ""
    cells = "".join(f"<tr data-at='{end}'><th>{end}</th><td class='held'>{h[end]['gpus']}</td>"
                    f"<td class='free'>{h[end]['free']}</td></tr>" for end in ("atMinimum", "atMaximum"))
    return (f"<table class='headroom' data-pool='{_a(pool['name'])}' data-gpus='{h['gpus']}'><caption>pool "
            f"{_a(pool['name'])}: {h['gpus']} GPUs</caption><tr><th></th><th>GPUs held</th><th>free</th></tr>"
            f"{cells}</table>")


CSS = """body{font-family:sans-serif;margin:24px;color:#222}h3 i,.key i{display:inline-block;width:12px;height:12px;
margin-right:6px}.key{margin-right:12px;font-size:12px}table{border-collapse:collapse;margin:8px 0}td,th{border:1px
solid #ccc;padding:2px 8px;text-align:left}.verdict{font-size:13px;padding:1px 6px;border-radius:3px;background:#dfd}
.verdict-tight .verdict{background:#ffd}.verdict-refuses .verdict{background:#fdd}.model{margin:16px 0}
.refusal{margin:6px 0}.warning{color:#8a6d3b}"""


def page(data: dict[str, Any], svg: str) -> str:
    color = colors(data)
    models = "".join(_model_html(m, color[m["name"]]) for m in data["models"])
    headroom = "".join(_headroom_html(p) for p in data["pools"])
    refusals = "".join(
        f"<li class='refusal' data-model='{_a(x['name'])}' data-stage='{_a(x['stage'])}'><b>{_a(x['name'])}</b> "
        f"({_a(x['stage'])}{', kept at its last settings' if x.get('kept') else ''}):<ul>"
        + "".join(f"<li>{_a(r)}</li>" for r in x["reasons"]) + "</ul></li>" for x in data[REJECTED_OUTPUT]) \
        or "<li>none</li>"
    notes = "".join(f"<li class='warning'>{_a(w)}</li>" for w in [*data[PROBLEMS_OUTPUT], *data["warnings"]])
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>tkf-infra plan: {_a(data['stack'])}"
            f"</title><style>{CSS}</style></head><body><h1>Plan of stack {_a(data['stack'])}</h1>"
            "<p>Planned offline from the stack file and models.lock.json, as the program plans it, without its live "
            "reads (cluster, DCGM, last deployment). Whole GPUs are drawn in order on the node the plan packed each "
            "pod onto (the device plugin picks the physical GPU); MIG slices at their planned positions.</p>"
            f"<h2>Layout</h2>{svg}<h2>Models</h2>{models}<h2>Headroom (whole GPUs)</h2>{headroom}"
            f"<h2>Refused</h2><ul class='refusals'>{refusals}</ul><h2>Warnings</h2><ul>{notes or '<li>none</li>'}"
            "</ul></body></html>")
