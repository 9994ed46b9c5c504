"""Any catalog document either validates or raises the catalog's own error: never another exception.

Strings include what careless and hostile input brings (issue 30): trailing newlines, control
characters, shell metacharacters, paths of unknown users, Unicode look-alikes, in stack settings,
node pools and catalog entries alike; every problem stays one line (values are quoted).
"""

from __future__ import annotations

import unicodedata
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tkf_infra.config import Catalog, SettingsError, validate_catalog
from tkf_infra.config.base import Problem, SecretValue

SHA = "7ae557604adf67be50417f59c2c2f167def9a775"
#: What careless and hostile input brings, alone or after a valid value ("m" + "\n" is the classic).
HOSTILE = ["\n", "\r\n", "\x00", "\t", "\x1b[31m", " ", "$(reboot)", "`id`", "; rm -rf /", "'\"", "${HOME}", "~",
           "~tkf-no-such-user/x", "~/x", "ü", "名前", "\u200b", "\u202e", "ｍ", "-", ".", "/", "\\"]  # fmt: skip
VALID_STRINGS = ["m", "qwen", "h100", "gpu-1", "llm-serving", "hf-token", "tkf.io/pool", SHA, "v0.20.0", "whole",
                 "Qwen/Qwen3-8B", "vllm/vllm-openai:v0.32.0", "http://prometheus:9090", "charts/lws"]  # fmt: skip
hostile_text = st.one_of(
    st.sampled_from(HOSTILE),
    st.builds(lambda a, b, c: a + b + c, st.sampled_from(["", *VALID_STRINGS]), st.sampled_from(HOSTILE),
              st.sampled_from(["", "", *VALID_STRINGS])),
    st.text(max_size=12),
)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 70_000), st.floats(allow_nan=True),
                    hostile_text, st.just(SHA), st.just("main"))
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                            st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                           max_leaves=8)
FIELDS = ["name", "repo", "revision", "servedName", "nodePool", "topology", "nodeCount", "gpusPerNode",
          "tensorParallelSize", "pipelineParallelSize", "replicas", "maxModelLen", "gpuMemoryUtilization",
          "maxNumSeqs", "dtype", "quantization", "kvCacheDtype", "extraArgs", "cost", "mode", "cpuKvCacheGiB"]
VALID = {"name": "m", "repo": "Qwen/Qwen2.5-0.5B-Instruct", "revision": SHA, "servedName": "m",
         "nodePool": "gpu", "gpusPerNode": 2, "tensorParallelSize": 2, "maxModelLen": 4096}


@st.composite
def mutated_entries(draw: st.DrawFn) -> Any:
    entry = dict(VALID, name=draw(st.sampled_from(["m", "n", "x-1"])), servedName=draw(st.sampled_from(["a", "b"])))
    for key in draw(st.lists(st.sampled_from(FIELDS), max_size=4)):
        if draw(st.booleans()):
            entry.pop(key, None)
        else:
            entry[key] = draw(json_values)
    return draw(st.one_of(st.just(entry), json_values))


POOL = {"name": "gpu", "gpuProduct": "H100-80GB", "gpusPerNode": 8}
POOL_FIELDS = ["name", "gpuProduct", "labels", "taints", "nodes", "kind", "instanceType", "nodeRoleArn", "subnetIds"]


@st.composite
def mutated_pools(draw: st.DrawFn) -> Any:
    pool: dict[str, Any] = dict(POOL)
    for key in draw(st.lists(st.sampled_from(POOL_FIELDS), max_size=3)):
        pool[key] = draw(st.one_of(
            hostile_text, st.lists(hostile_text, max_size=3),
            st.dictionaries(hostile_text, hostile_text, max_size=2),
            st.lists(st.fixed_dictionaries({"key": hostile_text}, optional={"value": hostile_text}), max_size=2)))
    return pool


