"""Real `pulumi preview` wall time of the dev stack with generated catalogs of 1, 10 and 50 models,
against a baseline program that registers the same number of plain ConfigMaps, run side by side.

Prints one line per size with both times and their ratio; target: ratio <= 1.5 at 50 models.
Needs the engine (scripts/setup.sh). Each program gets a fresh temporary project and file backend.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pulumi import automation as auto  # noqa: E402

from bench.catalogs import dev_stack_config, generated_models  # noqa: E402
from tkf_infra.ops.stacks import DEV_PASSPHRASE, copy_project, engine_env, pulumi_home  # noqa: E402

BASELINE_MAIN = '''
import pulumi, pulumi_kubernetes as k8s
n = pulumi.Config().require_int("count")
prov = k8s.Provider("render", render_yaml_to_directory=pulumi.Config().require("renderDir"))
for i in range(n):
    k8s.core.v1.ConfigMap(f"cm-{i}", metadata={"name": f"cm-{i}", "namespace": "bench"}, data={"i": str(i)},
                          opts=pulumi.ResourceOptions(provider=prov))
'''


def tkf_project(tmp: Path, n: int) -> auto.Stack:
    project = copy_project(tmp / "tkf")
    doc = dev_stack_config()
    doc["config"]["tkf-infra:models"] = generated_models(n)
    doc["config"]["tkf-infra:cluster"]["renderDir"] = str(tmp / "rendered-tkf")
    (project / "Pulumi.bench.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    env = engine_env("dev", project, f"file://{tmp / 'state-tkf'}")
    (tmp / "state-tkf").mkdir(exist_ok=True)
    env["PULUMI_CONFIG_PASSPHRASE"] = DEV_PASSPHRASE
    opts = auto.LocalWorkspaceOptions(env_vars=env, pulumi_command=auto.PulumiCommand(root=str(pulumi_home())))
    return auto.create_stack("bench", work_dir=str(project), opts=opts)


def baseline_project(tmp: Path, n: int) -> auto.Stack:
    project = tmp / "baseline"
    project.mkdir()
    (project / "Pulumi.yaml").write_text("name: tkf-baseline\nruntime:\n  name: python\n  options:\n"
                                         "    virtualenv: .venv\n")
    (project / "__main__.py").write_text(BASELINE_MAIN)
    (project / ".venv").symlink_to(ROOT / ".venv")
    (project / "Pulumi.bench.yaml").write_text(yaml.safe_dump(
        {"config": {"tkf-baseline:count": n, "tkf-baseline:renderDir": str(tmp / "rendered-base")}}))
    (tmp / "state-base").mkdir(exist_ok=True)
    env = engine_env("dev", project, f"file://{tmp / 'state-base'}")
    env["PULUMI_CONFIG_PASSPHRASE"] = DEV_PASSPHRASE
    opts = auto.LocalWorkspaceOptions(env_vars=env, pulumi_command=auto.PulumiCommand(root=str(pulumi_home())))
    return auto.create_stack("bench", work_dir=str(project), opts=opts)


def timed_preview(stack: auto.Stack) -> float:
    started = time.perf_counter()
    stack.preview()
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="1,10,50")
    ap.add_argument("--repeat", type=int, default=2, help="previews per program and size; the best is kept")
    args = ap.parse_args()
    last_ratio = 0.0
    for n in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            tkf, base = tkf_project(tmp, n), baseline_project(tmp, n)
            t_tkf = t_base = float("inf")
            for _ in range(args.repeat):  # interleaved, so machine noise hits both alike
                t_base = min(t_base, timed_preview(base))
                t_tkf = min(t_tkf, timed_preview(tkf))
            last_ratio = t_tkf / t_base
            print(f"models={n:3d} tkf_preview_s={t_tkf:6.2f} baseline_configmaps_s={t_base:6.2f} "
                  f"ratio={last_ratio:.2f}")
    print(f"summary ratio_at_largest={last_ratio:.2f} target<=1.5")


if __name__ == "__main__":
    main()
