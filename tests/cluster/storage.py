"""Storage for the cluster tier: two StorageClasses with the binding modes real ones use, and the
provisioner behind them, run by the harness.

No real provisioner builds and runs here (local-path-provisioner and the CSI drivers need a kubelet that
mounts), so :class:`Provisioner` does what an external provisioner does, through the API only:

- ``LOCAL_CLASS`` (``volumeBindingMode: WaitForFirstConsumer``) stands in for local-path-provisioner:
  a claim is provisioned only once the scheduler has picked a node for its first pod (it writes
  ``volume.kubernetes.io/selected-node`` on the claim), as a ``local`` volume whose node affinity is that
  node — so every later pod of that claim is scheduled there, and only there;
- ``SHARED_CLASS`` (``Immediate``) stands in for a shared filesystem (EFS, NFS): provisioned at once,
  no node affinity, any access mode.

The persistent-volume binder (kube-controller-manager) marks each claim of these classes for this
provisioner (``volume.kubernetes.io/storage-provisioner``) and binds claim and volume; a released volume
(its claim deleted; reclaim policy Delete) is deleted here, as a provisioner does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.cluster.sync_loop import SyncLoop
from tests.kube.client import KubeAPIError, KubeClient, Obj

PROVISIONER = "tkf.test/local-path"
LOCAL_CLASS = "tkf-local"
SHARED_CLASS = "tkf-shared"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"


def storage_classes() -> list[Obj]:
    return [{
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": name}, "provisioner": PROVISIONER, "reclaimPolicy": "Delete",
        "volumeBindingMode": mode,
    } for name, mode in ((LOCAL_CLASS, "WaitForFirstConsumer"), (SHARED_CLASS, "Immediate"))]


def install_storage_classes(kube: KubeClient) -> None:
    for sc in storage_classes():
        kube.apply(sc)


def volume_for(claim: Obj, node: str | None) -> Obj:
    """The PersistentVolume a provisioner makes for ``claim``: node-local on ``node``, or shared."""
    meta, spec = claim["metadata"], claim["spec"]
    name = f"pvc-{meta['uid']}"
    source: dict[str, Any] = {"hostPath": {"path": f"/srv/tkf-shared/{name}", "type": "DirectoryOrCreate"}}
    pv_spec: dict[str, Any] = {
        "capacity": {"storage": spec["resources"]["requests"]["storage"]},
        "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
        "persistentVolumeReclaimPolicy": "Delete",
        "storageClassName": spec["storageClassName"],
        "volumeMode": spec.get("volumeMode", "Filesystem"),
        "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": meta["namespace"],
                     "name": meta["name"], "uid": meta["uid"]},
    }
    if node is not None:
        source = {"local": {"path": f"/var/lib/tkf-local/{name}"}}
        pv_spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}
    return {"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": name, "annotations": {PROVISIONED_BY: PROVISIONER}},
            "spec": {**pv_spec, **source}}


class Provisioner(SyncLoop):
    """Every half second: a volume for each pending claim of the tier's classes that is ready for one
    (module doc), and released volumes deleted. Errors stop the loop and are kept in ``error``;
    ``provisioned`` records claim → node ("" for shared) for tests to read."""

    def __init__(self, kubeconfig: Path, interval: float = 0.5) -> None:
        self.provisioned: dict[str, str] = {}
        super().__init__(kubeconfig, interval, "provisioner")

    def sync(self, kube: KubeClient) -> None:
        modes = {LOCAL_CLASS: True, SHARED_CLASS: False}
        for claim in kube.list_objects("v1", "PersistentVolumeClaim"):
            meta, spec = claim["metadata"], claim["spec"]
            local = modes.get(spec.get("storageClassName") or "")
            annotations = meta.get("annotations") or {}
            if local is None or spec.get("volumeName") or meta.get("deletionTimestamp"):
                continue
            if annotations.get(STORAGE_PROVISIONER) != PROVISIONER:
                continue  # the binder has not handed it to a provisioner yet
            node = annotations.get(SELECTED_NODE)
            if local and not node:
                continue  # waiting for its first consumer
            try:
                kube.create(volume_for(claim, node if local else None))
            except KubeAPIError as exc:
                if exc.status_code != 409:  # made on an earlier pass, not bound yet
                    raise
            self.provisioned[f"{meta['namespace']}/{meta['name']}"] = (node or "") if local else ""
        for pv in kube.list_objects("v1", "PersistentVolume"):
            ours = (pv["metadata"].get("annotations") or {}).get(PROVISIONED_BY) == PROVISIONER
            if ours and (pv.get("status") or {}).get("phase") == "Released":
                kube.delete("v1", "PersistentVolume", pv["metadata"]["name"])
