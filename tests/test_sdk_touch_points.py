"""Guards on every private Pulumi SDK internal the code relies on (docs/architecture.md, "Private SDK touch
points"): one test per touch point, each naming the SDK version it was checked against, so an SDK bump that
removes or changes one fails here, first and by name, rather than as a puzzling failure somewhere else.

After a bump: re-check each row of the table against the new SDK, then move `CHECKED_AGAINST` (and the
table's version) to the new pin.
"""

from __future__ import annotations

import inspect
import json
import re
import subprocess
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pulumi
import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The `pulumi==` pin every row of the table was checked against.
CHECKED_AGAINST = "3.272.0"
#: pulumi-policy, in the policy pack's own virtualenv (policy/requirements.txt).
POLICY_CHECKED_AGAINST = "1.21.0"


def pin(requirements: Path, package: str) -> str:
    found = re.search(rf"^{re.escape(package)}==(\S+)", requirements.read_text(), re.MULTILINE)
    assert found, f"{requirements.name} does not pin {package}"
    return found.group(1)


def why(what: str) -> str:
    return (f"pulumi {version('pulumi')} (touch points checked against {CHECKED_AGAINST}): {what}; see "
            "docs/architecture.md, 'Private SDK touch points'")


@pytest.fixture
def clean_config() -> Iterator[None]:
    yield
    pulumi.runtime.set_all_config({}, [])


def test_the_sdk_is_the_version_the_touch_points_were_checked_against() -> None:
    pinned = pin(ROOT / "requirements.txt", "pulumi")
    assert pinned == CHECKED_AGAINST == version("pulumi"), (
        f"the Pulumi SDK pin is {pinned} (installed {version('pulumi')}), the private touch points were checked "
        f"against {CHECKED_AGAINST}: re-check every row of docs/architecture.md's table against the new SDK, "
        "then update CHECKED_AGAINST here and the table's version")
    assert pin(ROOT / "policy" / "requirements.txt", "pulumi") == CHECKED_AGAINST, "the pack's SDK moved alone"
    doc = (ROOT / "docs" / "architecture.md").read_text()
    assert f"pulumi=={CHECKED_AGAINST}" in doc and f"pulumi-policy=={POLICY_CHECKED_AGAINST}" in doc


# ---------------------------------------------------------------------------------------------
# tkf_infra/config/reader.py: pulumi.runtime.config.CONFIG
# ---------------------------------------------------------------------------------------------


