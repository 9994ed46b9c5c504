"""A prod-like fleet of ten small models on one 8 x H100 node, for the GPU-sharing tests of every tier.

Real models from models.lock.json (revisions pinned there), with the contexts and batch sizes a
platform team would give them. `gpuShare: auto` (from modelDefaults) lets the fit check choose each
model's MIG profile; one entry pins its profile, one takes whole GPUs on the same MIG node.
"""

from __future__ import annotations

import copy
from typing import Any

QWEN05 = {"repo": "Qwen/Qwen2.5-0.5B-Instruct", "revision": "7ae557604adf67be50417f59c2c2f167def9a775"}
CODER05 = {"repo": "Qwen/Qwen2.5-Coder-0.5B-Instruct", "revision": "ea3f2471cf1b1f0db85067f1ef93848e38e88c25"}
QWEN7 = {"repo": "Qwen/Qwen2.5-7B-Instruct", "revision": "a09a35458c702b33eeacc393d103063234e8bc28"}
QWEN3_8B = {"repo": "Qwen/Qwen3-8B", "revision": "b968826d9c46dd6066d109eabc6255188de91218"}
LLAMA8 = {"repo": "meta-llama/Llama-3.1-8B-Instruct", "revision": "0e9e39f249a16976918f6564b8830bc894c89659"}
MISTRAL7 = {"repo": "mistralai/Mistral-7B-Instruct-v0.3", "revision": "e0bc86c23ce5aae1db576c8cca6f06f1f73af2db"}
GEMMA9 = {"repo": "google/gemma-2-9b-it", "revision": "11c9b309abf73637e4b6f9a3fa1e92e615547819"}
QWEN3_32B = {"repo": "Qwen/Qwen3-32B", "revision": "9216db5781bf21249d130ec9da846c4624c16137"}

NODE = "gpu-node-1"
POOL = "h100-mig"


def _m(name: str, ref: dict[str, str], **kw: Any) -> dict[str, Any]:
    return {"name": name, **ref, "servedName": name, **kw}


#: Ten small models. The fit check picks each one's smallest MIG profile (auto) unless pinned.
TEN_SMALL: list[dict[str, Any]] = [
    _m("qwen05-chat", QWEN05, maxModelLen=8192),
    _m("qwen05-long", QWEN05, maxModelLen=32768, maxNumSeqs=64),
    _m("coder05", CODER05, maxModelLen=16384),
    _m("coder05-fast", CODER05, maxModelLen=4096, maxNumSeqs=16),
    _m("qwen7", QWEN7, maxModelLen=16384, replicas=2),
    _m("qwen7-long", QWEN7, maxModelLen=32768),
    _m("qwen3-8b", QWEN3_8B, maxModelLen=32768),
    _m("qwen3-8b-3g", QWEN3_8B, maxModelLen=8192, gpuShare="mig:3g.40gb"),
    _m("llama8", LLAMA8, maxModelLen=8192, hfTokenSecret="hf-token"),
    _m("mistral7", MISTRAL7, maxModelLen=16384, hfTokenSecret="hf-token"),
]
#: A whole-GPU model on the same MIG node (its GPUs keep MIG off).
WHOLE_TP2 = _m("qwen32-tp2", QWEN3_32B, maxModelLen=8192, gpusPerNode=2, tensorParallelSize=2, gpuShare="whole")


def mig_pool(nodes: list[str] | None = None, **kw: Any) -> dict[str, Any]:
    names = nodes or [NODE]
    return {"name": POOL, "kind": "existing", "gpuProduct": "H100-80GB", "gpusPerNode": 8, "nodeCount": len(names),
            "mig": True, "nodes": names, "labels": {"tkf.io/pool": POOL}, **kw}


def mig_settings(models: list[dict[str, Any]], *, nodes: list[str] | None = None) -> dict[str, Any]:
    """The stack settings that turn a catalog into a MIG fleet (merged over a stack document)."""
    return {
        "nodePools": [mig_pool(nodes)],
        "platform": {"gpuOperator": {"alreadyInstalled": True, "version": "v26.7.0", "migStrategy": "mixed"}},
        "modelDefaults": {"nodePool": POOL, "gpuShare": "auto", "maxNumSeqs": 32, "dtype": "bfloat16"},
        "models": copy.deepcopy(models),
    }