def settings_of(fields: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A stack-level mapping whose every named field may be a hostile string."""
    return st.fixed_dictionaries({}, optional={k: st.one_of(hostile_text, v) for k, v in fields.items()})


stack_settings = {
    "namespaces": settings_of({k: st.just("x") for k in ("serving", "gateway", "monitoring", "kserve", "lws")}),
    "serving": settings_of({"storageClass": st.just("fast"), "apiKeyEnv": st.just("K"),
                            "vllmVersion": st.just("0.32.0"), "vllmImage": st.just("vllm/vllm-openai:v0.32.0"),
                            "backend": st.just("vllm")}),
    "cluster": settings_of({"renderDir": st.just("rendered/x"), "mode": st.just("kubeconfig"),
                            "kubeconfig": st.just("/k"), "context": st.just("c")}),
    "platform": st.fixed_dictionaries({}, optional={
        k: settings_of({"version": st.just("v1.0.0"), "chartPath": st.just("charts/x"),
                        "alreadyInstalled": st.booleans()})
        for k in ("certManager", "kserve", "lws", "gatewayApi")}),
    "prometheusUrl": hostile_text,
}

documents = st.fixed_dictionaries(
    {"nodePools": st.one_of(st.just([dict(POOL)]), st.lists(mutated_pools(), max_size=2), json_values),
     "models": st.one_of(st.lists(mutated_entries(), max_size=5), json_values)},
    optional={"modelDefaults": st.one_of(st.just({"maxModelLen": 2048}), json_values),
              "strict": st.one_of(st.booleans(), json_values),
              **{k: st.one_of(v, json_values) for k, v in stack_settings.items()},
              "apiKeyNxt": st.just(SecretValue())},
)


def one_line(problem: Problem) -> bool:
    """A problem says something, on one line: a value with a line break is shown quoted, never raw."""
    text = str(problem)
    assert text and "\n" not in text and "\r" not in text, text
    return True


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents)
def test_any_document_validates_or_raises_catalog_error(doc: dict[str, Any]) -> None:
    try:
        cat = validate_catalog(doc)
    except SettingsError as err:
        assert err.problems and all(one_line(p) for p in err.problems)
        return
    assert isinstance(cat, Catalog)
    assert all(one_line(p) for p in cat.pool_problems)
    for rejected in cat.rejected:
        assert rejected.problems, "a rejected entry always says why"
        assert all(str(p).startswith(f"models[{rejected.index}]") and one_line(p) for p in rejected.problems)
    assert len({m.served_name for m in cat.models}) == len(cat.models)


#: Every string a stack file sets, by its path (a model or pool field refuses that entry or pool only).
STRING_SETTINGS: list[tuple[str, ...]] = [
    *(("namespaces", k) for k in ("serving", "gateway", "monitoring", "gpuOperator", "kserve", "lws", "certManager")),
    *(("serving", k) for k in ("storageClass", "apiKeyEnv", "vllmImage", "vllmCpuImage", "vllmVersion")),
    ("cluster", "renderDir"), ("cluster", "kubeconfig"), ("cluster", "context"), ("cluster", "clusterIdentifier"),
    *(("platform", piece, k) for piece in ("gpuOperator", "certManager", "gatewayApi", "kserve", "lws")
      for k in ("version", "chartPath")),
    ("prometheusUrl",),
    *(("nodePools", k) for k in ("name", "gpuProduct", "nodes", "labelKey", "labelValue", "taintKey", "taintValue")),
    *(("models", k) for k in ("name", "repo", "revision", "servedName", "hfTokenSecret", "gpuShare", "nodePool",
                              "toolCallParser", "dtype", "mode")),
]  # fmt: skip
#: Free text that reaches vLLM byte for byte (tests/test_argv_layers.py): hostile, but never a crash.
FREE_TEXT: list[tuple[str, ...]] = [("models", "extraArgs")]
GOOD_MODEL = {"name": "m", "repo": "Qwen/Qwen3-8B", "revision": SHA, "servedName": "m", "nodePool": "gpu",
              "maxModelLen": 4096}  # fmt: skip


def with_setting(path: tuple[str, ...], value: str) -> dict[str, Any]:
    """A valid stack document (kubeconfig mode when a cluster key is set) with one string replaced."""
    pool: dict[str, Any] = dict(POOL)
    model: dict[str, Any] = dict(GOOD_MODEL)
    doc: dict[str, Any] = {"nodePools": [pool], "models": [model]}
    head, key = path[0], path[-1]
    if head == "nodePools":
        wrapped = {"nodes": [value], "labelKey": {value: "x"}, "labelValue": {"tkf.io/pool": value},
                   "taintKey": [{"key": value}], "taintValue": [{"key": "k", "value": value}]}  # fmt: skip
        target = {"labelKey": "labels", "labelValue": "labels", "taintKey": "taints", "taintValue": "taints"}
        pool[target.get(key, key)] = wrapped.get(key, value)
    elif head == "models":
        model[key] = [value] if key == "extraArgs" else value
    elif head == "cluster":
        doc["cluster"] = {"mode": "kubeconfig", "kubeconfig": "/k", key: value}
    elif head == "platform":
        doc["platform"] = {path[1]: {"version": "v1.0.0", key: value}}
    elif head == "prometheusUrl":
        doc[head] = value
    else:
        doc[head] = {key: value}
    return doc


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([*STRING_SETTINGS, *FREE_TEXT]), hostile_text)
def test_a_hostile_string_anywhere_is_named_or_harmless(path: tuple[str, ...], value: str) -> None:
    """One string of an otherwise valid stack: the stack's own error or a refused pool / entry, never another
    exception; a control character (a trailing newline above all) is never accepted."""
    doc = with_setting(path, value)
    try:
        cat = validate_catalog(doc)
    except SettingsError as err:
        assert err.problems and all(one_line(p) for p in err.problems)
        return
    problems = [*cat.pool_problems, *(p for r in cat.rejected for p in r.problems)]
    assert all(one_line(p) for p in problems)
    if path not in FREE_TEXT and any(unicodedata.category(c) == "Cc" for c in value):
        assert problems, f"{'.'.join(path)} = {value!r} was accepted"
