"""A harness stand-in that reconciles in a background thread, as the controller it stands in for would.

Why one base: the device plugin's and the provisioner's loops are the same (a client of their own, a tick,
an error kept for `Cluster.check_alive`); only what each tick does differs (`sync`)."""

from __future__ import annotations

import threading
from pathlib import Path

from tests.kube.client import KubeClient


class SyncLoop:
    """Calls `sync` every `interval` seconds until `stop`; an error stops the loop and is kept in `error`."""

    def __init__(self, kubeconfig: Path, interval: float, name: str) -> None:
        self.error: BaseException | None = None
        self._kubeconfig, self._interval = kubeconfig, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        try:
            with KubeClient.from_kubeconfig(self._kubeconfig) as kube:
                while not self._stop.wait(self._interval):
                    self.sync(kube)
        except BaseException as exc:  # kept for Cluster.check_alive
            self.error = exc

    def sync(self, kube: KubeClient) -> None:
        raise NotImplementedError
