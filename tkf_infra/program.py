"""The Pulumi program, start to end: settings → edge data → plan → resources → outputs → verdict.

Why one entry: `__main__.py`, the mock tests and `bench/program_eval.py` must run exactly the same
steps. Reads from outside happen only here, at the edge (`Edge`) — the lock file, EC2's instance facts,
the cluster and its kubeconfig, DCGM's inventory through Prometheus, the last deployment — and are handed
on as plain data, so the plan (`tkf_infra.plan`) and the resource wiring (`components.fleet`) can be
tested apart with no network and no SDK internals (docs/architecture.md, "The edge"). The process-wide
state the run changes is set in one place, `set_process_state`.
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi

from tkf_infra.config import Catalog, SettingsError, read_pulumi_config, validate_catalog
from tkf_infra.config.api_keys import ApiKeys, missing_key_problem
from tkf_infra.config.reader import read_api_keys
from tkf_infra.hub.lock import Lock, load_lock
from tkf_infra.layer_edge import LayerRun
from tkf_infra.layers import Layer
from tkf_infra.live.ec2 import ec2_facts
from tkf_infra.outputs import DEPLOYED_OUTPUT, ENDPOINTS_OUTPUT, GPU_LAYOUT_OUTPUT
from tkf_infra.plan import FleetPlan, LiveFindings, plan_fleet
from tkf_infra.plan.admission import ClusterState, Footprints
from tkf_infra.plan.cache_modes import published_modes
from tkf_infra.plan.pins import read_pins
from tkf_infra.render_dir import render_dir_problem
from tkf_infra.targeted import kept, targeted_refusal


@dataclass(frozen=True)
class Edge:
    """What the program may read from outside. Tests pass their own (a moto EC2 client, a lock)."""

    lock: Lock | None = None
    ec2_client: Any = None
    region: str | None = None
    settings: dict[str, Any] | None = None
    """The raw stack settings; None reads them from the engine's config."""
    api_keys: ApiKeys | None = None
    """The runtime API keys; None reads the `apiKey*` secrets unless `read_api_key` is False."""
    read_api_key: bool = True
    cluster: ClusterState | None = None
    """What the cluster says (Nodes, storage, APIs); None reads it in cluster mode (`tkf_infra.live.cluster`)."""
    stack_outputs: Callable[[str], dict[str, Any] | None] | None = None
    """Another stack's outputs (a split environment's other layer); None reads them through the engine."""
    env_file: Callable[[str], dict[str, Any] | None] | None = None
    """Environment → the settings of its stack file (a platform stack's); None reads `Pulumi.<env>.yaml`."""


def load_catalog(raw: dict[str, Any] | None = None) -> Catalog:
    """Validate the stack settings; unusable settings stop the run with one readable message."""
    try:
        return validate_catalog(raw if raw is not None else read_pulumi_config())
    except SettingsError as err:
        raise pulumi.RunError(err.render()) from None


def live_findings(catalog: Catalog) -> LiveFindings | None:
    """What DCGM says about the pools, when the stack names a Prometheus (warnings when it is down)."""
    if not catalog.settings.prometheus_url:
        return None
    from tkf_infra.live.inventory import check_against_inventory, read_gpu_inventory

    live = check_against_inventory(catalog, read_gpu_inventory(catalog.settings.prometheus_url))
    return LiveFindings(tuple(live.warnings), live.pool_errors, live.model_problems)


#: Set by `python -m tkf_infra up` for the update after its preview: JSON {model: [violations]} of the
#: models the platform owner's policy pack refused there (`tkf_infra.ops.policy_report`).
POLICY_REFUSALS_ENV = "TKF_POLICY_REFUSALS"


def policy_refusals() -> dict[str, list[str]]:
    """The models the CLI's preview saw refused by the policy pack (none when run by plain pulumi)."""
    text = os.environ.get(POLICY_REFUSALS_ENV, "")
    try:
        data = json.loads(text) if text else {}
    except json.JSONDecodeError:
        raise pulumi.RunError(f"{POLICY_REFUSALS_ENV} is not JSON; unset it (only `python -m tkf_infra up` "
                              "sets it)") from None
    return {str(k): [str(r) for r in v] for k, v in data.items()} if isinstance(data, dict) else {}


