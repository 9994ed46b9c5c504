"""The engine seam: where the Pulumi engine is, how a stack of this project is opened, its outputs.

Every command that talks to the engine goes through here, so a missing engine, an unknown stack, a
missing or wrong passphrase, a locked stack or an unreachable state backend is one readable line with
its own exit code (an `OperatorError`), never an engine traceback.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import yaml
from pulumi import automation as auto

from tkf_infra.config import Catalog, SettingsError, validate_catalog
from tkf_infra.config.api_keys import DEV_STACK
from tkf_infra.exit_codes import ExitCode
from tkf_infra.layers import environment, is_platform_stack, platform_stack
from tkf_infra.names import PROJECT_ROOT
from tkf_infra.ops import engine_home, locks
from tkf_infra.ops.engine import EngineCommand

PROJECT_DIR = PROJECT_ROOT
DEV_PASSPHRASE = "tkf-dev-only"  # documented in README.md; only ever used for the dev stack


class OperatorError(Exception):
    """Something the operator can act on: printed as one line, the command exits with `code`."""

    code: ExitCode = ExitCode.USAGE


class UsageError(OperatorError):
    """A mistake the user can fix (unknown stack, missing or wrong passphrase, engine not installed)."""


class StackLocked(OperatorError):
    """Another run holds the stack's lock (or left it behind)."""

    code = ExitCode.LOCKED


class BackendUnavailable(OperatorError):
    """The state backend did not answer."""

    code = ExitCode.UNAVAILABLE


def pulumi_home() -> Path:
    """The engine's installation (its bin/ and plugins/); runs get their own home (engine_home.py)."""
    return engine_home.install_home()


def engine_env(stack: str, project_dir: Path = PROJECT_DIR, backend_url: str | None = None) -> dict[str, str]:
    """Environment for the engine: the bootstrap's binaries, the project's virtualenv, the backend."""
    env = {
        "PATH": os.pathsep.join([str(pulumi_home() / "bin"), str(project_dir / ".venv" / "bin"),
                                 os.environ.get("PATH", "")]),
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        # pulumi-aws in the virtualenv makes the engine fetch the aws plugin before every run, even for
        # stacks without an EKS pool; offline that costs each preview 2.5-8 s of retries. A stack that
        # uses AWS without the plugin installed fails with the engine's `pulumi plugin install` line.
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": os.environ.get(
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION", "true"),
        # Diffs on the step executor's workers instead of one at a time in the step generator: a one-model `up`
        # 10-13 % faster at 2 and 200 models, a no-change preview 2 % (bench/fleet_stack.py --engine-env,
        # docs/performance.md); the engine's switch since 3.157, off by default. `false` turns it off.
        "PULUMI_PARALLEL_DIFF": os.environ.get("PULUMI_PARALLEL_DIFF", "true"),
        # The language host buildable on air-gapped machines predates runtime options: point it at
        # the project's virtualenv explicitly (docs/engine.md).
        "PULUMI_PYTHON_CMD": str(project_dir / ".venv" / "bin" / "python"),
        **engine_home.home_env(),
        "PULUMI_BACKEND_URL": backend_url
        or os.environ.get("PULUMI_BACKEND_URL")
        or f"file://{project_dir / '.pulumi-state'}",
    }
    if env["PULUMI_BACKEND_URL"].startswith("file://"):
        Path(env["PULUMI_BACKEND_URL"].removeprefix("file://")).mkdir(parents=True, exist_ok=True)
    has_passphrase = os.environ.get("PULUMI_CONFIG_PASSPHRASE") or os.environ.get("PULUMI_CONFIG_PASSPHRASE_FILE")
    if stack in (DEV_STACK, platform_stack(DEV_STACK)) and not has_passphrase:
        env["PULUMI_CONFIG_PASSPHRASE"] = DEV_PASSPHRASE
    return env


def project_name(project_dir: Path = PROJECT_DIR) -> str:
    doc = yaml.safe_load((project_dir / "Pulumi.yaml").read_text())
    return str(doc["name"])


def _check_engine() -> auto.PulumiCommand:
    binary = pulumi_home() / "bin" / "pulumi"
    if not binary.exists() and not shutil.which("pulumi"):
        raise UsageError("the Pulumi engine is not installed; run `scripts/setup.sh` (builds it if needed)")
    root = str(pulumi_home()) if binary.exists() else None
    return EngineCommand(root=root)


