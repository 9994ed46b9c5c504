"""The contract between an environment's platform stack and its fleet stack (docs/stacks.md).

Why a typed, versioned output rather than reading the stack file: the fleet must plan against what
the platform *applied* (a platform edit not yet `up` is not there), and a platform stack run by an
older or newer tkf-infra must be refused by name, not misread. The platform exports
`platformContract` (`publish`); the fleet reads it (`read`), plans with its pools and pieces
(`fleet_settings`), refuses by name each model whose needs it does not provide (`unmet_needs`), and
exports how many objects of each platform kind it holds (`platform_use`), which the platform reads
before it removes a CRD (`crd_removal_problems`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, ValidationError

from tkf_infra import names
from tkf_infra.config import Backend, Catalog
from tkf_infra.config.base import Problem, SettingsError, SettingsModel, problems_from, short
from tkf_infra.config.platform import installed_pieces

if TYPE_CHECKING:
    from tkf_infra.plan import FleetPlan

PLATFORM_CONTRACT_VERSION = 1
PLATFORM_CONTRACT_OUTPUT = "platformContract"
#: Exported by the two layers of a split environment (`platform` / `fleet`); a one-stack environment exports none.
LAYER_OUTPUT = "layer"
#: The fleet's objects of each platform kind (kind → count), read by the platform before it removes a CRD.
PLATFORM_USE_OUTPUT = "platformUse"

#: The platform kinds the fleet makes objects of: the piece whose CRDs define each, and its API version
#: (the components' own: tests/test_platform_contract.py checks them against components/model_serving.py).
PLATFORM_KINDS: dict[str, tuple[str, str]] = {
    "LLMInferenceService": ("kserve", "serving.kserve.io/v1alpha2"),
    "LeaderWorkerSet": ("lws", "leaderworkerset.x-k8s.io/v1"),
    # An autoscaled model's (ours on vllm, KServe's controller's on kserve); platform.keda when installed here.
    "ScaledObject": ("keda", "keda.sh/v1alpha1"),
    # An autoscaled kserve model's (KServe's controller writes it for WVA); platform.wva when installed here.
    "VariantAutoscaling": ("wva", "llmd.ai/v1alpha1"),
}
#: The pieces a platform has only when its stack sets them (opt-in; the others are always there or alreadyInstalled).
OPTIONAL_PIECES = ("keda", "wva")
#: The namespaces the platform owns; the fleet's (serving, gateway, monitoring) stay in its own settings.
PLATFORM_NAMESPACES = ("gpuOperator", "kserve", "lws", "certManager")


class PieceFacts(SettingsModel):
    version: str | None = None
    installed_by: Literal["tkf-infra", "others"]
    """`tkf-infra`: the platform stack installs it (and would delete its CRDs if it stopped); `others`:
    alreadyInstalled."""


class GpuSharingFacts(SettingsModel):
    time_slicing_replicas: int = Field(ge=0)
    mig_strategy: Literal["none", "single", "mixed"]
    mig_config: str | None = None
    """The mig-parted ConfigMap the GPU Operator's mig-manager reads; None: MIG layouts are not applied."""


class PlatformContract(SettingsModel):
    contract_version: int
    environment: str
    backend: Backend
    cluster: dict[str, Any]
    namespaces: dict[str, str]
    node_pools: list[dict[str, Any]]
    pieces: dict[str, PieceFacts]
    """The pieces present on the cluster; a piece the backend does not need is absent."""
    gpu_sharing: GpuSharingFacts
    apis: dict[str, str]
    """Kind → API version of every platform kind served (`PLATFORM_KINDS` of the present pieces)."""
    presets: list[str]


def mig_config_name(catalog: Catalog) -> str | None:
    """The mig-parted ConfigMap the platform's GPU Operator reads: set when a pool is MIG (components.gpu_sharing)."""
    return names.MIG_CONFIG_NAME if any(p.mig for p in catalog.pools) else None


def publish(catalog: Catalog, env: str) -> dict[str, Any]:
    """The contract the platform stack exports, from its validated settings."""
    s = catalog.settings
    ours = installed_pieces(s.platform, s.serving.backend)
    needed = installed_pieces(s.platform.model_copy(update={k: c.model_copy(update={"already_installed": False})
                                                            for k, c in vars(s.platform).items()
                                                            if hasattr(c, "already_installed")}),
                              s.serving.backend)
    pieces = {key: {"version": c.version, "installedBy": "tkf-infra" if key in ours else "others"}
              for key, c in s.platform.pieces().items() if key in needed}
    kserve = s.serving.backend == Backend.KSERVE and "kserve" in pieces
    gpu = s.platform.gpu_operator
    ns = s.namespaces.model_dump(by_alias=True)
    return {
        "contractVersion": PLATFORM_CONTRACT_VERSION,
        "environment": env,
        "backend": s.serving.backend.value,
        "cluster": s.cluster.model_dump(by_alias=True, exclude_none=True),
        "namespaces": {k: ns[k] for k in PLATFORM_NAMESPACES},
        "nodePools": [p.model_dump(by_alias=True, mode="json", exclude_none=True) for p in catalog.pools],
        "pieces": pieces,
        "gpuSharing": {"timeSlicingReplicas": gpu.time_slicing_replicas, "migStrategy": gpu.mig_strategy,
                       "migConfig": mig_config_name(catalog) if "gpuOperator" in ours else None},
        "apis": {kind: api for kind, (piece, api) in PLATFORM_KINDS.items() if piece in pieces},
        "presets": [names.PIPELINE_PARALLEL_PRESET] if kserve and "kserve" in ours else [],
    }