def last_outputs() -> dict[str, Any]:
    """This stack's outputs from its last run, read from the backend ({} on a first run).

    Uses the engine's built-in `readStackOutputs` invoke on this very stack, which loads the stack's whole
    state file (megabytes at a few hundred models, docs/performance.md): a run reads it once.
    """
    name = f"{pulumi.get_organization()}/{pulumi.get_project()}/{pulumi.get_stack()}"
    try:
        result = pulumi.runtime.invoke("pulumi:pulumi:readStackOutputs", {"name": name})
    except Exception as exc:  # the engine's own error text is the useful part
        pulumi.log.warn(f"could not read the last deployment of {name} ({exc}); a refused model that was deployed "
                        "before will be removed instead of kept at its last settings")
        return {}
    outputs = (result.value or {}).get("outputs") or {}
    return dict(outputs) if isinstance(outputs, dict) else {}


def previous_deployment(outputs: dict[str, Any]) -> dict[str, Any]:
    """The entries the last run of this stack deployed: its `deployed` output, from its last `outputs`.

    A refused model then keeps serving at those settings instead of being deleted by this run
    (`tkf_infra.plan.fleet`); a first run (or an engine that cannot answer) has no previous deployment.
    """
    deployed = outputs.get(DEPLOYED_OUTPUT) or {}
    return dict(deployed) if isinstance(deployed, dict) else {}


def pod_requests(entry: Any, weight_bytes: int, lora_host_gib: float = 0.0) -> tuple[int, int]:
    """(CPU millicores, memory MiB) one serving pod requests: the main container and the metrics sidecar."""
    from components.pod_sizes import SIDECAR_CPU_MILLIS, SIDECAR_MEMORY_MIB, cpu_cores, memory_gib

    return (cpu_cores(entry) * 1000 + SIDECAR_CPU_MILLIS,
            memory_gib(entry, weight_bytes, lora_host_gib) * 1024 + SIDECAR_MEMORY_MIB)


def cache_gib(weight_bytes: int, headroom: float) -> int:
    """The weight cache PVC's GiB (components/weight_cache.py)."""
    from components.weight_cache import pvc_size_gib

    return pvc_size_gib(weight_bytes, headroom)


def footprints(catalog: Catalog) -> Footprints:
    """How each serving pod and weight cache is sized: the components' own rules, as plain functions."""
    from tkf_infra.names import weight_cache

    headroom = catalog.settings.serving.weight_cache_headroom
    from components.weight_cache import DOWNLOAD_CPU_MILLIS, DOWNLOAD_MEMORY_MIB

    return Footprints(pod=pod_requests, cache_gib=lambda b: cache_gib(b, headroom), cache_name=weight_cache,
                      download_job=(DOWNLOAD_CPU_MILLIS, DOWNLOAD_MEMORY_MIB))


def cluster_facts(catalog: Catalog) -> ClusterState | None:
    """What the cluster says about room and APIs (cluster mode only; render mode reads nothing)."""
    target = catalog.settings.cluster
    if target.mode != "kubeconfig" or not target.kubeconfig:
        return None
    from tkf_infra.live.cluster import cluster_state
    from tkf_infra.plan.piece_namespaces import written_namespaces

    return cluster_state(target.kubeconfig, target.context, catalog.settings.namespaces.serving,
                         [w.namespace for w in written_namespaces(catalog)])


def kubeconfig_text(catalog: Catalog) -> str | None:
    """The text of `cluster.kubeconfig` for the Kubernetes provider (cluster mode; None in render mode).

    Read here, at the edge, so `components/` reads no operator file; an unreadable path stops the run
    naming the key to fix."""
    target = catalog.settings.cluster
    if target.mode == "render" or not target.kubeconfig:
        return None
    path = Path(str(target.kubeconfig))
    try:
        path = path.expanduser()  # RuntimeError for ~user of an unknown user
        return path.read_text()
    except (OSError, RuntimeError) as exc:
        raise pulumi.RunError(f"cluster.kubeconfig {str(path)!r} cannot be read ({exc}); fix the path "
                              "in the stack file (tkf-infra:cluster.kubeconfig)") from None


def check_render_dir(catalog: Catalog) -> None:
    """In render mode, `cluster.renderDir` must be a directory the Kubernetes provider can create and write.

    Why at the edge and at preview: a preview writes nothing there, so a path that is a file or a device (or
    lies under one), a link to nothing, or a directory this user may not write would fail only the `up`, after
    the preview said it would go through."""
    target = catalog.settings.cluster
    if target.mode != "render":
        return
    if problem := render_dir_problem(Path(target.render_dir)):
        raise pulumi.RunError(f"cluster.renderDir {target.render_dir!r} {problem}; give a directory path this user "
                              "can write (tkf-infra:cluster.renderDir in the stack file)")


