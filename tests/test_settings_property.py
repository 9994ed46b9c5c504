"""Any catalog document either validates or raises the catalog's own error: never another exception."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tkf_infra.config import Catalog, SettingsError, validate_catalog

SHA = "7ae557604adf67be50417f59c2c2f167def9a775"
scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 70_000), st.floats(allow_nan=True),
                    st.text(max_size=12), st.just(SHA), st.just("main"))
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


documents = st.fixed_dictionaries(
    {"nodePools": st.one_of(st.just([{"name": "gpu", "gpuProduct": "H100-80GB", "gpusPerNode": 8}]), json_values),
     "models": st.one_of(st.lists(mutated_entries(), max_size=5), json_values)},
    optional={"modelDefaults": st.one_of(st.just({"maxModelLen": 2048}), json_values),
              "strict": st.one_of(st.booleans(), json_values), "serving": json_values},
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents)
def test_any_document_validates_or_raises_catalog_error(doc: dict[str, Any]) -> None:
    try:
        cat = validate_catalog(doc)
    except SettingsError as err:
        assert err.problems and all(str(p) for p in err.problems)
        return
    assert isinstance(cat, Catalog)
    for rejected in cat.rejected:
        assert rejected.problems, "a rejected entry always says why"
        assert all(str(p).startswith(f"models[{rejected.index}]") for p in rejected.problems)
    assert len({m.served_name for m in cat.models}) == len(cat.models)
