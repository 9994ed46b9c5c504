"""The cluster's own word on room: Nodes (less their DaemonSet pods), storage (CSIStorageCapacity, ResourceQuota,
PVCs with their size and access modes, StorageClass provisioners), served APIs, and whether the namespaces of
pieces already installed that the program writes into exist.

Why a reader of our own over httpx (already a pin) instead of the `kubernetes` client: a few GET
requests need no generated client, and the kubeconfig forms a preview meets (bearer token or token
file, client certificate, an `exec` credential plugin such as `aws eks get-token`, a CA or
insecure-skip-tls-verify) are a few lines each. Everything read is turned into plain data
(`tkf_infra.plan.admission.ClusterState`); whatever could not be read is carried as that part's
error, which the plan turns into a named warning — never a silent pass, never a traceback.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import yaml

from tkf_infra.config.quantity import GIB, mebibytes, millicores, parse_quantity
from tkf_infra.plan.admission import ClusterState, LiveNode, LivePvc, QuotaLimit, StorageCapacity

TIMEOUT_S = 10.0
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"


class KubeconfigError(ValueError):
    """A kubeconfig that cannot give a connection; the message names the file, the part and the fix."""


def _entry(items: Any, name: str, what: str, path: str) -> dict[str, Any]:
    for item in items or []:
        if isinstance(item, Mapping) and item.get("name") == name:
            return dict(item.get(what) or {})
    raise KubeconfigError(f"{path} has no {what} named {name!r}")


def _file(data_b64: str, tmp: list[str]) -> str:
    fd, name = tempfile.mkstemp(prefix="tkf-kube-")
    with os.fdopen(fd, "wb") as f:
        f.write(base64.b64decode(data_b64))
    tmp.append(name)
    return name


def _exec_credential(spec: Mapping[str, Any], path: str) -> dict[str, Any]:
    cmd = [str(spec.get("command", ""))] + [str(a) for a in spec.get("args") or []]
    env = {**os.environ, **{str(e["name"]): str(e["value"]) for e in spec.get("env") or [] if "name" in e}}
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, check=True)
        status: dict[str, Any] = json.loads(done.stdout).get("status") or {}
    except (OSError, subprocess.SubprocessError, json.JSONDecodeError, AttributeError) as exc:
        raise KubeconfigError(f"{path}: the exec credential plugin {cmd[0]!r} failed ({exc})") from None
    return status


def client_from_kubeconfig(kubeconfig: str, context: str | None) -> httpx.Client:
    """An httpx client on the kubeconfig's cluster and user (KubeconfigError when it cannot be made)."""
    try:
        path = Path(kubeconfig).expanduser()
        config = yaml.safe_load(path.read_text()) or {}
    except (OSError, RuntimeError, yaml.YAMLError) as exc:
        raise KubeconfigError(f"cluster.kubeconfig {kubeconfig!r} cannot be read ({exc})") from None
    if not isinstance(config, Mapping):
        raise KubeconfigError(f"{kubeconfig} is not a kubeconfig (not a mapping)")
    name = context or config.get("current-context") or ""
    ctx = _entry(config.get("contexts"), name, "context", kubeconfig)
    cluster = _entry(config.get("clusters"), ctx.get("cluster", ""), "cluster", kubeconfig)
    user = _entry(config.get("users"), ctx.get("user", ""), "user", kubeconfig) if ctx.get("user") else {}
    tmp: list[str] = []
    try:
        if cluster.get("insecure-skip-tls-verify"):
            verify: ssl.SSLContext | bool = False
        elif "certificate-authority-data" in cluster:
            verify = ssl.create_default_context(
                cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        elif "certificate-authority" in cluster:
            verify = ssl.create_default_context(cafile=str(cluster["certificate-authority"]))
        else:
            verify = ssl.create_default_context()
        if user.get("exec"):
            status = _exec_credential(user["exec"], kubeconfig)
            user = {**user, "token": status.get("token")} if status.get("token") else {
                **user, "client-certificate-data": base64.b64encode(
                    str(status.get("clientCertificateData", "")).encode()).decode(),
                "client-key-data": base64.b64encode(str(status.get("clientKeyData", "")).encode()).decode()}
        headers = {}
        token = user.get("token") or (Path(user["tokenFile"]).read_text().strip() if user.get("tokenFile") else None)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        cert = user.get("client-certificate") or (_file(user["client-certificate-data"], tmp)
                                                  if user.get("client-certificate-data") else None)
        key = user.get("client-key") or (_file(user["client-key-data"], tmp) if user.get("client-key-data") else None)
        if cert and key:
            if verify is False:
                verify = ssl.create_default_context()
                verify.check_hostname = False
                verify.verify_mode = ssl.CERT_NONE
            assert isinstance(verify, ssl.SSLContext)
            verify.load_cert_chain(str(cert), str(key))
        server = str(cluster.get("server") or "")
        if not server:
            raise KubeconfigError(f"{kubeconfig}: cluster {ctx.get('cluster')!r} has no server")
        return httpx.Client(base_url=server.rstrip("/"), verify=verify, headers=headers, timeout=TIMEOUT_S)
    except (OSError, ssl.SSLError, ValueError, KeyError) as exc:
        if isinstance(exc, KubeconfigError):
            raise
        raise KubeconfigError(f"{kubeconfig}: cannot set up a connection from it ({exc})") from None
    finally:
        for name in tmp:
            Path(name).unlink(missing_ok=True)


class Unreachable(ValueError):
    """The server did not answer at all (so the other reads are not tried: each would wait its timeout)."""


def _get(client: httpx.Client, path: str, *, absent_ok: bool = False) -> dict[str, Any]:
    """GET a path; ValueError with what went wrong (network, HTTP status and the server's message).
    With `absent_ok`, a 404 answers {} (the object does not exist: an answer, not a failure)."""
    try:
        response = client.get(path)
    except httpx.HTTPError as exc:
        raise Unreachable(f"GET {path} did not answer ({type(exc).__name__}: {exc})") from None
    if absent_ok and response.status_code == 404:
        return {}
    if not response.is_success:
        try:
            message = response.json().get("message", response.text)
        except ValueError:
            message = response.text
        hint = "; the credentials need get/list on it (RBAC)" if response.status_code in (401, 403) else ""
        raise ValueError(f"GET {path} answered HTTP {response.status_code}: {message[:300]}{hint}")
    body: dict[str, Any] = response.json()
    return body


def _gib(value: Any) -> float | None:
    return float(parse_quantity(value)) / GIB if value is not None else None


def live_node(item: Mapping[str, Any]) -> LiveNode:
    """A Node object as the plan and `status` use it: Ready from its condition, cordoned from spec.unschedulable."""
    meta, spec, status = item.get("metadata") or {}, item.get("spec") or {}, item.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    return LiveNode(str(meta.get("name", "")), dict(meta.get("labels") or {}),
                    tuple(dict(t) for t in spec.get("taints") or []),
                    dict(status["allocatable"]) if status.get("allocatable") else None, ready,
                    bool(spec.get("unschedulable")))


def pod_requests(pod: Mapping[str, Any]) -> tuple[int, int]:
    """(CPU millicores, memory MiB) the scheduler counts for a pod: the larger of its containers' sum and each
    init container, plus its overhead (kubernetes pkg/api/v1/resource PodRequests)."""
    spec = pod.get("spec") or {}

    def of(c: Mapping[str, Any]) -> tuple[int, int]:
        r = (c.get("resources") or {}).get("requests") or {}
        return millicores(r.get("cpu", 0)), mebibytes(r.get("memory", 0))

    main = [of(c) for c in spec.get("containers") or []]
    init = [of(c) for c in spec.get("initContainers") or []]
    extra = spec.get("overhead") or {}
    return (max(sum(c for c, _ in main), max((c for c, _ in init), default=0)) + millicores(extra.get("cpu", 0)),
            max(sum(m for _, m in main), max((m for _, m in init), default=0)) + mebibytes(extra.get("memory", 0)))


def daemon_pods(client: httpx.Client) -> dict[str, tuple[int, int, int]]:
    """Node → (CPU millicores, memory MiB, pods) of the DaemonSet pods bound to it and not finished: room the
    serving pods never get (the GPU Operator's, the CNI's, the CSI node plugins', kube-proxy)."""
    path = "/api/v1/pods?fieldSelector=status.phase!%3DSucceeded,status.phase!%3DFailed"
    out: dict[str, tuple[int, int, int]] = {}
    for pod in _get(client, path).get("items") or []:
        owners = (pod.get("metadata") or {}).get("ownerReferences") or []
        where = (pod.get("spec") or {}).get("nodeName")
        if where and any(o.get("kind") == "DaemonSet" for o in owners):
            cpu, mem = pod_requests(pod)
            c, m, n = out.get(where, (0, 0, 0))
            out[where] = (c + cpu, m + mem, n + 1)
    return out


def read_cluster(client: httpx.Client, source: str, namespace: str, present: Sequence[str] = ()) -> ClusterState:
    """Nodes, storage and served APIs, and whether each namespace in `present` exists (those of pieces already
    installed that the program writes into: `tkf_infra.plan.piece_namespaces`); each part that fails carries
    its error (never raises)."""
    nodes: tuple[LiveNode, ...] | None = None
    nodes_error = storage_error = api_error = None
    try:
        nodes = tuple(live_node(i) for i in _get(client, "/api/v1/nodes").get("items") or [])
    except Unreachable as exc:
        why = f"{exc}; check the network and cluster.kubeconfig"
        return ClusterState(source, None, why, f"the storage objects of {source} could not be read ({why})",
                            api_error=why, namespaces_error=why if present else None)
    except ValueError as exc:
        nodes_error = str(exc)
    daemons_error = None
    if nodes is not None:
        try:
            daemons = daemon_pods(client)
            nodes = tuple(replace(n, daemons=daemons.get(n.name, (0, 0, 0))) for n in nodes)
        except ValueError as exc:
            daemons_error = str(exc)
    default_class, caps, quotas, pvcs, provisioners = None, [], [], {}, {}
    try:
        for sc in _get(client, "/apis/storage.k8s.io/v1/storageclasses").get("items") or []:
            meta = sc.get("metadata") or {}
            provisioners[str(meta.get("name"))] = str(sc.get("provisioner", ""))
            if (meta.get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION) == "true":
                default_class = str(meta.get("name"))
        for c in _get(client, "/apis/storage.k8s.io/v1/csistoragecapacities").get("items") or []:
            caps.append(StorageCapacity(str(c.get("storageClassName", "")), _gib(c.get("capacity")),
                                        _gib(c.get("maximumVolumeSize"))))
        for q in _get(client, f"/api/v1/namespaces/{namespace}/resourcequotas").get("items") or []:
            hard, used = (q.get("status") or {}).get("hard") or (q.get("spec") or {}).get("hard") or {}, (
                (q.get("status") or {}).get("used") or {})
            for resource, value in hard.items():
                if resource.endswith("requests.storage"):
                    quotas.append(QuotaLimit(str((q.get("metadata") or {}).get("name")), resource,
                                             _gib(value) or 0.0, _gib(used.get(resource, 0)) or 0.0))
        for p in _get(client, f"/api/v1/namespaces/{namespace}/persistentvolumeclaims").get("items") or []:
            spec, status = p.get("spec") or {}, p.get("status") or {}
            request = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
            bound = status.get("phase") == "Bound"
            size = (status.get("capacity") or {}).get("storage") if bound else None
            name = str((p.get("metadata") or {}).get("name"))
            pvcs[name] = LivePvc(name, _gib(size or request) or 0.0, bound, spec.get("storageClassName"),
                                 tuple(str(m) for m in spec.get("accessModes") or ()))
    except ValueError as exc:
        storage_error = f"the storage objects of {source} could not be read ({exc})"
    api_versions: frozenset[str] | None = None
    try:
        groups = _get(client, "/apis").get("groups") or []
        api_versions = frozenset({"v1"} | {str(v.get("groupVersion")) for g in groups for v in g.get("versions") or []})
    except ValueError as exc:
        api_error = str(exc)
    namespaces: dict[str, bool] = {}
    namespaces_error = None
    try:
        namespaces = {ns: bool(_get(client, f"/api/v1/namespaces/{ns}", absent_ok=True)) for ns in present}
    except ValueError as exc:
        namespaces_error = str(exc)
    return ClusterState(source, nodes, nodes_error, storage_error, default_class, provisioners, tuple(caps),
                        tuple(quotas), pvcs, api_versions, api_error, daemons_error, namespaces, namespaces_error)


def cluster_state(kubeconfig: str, context: str | None, namespace: str, present: Sequence[str] = ()) -> ClusterState:
    """What the stack's cluster says (`present`: namespaces whose existence to read, `read_cluster`); a
    kubeconfig that cannot connect makes every part unreadable."""
    source = f"the cluster of {kubeconfig}" + (f" (context {context})" if context else "")
    try:
        client = client_from_kubeconfig(kubeconfig, context)
    except KubeconfigError as exc:
        why = f"{exc}; fix cluster.kubeconfig / cluster.context"
        return ClusterState(source, None, why, f"the storage objects of {source} could not be read ({why})",
                            api_error=why, namespaces_error=why if present else None)
    with client:
        return read_cluster(client, source, namespace, present)
