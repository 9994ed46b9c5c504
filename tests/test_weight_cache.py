"""How `up` waits for a weight download (components/weight_cache.py), under mocks.

The behaviour itself — a failed Job failing its models alone, the retry replacing it — runs through
the engine against a real API server in tests/faults/test_failed_download.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from components.weight_cache import BACKOFF_LIMIT, DOWNLOAD_START_SECONDS, download_timeout_seconds
from tests.mocks import SINGLE_GPU, program, stack_doc
from tkf_infra.hub.lock import load_lock
from tkf_infra.sizing.params import GIB
from tkf_infra.sizing.weights import checkpoint_bytes


def cache_objects(tmp_path: Path, cluster: dict[str, Any], serving: dict[str, Any] | None = None
                  ) -> tuple[dict[str, str], dict[str, str]]:
    """The download Job's and the PVC's annotations."""
    if cluster.get("mode") == "kubeconfig":
        (tmp_path / "kubeconfig").write_text("apiVersion: v1\nkind: Config\n")
        cluster = {**cluster, "kubeconfig": str(tmp_path / "kubeconfig")}
    h = program(stack_doc(SINGLE_GPU, cluster=cluster, serving=serving or {}))
    assert h.error is None, h.error
    [job] = [r for r in h.resources if r.type == "kubernetes:batch/v1:Job"]
    [pvc] = [r for r in h.resources if r.type == "kubernetes:core/v1:PersistentVolumeClaim"]
    return job.metadata["annotations"], pvc.metadata["annotations"]


def test_against_a_cluster_up_waits_for_the_download_bounded_by_the_checkpoint(tmp_path: Path) -> None:
    job, pvc = cache_objects(tmp_path, {"mode": "kubeconfig"})
    facts = load_lock().get(str(SINGLE_GPU["repo"]), str(SINGLE_GPU["revision"]))
    assert facts is not None
    weight_bytes = checkpoint_bytes(facts)
    assert "pulumi.com/skipAwait" not in job and "pulumi.com/skipAwait" not in pvc
    assert job["pulumi.com/timeoutSeconds"] == str(download_timeout_seconds(weight_bytes))
    assert job["pulumi.com/replaceUnready"] == "true", "the retry after a failed download replaces the Job"
    assert job["tkf.io/models"] == SINGLE_GPU["name"]


def test_the_bound_covers_the_download_every_retry_and_the_start() -> None:
    # 16 GiB at half of 100 MiB/s = 328 s; back-off 10+20+40+80+160+320 s; 600 s to schedule and pull.
    assert BACKOFF_LIMIT == 6
    assert download_timeout_seconds(16 * GIB) == 328 + 630 + DOWNLOAD_START_SECONDS


@pytest.mark.parametrize(("cluster", "serving", "job_waits", "pvc_waits"), [
    ({"mode": "kubeconfig", "skipAwait": True}, {}, False, False),  # test servers: no controllers
    ({"mode": "kubeconfig", "skipAwait": True}, {"awaitWeightDownload": True}, True, False),  # the fault tests
    ({"mode": "kubeconfig"}, {"awaitWeightDownload": False}, False, True),  # opted out: pods wait instead
    ({"mode": "render", "renderDir": "r"}, {}, False, True),  # nothing is applied, nothing to wait for
])
def test_who_waits(tmp_path: Path, cluster: dict[str, Any], serving: dict[str, Any], job_waits: bool,
                   pvc_waits: bool) -> None:
    job, pvc = cache_objects(tmp_path, cluster, serving)
    assert ("pulumi.com/skipAwait" not in job) is job_waits and ("pulumi.com/replaceUnready" in job) is job_waits
    assert ("pulumi.com/skipAwait" not in pvc) is pvc_waits