def test_reader_can_list_every_config_key_through_runtime_config_CONFIG(
        clean_config: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """`_other_keys` lists the stack's keys (pulumi.Config has no listing) from the module's CONFIG
    ContextVar, a dict of `project:key` → value that `set_all_config` (and the language host) fill."""
    from pulumi.runtime import config as runtime_config

    from tkf_infra.config import reader

    config = getattr(runtime_config, "CONFIG", None)
    assert config is not None and callable(getattr(config, "get", None)), why(
        "pulumi.runtime.config.CONFIG is gone; tkf_infra/config/reader.py _other_keys needs another way to list "
        "the stack's config keys (a misspelt key would otherwise be ignored)")
    monkeypatch.setattr(pulumi, "get_project", lambda: "tkf-infra")
    pulumi.runtime.set_all_config({"tkf-infra:modelz": "[]", "tkf-infra:strict": "true"}, [])
    current = config.get()
    assert isinstance(current, dict) and {"tkf-infra:modelz", "tkf-infra:strict"} <= set(current), why(
        "pulumi.runtime.config.CONFIG.get() no longer holds the whole config as a dict of full keys")
    assert [name for name, _ in reader._other_keys()] == ["modelz"], why("the misspelt key is no longer found")


# ---------------------------------------------------------------------------------------------
# tkf_infra/sdk_trace.py: pulumi.runtime.resource._get_stack_trace and source_pb2
# ---------------------------------------------------------------------------------------------


def test_sdk_trace_replaces_a_module_global_the_sdk_still_calls() -> None:
    from pulumi.runtime import resource as sdk_resource

    from tkf_infra import sdk_trace

    original = sdk_trace.SDK_STACK_TRACE
    assert callable(original) and list(inspect.signature(original).parameters) == [], why(
        f"pulumi.runtime.resource.{sdk_trace.SDK_FUNCTION} is gone or takes arguments now; tkf_infra/sdk_trace.py "
        "replaces it with a one-frame version")
    source = inspect.getsource(sdk_resource)
    calls = len(re.findall(rf"(?<![.\w]){sdk_trace.SDK_FUNCTION}\(\)", source)) - 1  # less its own `def`
    assert calls >= 2, why(f"the SDK no longer calls {sdk_trace.SDK_FUNCTION}() by its module-global name "
                           "(read, register, register-outputs): replacing the attribute would change nothing")
    walk = inspect.getsource(original)
    assert '"__init__"' in walk and "n == 3" in walk, why(
        "the SDK no longer finds the constructing frame as the frame beyond the third `__init__`; "
        "sdk_trace._constructor_caller mirrors that rule and must change with it")


def test_sdk_trace_builds_the_sdks_own_stack_trace_messages() -> None:
    from pulumi.runtime.proto import source_pb2

    try:
        frame = source_pb2.StackFrame(pc=source_pb2.SourcePosition(uri="file:///x.py", line=3))
        trace = source_pb2.StackTrace(frames=[frame])
    except (AttributeError, ValueError, TypeError) as err:
        raise AssertionError(why(f"pulumi.runtime.proto.source_pb2 changed ({err}); sdk_trace builds "
                                 "StackTrace(frames=[StackFrame(pc=SourcePosition(uri, line))])")) from err
    assert trace.frames[0].pc.uri == "file:///x.py" and trace.frames[0].pc.line == 3


# ---------------------------------------------------------------------------------------------
# providers/fit.py: pulumi.output.Unknown, the wire sentinel, the dynamic type token
# ---------------------------------------------------------------------------------------------


def test_fit_provider_recognises_the_sdks_unknowns() -> None:
    from pulumi.runtime import rpc

    from providers import fit

    unknown_class = getattr(pulumi.output, "Unknown", None)
    assert unknown_class is not None and isinstance(pulumi.UNKNOWN, unknown_class), why(
        "pulumi.output.Unknown is gone; providers/fit.py _has_unknown skips unknown verdicts at preview by it")
    assert rpc.UNKNOWN == fit._UNKNOWN_SENTINEL, why(
        "the unknown-value sentinel a dynamic provider receives at preview (pulumi.runtime.rpc.UNKNOWN) changed; "
        "copy the new one into providers/fit.py _UNKNOWN_SENTINEL (fit.py imports nothing but Pulumi at module "
        "level and keeps its own copy)")
    assert fit._has_unknown({"a": [rpc.UNKNOWN]}) and fit._has_unknown(pulumi.UNKNOWN)


def test_the_fit_checks_type_token_is_the_one_the_cli_recognises() -> None:
    """`dyn.Resource` subclass keywords name the type (`pulumi-python:dynamic/tkf:FitCheck`); the CLI's
    summary maps a per-model FitCheck left in an old state back to its model by that token."""
    from tests.mocks import SINGLE_GPU, program, stack_doc
    from tkf_infra import names
    from tkf_infra.ops import summary

    h = program(stack_doc(SINGLE_GPU))
    types = {r.type for r in h.resources if r.name == names.FIT_CHECK}
    assert types == {names.FIT_CHECK_TYPE}, why(f"the FitCheck registers as {types}, a targeted run names it "
                                                f"{names.FIT_CHECK_TYPE}")
    old = f"urn:pulumi:s::p::{names.FIT_CHECK_TYPE}::m{names.FIT_CHECK_SUFFIX}"
    assert summary.models_of(old, {}, {}) == ["m"]


# ---------------------------------------------------------------------------------------------
# tkf_infra/ops/engine.py: PulumiCommand.run and create_command_error
# ---------------------------------------------------------------------------------------------


def test_engine_command_overrides_the_run_the_automation_api_calls() -> None:
    from pulumi import automation as auto
    from pulumi.automation import errors

    from tkf_infra.ops.engine import EngineCommand

    params = list(inspect.signature(auto.PulumiCommand.run).parameters)
    ours = list(inspect.signature(EngineCommand.run).parameters)
    assert params == ours == ["self", "args", "cwd", "additional_env", "on_output", "on_error"], why(
        f"PulumiCommand.run is now {params}; tkf_infra/ops/engine.py EngineCommand.run overrides it (every "
        "operation of the CLI goes through it)")
    workspace = inspect.getsource(auto.LocalWorkspace)
    assert "pulumi_command.run(" in workspace, why("LocalWorkspace no longer runs commands through pulumi_command.run")
    init = inspect.signature(auto.PulumiCommand.__init__).parameters
    assert "root" in init and "self.command =" in inspect.getsource(auto.PulumiCommand.__init__), why(
        "PulumiCommand(root=…) no longer sets `command`, the binary EngineCommand.run starts")
    err = errors.create_command_error(auto.CommandResult(stdout="", stderr="error: [409] Conflict", code=255))
    assert isinstance(err, errors.CommandError), why("pulumi.automation.errors.create_command_error changed")


# ---------------------------------------------------------------------------------------------
# policy/pack.py: pulumi_policy.proxy's UNKNOWN_*_VALUE sentinels (the pack's own virtualenv)
# ---------------------------------------------------------------------------------------------


@pytest.mark.engine  # runs after the setup (scripts/test_suite.sh), which makes the pack's virtualenv
def test_policy_pack_finds_pulumi_policys_unknown_sentinels() -> None:
    python = ROOT / "policy" / ".venv" / "bin" / "python"
    if not python.exists():
        pytest.skip("the policy pack's virtualenv is not built (scripts/bootstrap.sh makes it)")
    assert pin(ROOT / "policy" / "requirements.txt", "pulumi-policy") == POLICY_CHECKED_AGAINST, (
        f"pulumi-policy moved from {POLICY_CHECKED_AGAINST}: re-check policy/pack.py's use of pulumi_policy.proxy")
    code = ("import json, importlib.metadata as m; from pulumi_policy import proxy as p; "
            "print(json.dumps([m.version('pulumi-policy'), sorted(getattr(p, n) for n in dir(p) "
            "if n.startswith('UNKNOWN_') and n.endswith('_VALUE'))]))")
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60, check=True)
    installed, sentinels = json.loads(out.stdout)
    from pulumi.runtime import rpc

    assert installed == POLICY_CHECKED_AGAINST and rpc.UNKNOWN in sentinels and len(sentinels) >= 5, (
        f"pulumi-policy {installed} (checked against {POLICY_CHECKED_AGAINST}): pulumi_policy.proxy's UNKNOWN_*_VALUE "
        f"sentinels are now {sentinels}; policy/pack.py unwrap() turns them into UNKNOWN for the guardrails")