def read(value: Any, platform_stack: str) -> PlatformContract:
    """The platform stack's contract, or a SettingsError naming the output, the field and the fix."""
    where = f"stack {platform_stack} output {PLATFORM_CONTRACT_OUTPUT}"
    headline = f"the fleet cannot use the platform stack {platform_stack}'s {PLATFORM_CONTRACT_OUTPUT}"
    if not isinstance(value, Mapping):
        raise SettingsError([Problem(where, "", f"expected a mapping, got {short(value)}; run `python -m tkf_infra up "
                                     f"--stack {platform_stack}` with this tkf-infra")], headline=headline)
    version = value.get("contractVersion")
    if isinstance(version, float) and version.is_integer():  # another stack's outputs carry numbers as floats
        version = int(version)
    if not isinstance(version, int) or isinstance(version, bool):
        raise SettingsError([Problem(where, "contractVersion", f"is {short(version)}, not a version number; run "
                                     f"`python -m tkf_infra up --stack {platform_stack}` with this tkf-infra")],
                            headline=headline)
    if version != PLATFORM_CONTRACT_VERSION:
        fix = ("update tkf-infra where the fleet runs" if version > PLATFORM_CONTRACT_VERSION else
               f"run `python -m tkf_infra up --stack {platform_stack}` with this tkf-infra first")
        raise SettingsError([Problem(where, "contractVersion", f"is {version}, and this tkf-infra reads version "
                                     f"{PLATFORM_CONTRACT_VERSION} only; {fix}")], headline=headline)
    try:
        return PlatformContract.model_validate(value)
    except ValidationError as err:
        raise SettingsError(problems_from(err, where, model=PlatformContract), headline=headline) from None


