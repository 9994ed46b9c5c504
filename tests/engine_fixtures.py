"""Fixtures that run this project through the real Pulumi engine (Automation API, LocalWorkspace).

Each test gets a copy of the project in a temporary folder (so stack files and rendered manifests
never land in the checkout), its own file backend, and a stack configured like `dev`.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi import automation as auto

from tkf_infra.hub.lock import load_lock
from tkf_infra.ops import engine_home
from tkf_infra.ops.stacks import DEV_PASSPHRASE, copy_project, engine_env, pulumi_home
from tkf_infra.sizing.adapter_facts import AdapterFacts

ROOT = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/engine/" in str(item.fspath) or "make_stack" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.engine)


@pytest.fixture(scope="session")
def engine_ready() -> None:
    binary = pulumi_home() / "bin" / "pulumi"
    if not binary.exists():
        pytest.fail(f"the Pulumi engine is not installed at {binary}: run scripts/setup.sh (or make test)")


@dataclass
class EngineStack:
    """A stack of a private project copy, with the dev settings as a starting point."""

    stack: auto.Stack
    project: Path
    render_dir: Path
    env: dict[str, str]

    def edit_config(self, change: Callable[[dict[str, Any]], None]) -> None:
        """Change the stack file's `config` map in place and write it back, as a person editing it would;
        the one read/modify/write of the stack file every test that edits settings goes through."""
        stack_file = self.project / f"Pulumi.{self.stack.name}.yaml"
        doc = yaml.safe_load(stack_file.read_text())
        change(doc["config"])
        stack_file.write_text(yaml.safe_dump(doc, sort_keys=False))

    def set_models(self, models: list[dict[str, Any]]) -> None:
        """Rewrite the catalog in the stack file."""
        self.edit_config(lambda c: c.update({"tkf-infra:models": models}))

    def manifests(self) -> dict[tuple[str, str], dict[str, Any]]:
        return rendered_manifests(self.render_dir)


def rendered_manifests(render_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The objects a render-mode run wrote, by (kind, name)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(render_dir.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out[(doc["kind"], doc["metadata"]["name"])] = doc
    return out


def cli_project(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A project copy whose dev stack renders into its own directory, on a file state backend of its own,
    for tests that run the CLI as a user does: (project root, render directory, environment without a
    passphrase, so the CLI's own default applies)."""
    root = copy_project(tmp_path / "project")
    doc = dev_config()
    render = tmp_path / "rendered"
    doc["config"]["tkf-infra:cluster"]["renderDir"] = str(render)
    (root / "Pulumi.dev.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    (tmp_path / "state").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_CONFIG_PASSPHRASE")}
    env["PULUMI_BACKEND_URL"] = f"file://{tmp_path / 'state'}"
    return root, render, env


def add_adapters(project: Path, adapters: Sequence[AdapterFacts]) -> None:
    """LoRA adapter facts added to a project copy's lock, as `lock` records them (nothing to do without any)."""
    if not adapters:
        return
    path = project / "models.lock.json"
    lock = load_lock(path)
    for facts in adapters:
        lock.put_adapter(facts)
    lock.save(path)


def set_dev_models(root: Path, models: list[dict[str, Any]]) -> None:
    """Replace the dev stack file's catalog, as a person editing it would."""
    path = root / "Pulumi.dev.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["config"]["tkf-infra:models"] = models
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def dev_config(platform: bool = False) -> dict[str, Any]:
    """The dev stack file. ``platform``: keep its platform (every chart rendered: a minute and more);
    by default each piece is marked alreadyInstalled, as the tests of the models need none of it.
    Without dev's `weightCacheBudgetGiB`: it is the dev cluster's allotment for dev's two caches, and
    the stacks built from this swap in other catalogs or aim at a test API server, whose own storage
    objects (or none) are what they test (tests/test_admission_stacks.py checks the dev budget)."""
    doc: dict[str, Any] = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())
    doc["config"]["tkf-infra:serving"].pop("weightCacheBudgetGiB", None)
    # One stack holding both layers: these tests are about the models (tests/engine/test_layers.py splits it).
    doc["config"].pop("tkf-infra:layer", None)
    if not platform:
        for piece in doc["config"]["tkf-infra:platform"].values():
            if isinstance(piece, dict):
                piece["alreadyInstalled"] = True
    return doc