def open_stack(stack: str, *, create: bool = False, project_dir: Path = PROJECT_DIR,
               backend_url: str | None = None) -> auto.Stack:
    """Select (or, with create, create) a stack of the project, with a clear error when it cannot."""
    env = engine_env(stack, project_dir, backend_url)
    if not (os.environ.get("PULUMI_CONFIG_PASSPHRASE") or os.environ.get("PULUMI_CONFIG_PASSPHRASE_FILE")
            or "PULUMI_CONFIG_PASSPHRASE" in env):
        stack_file = project_dir / f"Pulumi.{stack}.yaml"
        if stack_file.exists() and "encryptionsalt" in stack_file.read_text():
            raise UsageError(f"stack {stack!r} uses a passphrase secrets provider: set PULUMI_CONFIG_PASSPHRASE "
                             "(or PULUMI_CONFIG_PASSPHRASE_FILE) before running this command")
    # A split environment's platform stack takes its settings from Pulumi.<env>.yaml (tkf_infra/layers.py).
    settings_file = project_dir / f"Pulumi.{environment(stack)}.yaml"
    if create and not (project_dir / f"Pulumi.{stack}.yaml").exists() and not (
            is_platform_stack(stack) and settings_file.exists()):
        files = ", ".join(sorted(p.name.split(".")[1] for p in project_dir.glob("Pulumi.*.yaml")))
        raise UsageError(f"unknown stack {stack!r}: there is no Pulumi.{stack}.yaml (stack files: {files})")
    cmd = _check_engine()
    opts = auto.LocalWorkspaceOptions(env_vars=env, pulumi_command=cmd)
    try:
        if create:
            return auto.create_or_select_stack(stack, work_dir=str(project_dir), opts=opts)
        return auto.select_stack(stack, work_dir=str(project_dir), opts=opts)
    except auto.StackNotFoundError:
        raise UsageError(f"stack {stack!r} does not exist in {env['PULUMI_BACKEND_URL']}; "
                         f"run `python -m tkf_infra up --stack {stack}` first, or check the name") from None
    except auto.CommandError as err:
        known = engine_error(str(err), stack, env["PULUMI_BACKEND_URL"], project_dir)
        raise known or UsageError(last_error_line(str(err)).removeprefix("error: ")) from None


def stack_catalog(stack: auto.Stack) -> Catalog | None:
    """Validate the stack's catalog locally, for reporting rejected entries per model."""
    try:
        cfg = stack.get_all_config()
    except auto.CommandError:
        return None
    doc: dict[str, Any] = {}
    for key, value in cfg.items():
        ns, _, name = key.partition(":")
        if ns != "tkf-infra" or value.secret or name == "apiKey":
            continue
        try:  # structured values are JSON; a plain string that is not YAML ("@x", "a: b: c") stays a string
            doc[name] = yaml.safe_load(value.value) if isinstance(value.value, str) else value.value
        except yaml.YAMLError:
            doc[name] = value.value
    try:
        return validate_catalog(doc)
    except SettingsError:
        return None


#: Engine messages that mean a wrong or missing passphrase (pkg/secrets/passphrase of the pinned engine).
_PASSPHRASE_ERRORS = ("incorrect passphrase", "passphrase must be set")
#: What the engine says when the state bucket does not answer: gocloud's blob errors (`blob (key …)`,
#: `unable to open bucket`) wrapping the cloud SDK's; a cluster that does not answer reads differently.
_BACKEND_ERRORS = ("blob (key", "unable to open bucket", "operation error S3")
#: The network-level cause inside those errors, for the one line (most telling first).
_NETWORK_CAUSES = tuple(re.compile(p) for p in (
    r"dial tcp \S+: connect: [a-z ]+", r"lookup \S+: no such host", r"i/o timeout", r"connection reset by peer",
    r"context deadline exceeded", r"exceeded maximum number of attempts"))