def as_read(value: Any) -> Any:
    """A value as another stack's outputs give it back: no None entries, whole numbers as ints (the engine
    carries numbers as floats and drops nulls), so what a stack published compares equal to what it would."""
    if isinstance(value, Mapping):
        return {k: as_read(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [as_read(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def fleet_settings(env_doc: Mapping[str, Any], contract: PlatformContract) -> dict[str, Any]:
    """The fleet's raw settings: its own keys, with pools, platform pieces and platform namespaces from the contract.

    Every piece is `alreadyInstalled` for the fleet: it installs none; what is absent is refused per
    model by `unmet_needs`.
    """
    doc = dict(env_doc)
    doc["nodePools"] = list(contract.node_pools)
    platform: dict[str, Any] = {}
    for key in ("gpuOperator", "certManager", "gatewayApi", "kserve", "lws"):
        piece = contract.pieces.get(key)
        platform[key] = {"alreadyInstalled": True, **({"version": piece.version} if piece and piece.version else {})}
    for key in OPTIONAL_PIECES:  # present only when the platform has them (platform.keda, platform.wva)
        if key in contract.pieces:
            piece = contract.pieces[key]
            platform[key] = {"alreadyInstalled": True, **({"version": piece.version} if piece.version else {})}
    platform["gpuOperator"].update(timeSlicingReplicas=contract.gpu_sharing.time_slicing_replicas,
                                   migStrategy=contract.gpu_sharing.mig_strategy)
    doc["platform"] = platform
    doc["namespaces"] = {**dict(env_doc.get("namespaces") or {}), **contract.namespaces}
    return doc


def unmet_needs(catalog: Catalog, contract: PlatformContract, platform_stack: str) -> dict[str, list[str]]:
    """Model → why the platform cannot serve it: a kind it needs not served, the PP preset or MIG config absent."""
    env = contract.environment
    fix_piece = f"enable it in Pulumi.{env}.yaml's platform and run `python -m tkf_infra up --stack {platform_stack}`"
    mig_pools = {p.get("name") for p in contract.node_pools if p.get("mig")}
    out: dict[str, list[str]] = {}
    for e in catalog.models:
        why: list[str] = []
        kinds = []
        if catalog.settings.serving.backend == Backend.KSERVE:
            kinds.append("LLMInferenceService")
        if e.is_multi_node:
            kinds.append("LeaderWorkerSet")
        for kind in kinds:
            if kind not in contract.apis:
                piece, api = PLATFORM_KINDS[kind]
                why.append(f"model {e.name}: needs {kind} ({api}), which platform stack {platform_stack} does not "
                           f"provide (platform.{piece} is not on it); {fix_piece}, or change the model")
        if (catalog.settings.serving.backend == Backend.KSERVE and e.is_multi_node
                and names.PIPELINE_PARALLEL_PRESET not in contract.presets and "LLMInferenceService" in contract.apis):
            why.append(f"model {e.name}: multi-node on KServe needs the preset {names.PIPELINE_PARALLEL_PRESET}, which "
                       f"platform stack {platform_stack} has not installed (KServe is not installed by it); install "
                       "that preset, let the platform stack install KServe, or set nodeCount 1")
        kind_of_share = e.share_request[0]
        if e.node_pool in mig_pools and kind_of_share in ("mig", "auto") and not contract.gpu_sharing.mig_config:
            why.append(f"model {e.name}: gpuShare {e.gpu_share} on MIG pool {e.node_pool} needs mig-manager to apply "
                       f"the layout, but platform stack {platform_stack}'s GPU Operator reads no MIG config (it is not "
                       f"installed by that stack); let it install the GPU Operator, or set gpuShare: whole")
        if why:
            out[e.name] = why
    return out


def platform_use(plan: FleetPlan) -> dict[str, int]:
    """How many objects of each platform kind the fleet's deployed models make (KServe makes an LWS per multi-node,
    and a ScaledObject and a VariantAutoscaling per autoscaled model; we make a ScaledObject on the vllm backend)."""
    models = [m.entry for m in plan.models]
    kserve = plan.catalog.settings.serving.backend == Backend.KSERVE
    return {"LLMInferenceService": len(models) if kserve else 0,
            "LeaderWorkerSet": sum(1 for e in models if e.is_multi_node),
            "ScaledObject": sum(1 for e in models if e.scaling is not None),
            "VariantAutoscaling": sum(1 for e in models if e.scaling is not None) if kserve else 0}


#: What makes a model hold an object of each platform kind: what a one-stack refusal tells the user to change.
_WHAT_MAKES = {"LLMInferenceService": "serving.backend kserve makes one per model",
               "LeaderWorkerSet": "a multi-node model (nodeCount above 1) makes one",
               "ScaledObject": "`scaling` makes one; a fixed `replicas` makes none",
               "VariantAutoscaling": "`scaling` on the kserve backend makes one; a fixed `replicas` makes none"}


def crd_removal_problems(previous: Mapping[str, Any] | None, now: Mapping[str, Any],
                         fleets: Mapping[str, Mapping[str, Any]], *, one_stack: bool = False) -> list[str]:
    """Why this platform run must not go on: it would remove a piece's CRDs while a fleet has objects of them.

    `previous`: the contract the platform stack last exported; `now`: the one it would export;
    `fleets`: each fleet stack's `platformUse`. A piece the stack did not install is never deleted by it.
    `one_stack`: the platform and the fleet are one stack, `fleets` this run's own use.
    """
    before = (previous or {}).get("pieces") or {}
    problems = []
    for fleet, use in sorted(fleets.items()):
        for kind, count in sorted(use.items()):
            # Read through the engine, counts are floats.
            if kind not in PLATFORM_KINDS or isinstance(count, bool) or not isinstance(count, int | float):
                continue
            if count <= 0:
                continue
            piece = PLATFORM_KINDS[kind][0]
            was = (before.get(piece) or {}).get("installedBy")
            still = (now["pieces"].get(piece) or {}).get("installedBy")
            if was == "tkf-infra" and still != "tkf-infra":
                change = ("marked alreadyInstalled" if still == "others" else
                          "no longer set" if piece in OPTIONAL_PIECES else "no longer needed by serving.backend")
                if one_stack:
                    problems.append(f"platform.{piece}: this run would delete {piece}'s CRDs ({piece} is now "
                                    f"{change}), while stack {fleet} keeps {int(count)} {kind} object(s) of its "
                                    "models, which the API server would delete with them behind Pulumi's back; "
                                    f"change or remove those models in this same run ({_WHAT_MAKES[kind]}), or keep "
                                    f"platform.{piece} as it was")
                    continue
                problems.append(f"platform.{piece}: this run would delete {piece}'s CRDs ({piece} is now {change}), "
                                f"and fleet stack {fleet} has {int(count)} {kind} object(s), which the API server "
                                f"would delete with them; remove those models first (`python -m tkf_infra up --stack "
                                f"{fleet}`), or keep platform.{piece} as it was")
    return problems