def layer_run(edge: Edge) -> LayerRun:
    """Which layer this stack is and the settings it plans with (`tkf_infra.layers`, docs/stacks.md)."""
    from tkf_infra.layer_edge import engine_outputs, prepare, read_env_file

    try:
        raw = edge.settings if edge.settings is not None else read_pulumi_config()
        return prepare(pulumi.get_stack(), raw, dry_run=pulumi.runtime.is_dry_run(),
                       read_outputs=edge.stack_outputs or engine_outputs,
                       env_file=edge.env_file or read_env_file)
    except SettingsError as err:
        raise pulumi.RunError(err.render()) from None


def plan(edge: Edge | None = None, run: LayerRun | None = None, outputs: dict[str, Any] | None = None) -> FleetPlan:
    """Settings and the edge's data → the fleet plan (no resources registered); `outputs`: this stack's last
    outputs when the caller has read them already."""
    from tkf_infra.layer_edge import refused

    edge = edge or Edge()
    run = run or layer_run(edge)
    catalog = load_catalog(run.settings)
    found, errors = ec2_facts(catalog, edge.ec2_client, edge.region)
    lock = edge.lock if edge.lock is not None else load_lock()
    cluster = edge.cluster if edge.cluster is not None else cluster_facts(catalog)
    if run.layer != Layer.PLATFORM and outputs is None:
        outputs = last_outputs()  # once: the deployed entries and the GPU layout
    last = outputs if run.layer != Layer.PLATFORM and outputs is not None else {}
    return plan_fleet(catalog, lock=lock, ec2=found, ec2_errors=errors, live=live_findings(catalog),
                      refused_by_policy=policy_refusals(), previous=previous_deployment(last), cluster=cluster,
                      footprints=footprints(catalog), refused_by_platform=refused(run, catalog),
                      previous_layout=last.get(GPU_LAYOUT_OUTPUT), previous_pins=read_pins(last.get(ENDPOINTS_OUTPUT)),
                      previous_claims=published_modes(last.get(ENDPOINTS_OUTPUT)))


def report(plan: FleetPlan) -> None:
    """Log every left-out model and stack problem once, as errors the preview shows."""
    for warning in plan.warnings:
        pulumi.log.warn(warning)
    for x in plan.excluded:
        pulumi.log.error(x.log_line())
    for message in plan.errors:
        pulumi.log.error(message)


def finish(plan: FleetPlan) -> None:
    """End the run non-zero when anything was left out, after every good resource is registered.

    `pulumi.log.error` alone does not fail a Python program; raising at the very end does, and the
    SDK waits for all registrations (and registers the stack outputs) before reporting it, so the
    healthy models are still deployed and the outputs still name what was left out.
    """
    verdict = plan.verdict()
    if verdict and not pulumi.runtime.is_dry_run():
        raise pulumi.RunError(verdict)
    if verdict:
        pulumi.log.error(verdict)


#: Collector thresholds from the resource build on, for the rest of the process: the first generation is
#: collected every 50,000 allocations instead of CPython's 700, older ones proportionally less often
#: (docs/performance.md).
GC_THRESHOLDS = (50_000, 20, 100)


def set_process_state() -> None:
    """Every process-wide change the program makes, in one place, called once by `deploy` before the build.

    None is restored: the program's process ends with the run.

    - The SDK's per-registration stack trace is cut to its first frame (`tkf_infra.sdk_trace`, a private
      SDK touch point: docs/architecture.md).
    - The cyclic garbage collector runs rarely (`GC_THRESHOLDS`). Why: every model adds a few thousand
      long-lived objects (resource objects, their inputs, the SDK's futures) and almost no cyclic
      garbage, and CPython's default thresholds make the collector rescan that growing heap again and
      again: 30 % of the program's CPU at 500 models under mocks, and the program is the busiest process
      of a preview. Measured peak memory is unchanged (within 2 %, `bench/program_eval.py`); the
      collector still runs, so a long `up` does not grow without bound.
    - The SDK's own per-resource debug lines are dropped in the process instead of being one blocking engine
      call each (`tkf_infra.sdk_debug`; `TKF_SDK_DEBUG_LOGS=1` keeps them).
    """
    from tkf_infra.sdk_debug import drop_sdk_debug_lines
    from tkf_infra.sdk_trace import record_creation_frame_only

    record_creation_frame_only()
    gc.set_threshold(*GC_THRESHOLDS)
    drop_sdk_debug_lines()