def engine_error(text: str, stack: str, backend_url: str, project_dir: Path = PROJECT_DIR) -> OperatorError | None:
    """The operator's reading of an engine failure that is not about the program: one line, its exit code."""
    line = last_error_line(text).removeprefix("error: ")
    if any(m in text for m in _PASSPHRASE_ERRORS):
        what = "wrong" if "incorrect passphrase" in text else "missing"
        return UsageError(f"the passphrase of stack {stack!r} is {what}: set PULUMI_CONFIG_PASSPHRASE (or "
                          "PULUMI_CONFIG_PASSPHRASE_FILE) to the one this stack's secrets were encrypted with")
    if locks.ENGINE_LOCKED_MARKER in text:
        return StackLocked(locks.locked_message(stack, read_locks(stack, backend_url, project_dir)))
    if any(m in text for m in _BACKEND_ERRORS):
        doing = ("saving the state" if "save snapshot" in text else
                 "taking the lock" if "/locks/" in text else "reading the state")
        cause = next((m.group(0) for p in _NETWORK_CAUSES if (m := p.search(text))), line)
        return BackendUnavailable(
            f"the state backend {redact(backend_url)} did not answer ({doing}: {cause}); nothing was lost: the "
            "state there is the last one saved. Run the command again once the backend is back (a run cut off "
            f"while saving leaves the stack locked: see `python -m tkf_infra unlock --stack {stack}`)")
    return None


def read_locks(stack: str, backend_url: str, project_dir: Path = PROJECT_DIR) -> list[locks.StackLock]:
    """The stack's locks, or none when the backend cannot be read (the engine then says why)."""
    try:
        return locks.stack_locks(locks.open_store(backend_url), project_name(project_dir), stack)
    except Exception:  # an unreadable backend is reported by the run that needs it
        return []


def redact(url: str) -> str:
    """A backend URL for messages: no credentials, no query string except the endpoint it names."""
    parsed = urlparse(url)
    if not parsed.scheme:
        return url
    shown = f"{parsed.scheme}://{parsed.hostname or ''}{f':{parsed.port}' if parsed.port else ''}{parsed.path}"
    endpoint = parse_qs(parsed.query).get("endpoint")
    return f"{shown} (endpoint {endpoint[-1]})" if endpoint else shown


def last_error_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("error:")]
    return lines[-1] if lines else text.strip().splitlines()[-1] if text.strip() else "the engine failed"


def state_deployment(stack: auto.Stack) -> dict[str, Any] | None:
    """The stack's saved state (`pulumi stack export`), or None when it cannot be read."""
    try:
        deployment = stack.export_stack().deployment
    except auto.CommandError:
        return None
    return deployment if isinstance(deployment, dict) else None


def signal_name(signum: int | None) -> str:
    import signal

    return signal.Signals(signum).name if signum else "an interrupt"


#: Reads of the outputs `stack_outputs` tries while an `up` keeps rewriting them.
OUTPUT_READS = 5


def stack_outputs(stack: auto.Stack, *, show_secrets: bool = False) -> dict[str, Any]:
    """Stack outputs as plain values; secret outputs are left out unless asked for.

    The Automation API reads them twice (`pulumi stack output --json`, then with `--show-secrets`) and
    indexes one by the other's keys (pulumi 3.x `LocalWorkspace.stack_outputs`): an `up` in progress that
    writes its checkpoint between the two reads (`status` during an `up`) makes them differ, a KeyError;
    the next read sees one state."""
    for attempt in range(OUTPUT_READS):
        try:
            values = stack.outputs()
            break
        except KeyError:
            if attempt == OUTPUT_READS - 1:
                raise
    out: dict[str, Any] = {}
    for key, value in values.items():
        if value.secret and not show_secrets:
            continue
        out[key] = value.value
    return out


PROJECT_FILES = ("Pulumi.yaml", "__main__.py", "models.lock.json", "requirements.txt")
PROJECT_DIRS = ("tkf_infra", "components", "providers", "policy")


def copy_project(dest: Path, project_dir: Path = PROJECT_DIR) -> Path:
    """A private copy of the program (sharing the virtualenv), so tests and benchmarks can create
    stack files and state without touching the checkout."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in PROJECT_FILES:
        shutil.copy2(project_dir / name, dest / name)
    for name in PROJECT_DIRS:
        shutil.copytree(project_dir / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", ".venv"))
    (dest / ".venv").symlink_to(project_dir / ".venv")
    if (project_dir / "policy" / ".venv").exists():  # the policy pack's own virtualenv (docs/policy.md)
        (dest / "policy" / ".venv").symlink_to(project_dir / "policy" / ".venv")
    return dest
