"""A weight download that fails for good (revision gone, token revoked) fails its model, alone.

The failure is injected as the job controller reports it: the download Job's status written through
the status subresource (FailureTarget, then Failed, reason BackoffLimitExceeded; tests/kube/jobs.py)
while `up` waits for the Job.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from components.pod_meta import MARKER_FILE
from tests.engine_fixtures import EngineStack
from tests.faults.harness import (
    CPU_MODELS,
    Cli,
    aim,
    assert_converged,
    download_jobs,
    server_objects,
    wait_applying,
    workload_objects,
)
from tests.kube.apiserver import KubeAPIServer
from tests.kube.client import KubeClient
from tests.kube.jobs import BACKOFF_LIMIT_EXCEEDED, BACKOFF_LIMIT_MESSAGE, complete_job, fail_job
from tkf_infra import names
from tkf_infra.exit_codes import ExitCode

pytestmark = [pytest.mark.apiserver, pytest.mark.engine]


def test_a_failed_download_fails_its_model_alone_and_keeps_the_cache(
        make_stack: Callable[..., EngineStack], kube_apiserver: KubeAPIServer, kube: KubeClient) -> None:
    es = make_stack()
    ns = aim(es, kube_apiserver)
    good, bad = CPU_MODELS
    [good_job], [bad_job] = download_jobs([good]), download_jobs([bad])
    bad_cache = names.weight_cache(bad["repo"], bad["revision"])

    run = Cli(es, ("up",)).start()
    wait_applying(es, run, kube, ns, [good_job, bad_job])
    fail_job(kube, ns, bad_job)
    complete_job(kube, ns, good_job)
    code, summary, err = run.wait()

    assert code == ExitCode.REFUSED, (code, err, summary)
    assert summary["failedModels"] == [bad["name"]]
    assert summary["models"][good["name"]]["status"] == "created"
    report = summary["models"][bad["name"]]
    assert report["status"] == "failed"
    [reason] = report["reasons"]
    assert f"weight download Job {bad_job} failed: [{BACKOFF_LIMIT_EXCEEDED}] {BACKOFF_LIMIT_MESSAGE}" in reason
    assert "The weight cache is kept" in reason and "run `up` again" in reason
    assert summary["errors"] == [], "nothing unexplained, no traceback: the model's own reason says it all"
    live = set(server_objects(kube, ns))
    assert workload_objects(good["name"]) | workload_objects(bad["name"]) <= live
    # The failed model's pods wait for weights that are not there: never half-started.
    deployment = kube.get("apps/v1", "Deployment", names.workload(bad["name"]), ns)
    assert deployment is not None
    [wait] = deployment["spec"]["template"]["spec"]["initContainers"]
    assert f"/{bad['revision']}/{MARKER_FILE}" in " ".join(wait["command"] + wait.get("args", []))
    pvc = kube.get("v1", "PersistentVolumeClaim", bad_cache, ns)
    assert pvc is not None, "the cache PVC is kept"

    # The cause fixed (a valid token again), the next up replaces the failed Job; the download
    # (resuming into the same volume) completes and the model comes up.
    failed_uid = kube.get("batch/v1", "Job", bad_job, ns)["metadata"]["uid"]  # type: ignore[index]
    run = Cli(es, ("up",)).start()
    wait_applying(es, run, kube, ns, [bad_job], replacing={bad_job: failed_uid})
    complete_job(kube, ns, bad_job)
    code, summary, err = run.wait()
    assert code == ExitCode.OK, (code, err, summary)
    assert summary["models"][bad["name"]]["status"] == "replaced"  # its failed Job replaced, nothing else
    assert set(summary["models"][bad["name"]]["changes"]) == {"replace", "same"}, summary["models"][bad["name"]]
    assert summary["models"][good["name"]]["status"] == "unchanged"
    kept = kube.get("v1", "PersistentVolumeClaim", bad_cache, ns)
    assert kept is not None and kept["metadata"]["uid"] == pvc["metadata"]["uid"], "the same volume"
    assert_converged(es, kube, ns)
