"""A small kubectl-like client over plain HTTP (httpx) for tests that talk to a real API server.

Reads a kubeconfig (the one tkf-kube-apiserver writes, or any with a bearer token and a CA), finds
resources through API discovery (so custom resources work once their CRD is Established), and
offers get / list_objects / server-side apply / delete / wait. Errors carry the server's Status message, so
a test can assert on what admission said.
"""

from __future__ import annotations

import base64
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

Obj = dict[str, Any]


class KubeAPIError(Exception):
    """A non-2xx answer; `message` is the server's Status message (what kubectl would print)."""

    def __init__(self, method: str, path: str, response: httpx.Response) -> None:
        self.status_code = response.status_code
        try:
            body: Any = response.json()
        except ValueError:
            body = {"message": response.text}
        self.body: Obj = body if isinstance(body, dict) else {"message": str(body)}
        self.reason: str = str(self.body.get("reason", ""))
        self.message: str = str(self.body.get("message", response.text))
        super().__init__(f"{method} {path}: HTTP {self.status_code} {self.reason}: {self.message}")


@dataclass(frozen=True)
class Resource:
    """Where a kind is served: /api/v1 or /apis/<group>/<version>, its plural, its scope."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced and namespace is not None:
            base += f"/namespaces/{namespace}"
        elif self.namespaced is False and namespace is not None:
            raise ValueError(f"{self.kind} is cluster-scoped; do not pass a namespace")
        base += f"/{self.plural}"
        return f"{base}/{name}" if name is not None else base


def _kubeconfig_entry(items: list[Obj], name: str, what: str) -> Obj:
    for item in items:
        if item.get("name") == name:
            return dict(item.get(what) or {})
    raise ValueError(f"kubeconfig has no {what} named {name!r}")


class KubeClient:
    def __init__(self, server: str, token: str, verify: ssl.SSLContext | bool, timeout: float = 60.0) -> None:
        self.server = server.rstrip("/")
        self._http = httpx.Client(
            base_url=self.server, verify=verify, timeout=timeout, headers={"Authorization": f"Bearer {token}"}
        )
        self._discovery: dict[str, list[Obj]] = {}

    @classmethod
    def from_kubeconfig(cls, path: Path | str, context: str | None = None) -> KubeClient:
        """Token + CA kubeconfigs only (what tkf-kube-apiserver writes); others raise ValueError."""
        config = yaml.safe_load(Path(path).read_text())
        ctx = _kubeconfig_entry(config.get("contexts", []), context or config["current-context"], "context")
        cluster = _kubeconfig_entry(config.get("clusters", []), ctx["cluster"], "cluster")
        user = _kubeconfig_entry(config.get("users", []), ctx["user"], "user")
        if "token" not in user:
            raise ValueError(f"{path}: only bearer-token users are supported (user {ctx['user']!r})")
        verify: ssl.SSLContext | bool
        if cluster.get("insecure-skip-tls-verify"):
            verify = False
        elif "certificate-authority-data" in cluster:
            verify = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        elif "certificate-authority" in cluster:
            verify = ssl.create_default_context(cafile=cluster["certificate-authority"])
        else:
            verify = True
        return cls(cluster["server"], user["token"], verify)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, **kwargs: Any) -> Obj:
        """Send a request; return the decoded JSON body, raise KubeAPIError on non-2xx."""
        response = self._http.request(method, path, **kwargs)
        if not response.is_success:
            raise KubeAPIError(method, path, response)
        result: Obj = response.json() if response.content else {}
        return result

    def text(self, path: str) -> str:
        """GET a non-JSON endpoint such as /readyz or /livez?verbose."""
        response = self._http.get(path)
        if not response.is_success:
            raise KubeAPIError("GET", path, response)
        return response.text

    # -- discovery ---------------------------------------------------------------------------------

    def _resources(self, api_version: str, refresh: bool = False) -> list[Obj]:
        """Discovery of one API version (cached); an unknown version has no resources."""
        if refresh or api_version not in self._discovery:
            path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            try:
                self._discovery[api_version] = self.request("GET", path).get("resources", [])
            except KubeAPIError as e:
                if e.status_code != 404:
                    raise
                self._discovery[api_version] = []
        return self._discovery[api_version]

    def resource(self, api_version: str, kind: str) -> Resource:
        """Resolve a kind through discovery; re-asks once on a miss (a CRD may have just appeared)."""
        for refresh in (False, True):
            for r in self._resources(api_version, refresh):
                if r.get("kind") == kind and "/" not in r["name"]:  # skip subresources like pods/status
                    return Resource(api_version, kind, r["name"], bool(r["namespaced"]))
        raise LookupError(f"the server does not serve {kind} in {api_version}")

    # -- objects -----------------------------------------------------------------------------------

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        """The object, or None if it does not exist."""
        try:
            return self.request("GET", self.resource(api_version, kind).path(namespace, name))
        except KubeAPIError as e:
            if e.status_code == 404:
                return None
            raise

    def list_objects(
        self, api_version: str, kind: str, namespace: str | None = None, label_selector: str | None = None
    ) -> list[Obj]:
        """Objects of a kind in a namespace (or in all namespaces / cluster-scoped when None)."""
        params = {"labelSelector": label_selector} if label_selector else {}
        items: list[Obj] = self.request("GET", self.resource(api_version, kind).path(namespace), params=params)["items"]
        return items

    def all_objects(self, namespace: str, skip_kinds: frozenset[str] = frozenset({"Event"})) -> dict[str, list[Obj]]:
        """Every object in a namespace, keyed "apiVersion/Kind" (preferred versions; empty kinds left
        out) — to read back what `pulumi up` created without knowing the kinds in advance."""
        groups = self.request("GET", "/apis").get("groups", [])
        found: dict[str, list[Obj]] = {}
        for api_version in ["v1"] + [g["preferredVersion"]["groupVersion"] for g in groups]:
            for r in self._resources(api_version, refresh=True):  # CRDs may have appeared since
                if "/" in r["name"] or not r.get("namespaced") or "list" not in r.get("verbs", []):
                    continue
                if r["kind"] not in skip_kinds and (items := self.list_objects(api_version, r["kind"], namespace)):
                    found[f"{api_version}/{r['kind']}"] = items
        return found

    def apply(self, obj: Obj, field_manager: str = "tkf-tests", force: bool = True) -> Obj:
        """Server-side apply (what `kubectl apply --server-side` and the Pulumi provider do)."""
        meta = obj["metadata"]
        path = self.resource(obj["apiVersion"], obj["kind"]).path(meta.get("namespace"), meta["name"])
        params = {"fieldManager": field_manager, "force": "true" if force else "false"}
        return self.request(
            "PATCH", path, params=params, json=obj, headers={"Content-Type": "application/apply-patch+yaml"}
        )

    def create(self, obj: Obj) -> Obj:
        meta = obj["metadata"]
        return self.request("POST", self.resource(obj["apiVersion"], obj["kind"]).path(meta.get("namespace")), json=obj)

    def delete(
        self, api_version: str, kind: str, name: str, namespace: str | None = None, propagation: str = "Background"
    ) -> None:
        """Delete; a missing object is not an error. Foreground propagation needs the GC controller."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        try:
            self.request("DELETE", self.resource(api_version, kind).path(namespace, name), json=body)
        except KubeAPIError as e:
            if e.status_code != 404:
                raise

    # -- waiting -----------------------------------------------------------------------------------

    @staticmethod
    def wait_for(check: Callable[[], bool], what: str, timeout: float = 60.0, interval: float = 0.2) -> float:
        """Poll until check() is true; return the seconds it took, raise TimeoutError naming `what`."""
        start = time.monotonic()
        while not check():
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(interval)
        return time.monotonic() - start

    def wait_condition(
        self,
        api_version: str,
        kind: str,
        name: str,
        condition: str,
        namespace: str | None = None,
        timeout: float = 60.0,
    ) -> Obj:
        """Wait for status.conditions[type=condition].status == "True"; return the object."""
        found: Obj = {}

        def check() -> bool:
            obj = self.get(api_version, kind, name, namespace)
            conditions = ((obj or {}).get("status") or {}).get("conditions") or []
            if any(c.get("type") == condition and c.get("status") == "True" for c in conditions):
                found.update(obj or {})
                return True
            return False

        self.wait_for(check, f"{kind} {name} {condition}", timeout)
        return found

    def wait_crd_served(self, crd: Obj, timeout: float = 60.0) -> tuple[str, str]:
        """Wait until a CRD is Established *and* discovery lists its kind; return (apiVersion, kind) of
        its first version. The two are set by two controllers of the server: a kind can be Established
        for a moment before /apis/<group>/<version> lists it (seen on a quiet machine, every time, with
        KServe's CRDs)."""
        spec = crd["spec"]
        api_version, kind = f"{spec['group']}/{spec['versions'][0]['name']}", spec["names"]["kind"]
        self.wait_condition("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd["metadata"]["name"],
                            "Established", timeout=timeout)

        def listed() -> bool:
            try:
                self.resource(api_version, kind)  # re-asks discovery on a miss
            except LookupError:
                return False
            return True

        self.wait_for(listed, f"{kind} in {api_version} to be listed by discovery", timeout)
        return api_version, kind

    def wait_gone(
        self, api_version: str, kind: str, name: str, namespace: str | None = None, timeout: float = 60.0
    ) -> float:
        return self.wait_for(
            lambda: self.get(api_version, kind, name, namespace) is None, f"{kind} {name} to be deleted", timeout
        )
