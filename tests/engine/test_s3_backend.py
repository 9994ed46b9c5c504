"""The prod-like backend: state in S3 (moto's server mode on 127.0.0.1), same preview and up as dev."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator

import boto3
import pytest
from moto.server import ThreadedMotoServer

from tests.engine_fixtures import EngineStack

AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
           "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop()


def test_preview_and_up_on_s3_backend(make_stack: Callable[..., EngineStack], s3_endpoint: str,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in AWS_ENV.items():
        monkeypatch.setenv(k, v)
    s3 = boto3.client("s3", endpoint_url=f"http://{s3_endpoint}")
    s3.create_bucket(Bucket="tkf-state")
    url = f"s3://tkf-state?endpoint={s3_endpoint}&disableSSL=true&s3ForcePathStyle=true&region=us-east-1"
    es = make_stack(backend_url=url, extra_env=AWS_ENV)
    preview = es.stack.preview()
    assert sum(preview.change_summary.values()) > 0
    es.stack.up()
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="tkf-state").get("Contents", [])]
    assert any(k.endswith(f"{es.stack.name}.json") for k in keys), keys
    assert ("LLMInferenceService", "qwen-0-5b") in es.manifests()
