"""The prod-like backend: state in S3 (moto's server mode on 127.0.0.1), same preview and up as dev."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import boto3
import pytest

from tests.aws import AWS_ENV, S3Server
from tests.engine_fixtures import EngineStack


@pytest.fixture(scope="module")
def s3_server() -> Iterator[S3Server]:
    server = S3Server()
    server.start()
    try:
        yield server
    finally:
        server.close()


def test_preview_and_up_on_s3_backend(make_stack: Callable[..., EngineStack], s3_server: S3Server,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in AWS_ENV.items():
        monkeypatch.setenv(k, v)
    s3 = boto3.client("s3", endpoint_url=f"http://{s3_server.endpoint}")
    s3.create_bucket(Bucket="tkf-state")
    es = make_stack(backend_url=s3_server.backend_url("tkf-state"), extra_env=AWS_ENV)
    preview = es.stack.preview()
    assert sum(preview.change_summary.values()) > 0
    es.stack.up()
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="tkf-state").get("Contents", [])]
    assert any(k.endswith(f"{es.stack.name}.json") for k in keys), keys
    assert ("LLMInferenceService", "qwen-0-5b") in es.manifests()
