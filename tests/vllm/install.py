"""The two things every real-vLLM test needs, found or made the same way wherever the test lives: the
vLLM virtualenv scripts/install_vllm.sh made, and the tiny local model (tests/vllm/tiny_model.py).

Plain functions, not fixtures, so that both this tier's conftest and the controllers tier's
vLLM tests (tests/controllers/test_vllm_*.py, which start vLLM from the pods the controllers wrote)
use one definition of each.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent
INSTALL_HINT = "run scripts/install_vllm.sh (make test and scripts/setup.sh --dev do)"


def vllm_venv_path() -> Path:
    """The virtualenv scripts/install_vllm.sh made (fail, not skip: a skipped tier checks nothing)."""
    path = Path(subprocess.run(["bash", str(ROOT / "scripts" / "install_vllm.sh"), "--print"],
                               capture_output=True, text=True, check=True).stdout.strip())
    if not (path / ".tkf-installed").is_file() or not (path / "bin" / "vllm").is_file():
        pytest.fail(f"vLLM is not installed at {path}: {INSTALL_HINT}", pytrace=False)
    return path


def build_tiny_model(venv: Path, out: Path, workdir: Path) -> Path:
    """The tiny Qwen2 checkpoint at ``out``, built in the vLLM virtualenv (``workdir``: its HOME and TMPDIR)."""
    env = {"HOME": str(workdir / "build-home"), "TMPDIR": str(workdir), "PATH": "/usr/bin:/bin"}
    subprocess.run([str(venv / "bin" / "python"), str(HERE / "tiny_model.py"), str(out)], check=True,
                   capture_output=True, env=env)
    return out
