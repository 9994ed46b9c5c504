"""Where the engine is installed, and the PULUMI_HOME tkf runs it with (the engine's own log off by default).

Pulumi 3.260 writes an always-on debug log of every property it marshals, gzip-compressed and
encrypted, to ``$PULUMI_HOME/logs`` (pkg/logging/encrypted.go@v3.260.0:86-135, enabled
unconditionally by pulumi/pulumi#23731; no setting turns it off). On this project's previews that
log is half of the CLI's CPU: the dev stack's preview with its platform charts took 70.7 s wall /
55 s CPU with it and 18.7 s / 15 s without (2 cores, measured side by side), and it filled 511 MB of
``~/.pulumi/logs`` in a day of test runs. The engine skips the log when it cannot create that
directory (``StartLogging`` returns an error and the CLI carries on), so tkf runs the engine with a
home of its own whose ``bin`` and ``plugins`` are the real installation's and whose ``logs`` is a
file. ``TKF_ENGINE_LOGS=1`` runs the engine with the real home, log included (e.g. to send Pulumi a
log with ``pulumi logs share``). Stack selections (``workspaces``) live in tkf's home; state does
not live in a home at all (it is in the backend).

One run home per installation (its resolved path hashed into the directory name): with one home for
all, two checkouts with different installations (or a test run with its own ``TKF_PULUMI_HOME``)
re-linked ``bin`` and ``plugins`` under each other's running engines, and removed the links when the
other installation had none — a run then lost its plugins mid-way. An installation moved elsewhere gets
a new home (stack selections are made again with ``pulumi stack select``; tkf's own commands name the
stack each time).
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

#: The engine's installation: $TKF_PULUMI_HOME (set by scripts/env.sh once PULUMI_HOME is tkf's own),
#: else $PULUMI_HOME, else ~/.pulumi, as scripts/bootstrap.sh installs it.
INSTALL_ENV = "TKF_PULUMI_HOME"
KEEP_LOGS_ENV = "TKF_ENGINE_LOGS"
_LINKED = ("bin", "plugins", "credentials.json")
_LOGS_NOTE = ("The Pulumi engine's automatic log is off for tkf-infra runs (tkf_infra/ops/engine_home.py); "
              "set TKF_ENGINE_LOGS=1 to keep it.\n")


def install_home() -> Path:
    """The real PULUMI_HOME: the engine's binaries and plugins."""
    explicit = os.environ.get(INSTALL_ENV) or os.environ.get("PULUMI_HOME")
    return Path(explicit) if explicit else Path.home() / ".pulumi"


def keeps_engine_logs() -> bool:
    return os.environ.get(KEEP_LOGS_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def run_home(install: Path | None = None) -> Path:
    """The PULUMI_HOME to run the engine with; created (idempotently) unless the engine log is wanted."""
    install = install or install_home()
    if keeps_engine_logs():
        return install
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    key = hashlib.sha256(str(install.resolve()).encode()).hexdigest()[:12]
    home = cache / "tkf-infra" / f"pulumi-home-{key}"
    (home / "workspaces").mkdir(parents=True, exist_ok=True)
    for name in _LINKED:
        _link(home / name, install / name)
    logs = home / "logs"
    if logs.is_dir() and not logs.is_symlink():
        # A home made while TKF_ENGINE_LOGS was set and PULUMI_HOME pointed here: keep its logs aside.
        logs.rename(home / "logs.kept")
    if not logs.exists():
        logs.write_text(_LOGS_NOTE)
    return home


def _link(link: Path, target: Path) -> None:
    """``link`` → ``target`` when the target exists (else no link); two processes of one installation may
    make the same link at once, which is the same link."""
    if link.is_symlink() and link.readlink() == target:
        return
    if link.is_symlink() or link.exists():
        link.unlink(missing_ok=True)
    if target.exists():
        try:
            link.symlink_to(target, target_is_directory=target.is_dir())
        except FileExistsError:
            if not (link.is_symlink() and link.readlink() == target):
                raise


@functools.cache
def run_tmpdir() -> Path:
    """A private TMPDIR for the engine and its plugins, removed when this process exits.

    Why: the Kubernetes provider writes the kubeconfig it is configured with to a new
    ``$TMPDIR/kubeconfig<N>`` on every run, for Helm, and never removes it
    (pulumi-kubernetes provider/pkg/provider/provider.go:774 and util.go:126 at the pinned
    f47bc2d6f199): every preview or up would leave a copy of the cluster's credentials in the shared
    /tmp. One directory per process (created 0700 by mkdtemp), not per run: runs of one process may
    overlap (status reads while an up runs), and the directory goes with the process."""
    path = Path(tempfile.mkdtemp(prefix="tkf-engine-tmp-"))
    atexit.register(shutil.rmtree, path, True)
    return path


def home_env(install: Path | None = None) -> dict[str, str]:
    """PULUMI_HOME for the engine, where its installation is for tools started under it, and the
    engine's private TMPDIR (`run_tmpdir`)."""
    install = install or install_home()
    return {"PULUMI_HOME": str(run_home(install)), INSTALL_ENV: str(install), "TMPDIR": str(run_tmpdir())}


if __name__ == "__main__":  # scripts/env.sh: `export PULUMI_HOME=$(python -m tkf_infra.ops.engine_home)`
    sys.stdout.write(f"{run_home()}\n")
