"""WeightCache: one PVC and one download Job per distinct ``repo@revision``.

Why a cache of our own: downloading hundreds of GiB from the Hub on every pod start makes
restarts slow and ties serving to the Hub being up. The Job downloads the pinned revision once;
every catalog entry that serves the same weights mounts the same PVC read-only (two entries → one
PVC, one Job).

Why ``up`` waits for the Job (``serving.awaitWeightDownload``, on by default against a cluster): a
download that fails for good (revision gone, token revoked) must fail *its* models, by name and with
the Job's reason, and nothing else. Awaited, the Job's failure is an engine error on the Job, and the
CLI attributes it to every model this cache serves (``consumers``, registered as the component's
``models`` output). The wait is bounded by the checkpoint size (`download_timeout_seconds`). Serving
pods wait for the Job's marker file with an init container, so a model's workload can be created
while its weights download, and a failed download leaves it waiting, never half-started (the
workload depends on the PVC, not the Job: see `components.fleet`). A failed Job is replaced by the
next ``up`` (``replaceUnready``), so fixing the cause and running ``up`` again retries the download,
which resumes.

Removing a model keeps its PVC (``retain_on_delete``) unless ``serving.pruneWeightCache`` is set:
re-adding the model, or rolling back, must not cost another download. ``serving.protect`` (prod)
also protects it from ``pulumi destroy``.

Why the claim's access mode never changes (`tkf_infra.plan.cache_modes` has the rule): the Kubernetes provider
replaces a claim whose ``spec.accessModes`` change (pulumi-kubernetes ``provider/pkg/provider/diff.go``), and a
replaced cache fails ``up`` under ``protect``, collides with its retained self, or is downloaded again under
``pruneWeightCache``. The plan writes the mode the claim already has, and the engine is told to ignore the field
on an existing claim (``ignore_changes``) so that a mode the plan could not know (no live read, nothing
published) still plans no replace; a new claim is created with the plan's mode.

Why a claim keeps its class too: ``spec.storageClassName`` is force-new in the same table, so a change of
``serving.storageClass`` would replace every cache at once. The engine ignores it on an existing claim, new
caches get the new class, and preview names each cache left behind and how to move it
(`tkf_infra.plan.storage_room.classes_kept`, in kubeconfig mode where the live claims are read).
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components import pod_meta, pod_sizes
from components.pod import Placement, container_security, pinned_to, pod_security, secret_env
from tkf_infra import names
from tkf_infra.plan.cache_modes import RWO
from tkf_infra.sizing.params import GIB

meta = k8s.meta.v1
core = k8s.core.v1

#: Smallest PVC we ask for: several CSI drivers refuse tiny volumes, and tokenizer-only repos exist.
MIN_PVC_GIB = 10
#: Pod retries of the download Job: transient failures retry (the download resumes), a permanent one
#: ends as the Job condition Failed/BackoffLimitExceeded, which the engine reports.
BACKOFF_LIMIT = 6
#: The job controller's back-off between failed pods: 10 s, doubling, capped at 10 min
#: (kubernetes v1.36.3 pkg/controller/job/job_controller.go:77-79, DefaultJobPodFailureBackOff and
#: MaxJobPodFailureBackOff).
_POD_FAILURE_BACKOFF_S, _MAX_POD_FAILURE_BACKOFF_S = 10, 600
#: Scheduling, image pull and volume attach before the first byte, for the download's time bound.
DOWNLOAD_START_SECONDS = 600
#: What the download pod requests; the plan reserves it on the node the Job is pinned to (tkf_infra/plan/pins.py).
DOWNLOAD_CPU_MILLIS, DOWNLOAD_MEMORY_MIB = 1000, 2048
#: The claim's fields the engine keeps as they are on an existing claim (`ignore_changes`; module docstring).
ACCESS_MODES_PATH = "spec.accessModes"
STORAGE_CLASS_PATH = "spec.storageClassName"


@dataclass(frozen=True)
class WeightCacheArgs:
    repo: str
    revision: str
    weight_bytes: int
    """Tensor bytes of the checkpoint (lock); the PVC is this × headroom, rounded up to GiB."""
    namespace: str
    image: str
    """Image with the Hugging Face CLI; the serving image, so no extra image has to be mirrored."""
    headroom: float = 1.25
    storage_class: str | None = None
    hf_token_secret: str | None = None
    """Secret (key ``HF_TOKEN``) for gated repos; only the download Job sees it."""
    access_mode: str = RWO
    """The claim's access mode, decided by the plan (`tkf_infra.plan.cache_modes`): an existing claim's own, a
    class several nodes mount ReadWriteMany, else by its readers; see the module docstring for why it never flips."""
    consumers: tuple[str, ...] = field(default_factory=tuple)
    """Catalog names served from these weights: the annotation ``tkf.io/models`` and the component's
    ``models`` output, through which the CLI reports a failed download for each of them."""
    prune: bool = False
    protect: bool = False
    skip_await: bool = False
    """No controllers run on the target (test API servers): do not wait for the PVC to bind."""
    await_download: bool = False
    """Wait for the download Job in ``up`` (see the module docstring)."""
    adapters: tuple[tuple[str, str], ...] = ()
    """LoRA adapters (repo, revision) of the models served from these weights, downloaded beside them."""
    placement: Placement = field(default_factory=Placement)
    """The node selector and tolerations of its readers' pool: a GPU-only pool's taint must not keep the Job off."""
    node: str | None = None
    """The node the plan reserved the Job's room on, beside its first reader (`tkf_infra.plan.pins`): a volume
    that binds where its first consumer runs (node-local storage) then lives where the server runs."""


def pvc_size_gib(weight_bytes: int, headroom: float) -> int:
    return max(MIN_PVC_GIB, math.ceil(weight_bytes * headroom / GIB))


def download_timeout_seconds(weight_bytes: int) -> int:
    """How long ``up`` waits for a download: the checkpoint at half the assumed Hub throughput, the
    job controller's back-off between all retries, and the time to start the first pod."""
    backoff = sum(min(_POD_FAILURE_BACKOFF_S * 2**i, _MAX_POD_FAILURE_BACKOFF_S) for i in range(BACKOFF_LIMIT))
    download = math.ceil(2 * weight_bytes / int(pod_sizes.HUB_DOWNLOAD_BYTES_PER_SECOND))
    return int(download + backoff + DOWNLOAD_START_SECONDS)


