"""Pulumi mocks for component tests: record every registered resource, echo inputs.

Why a recording monitor: the assertions that matter are about what the program *registers*
(types, inputs, parents, providers, dependencies, options), and mocks never run providers. Only
the SDK's public surface is used: `pulumi.runtime.set_mocks` and `Mocks.new_resource` see each
resource's inputs as the engine would; a stack transformation
(`pulumi.runtime.register_stack_transformation`) sees its options (parent, depends_on, protect …).
Resources are keyed `type::name` (`Registered.urn`), unique within these programs.
Helm charts and remote components echo their inputs (no children are rendered). `pulumi.log`
messages are captured per severity.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import pulumi

from tkf_infra.config import Platform

T = TypeVar("T")


def key(type_: str, name: str) -> str:
    return f"{type_}::{name}"


@dataclass
class Registered:
    type: str
    name: str
    inputs: dict[str, Any]
    custom: bool
    provider: str | None = None
    """`type::name` of the explicit provider the resource ended up with."""
    parent: str | None = None
    depends_on: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def urn(self) -> str:
        return key(self.type, self.name)

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
            api = (version if group == "core" else f"{group}.k8s.io/{version}"
                   if group in {"networking", "rbac", "storage"} else f"{group}/{version}")
            doc = {"apiVersion": api, "kind": kind, **doc}
        return doc


@dataclass
class _Options:
    parent: str | None
    depends_on: list[str]
    options: dict[str, Any]


class RecordingMocks(pulumi.runtime.Mocks):
    def __init__(self, stack_outputs: dict[str, Any] | None = None) -> None:
        self.stack_outputs = dict(stack_outputs or {})
        """What the engine's `readStackOutputs` returns: the outputs of the stack's last run."""
        self.resources: list[Registered] = []
        self._objects: dict[int, str] = {}
        self._options: dict[str, _Options] = {}

    # -- the monitor side ---------------------------------------------------------------------

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        inputs = dict(args.inputs)
        outputs = dict(inputs)
        if args.typ == "kubernetes:helm.sh/v4:Chart" or args.typ.startswith("kubernetes:yaml/v2"):
            outputs = {**inputs, "resources": []}
        provider = None
        if args.provider:  # "urn:pulumi:<stack>::<project>::<type>::<name>::<id>"
            parts = args.provider.split("::")
            provider = key(parts[2].split("$")[-1], parts[3]) if len(parts) >= 4 else args.provider
        self.resources.append(Registered(type=args.typ, name=args.name, inputs=inputs, custom=bool(args.custom),
                                         provider=provider))
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]]]:
        if args.token == "pulumi:pulumi:readStackOutputs":
            return {"name": args.args.get("name"), "outputs": self.stack_outputs, "secretOutputNames": []}, []
        return {}, []

    # -- the program side (a stack transformation: sees options, changes nothing) ------------

    def transformation(self, args: pulumi.ResourceTransformationArgs) -> None:
        me = key(args.type_, args.name)
        self._objects[id(args.resource)] = me
        opts = args.opts or pulumi.ResourceOptions()
        deps = opts.depends_on if isinstance(opts.depends_on, list) else [opts.depends_on] if opts.depends_on else []
        self._options[me] = _Options(
            parent=self._objects.get(id(opts.parent)) if opts.parent is not None else None,
            depends_on=[self._objects.get(id(d), "?") for d in deps if isinstance(d, pulumi.Resource)],
            options={
                "protect": opts.protect, "retainOnDelete": opts.retain_on_delete,
                "deleteBeforeReplace": bool(opts.delete_before_replace),
                "replaceOnChanges": list(opts.replace_on_changes or []),
                "ignoreChanges": list(opts.ignore_changes or []),
                "additionalSecretOutputs": list(opts.additional_secret_outputs or []),
            },
        )

    def finish(self) -> None:
        for r in self.resources:
            o = self._options.get(r.urn)
            if o is not None:
                r.parent, r.depends_on, r.options = o.parent, o.depends_on, o.options

    # -- queries ------------------------------------------------------------------------------

    def of_type(self, typ: str) -> list[Registered]:
        return [r for r in self.resources if r.type == typ]

    def kind(self, kind: str) -> list[Registered]:
        """Kubernetes objects by kind (typed resources and CustomResources alike)."""
        return [r for r in self.resources
                if r.custom and (r.inputs.get("kind") == kind or r.type.endswith(f":{kind}"))]

    def named(self, name: str) -> Registered:
        found = [r for r in self.resources if r.name == name]
        assert len(found) == 1, f"{len(found)} resources named {name}: {self.dump()}"
        return found[0]

    def by_urn(self, urn: str | None) -> Registered | None:
        return next((r for r in self.resources if r.urn == urn), None)

    def dump(self) -> str:
        return json.dumps([f"{r.type} {r.name}" for r in self.resources], indent=1)


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
    error: Exception | None = None

    @property
    def resources(self) -> list[Registered]:
        return self.mocks.resources

    def errors(self) -> list[str]:
        return [r.getMessage() for r in self.logs.records if r.levelno >= logging.ERROR]

    def warnings(self) -> list[str]:
        return [r.getMessage() for r in self.logs.records if r.levelno == logging.WARNING]


_ACTIVE: list[RecordingMocks] = []
_REGISTERED_ON: list[object] = []


def _dispatch(args: pulumi.ResourceTransformationArgs) -> None:
    if _ACTIVE:
        _ACTIVE[-1].transformation(args)


def run(build: Callable[[], T], outputs: Callable[[T], dict[str, Any]] | None = None, *,
        preview: bool = False, stack: str = "test", expect_error: bool = False,
        stack_outputs: dict[str, Any] | None = None) -> Harness[T]:
    """Build resources under fresh mocks and wait for every registration.

    ``outputs(result)`` may return a dict of Outputs; their resolved values land in
    ``Harness.values`` (``None`` where unknown). With ``expect_error`` an exception from `build`
    (a RunError at the end of the program) is kept in ``Harness.error`` after registrations finish.
    """
    mocks = RecordingMocks(stack_outputs) if stack_outputs else RecordingMocks()
    logger = logging.getLogger(f"tkf-test-{id(mocks)}")
    logger.propagate = False
    logs = _Collect()
    logger.addHandler(logs)
    pulumi.runtime.set_mocks(mocks, project="tkf-infra", stack=stack, preview=preview, logger=logger)
    root = pulumi.runtime.get_root_resource()
    if not _REGISTERED_ON or _REGISTERED_ON[-1] is not root:
        pulumi.runtime.register_stack_transformation(_dispatch)
        _REGISTERED_ON.append(root)
    h: Harness[T] = Harness(mocks, logs)

    def program() -> Any:
        try:
            h.result = build()
        except Exception as exc:
            if not expect_error:
                raise
            h.error = exc
        outs = outputs(h.result) if outputs else {}  # type: ignore[arg-type]
        if not outs:
            return None
        return pulumi.Output.all(**outs).apply(lambda vals: h.values.update(vals))

    _ACTIVE.append(mocks)
    try:
        pulumi.runtime.test(program)()  # type: ignore[no-untyped-call]
    finally:
        _ACTIVE.remove(mocks)
        logger.removeHandler(logs)
    mocks.finish()
    return h


def unwrap_secrets(value: Any) -> Any:
    """The plain values of secret-wrapped inputs, for schema checks of the objects a cluster receives.

    A secret travels as a two-key envelope (a 32-hex signature key and ``value``); detected by shape,
    so no SDK constant is copied here.
    """
    if isinstance(value, dict):
        if len(value) == 2 and "value" in value and any(len(k) == 32 and k.isalnum() for k in value if k != "value"):
            return unwrap_secrets(value["value"])
        return {k: unwrap_secrets(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap_secrets(v) for v in value]
    return value


def prune_nulls(value: Any) -> Any:
    """Drop null fields as the API server does before validating against a schema."""
    if isinstance(value, dict):
        return {k: prune_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [prune_nulls(v) for v in value]
    return value


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
              **overrides: Any) -> dict[str, Any]:
    """A stack document with an H100 pool (3 nodes x 8), every platform piece already installed."""
    doc: dict[str, Any] = {
        "cluster": {"mode": "render", "renderDir": "rendered/test"},
        "nodePools": [{"name": "h100", "gpuProduct": "H100-80GB", "gpusPerNode": 8, "nodeCount": 3}],
        # settings.Component requires `version` once a piece is spelled out: reuse the defaults.
        "platform": {k: {"alreadyInstalled": installed, "version": v["version"]}
                     for k, v in Platform().model_dump(by_alias=True).items() if isinstance(v, dict)},
        "serving": {"backend": backend, "allowCpu": True},
        "models": [dict(m) for m in models],
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(doc.get(key), dict):
            doc[key] = {**doc[key], **value}
        else:
            doc[key] = value
    return doc


def program(doc: dict[str, Any], *, lock: Any = None, api_key: str | None = "unit-test-api-key",
            ec2_client: Any = None, preview: bool = False, outputs: Callable[[Any], dict[str, Any]] | None = None,
            previous: dict[str, Any] | None = None, api_key_next: str | None = None,
            api_key_previous: str | None = None, stack: str = "test") -> Harness[Any]:
    """The whole program (`tkf_infra.program.run`) on a stack document, under mocks, as stack ``stack``.

    A run that leaves something out ends in a RunError after every registration; it is kept in
    ``Harness.error`` and ``Harness.result`` is then None (the resources are all recorded).
    ``previous``: the stack's outputs from its last run (what `readStackOutputs` answers).
    ``api_key*``: the stack's `apiKey`, `apiKeyNext`, `apiKeyPrevious` secrets.
    """
    from tkf_infra.config.api_keys import ApiKeys
    from tkf_infra.hub.lock import load_lock
    from tkf_infra.program import Edge
    from tkf_infra.program import run as run_program

    def build() -> Any:
        # Made inside the mocked run, like every Output the program makes from it: outside it there may
        # be no event loop (a test before may have run asyncio.run(), which leaves none behind).
        keys = ApiKeys(api_key, api_key_next, api_key_previous) if api_key else None
        edge = Edge(settings=doc, lock=lock if lock is not None else load_lock(), ec2_client=ec2_client,
                    api_keys=keys, read_api_key=False)
        return run_program(edge)

    return run(build, outputs, preview=preview, stack=stack, expect_error=True, stack_outputs=previous)