#: How a reach past the SDK's public surface is spelled: its runtime modules, `pulumi.output`, the Automation
#: API's submodules, pulumi-policy's proxy, or any underscore name of a pulumi module.
PRIVATE = re.compile(r"from pulumi\.runtime(?:\.[a-z_]+)* import|pulumi\.runtime\.[a-z_]+\.[A-Za-z_]|"
                     r"from pulumi\.output import|from pulumi\.automation\.[a-z_]+ import|"
                     r"from pulumi_policy import proxy|\bpulumi[a-z_]*(?:\.[a-z_]+)*\._[a-z]")


def test_every_private_sdk_reach_is_a_row_of_the_table() -> None:
    """A new touch point cannot slip in unlisted: each file that reaches past the public surface is a row."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    table = doc[doc.index("## Private SDK touch points"):]
    table = table[:table.index("\n## ", 1)]
    found = sorted({p.relative_to(ROOT).as_posix() for folder in ("tkf_infra", "components", "providers", "policy")
                    for p in (ROOT / folder).rglob("*.py") if ".venv" not in p.parts
                    and any(PRIVATE.search(line) for line in p.read_text().splitlines()
                            if not line.lstrip().startswith("#"))})
    assert found, "the pattern finds nothing: it no longer matches how the touch points are spelled"
    unlisted = [f for f in found if f"`{f}" not in table]
    assert not unlisted, (f"{', '.join(unlisted)} reach past the Pulumi SDK's public surface but are not rows of "
                          "docs/architecture.md's 'Private SDK touch points' table; add a row and a guard here")
