"""vLLM's own command-line checks on the command lines of shared GPUs (tests/vllm/oracle.py, vLLM 0.32.0).

A share changes what reaches vLLM: a MIG slice keeps the entry's flags, a time-sliced share renders
its budget as a fractional `--gpu-memory-utilization` and the pinned cache as
`--kv-cache-memory-bytes`. Every pod of the packed MIG fleet and of a time-sliced fleet, on both
backends (the shells really run), must pass what `vllm serve` checks before it loads anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.sharing_fixtures import QWEN05, TEN_SMALL, WHOLE_TP2
from tests.test_gpu_sharing import mig_doc, sliced_doc
from tests.vllm.test_oracle import command_lines
from tkf_infra.config import validate_catalog
from tkf_infra.hub.lock import load_lock
from tkf_infra.plan import plan_fleet


def test_shared_gpu_command_lines_pass_vllms_checks(oracle: Any, fake_bin: Path) -> None:
    lock = load_lock()
    sliced = [{"name": f"q{k}", **QWEN05, "servedName": f"q{k}", "nodePool": "h100", "maxModelLen": 8192,
               "maxNumSeqs": 16, "gpuShare": f"slice:{k}"} for k in (1, 2)]
    cases: dict[str, list[str]] = {}
    shares: dict[str, str] = {}
    for fleet, doc in (("mig", mig_doc([*TEN_SMALL, WHOLE_TP2])), ("sliced", sliced_doc(sliced))):
        plan = plan_fleet(validate_catalog(doc), lock=lock)
        for m in plan.models:
            shares[m.entry.name] = m.share.label if m.share else "whole"
            for pod, argv in command_lines(m.entry, fake_bin).items():
                cases[f"{fleet}/{m.entry.name}/{pod}"] = argv
    budgets = [a for a in cases.values() if "--kv-cache-memory-bytes" in a]
    assert budgets and all("--gpu-memory-utilization" in a for a in budgets)  # the time-sliced pods
    results = oracle(cases)["results"]
    refused = {case: r for case, r in results.items() if not r["ok"]}
    assert not refused, refused
    assert len(results) == len(cases) >= 2 * (len(TEN_SMALL) + 1)
    assert {s.split(":")[0] for s in shares.values()} == {"mig", "slice", "whole"}