def adapter_marker(revision: str, adapter_repo: str, adapter_revision: str) -> str:
    """The marker of one LoRA adapter's complete download, inside its base's revision directory."""
    adapter = names.adapter_dir(adapter_repo, adapter_revision)
    return f"{pod_meta.CACHE_MOUNT}/{revision}/{adapter}/{pod_meta.MARKER_FILE}"


def download_script(repo: str, revision: str, adapters: tuple[tuple[str, str], ...] = ()) -> str:
    """Idempotent: a completed revision has its marker and is skipped; partial downloads resume.

    With LoRA adapters (repo, revision), each is downloaded after the base into the base's directory
    (`names.adapter_dir`), with a marker of its own: adding or removing an adapter changes this script,
    so the Job runs again, finds the base's marker and the kept adapters' markers, and downloads only
    the new adapter — never the base again. Without adapters the script is the one it always was, so
    stacks without LoRA see no change to their Jobs."""
    dest = f"{pod_meta.CACHE_MOUNT}/{revision}"
    marker = f"{dest}/{pod_meta.MARKER_FILE}"
    q = shlex.quote
    if adapters:
        lines = ["set -eu",
                 "if command -v hf >/dev/null 2>&1; then CLI='hf download'; else CLI='huggingface-cli download'; fi",
                 f"if [ -f {q(marker)} ]; then echo 'already downloaded: {repo}@{revision}'; else",
                 f"  mkdir -p {q(dest)}",
                 f"  $CLI {q(repo)} --revision {q(revision)} --local-dir {q(dest)}",
                 f"  echo {q(f'{repo}@{revision}')} > {q(marker)}",
                 "fi"]
        for a_repo, a_rev in adapters:
            a_marker = adapter_marker(revision, a_repo, a_rev)
            a_dest = a_marker.rsplit("/", 1)[0]
            lines += [f"if [ -f {q(a_marker)} ]; then echo 'already downloaded: {a_repo}@{a_rev}'; else",
                      f"  mkdir -p {q(a_dest)}",
                      f"  $CLI {q(a_repo)} --revision {q(a_rev)} --local-dir {q(a_dest)}",
                      f"  echo {q(f'{a_repo}@{a_rev}')} > {q(a_marker)}",
                      "fi"]
        return "\n".join(lines)
    return "\n".join([
        "set -eu",
        f"if [ -f {q(marker)} ]; then echo 'already downloaded: {repo}@{revision}'; exit 0; fi",
        f"mkdir -p {q(dest)}",
        # `hf` replaced `huggingface-cli` in huggingface_hub 0.34; images carry one or the other.
        "if command -v hf >/dev/null 2>&1; then CLI='hf download'; else CLI='huggingface-cli download'; fi",
        f"$CLI {q(repo)} --revision {q(revision)} --local-dir {q(dest)}",
        f"echo {q(f'{repo}@{revision}')} > {q(marker)}",
    ])


