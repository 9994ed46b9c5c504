"""Pulumi mocks for component tests: record every registered resource, echo inputs.

Why a recording monitor: the assertions that matter are about what the program *registers*
(types, inputs, parents, providers, dependencies, options, which values are secret), and mocks
never run providers. Helm releases and remote components echo their inputs (no children are
rendered); FitCheck dynamic resources run the real estimate, so fit annotations and ``fit``
outputs carry real numbers. ``pulumi.log`` messages are captured per severity.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import pulumi
from google.protobuf import json_format  # type: ignore[import-untyped]
from pulumi.runtime import mocks as pmocks

from tkf_infra.settings import Platform

T = TypeVar("T")
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"


@dataclass
class Registered:
    type: str
    name: str
    urn: str
    inputs: dict[str, Any]
    custom: bool
    provider: str | None = None
    parent: str | None = None
    depends_on: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)
    """The wire form of the inputs, where secrets still carry Pulumi's secret signature."""
    outputs: dict[str, Any] = field(default_factory=dict)

    @property
    def spec(self) -> dict[str, Any]:
        return dict(self.inputs.get("spec") or {})

    @property
    def metadata(self) -> dict[str, Any]:
        return dict(self.inputs.get("metadata") or {})

    def manifest(self) -> dict[str, Any]:
        """The Kubernetes object as the API server would receive it (typed kinds get apiVersion/kind)."""
        doc = {k: v for k, v in self.inputs.items() if not k.startswith("__")}
        if "kind" not in doc:
            group_version, kind = self.type.split(":", 1)[1].rsplit(":", 1)
            group, version = group_version.split("/")
            doc = {
                "apiVersion": version
                if group == "core"
                else f"{group}.k8s.io/{version}"
                if group in {"networking", "rbac", "storage"}
                else f"{group}/{version}",
                "kind": kind,
                **doc,
            }
        return doc


class RecordingMocks(pulumi.runtime.Mocks):
    def __init__(self) -> None:
        self.resources: list[Registered] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        inputs = dict(args.inputs)
        outputs = dict(inputs)
        if args.typ.startswith("pulumi-python:dynamic"):
            from providers.fit import evaluate

            # The mock monitor hands every number over as a float; the real engine's dynamic provider
            # host sized GPU entries fine (checked with `pulumi up` in render mode), the engine's
            # range()/int arithmetic does not accept 8192.0. Give it back its integers.
            outs, _ = evaluate(_integral(inputs))
            outputs.update(outs)
        if args.typ == "kubernetes:helm.sh/v4:Chart" or args.typ.startswith("kubernetes:yaml/v2"):
            outputs = {**inputs, "resources": []}
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        return {}, None

    # -- queries ------------------------------------------------------------------------------

    def of_type(self, typ: str) -> list[Registered]:
        return [r for r in self.resources if r.type == typ]

    def kind(self, kind: str) -> list[Registered]:
        """Kubernetes objects by kind (typed resources and CustomResources alike)."""
        return [r for r in self.resources
                if r.custom and (r.inputs.get("kind") == kind or r.type.endswith(f":{kind}"))]  # fmt: skip

    def named(self, name: str) -> Registered:
        found = [r for r in self.resources if r.name == name]
        assert len(found) == 1, f"{len(found)} resources named {name}: {self.dump()}"
        return found[0]

    def by_urn(self, urn: str | None) -> Registered | None:
        return next((r for r in self.resources if r.urn == urn), None)

    def dump(self) -> str:
        return json.dumps([f"{r.type} {r.name}" for r in self.resources], indent=1)


class RecordingMonitor(pmocks.MockMonitor):
    """MockMonitor that also records what MockResourceArgs leaves out (parent, deps, options)."""

    mocks: RecordingMocks

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)  # type: ignore[no-untyped-call]
        if request.type == "pulumi:pulumi:Stack":
            return response
        raw = json_format.MessageToDict(request.object)
        self.mocks.resources.append(Registered(
            type=request.type,
            name=request.name,
            urn=response.urn,
            inputs=unwrap_secrets(pulumi.runtime.rpc.deserialize_properties(request.object)),
            custom=bool(request.custom),
            provider=request.provider or None,
            parent=request.parent or None,
            depends_on=list(request.dependencies),
            options={
                "protect": request.protect if request.HasField("protect") else None,
                "retainOnDelete": request.retainOnDelete if request.HasField("retainOnDelete") else None,
                "deleteBeforeReplace": request.deleteBeforeReplace,
                "replaceOnChanges": list(request.replaceOnChanges),
                "ignoreChanges": list(request.ignoreChanges),
                "additionalSecretOutputs": list(request.additionalSecretOutputs),
            },
            raw=raw,
            outputs=self.resources[response.urn].state if response.urn in self.resources else {},
        ))  # fmt: skip
        return response


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@dataclass
class Harness(Generic[T]):
    mocks: RecordingMocks
    logs: _Collect
    result: T | None = None
    values: dict[str, Any] = field(default_factory=dict)

    @property
    def resources(self) -> list[Registered]:
        return self.mocks.resources

    def errors(self) -> list[str]:
        return [r.getMessage() for r in self.logs.records if r.levelno >= logging.ERROR]

    def warnings(self) -> list[str]:
        return [r.getMessage() for r in self.logs.records if r.levelno == logging.WARNING]