def deploy(edge: Edge | None = None) -> Any:
    """Plan, report, register every resource, export the outputs; returns the `Fleet` (or the platform layer)."""
    edge = edge or Edge()
    run = layer_run(edge)
    api_keys = None if run.layer == Layer.PLATFORM else runtime_api_keys(edge)
    outputs = last_outputs() if run.layer != Layer.PLATFORM else None  # read once: the deployment and the contract
    fleet_plan = plan(edge, run, outputs)
    for warning in run.warnings:
        pulumi.log.warn(warning)
    report(fleet_plan)
    last = previous_deployment(outputs or {})
    if run.layer != Layer.PLATFORM and (stale := targeted_refusal(
            fleet_plan.models, last, plan=fleet_plan, before_endpoints=(outputs or {}).get(ENDPOINTS_OUTPUT))):
        raise pulumi.RunError(stale)  # a targeted run would leave these models as they were (tkf_infra/targeted.py)
    kubeconfig = kubeconfig_text(fleet_plan.catalog)
    check_render_dir(fleet_plan.catalog)
    set_process_state()
    if run.layer == Layer.PLATFORM:
        return deploy_platform(fleet_plan, run, kubeconfig)
    from components.fleet import build_fleet
    from tkf_infra.outputs import export_outputs

    contract = one_stack(fleet_plan, run.environment, outputs or {}) if run.layer == Layer.ALL else None
    keep = kept()  # a targeted run's (its environment was checked by targeted_refusal above)
    fleet = build_fleet(fleet_plan, api_keys=api_keys, stack=run.environment, layer=run.layer, kubeconfig=kubeconfig,
                        kept=keep.as_pair() if keep else (frozenset(), frozenset()))
    export_outputs(fleet_plan, api_keys)
    if contract is not None:
        from tkf_infra.platform_contract import PLATFORM_CONTRACT_OUTPUT

        pulumi.export(PLATFORM_CONTRACT_OUTPUT, contract)
    if run.layer == Layer.FLEET:
        from tkf_infra.platform_contract import LAYER_OUTPUT, PLATFORM_USE_OUTPUT, platform_use

        pulumi.export(LAYER_OUTPUT, Layer.FLEET.value)
        pulumi.export(PLATFORM_USE_OUTPUT, platform_use(fleet_plan))
    return fleet


def one_stack(fleet_plan: FleetPlan, environment: str, outputs: dict[str, Any]) -> dict[str, Any]:
    """A stack holding both layers stops before registering anything when it would delete a platform piece's
    CRDs while its own models keep objects of them (the split environment's platform does the same); else
    the platform contract it exports, for its next run to compare."""
    from tkf_infra.layer_edge import check_one_stack_removals
    from tkf_infra.platform_contract import PLATFORM_CONTRACT_OUTPUT, platform_use, publish

    contract = publish(fleet_plan.catalog, environment)
    try:
        check_one_stack_removals(pulumi.get_stack(), contract, platform_use(fleet_plan),
                                 outputs.get(PLATFORM_CONTRACT_OUTPUT))
    except SettingsError as err:
        raise pulumi.RunError(err.render()) from None
    return contract


def runtime_api_keys(edge: Edge) -> ApiKeys | None:
    """The runtime API keys: the edge's, else the `apiKey*` secrets; a stack that needs one and has none stops."""
    api_keys = edge.api_keys
    if api_keys is None and edge.read_api_key:
        try:
            api_keys = read_api_keys()
        except SettingsError as err:
            raise pulumi.RunError(err.render()) from None
    if api_keys is None and (problem := missing_key_problem(pulumi.get_stack())) is not None:
        raise pulumi.RunError(SettingsError([problem], headline="the runtime API key is missing").render())
    return api_keys


def deploy_platform(platform_plan: FleetPlan, run: LayerRun, kubeconfig: str | None) -> Any:
    """A platform stack: its pools, GPU operator and prerequisites, and the contract its fleet reads."""
    from components.fleet import build_platform
    from tkf_infra.outputs import PROBLEMS_OUTPUT
    from tkf_infra.platform_contract import LAYER_OUTPUT, PLATFORM_CONTRACT_OUTPUT

    built = build_platform(platform_plan, environment=run.environment, kubeconfig=kubeconfig)
    pulumi.export(LAYER_OUTPUT, Layer.PLATFORM.value)
    pulumi.export(PLATFORM_CONTRACT_OUTPUT, run.contract)
    pulumi.export(PROBLEMS_OUTPUT, list(platform_plan.errors))
    return built


def run(edge: Edge | None = None) -> Any:
    """The whole program: `deploy`, then end non-zero (RunError) if anything was left out."""
    fleet = deploy(edge)
    finish(fleet.plan)
    return fleet
