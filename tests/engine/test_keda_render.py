"""KEDA (`platform.keda`) rendered by the real provider in render mode, as `make preview`/`make up` write it.

Why an engine test: mocks echo the YAML group's file list; only the provider reads the file, orders
the Namespace and CRDs first and writes each object. Render mode has no cluster to ask a kind's scope,
so this also shows every kind in KEDA's file is one the provider knows offline (built in, or a CRD
of the file itself): the APIService and the ValidatingWebhookConfiguration included.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.prerequisites import ServingPrerequisites, ServingPrerequisitesArgs
from tests.engine.test_platform_charts import read_rendered, render_inline
from tkf_infra.config import Backend, Namespaces, Platform

pytestmark = pytest.mark.engine

KEDA_FILE = Path(__file__).resolve().parents[2] / "components/data/charts/keda-v2.18.0/keda-2.18.0.yaml"


def test_render_mode_writes_every_keda_object_of_the_vendored_release(
    tmp_path: Path, lean_engine_env: dict[str, str], engine_ready: None,
) -> None:
    platform = Platform.model_validate({"keda": {"version": "v2.18.0"}, "lws": {"alreadyInstalled": True},
                                        "gpuOperator": {"alreadyInstalled": True}})

    def program(provider_for: Callable[[str], Any]) -> None:
        ServingPrerequisites("prereq", ServingPrerequisitesArgs(
            platform, Namespaces(), backend=Backend.VLLM, source="vendored", render=True, skip_await=True),
            opts=provider_for("keda"))

    docs = read_rendered(render_inline(tmp_path, lean_engine_env, program) / "keda")
    shipped = [d for d in yaml.load_all(KEDA_FILE.read_text(), Loader=yaml.CSafeLoader) if d]
    assert Counter(d["kind"] for d in docs) == Counter(d["kind"] for d in shipped)
    assert len(docs) == 24
    assert {(d["kind"], d["metadata"]["name"]) for d in docs} == {(d["kind"], d["metadata"]["name"]) for d in shipped}
    images = {c["image"] for d in docs if d["kind"] == "Deployment"
              for c in d["spec"]["template"]["spec"]["containers"]}
    assert images == {"ghcr.io/kedacore/keda:2.18.0", "ghcr.io/kedacore/keda-metrics-apiserver:2.18.0",
                      "ghcr.io/kedacore/keda-admission-webhooks:2.18.0"}
