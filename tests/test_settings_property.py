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
           "~tkf-no-such-user/x", "~/x", "ü", "名前", "\u200b", "\u202e", "ｍ", "-", ".", "/", "\\"]
VALID_STRINGS = ["m", "qwen", "h100", "gpu-1", "llm-serving", "hf-token", "tkf.io/pool", SHA, "v0.20.0", "whole",
                 "Qwen/Qwen3-8B", "vllm/vllm-openai:v0.32.0", "http://prometheus:9090", "charts/lws"]
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
]
#: Free text that reaches vLLM byte for byte (tests/test_argv_layers.py): hostile, but never a crash.
FREE_TEXT: list[tuple[str, ...]] = [("models", "extraArgs")]
GOOD_MODEL = {"name": "m", "repo": "Qwen/Qwen3-8B", "revision": SHA, "servedName": "m", "nodePool": "gpu",
              "maxModelLen": 4096}


def with_setting(path: tuple[str, ...], value: str) -> dict[str, Any]:
    """A valid stack document (kubeconfig mode when a cluster key is set) with one string replaced."""
    pool: dict[str, Any] = dict(POOL)
    model: dict[str, Any] = dict(GOOD_MODEL)
    doc: dict[str, Any] = {"nodePools": [pool], "models": [model]}
    head, key = path[0], path[-1]
    if head == "nodePools":
        wrapped = {"nodes": [value], "labelKey": {value: "x"}, "labelValue": {"tkf.io/pool": value},
                   "taintKey": [{"key": value}], "taintValue": [{"key": "k", "value": value}]}
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


def accepted(doc: dict[str, Any]) -> bool:
    """The stack validates and nothing in it is refused."""
    try:
        cat = validate_catalog(doc)
    except SettingsError:
        return False
    return not [*cat.pool_problems, *(p for r in cat.rejected for p in r.problems)]


#: Values some string setting accepts as they are, for the check below (each path finds its own among them).
ACCEPTED_BASES = [*VALID_STRINGS, "H100-80GB", "NVIDIA-H100-80GB-HBM3", "auto", "bfloat16", "hermes", "1g.10gb"]


def test_a_control_character_in_any_accepted_value_is_refused() -> None:
    """The property above samples; this walks every string setting with every value it accepts, and puts a line
    break, a unit separator or a NUL before, inside and after it. A lenient matcher behind a setting (the GPU
    table's, which ignores punctuation) once took 'H100\x1f' for the H100; every such path is refused now."""
    covered, taken = 0, []
    for path in STRING_SETTINGS:
        bases = [b for b in ACCEPTED_BASES if accepted(with_setting(path, b))]
        covered += bool(bases)
        for base in bases:
            for c in ("\n", "\x1f", "\x00"):
                taken += [f"{'.'.join(path)} = {v!r}" for v in (base + c, c + base, base[:1] + c + base[1:])
                          if accepted(with_setting(path, v))]
    assert covered >= 25, f"only {covered} string settings accepted any base value: the walk checks too little"
    assert not taken, "accepted with a control character: " + "; ".join(taken[:10])


# -- contradictions between fields (each valid alone): only the product's named error, and exactly when due -------

DEEPSEEK_V3 = {"repo": "deepseek-ai/DeepSeek-V3", "revision": "86518964eaef84e3fdd98e9861759a1384f9c29d"}
CHUNKED = {(): None, ("--enable-chunked-prefill",): True, ("--no-enable-chunked-prefill",): False,
           ("--no_enable_chunked_prefill",): False, ("--no-enable-chunked",): False}
OWNED_SPELLINGS = [(), ("-q", "awq"), ("--quant", "awq"), ("--quantization=awq",), ("-tp", "2"),
                   ("--tensor_parallel_size", "2"), ("-qawq",), ("-sc", "{}"), ("--max_model", "1")]
SPECS: list[tuple[dict[str, Any] | None, bool]] = [  # (speculativeConfig, its draft is a repo id or none)
    (None, True), ({"method": "mtp"}, True), ({"method": "ngram", "num_speculative_tokens": 2}, True),
    ({"method": "eagle", "model": "org/draft"}, True), ({"method": "eagle", "model": "https://hf.co/org/d"}, False),
    ({"method": "eagle3", "model": "./draft"}, False)]
#: nvidia.com/gpu.product in the pool's labels → whether it is the H100-80GB the pool is sized on.
LABELS = {None: True, "NVIDIA-H100-80GB-HBM3": True, "NVIDIA-A100-SXM4-80GB": False, "NVIDIA-L40S": False,
          "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb": False, "NVIDIA-Foo-80GB": False}
