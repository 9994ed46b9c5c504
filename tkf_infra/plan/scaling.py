"""What an autoscaled model needs beyond room for its maximum: an autoscaler that can read its signal.

Why in the plan: the room itself is checked where every replica is (admission, the MIG layout, the
time-slicing proof, each at `ModelEntry.reserved_replicas`, the autoscaler's maximum: failing closed,
so a busy hour never ends in Pending pods). This module adds the refusals that need the stack's
settings and the cluster's APIs, so a model whose autoscaler could not work is left out by name at
preview rather than sitting at its minimum for ever (docs/scaling.md):

- both backends scale through KEDA (`keda.sh/v1alpha1` ScaledObject, Prometheus trigger): on `vllm`
  we render the ScaledObject on the Deployment; on `kserve`, KServe v0.20.0 renders one from
  `spec.scaling.wva.keda` (pkg/controller/v1alpha2/llmisvc/scaling.go `expectedScaledObject`) and a
  VariantAutoscaling (`llmd.ai/v1alpha1`) for llm-d's Workload Variant Autoscaler, whose
  `wva_desired_replicas` the ScaledObject follows. tkf-infra installs KEDA when `platform.keda` is set
  and WVA when `platform.wva` is (then `keda.sh`, `llmd.ai` count as served: this `up` creates them); a
  cluster that does not serve an API the model needs and that tkf-infra does not install refuses the model;
- on `vllm` the trigger queries the stack's Prometheus (`prometheusUrl`), which must be set; on `kserve`
  too when tkf-infra installs KServe: its controller writes the ScaledObject only once
  `inferenceservice-config` names a Prometheus, which our install sets from `prometheusUrl`
  (components/prerequisites.py `kserve_wva_config`) — without it every reconcile of the model fails;
- scale-to-zero only on `vllm`: KServe v0.20.0's CRD starts `minReplicas` and `idleReplicaCount` at 1;
- on `kserve`, WVA decides from its own saturation thresholds (its ConfigMap, fleet-wide): an entry's
  `metric`/`target`/`cooldownSeconds` have no KServe v0.20.0 field that takes them (components/autoscaling.py
  says why not the cool-down), so setting them there is a warning, not silence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tkf_infra.config import ModelEntry, StackSettings
from tkf_infra.config.catalog import Backend
from tkf_infra.config.platform import installed_pieces
from tkf_infra.config.scaling import Scaling
from tkf_infra.plan.admission import ClusterState

#: The APIs an autoscaled model needs on the cluster (group/version as discovery lists them).
KEDA_API = "keda.sh/v1alpha1"
WVA_API = "llmd.ai/v1alpha1"
#: The platform piece (`platform.<key>`) that installs each.
API_PIECES = {KEDA_API: "keda", WVA_API: "wva"}


def at_maximum(entry: ModelEntry, reason: str) -> str:
    """A room refusal of an autoscaled model, saying the count refused is its maximum and the way out."""
    if entry.scaling is None:
        return reason
    return (f"{reason} (planned at scaling.maxReplicas {entry.scaling.max_replicas}, the most its autoscaler may "
            f"run, not minReplicas {entry.scaling.min_replicas}: lower maxReplicas to what fits)")


#: Admission stages that refuse a model for want of room for its replicas (its count matters there).
ROOM_STAGES = frozenset({"capacity", "placement"})


def over_maximum(refused: Mapping[str, tuple[str, str]], entries: Mapping[str, ModelEntry]) -> frozenset[str]:
    """Autoscaled models refused room at their maximum whose minimum is lower: what `overcommit: allow`
    admits at their floor (config/scaling.py Overcommit)."""
    return frozenset(name for name, (stage, _) in refused.items()
                     if stage in ROOM_STAGES and (e := entries.get(name)) is not None and e.scaling is not None
                     and e.scaling.min_replicas < e.scaling.max_replicas)


def overcommitted(entry: ModelEntry, reason_at_maximum: str) -> str:
    """The warning of a model admitted at its floor: what was not held, why, and what may then happen."""
    assert entry.scaling is not None
    lo, hi = entry.scaling.min_replicas, entry.scaling.max_replicas
    why = reason_at_maximum.removeprefix(f"model {entry.name}: ")
    return (f"model {entry.name}: serving.overcommit is allow, so room is held for scaling.minReplicas {lo}, not "
            f"maxReplicas {hi}, which does not fit — {why}. Its autoscaler may ask for up to {hi - lo} "
            "replicas the plan holds no room for; they would sit Pending until room frees. Lower maxReplicas to what "
            "fits to hold them all, or set serving.overcommit refuse to leave the model out instead")


def at_minimum(entry: ModelEntry, reason: str) -> str:
    """A room refusal of a model tried at its floor under `overcommit: allow`: even that does not fit."""
    assert entry.scaling is not None
    return (f"{reason} (planned at scaling.minReplicas {entry.scaling.min_replicas} under serving.overcommit allow, "
            f"after maxReplicas {entry.scaling.max_replicas} did not fit either: lower minReplicas, or free room in "
            "the pool)")


def scaling_checks(entries: Sequence[ModelEntry], settings: StackSettings,
                   cluster: ClusterState | None) -> tuple[dict[str, str], list[str]]:
    """(model → refusal, warnings) for the autoscaled entries, from the settings and the cluster's APIs."""
    scaled = [e for e in entries if e.scaling is not None]
    if not scaled:
        return {}, []
    backend = settings.serving.backend
    needs = [KEDA_API, WVA_API] if backend == Backend.KSERVE else [KEDA_API]
    refused: dict[str, str] = {}
    warnings: list[str] = []
    installed = installed_pieces(settings.platform, backend)
    # What this stack installs is served once its `up` has run, whatever the cluster serves now.
    needs = [api for api in needs if API_PIECES[api] not in installed]
    served = cluster.api_versions if cluster is not None else None
    missing = [api for api in needs if served is not None and api not in served]
    ours = "kserve" in installed
    for e in scaled:
        if backend == Backend.KSERVE and ours and settings.prometheus_url is None:
            refused[e.name] = (f"model {e.name}: scaling on the kserve backend needs KServe's "
                               "inferenceservice-config to name a Prometheus (autoscaling-wva-controller-config: "
                               "without it KServe v0.20.0 refuses to write the ScaledObject and fails every "
                               "reconcile of the model), which tkf-infra sets from prometheusUrl when it installs "
                               "KServe, but the stack sets no prometheusUrl; set tkf-infra:prometheusUrl (the "
                               "Prometheus that scrapes WVA's wva_desired_replicas) or drop `scaling` and set "
                               "`replicas`")
        elif backend == Backend.KSERVE and e.scaling is not None and e.scaling.min_replicas == 0:
            refused[e.name] = (f"model {e.name}: scaling.minReplicas 0 (scale-to-zero) is not possible on the kserve "
                               "backend: KServe v0.20.0's LLMInferenceService takes spec.scaling.minReplicas and "
                               "wva.keda.idleReplicaCount of at least 1; set minReplicas to 1 or more, or serve the "
                               "model on serving.backend vllm, where the gateway's requests wake it "
                               "(docs/scaling.md)")
        elif backend == Backend.VLLM and settings.prometheus_url is None:
            refused[e.name] = (f"model {e.name}: scaling on the vllm backend is a KEDA ScaledObject whose trigger "
                               "reads vLLM's metrics from Prometheus, but the stack sets no prometheusUrl; set "
                               "tkf-infra:prometheusUrl (the Prometheus that scrapes the serving namespace) or drop "
                               "`scaling` and set `replicas`")
        elif missing:
            refused[e.name] = (f"model {e.name}: scaling needs {' and '.join(missing)} on the cluster "
                               f"({_who(backend)}), which {cluster.source if cluster else 'it'} does not serve; "
                               f"{_fix(missing)}, or drop `scaling` and set `replicas`")
        elif backend == Backend.KSERVE and e.scaling is not None and (
                unused := sorted({"metric", "target", "cooldown_seconds"} & e.scaling.model_fields_set)):
            fields = "/".join(Scaling.model_fields[f].alias or f for f in unused)
            warnings.append(f"model {e.name}: scaling.{fields} not used on the kserve backend: KServe v0.20.0 "
                            "scales through llm-d's Workload Variant Autoscaler, which decides from its own "
                            "saturation thresholds (KV cache, queue) in its ConfigMap, and its CRD's rules refuse "
                            "the HPA behaviour a cool-down would set; they apply on serving.backend vllm")
    if backend == Backend.KSERVE and not ours and settings.serving.prometheus_auth is not None:
        warnings.append("serving.prometheusAuth is not written anywhere on the kserve backend here: KServe copies "
                        "it into the ScaledObjects it writes from its own inferenceservice-config, which this stack "
                        "does not install (platform.kserve.alreadyInstalled); set the same authModes, "
                        "triggerAuthName/triggerAuthKind and tlsInsecureSkipVerify under prometheus in that "
                        "installation's autoscaling-wva-controller-config")
    if served is None and needs and len(refused) < len(scaled):
        warnings.append(f"scaling: {', '.join(e.name for e in scaled if e.name not in refused)} autoscale through "
                        f"{_who(backend)}; the cluster's APIs were not read, so whether it serves "
                        f"{' and '.join(needs)} was not checked ({_fix(needs)})")
    return refused, warnings


def _fix(apis: Sequence[str]) -> str:
    """How to get the missing APIs: tkf-infra installs KEDA with `platform.keda`, WVA with `platform.wva`."""
    out = []
    if KEDA_API in apis:
        out.append("set platform.keda (tkf-infra then installs KEDA) or install KEDA on the cluster")
    if WVA_API in apis:
        out.append("set platform.wva (tkf-infra then installs llm-d's Workload Variant Autoscaler; it needs an https "
                   "prometheusUrl) or install WVA on the cluster")
    return "; ".join(out)


def _who(backend: Backend) -> str:
    return ("KEDA, and llm-d's Workload Variant Autoscaler that KServe's spec.scaling drives"
            if backend == Backend.KSERVE else "KEDA")