class WeightCache(pulumi.ComponentResource):
    """PVC + download Job of one ``repo@revision``; see the module docstring for why."""

    pvc_name: str
    subpath: str
    """Directory of the revision inside the PVC (``pvc://<pvc>/<subpath>``)."""
    pvc: core.PersistentVolumeClaim
    job: k8s.batch.v1.Job

    def __init__(self, name: str, args: WeightCacheArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(names.WEIGHT_CACHE_TYPE, name, None, opts)
        self.pvc_name = names.weight_cache(args.repo, args.revision)
        self.subpath = args.revision
        job_name = names.weight_download_job(args.repo, args.revision)
        lbl = {
            names.NAME_LABEL: names.WEIGHT_CACHE_COMPONENT,
            names.INSTANCE_LABEL: self.pvc_name,
            names.COMPONENT_LABEL: names.WEIGHT_CACHE_COMPONENT,
            names.PART_OF_LABEL: names.PART_OF,
            names.MANAGED_BY_LABEL: names.MANAGED_BY,
            names.REVISION_KEY: args.revision[:12],
        }
        ann = {names.REPO_ANNOTATION: args.repo, names.REVISION_KEY: args.revision,
               names.CACHE_MODELS_ANNOTATION: ",".join(args.consumers)}
        # Test API servers run no controllers: the PVC would never bind.
        pvc_ann = {**ann, "pulumi.com/skipAwait": "true"} if args.skip_await else ann
        size = pvc_size_gib(args.weight_bytes, args.headroom)
        self.pvc = core.PersistentVolumeClaim(
            f"{name}-pvc",
            metadata=meta.ObjectMetaArgs(name=self.pvc_name, namespace=args.namespace, labels=lbl,
                                         annotations=pvc_ann),
            spec=core.PersistentVolumeClaimSpecArgs(
                access_modes=[args.access_mode],
                resources=core.VolumeResourceRequirementsArgs(requests={"storage": f"{size}Gi"}),
                storage_class_name=args.storage_class,
            ),
            opts=pulumi.ResourceOptions(parent=self, retain_on_delete=not args.prune, protect=args.protect,
                                        ignore_changes=[ACCESS_MODES_PATH, STORAGE_CLASS_PATH]),
        )
        env = [core.EnvVarArgs(name="HOME", value="/tmp"), core.EnvVarArgs(name="HF_HUB_DISABLE_TELEMETRY", value="1")]
        if args.hf_token_secret:
            env.append(secret_env("HF_TOKEN", args.hf_token_secret, "HF_TOKEN"))
        job_ann = dict(ann)
        if args.await_download:
            job_ann[names.TIMEOUT_ANNOTATION] = str(download_timeout_seconds(args.weight_bytes))
            # A Job that failed (or never finished) is replaced by the next `up`: the retry after a fix.
            job_ann["pulumi.com/replaceUnready"] = "true"
        else:
            job_ann["pulumi.com/skipAwait"] = "true"
        self.job = k8s.batch.v1.Job(
            f"{name}-download",
            metadata=meta.ObjectMetaArgs(name=job_name, namespace=args.namespace, labels=lbl, annotations=job_ann),
            spec=k8s.batch.v1.JobSpecArgs(
                backoff_limit=BACKOFF_LIMIT,
                template=core.PodTemplateSpecArgs(
                    metadata=meta.ObjectMetaArgs(labels=lbl),
                    spec=core.PodSpecArgs(
                        restart_policy="Never",
                        automount_service_account_token=False,
                        node_selector=dict(args.placement.node_selector) or None,
                        tolerations=[core.TolerationArgs(**t) for t in args.placement.tolerations] or None,
                        affinity=pinned_to((args.node,)) if args.node else None,
                        security_context=pod_security(),
                        containers=[core.ContainerArgs(
                            name="download",
                            image=args.image,
                            command=["/bin/sh", "-c", download_script(args.repo, args.revision, args.adapters)],
                            env=env,
                            resources=core.ResourceRequirementsArgs(requests={"cpu": f"{DOWNLOAD_CPU_MILLIS}m",
                                                                              "memory": f"{DOWNLOAD_MEMORY_MIB}Mi"},
                                                                    limits={"memory": "4Gi"}),
                            security_context=container_security(),
                            volume_mounts=[core.VolumeMountArgs(name="weight-cache", mount_path=pod_meta.CACHE_MOUNT),
                                           core.VolumeMountArgs(name="tmp", mount_path="/tmp")],
                        )],
                        volumes=[core.VolumeArgs(name="weight-cache", persistent_volume_claim=(
                                     core.PersistentVolumeClaimVolumeSourceArgs(claim_name=self.pvc_name))),
                                 core.VolumeArgs(name="tmp", empty_dir=core.EmptyDirVolumeSourceArgs())],
                    ),
                ),
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.pvc], delete_before_replace=True),
        )
        self.register_outputs({"pvcName": self.pvc_name, "subpath": self.subpath, "sizeGiB": size,
                               names.WEIGHT_CACHE_MODELS_OUTPUT: list(args.consumers)})