MEMORY = {None: True, 79.5: True, 80: True, 60: True, 141: False, 59: False, 8: False}
VERSIONS = {None: True, "0.32.0": True, "v0.32": True, "0.19.0": False, "in-house": False}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seqs=st.sampled_from([1, 16, 256, 1024]), mnbt=st.sampled_from([None, 16, 255, 256, 2048, 8192, 65536]),
       mml=st.sampled_from([512, 4096, 8192, 32768]), chunked=st.sampled_from(list(CHUNKED)),
       owned=st.sampled_from(OWNED_SPELLINGS), spec=st.sampled_from(SPECS),
       model=st.sampled_from([{"repo": "Qwen/Qwen3-8B", "revision": "b968826d9c46dd6066d109eabc6255188de91218"},
                              DEEPSEEK_V3]),
       label=st.sampled_from(list(LABELS)), memory=st.sampled_from(list(MEMORY)),
       version=st.sampled_from(list(VERSIONS)), gpu_ns=st.sampled_from(["gpu-operator", "llm-serving"]))
def test_cross_field_contradictions_are_named_exactly_when_present(
        seqs: int, mnbt: int | None, mml: int, chunked: tuple[str, ...], owned: tuple[str, ...],
        spec: tuple[dict[str, Any] | None, bool], model: dict[str, str], label: str | None, memory: float | None,
        version: str | None, gpu_ns: str) -> None:
    from tkf_infra.hub.lock import load_lock
    from tkf_infra.plan.fleet import plan_fleet

    config, draft_ok = spec
    entry: dict[str, Any] = {"name": "m", **model, "servedName": "m", "nodePool": "gpu", "maxModelLen": mml,
                             "maxNumSeqs": seqs, "extraArgs": [*chunked, *owned]}
    if mnbt is not None:
        entry["maxNumBatchedTokens"] = mnbt
    if config is not None:
        entry["speculativeConfig"] = config
    pool: dict[str, Any] = {**POOL, **({"labels": {"nvidia.com/gpu.product": label}} if label else {}),
                            **({"gpuMemoryGiB": memory} if memory is not None else {})}
    sibling = {"name": "sibling", "repo": "Qwen/Qwen3-8B", "revision": "b968826d9c46dd6066d109eabc6255188de91218",
               "servedName": "sibling", "nodePool": "cpu", "gpusPerNode": 0, "maxModelLen": 2048}
    serving: dict[str, Any] = {"allowCpu": True, **({"vllmVersion": version} if version else {})}
    doc = {"nodePools": [pool, {"name": "cpu", "gpusPerNode": 0}], "models": [entry, sibling],
           "serving": serving, "namespaces": {"serving": "llm-serving", "gpuOperator": gpu_ns}}

    stack_due = {"vllmVersion": not VERSIONS[version], "gpuOperator": gpu_ns == "llm-serving"}
    try:
        cat = validate_catalog(doc)
    except SettingsError as err:
        text = str(err)
        assert any(stack_due.values()), text
        assert ("contradicts serving.vllmImage" in text) == stack_due["vllmVersion"], text
        assert ("namespaces.gpuOperator is 'llm-serving'" in text) == stack_due["gpuOperator"], text
        assert all(one_line(p) for p in err.problems)
        return
    assert not any(stack_due.values())

    off = CHUNKED[chunked] is False
    entry_due = {"is below maxNumSeqs": mnbt is not None and mnbt < seqs,
                 "while extraArgs turn chunked prefill off": off and mnbt is not None and mnbt < mml,
                 "a flag the platform owns": bool(owned), "is not a Hugging Face repo id": not draft_ok}
    text = "\n".join(str(p) for r in cat.rejected for p in r.problems)
    assert {k for k in entry_due if k in text} == {k for k, due in entry_due.items() if due}, text
    assert [r.name for r in cat.rejected] == (["m"] if any(entry_due.values()) else []), text
    assert "sibling" in [m.name for m in cat.models]

    plan = plan_fleet(cat, lock=load_lock())
    assert "sibling" in plan.deployed
    if any(entry_due.values()):
        return
    pool_due = not LABELS[label] or not MEMORY[memory]
    reasons = "\n".join(r for x in plan.excluded for r in x.reasons)
    assert ("node pool gpu:" in reasons) == pool_due, reasons
    if not LABELS[label] and MEMORY[memory]:
        assert "labels nvidia.com/gpu.product is" in reasons
    if not MEMORY[memory]:
        assert "no part of that name has it" in reasons
    mtp_due = not pool_due and config == {"method": "mtp"} and model["repo"] == "Qwen/Qwen3-8B"
    assert ("speculativeConfig.method mtp drafts" in reasons) == mtp_due, reasons
    stages = {x.stage.value for x in plan.excluded}
    assert stages <= {"pool", "catalog", "fit"}, plan.excluded
