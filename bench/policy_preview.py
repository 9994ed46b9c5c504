"""What the guardrails cost a preview: real `pulumi preview` of the dev stack with and without the policy
pack (policy/analyzer + policy/config/dev.json), for the committed catalog and a generated larger one.

Prints, per catalog size, the best and median wall time of each form and the pack's overhead. Previews
alternate (with, without, with, ...) so machine noise hits both alike. Needs scripts/setup.sh.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pulumi import automation as auto  # noqa: E402

from bench.catalogs import dev_stack_config, generated_models  # noqa: E402
from tkf_infra.ops.policy_report import PACK, PACK_DIR  # noqa: E402
from tkf_infra.ops.stacks import DEV_PASSPHRASE, copy_project, engine_env, pulumi_home  # noqa: E402


def dev_project(tmp: Path, n: int | None) -> auto.Stack:
    project = copy_project(tmp / "project")
    doc = dev_stack_config()
    if n is not None:
        doc["config"]["tkf-infra:models"] = generated_models(n)
    doc["config"]["tkf-infra:cluster"]["renderDir"] = str(tmp / "rendered")
    (project / "Pulumi.bench.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    (tmp / "state").mkdir(exist_ok=True)
    env = engine_env("dev", project, f"file://{tmp / 'state'}")
    env["PULUMI_CONFIG_PASSPHRASE"] = DEV_PASSPHRASE
    opts = auto.LocalWorkspaceOptions(env_vars=env, pulumi_command=auto.PulumiCommand(root=str(pulumi_home())))
    return auto.create_stack("bench", work_dir=str(project), opts=opts)


def timed(stack: auto.Stack, with_pack: bool) -> float:
    kwargs: dict[str, list[str]] = {}
    if with_pack:
        kwargs = {"policy_packs": [str(PACK)], "policy_pack_configs": [str(PACK_DIR / "config" / "dev.json")]}
    started = time.perf_counter()
    stack.preview(**kwargs)  # type: ignore[arg-type]
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="dev,20", help="'dev' = the committed catalog; a number = generated models")
    ap.add_argument("--repeat", type=int, default=5, help="previews per form and size")
    args = ap.parse_args()
    for size in args.sizes.split(","):
        n = None if size == "dev" else int(size)
        with tempfile.TemporaryDirectory() as d:
            stack = dev_project(Path(d), n)
            timed(stack, with_pack=True)  # warm-up: first run installs nothing, but fills OS caches
            runs: dict[bool, list[float]] = {True: [], False: []}
            for _ in range(args.repeat):
                for with_pack in (False, True):
                    runs[with_pack].append(timed(stack, with_pack))
            best = {k: min(v) for k, v in runs.items()}
            med = {k: statistics.median(v) for k, v in runs.items()}
            label = "dev (2 models)" if n is None else f"{n} models"
            print(
                f"{label:15s} without_pack best={best[False]:5.2f}s median={med[False]:5.2f}s  "
                f"with_pack best={best[True]:5.2f}s median={med[True]:5.2f}s  "
                f"overhead_median={med[True] - med[False]:+5.2f}s"
            )


if __name__ == "__main__":
    main()
