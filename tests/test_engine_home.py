"""The engine runs with tkf's own PULUMI_HOME: the real installation's binaries, no always-on debug log."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tkf_infra.ops import engine_home

REAL_INSTALL = engine_home.install_home()


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An installation that shares the real engine's binaries, with its own (empty) logs."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(engine_home.KEEP_LOGS_ENV, raising=False)
    root = tmp_path / "install"
    root.mkdir()
    for name in ("bin", "plugins"):
        if (REAL_INSTALL / name).exists():
            (root / name).symlink_to(REAL_INSTALL / name, target_is_directory=True)
        else:  # the engine is not built yet: these tests run beside the setup (scripts/test_suite.sh --full)
            (root / name).mkdir()
    return root


def test_run_home_uses_the_installation_and_has_no_log_directory(install: Path) -> None:
    home = engine_home.run_home(install)
    assert home != install
    assert (home / "logs").is_file()
    assert (home / "bin").resolve() == (install / "bin").resolve()
    assert engine_home.run_home(install) == home  # idempotent


def test_run_home_follows_a_moved_installation(install: Path, tmp_path: Path) -> None:
    home = engine_home.run_home(install)
    moved = tmp_path / "elsewhere"
    install.rename(moved)
    again = engine_home.run_home(moved)
    assert (again / "bin").readlink() == moved / "bin"
    assert (again / "bin").resolve() == (moved / "bin").resolve()
    assert home.parent == again.parent


def test_two_installations_never_relink_each_others_run_home(install: Path, tmp_path: Path) -> None:
    """Two checkouts (or a test run) with different engines: each run home keeps its own binaries, and one
    without plugins does not take the other's away while it runs."""
    other = tmp_path / "other-install"
    (other / "bin").mkdir(parents=True)
    home = engine_home.run_home(install)
    other_home = engine_home.run_home(other)
    assert other_home != home
    assert (home / "bin").readlink() == install / "bin" and (home / "plugins").readlink() == install / "plugins"
    assert not (other_home / "plugins").exists()
    assert engine_home.run_home(install) == home and (home / "plugins").is_symlink()


def test_keeping_the_engine_log_runs_with_the_real_home(install: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(engine_home.KEEP_LOGS_ENV, "1")
    assert engine_home.run_home(install) == install
    assert engine_home.home_env(install)["PULUMI_HOME"] == str(install)


def _run_engine(env: dict[str, str], install: Path) -> None:
    subprocess.run([str(install / "bin" / "pulumi"), "version"], env={**os.environ, **env}, check=True,
                   capture_output=True, timeout=120)


@pytest.mark.engine  # runs after the setup (scripts/test_suite.sh), which builds the engine
@pytest.mark.skipif(not (REAL_INSTALL / "bin" / "pulumi").exists(), reason="engine not built (scripts/setup.sh)")
def test_the_real_engine_writes_its_log_only_when_asked(install: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _run_engine(engine_home.home_env(install), install)
    assert not (install / "logs").exists()
    assert (engine_home.run_home(install) / "logs").is_file()

    monkeypatch.setenv(engine_home.KEEP_LOGS_ENV, "1")
    _run_engine(engine_home.home_env(install), install)
    assert list((install / "logs").glob("pulumi-*.log")), "the engine's own log is written when kept"


def test_the_engine_temp_dir_is_private_and_gone_when_the_process_exits(tmp_path: Path) -> None:
    """The Kubernetes provider leaves a kubeconfig copy in $TMPDIR per run: the engine's TMPDIR is
    readable by its owner only, and goes away with the process that ran the engine."""
    script = ("from tkf_infra.ops import engine_home; import pathlib; d = engine_home.run_tmpdir(); "
              "assert engine_home.home_env()['TMPDIR'] == str(d) and engine_home.run_tmpdir() == d; "
              "(d / 'kubeconfig123').write_text('token'); print(d, oct(d.stat().st_mode & 0o777))")
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1], env={**os.environ, "TMPDIR": str(tmp_path)}).stdout
    path, mode = out.split()
    assert Path(path).parent == tmp_path and mode == "0o700"
    assert not Path(path).exists()