def new_stack(workdir: Path, backend_url: str | None = None, extra_env: dict[str, str] | None = None,
              platform: bool = False) -> EngineStack:
    """A project copy under ``workdir`` with a stack of the dev settings (``platform``: keep the dev stack's
    platform, see `dev_config`), rendering into its own directory, on a file backend of its own unless
    ``backend_url``."""
    name = f"t{uuid.uuid4().hex[:8]}"
    project = copy_project(workdir / f"project-{name}")
    render_dir = workdir / f"rendered-{name}"
    doc = dev_config(platform)
    doc["config"]["tkf-infra:cluster"]["renderDir"] = str(render_dir)
    (project / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    state = workdir / f"state-{name}"
    state.mkdir()
    env = engine_env("dev", project, backend_url or f"file://{state}")
    env["PULUMI_CONFIG_PASSPHRASE"] = DEV_PASSPHRASE
    env.update(extra_env or {})
    opts = auto.LocalWorkspaceOptions(env_vars=env, pulumi_command=auto.PulumiCommand(root=str(pulumi_home())))
    stack = auto.create_stack(name, work_dir=str(project), opts=opts)
    return EngineStack(stack, project, render_dir, env)


@pytest.fixture
def make_stack(engine_ready: None, tmp_path: Path) -> Iterator[Callable[..., EngineStack]]:
    """``make_stack(backend_url=None, extra_env=None, platform=False)``: `new_stack` in the test's directory,
    destroyed and removed afterwards."""
    created: list[EngineStack] = []

    def make(backend_url: str | None = None, extra_env: dict[str, str] | None = None,
             platform: bool = False) -> EngineStack:
        created.append(new_stack(tmp_path, backend_url, extra_env, platform))
        return created[-1]

    yield make
    for es in created:
        with contextlib.suppress(auto.CommandError):
            es.stack.destroy(continue_on_error=True)
        with contextlib.suppress(auto.CommandError):
            es.stack.workspace.remove_stack(es.stack.name, force=True)


@pytest.fixture(scope="session")
def lean_engine_env() -> dict[str, str]:
    """Engine settings for runs that register the platform's multi-megabyte CRDs (about 11 MB of state).

    Measured on the dev stack's `up` with its platform (2 cores): 244 s of CPU as shipped, 41 s with
    both settings. ``PULUMI_SKIP_CHECKPOINTS``: the engine otherwise rewrites the whole state file
    after every step; only the final state is written (a crash mid-run loses the journal: test stacks
    only, never the product's runs). The engine's automatic log is off as in every tkf run
    (tkf_infra/ops/engine_home.py).
    """
    return lean_env()


def lean_env() -> dict[str, str]:
    """`lean_engine_env`'s settings, for scripts outside pytest (bench/cluster_churn.py)."""
    return {"PULUMI_SKIP_CHECKPOINTS": "true", **engine_home.home_env()}


def resource_events(collected: list[auto.events.EngineEvent]) -> list[tuple[str, str, str]]:
    """(op, type, name) of every resource step of a run, once per URN, from its engine events.

    Components report outputs twice (at registration and at register_outputs): count URNs, not events.
    """
    steps: dict[str, tuple[str, str, str]] = {}
    for ev in collected:
        if ev.res_outputs_event:
            meta = ev.res_outputs_event.metadata
            op = meta.op.value if hasattr(meta.op, "value") else str(meta.op)
            steps.setdefault(meta.urn, (op, meta.type, meta.urn.split("::")[-1]))
    return list(steps.values())




__all__ = ["EngineStack", "copy_project", "dev_config", "engine_ready", "lean_engine_env", "make_stack",
           "resource_events"]
