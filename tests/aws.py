"""AWS for the tests, through moto: fake credentials, EC2 in-process (the ``ec2`` fixture, tests/conftest.py),
S3 as a real server on 127.0.0.1 for the engine's state backend (which calls it from its own process)."""

from __future__ import annotations

from moto.server import ThreadedMotoServer

from tests.ports import Reservation, reserve

#: What moto needs in the environment (boto3 and the engine's S3 client read them); never real credentials.
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1",
           "AWS_DEFAULT_REGION": "us-east-1"}
REGION = AWS_ENV["AWS_REGION"]


class S3Server:
    """moto's S3 server on a port reserved for it (tests/ports.py), which can go away and come back on it."""

    def __init__(self) -> None:
        self._port: Reservation | None = reserve()
        self.port = self._port.port
        self.server: ThreadedMotoServer | None = None

    def start(self) -> None:
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()

    def stop(self) -> None:
        """The server goes away; its port stays reserved, so :meth:`start` gets it back."""
        if self.server is not None:
            self.server.stop()
            self.server = None

    def close(self) -> None:
        self.stop()
        if self._port is not None:
            self._port.release()
            self._port = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def backend_url(self, bucket: str) -> str:
        """The Pulumi state backend URL of ``bucket`` on this server."""
        return (f"s3://{bucket}?endpoint={self.endpoint}&disableSSL=true&s3ForcePathStyle=true"
                f"&region={REGION}")
