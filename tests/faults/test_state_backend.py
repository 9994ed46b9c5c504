"""The state backend failing a run: the S3 bucket gone mid-`up`; a wrong or missing passphrase.

The S3 backend is moto's server on 127.0.0.1 (as in tests/engine/test_s3_backend.py), stopped for
real while `up` waits for a weight download, so the engine's next state write meets a closed port.
moto keeps its buckets in the test process, so the restarted server has the data a real S3 outage
would have kept.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import boto3
import pytest

from tests.aws import AWS_ENV, S3Server
from tests.engine_fixtures import EngineStack
from tests.faults.harness import (
    CPU_MODELS,
    Cli,
    aim,
    assert_converged,
    download_jobs,
    process_tree,
    run_cli,
    still_running,
    wait_applying,
)
from tests.kube.apiserver import KubeAPIServer
from tests.kube.client import KubeClient
from tests.kube.jobs import complete_job
from tkf_infra.exit_codes import ExitCode

BUCKET = "tkf-state"


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    for key, value in AWS_ENV.items():
        monkeypatch.setenv(key, value)
    server = S3Server()
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.mark.apiserver
@pytest.mark.engine
def test_the_s3_backend_going_away_mid_up_loses_nothing(
        make_stack: Callable[..., EngineStack], kube_apiserver: KubeAPIServer, kube: KubeClient,
        s3: S3Server) -> None:
    client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{s3.port}")
    client.create_bucket(Bucket=BUCKET)
    es = make_stack(backend_url=s3.backend_url(BUCKET), extra_env=AWS_ENV)
    model = CPU_MODELS[0]  # one model: every failed state write costs the engine's retries (~85 s)
    ns = aim(es, kube_apiserver, models=[model])
    [job] = download_jobs([model])
    checkpoint = f".pulumi/stacks/tkf-infra/{es.stack.name}.json"

    def holders() -> list[int]:
        listed = client.list_objects_v2(Bucket=BUCKET, Prefix=".pulumi/locks/").get("Contents", [])
        return [int(json.loads(client.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read())["pid"])
                for o in listed if o["Key"].endswith(".json")]

    run = Cli(es, ("up",)).start()
    wait_applying(es, run, kube, ns, [job], holders=holders)
    tree = process_tree(run.pid)
    s3.stop()  # the backend goes away while the engine waits for the download
    complete_job(kube, ns, job)  # the download finishes: the engine must now save the state, and cannot
    code, summary, err = run.wait()

    assert code == ExitCode.UNAVAILABLE and summary == {}, (code, err)
    assert still_running(tree) == {}, "the crashed engine's language host and providers were ended too"
    [line] = err.strip().splitlines()
    assert line.startswith(f"error: the state backend s3://{BUCKET} (endpoint 127.0.0.1:{s3.port}) did not answer")
    assert "connection refused" in line and "nothing was lost" in line, line

    s3.start()  # the backend is back, with the last state the engine saved, whole
    saved = json.loads(client.get_object(Bucket=BUCKET, Key=checkpoint)["Body"].read())
    pending = saved["checkpoint"]["latest"]["pending_operations"]
    assert [op["resource"]["urn"].rsplit("::", 1)[1] for op in pending] == [job], "saved just before the outage"
    assert es.stack.export_stack().deployment, "the engine loads it"

    # The engine died with its lock held (pulumi v3.260.0 crashes on the final failed write):
    # the next up names it, `unlock` clears it, and the up after converges.
    code, _, err = run_cli(es, "up")
    assert code == ExitCode.LOCKED and "that process is gone" in err, (code, err)
    code, _, err = run_cli(es, "unlock")
    assert code == ExitCode.OK, (code, err)
    code, summary, err = run_cli(es, "up")
    assert code == ExitCode.OK and summary["models"][model["name"]]["status"] == "created", (code, err, summary)
    assert summary["models"][model["name"]]["pending"], "the create the outage cut off is reported"
    code, summary, err = run_cli(es, "refresh", "--clear-pending-creates")
    assert code == ExitCode.OK, (code, err)
    assert_converged(es, kube, ns)


@pytest.mark.engine
def test_a_wrong_or_missing_passphrase_is_one_line(make_stack: Callable[..., EngineStack]) -> None:
    es = make_stack()
    code, _, err = run_cli(es, "up")  # with the right passphrase (render mode: no cluster needed)
    assert code == ExitCode.OK, err
    wrong = {"PULUMI_CONFIG_PASSPHRASE": "not-this-stacks-passphrase"}
    for command, as_json in (("preview", True), ("up", True), ("outputs", False)):
        args = (command, "--show-secrets") if command == "outputs" else (command,)
        code, summary, err = run_cli(es, *args, env=wrong, as_json=as_json)
        assert code == ExitCode.USAGE and summary == {}, (command, code, err)
        assert err.strip().splitlines() == [
            f"error: the passphrase of stack '{es.stack.name}' is wrong: set PULUMI_CONFIG_PASSPHRASE (or "
            "PULUMI_CONFIG_PASSPHRASE_FILE) to the one this stack's secrets were encrypted with"], (command, err)
    code, summary, err = run_cli(es, "preview", env={"PULUMI_CONFIG_PASSPHRASE": None})
    assert code == ExitCode.USAGE and summary == {}, err
    [line] = err.strip().splitlines()
    assert "passphrase" in line and "PULUMI_CONFIG_PASSPHRASE" in line, line