@contextmanager
def _mocked(preview: bool, stack: str) -> Iterator[tuple[RecordingMocks, _Collect]]:
    mocks = RecordingMocks()
    logger = logging.getLogger(f"tkf-test-{id(mocks)}")
    logger.propagate = False
    handler = _Collect()
    logger.addHandler(handler)
    saved = pulumi.runtime.settings.SETTINGS
    pulumi.runtime.set_mocks(mocks, project="tkf-infra", stack=stack, preview=preview, logger=logger,
                             monitor=RecordingMonitor(mocks))  # fmt: skip
    try:
        yield mocks, handler
    finally:
        pulumi.runtime.settings.SETTINGS = saved
        logger.removeHandler(handler)


def run(build: Callable[[], T], outputs: Callable[[T], dict[str, Any]] | None = None, *,
        preview: bool = False, stack: str = "test") -> Harness[T]:  # fmt: skip
    """Build resources under fresh mocks and wait for every registration.

    ``outputs(result)`` may return a dict of Outputs; their resolved values land in
    ``Harness.values`` (``None`` where unknown).
    """
    with _mocked(preview, stack) as (mocks, logs):
        h: Harness[T] = Harness(mocks, logs)

        def program() -> Any:
            h.result = build()
            outs = outputs(h.result) if outputs else {}
            if not outs:
                return None
            return pulumi.Output.all(**outs).apply(lambda vals: h.values.update(vals))

        pulumi.runtime.test(program)()  # type: ignore[no-untyped-call]
        return h


def prune_nulls(value: Any) -> Any:
    """Drop null fields as the API server does before validating against a schema."""
    if isinstance(value, dict):
        return {k: prune_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [prune_nulls(v) for v in value]
    return value


def _integral(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral(v) for v in value]
    return value


def unwrap_secrets(value: Any) -> Any:
    """Replace Pulumi's secret envelopes with their values (``raw`` keeps the envelopes)."""
    if isinstance(value, dict):
        if value.get("4dabf18193072939515e22adb298388d") == SECRET_SIG:
            return unwrap_secrets(value.get("value"))
        return {k: unwrap_secrets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap_secrets(v) for v in value]
    return value


def contains_secret_marker(value: Any) -> bool:
    if isinstance(value, dict):
        if value.get("4dabf18193072939515e22adb298388d") == SECRET_SIG:
            return True
        return any(contains_secret_marker(v) for v in value.values())
    if isinstance(value, list):
        return any(contains_secret_marker(v) for v in value)
    return False


# ---------------------------------------------------------------------------------------------
# Test catalogs: real models from models.lock.json
# ---------------------------------------------------------------------------------------------

QWEN3_8B = {"repo": "Qwen/Qwen3-8B", "revision": "b968826d9c46dd6066d109eabc6255188de91218"}
QWEN_72B = {"repo": "Qwen/Qwen2.5-72B-Instruct", "revision": "495f39366efef23836d0cfae4fbe635880d2be31"}
LLAMA_405B = {"repo": "meta-llama/Llama-3.1-405B-Instruct", "revision": "be673f326cab4cd22ccfef76109faf68e41aa5f1"}
QWEN_05B = {"repo": "Qwen/Qwen2.5-0.5B-Instruct", "revision": "7ae557604adf67be50417f59c2c2f167def9a775"}

SINGLE_GPU = {"name": "qwen3-8b", **QWEN3_8B, "servedName": "qwen3-8b", "nodePool": "h100", "maxModelLen": 8192}
TP4 = {
    "name": "qwen-72b",
    **QWEN_72B,
    "servedName": "qwen2.5-72b",
    "nodePool": "h100",
    "gpusPerNode": 4,
    "tensorParallelSize": 4,
    "maxModelLen": 16384,
}
MULTI_NODE = {
    "name": "llama-405b",
    **LLAMA_405B,
    "servedName": "llama-3.1-405b",
    "nodePool": "h100",
    "nodeCount": 2,
    "gpusPerNode": 8,
    "tensorParallelSize": 8,
    "pipelineParallelSize": 2,
    "maxModelLen": 8192,
    "hfTokenSecret": "hf-token",
}
CPU = {
    "name": "tiny",
    **QWEN_05B,
    "servedName": "qwen2.5-0.5b",
    "gpusPerNode": 0,
    "maxModelLen": 4096,
    "cpuKvCacheGiB": 2,
}


def stack_doc(*models: dict[str, Any], backend: str = "kserve", installed: bool = True,
              **overrides: Any) -> dict[str, Any]:  # fmt: skip
    """A stack document with an H100 pool (3 nodes x 8), every platform piece already installed."""
    doc: dict[str, Any] = {
        "cluster": {"mode": "render", "renderDir": "rendered/test"},
        "nodePools": [{"name": "h100", "gpuProduct": "H100-80GB", "gpusPerNode": 8, "nodeCount": 3}],
        # settings.Component requires `version` once a piece is spelled out: reuse the defaults.
        "platform": {k: {"alreadyInstalled": installed, "version": v}
                     for k, v in Platform().model_dump(by_alias=True).items() for v in [v["version"]]},
        "serving": {"backend": backend, "allowCpu": True},
        "models": [dict(m) for m in models],
    }  # fmt: skip
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(doc.get(key), dict):
            doc[key] = {**doc[key], **value}
        else:
            doc[key] = value
    return doc
