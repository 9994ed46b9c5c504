"""Program evaluation time under Pulumi mocks for generated catalogs of 10, 100 and 500 models.

Prints seconds per model per size; the target is linear growth under 20 ms per model. Runs the same
steps as __main__.py (settings validation, lock, fleet, outputs) with every resource mocked.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pulumi  # noqa: E402

from bench.catalogs import dev_stack_config, generated_models  # noqa: E402


class EchoMocks(pulumi.runtime.Mocks):
    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        return {}, []


def run_once(n: int) -> float:
    """Evaluate the program once under mocks (one process per run: the SDK allows one root stack)."""
    cfg = dev_stack_config()["config"]
    pulumi.runtime.set_mocks(EchoMocks(), project="tkf-infra", stack="bench", preview=True)
    settings = {k: json.dumps(v) if not isinstance(v, str) else v for k, v in cfg.items() if k != "tkf-infra:apiKey"}
    settings["tkf-infra:models"] = json.dumps(generated_models(n))
    settings["tkf-infra:apiKey"] = "bench-key"
    pulumi.runtime.set_all_config(settings, ["tkf-infra:apiKey"])
    from tkf_infra.program import run

    started = time.perf_counter()
    pulumi.runtime.test(run)()  # type: ignore[no-untyped-call]  # the program's one entry; waits for every registration
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="10,100,500")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(f"{run_once(args.one):.6f}")
        return
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        out = subprocess.run([sys.executable, __file__, "--one", str(n)], capture_output=True, text=True, check=True)
        secs = float(out.stdout.strip().splitlines()[-1])
        rows.append((n, secs))
        print(f"models={n:4d} seconds={secs:7.3f} ms_per_model={1000 * secs / n:6.2f}")
    (n0, s0), (n1, s1) = rows[0], rows[-1]
    print(f"summary ms_per_model_small={1000 * s0 / n0:.2f} ms_per_model_large={1000 * s1 / n1:.2f} "
          f"growth_ratio={(s1 / n1) / (s0 / n0):.2f} target_ms_per_model=20")


if __name__ == "__main__":
    main()
