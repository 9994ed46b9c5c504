"""What a rendered serving pod runs: its container's command, args and env, read from the YAML the
program wrote, resolved the way Kubernetes (and, for the ``kserve`` backend, KServe) would.

Nothing here knows our flags: the test takes whatever the program rendered and only substitutes the
model path and the port, so a renamed flag, a wrong env var or a bad secret reference shows up as a
vLLM that refuses to start or answers differently.

- ``vllm`` backend: the Deployment's container ``main`` as is.
- both: ``$(VAR)`` references in command and args are expanded from the container's env, as the
  kubelet does (a key rotation passes its two keys that way), and the metrics sidecar (container
  ``metrics``, :func:`sidecar_command`) is read from our own pod template, its source from the rendered
  ConfigMap it mounts (:func:`project_config_maps`).
- ``kserve`` backend: KServe v0.20.0 runs its ``kserve-config-llm-template`` preset's container
  ``main`` (command: a bash script that ends in ``exec vllm serve /mnt/models ... $@``) with our
  ``LLMInferenceService`` ``spec.template`` merged over it (strategic merge by container name, env
  by variable name; our ``args`` follow the preset's command). The preset's command is a Go template
  that KServe executes over the JSON of the preset (``ReplaceVariables`` in
  ``pkg/controller/v1alpha2/llmisvc/config_merge.go``); :func:`render_go_template` evaluates exactly
  the expressions it uses and fails on any other, so a changed preset cannot be half-understood.

The emulation is kept because the rest of this tier starts pods without an API server (seconds, not
minutes per stack); tests/controllers/test_vllm_controller_pods.py checks it against the pod KServe's
own controller writes for every profile (argv, env, probes, mounts), and starts real vLLM from the
controller-written pods of both backends (tests/vllm/kubelet.py).
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# Where KServe puts the model and the vllm backend mounts the weight cache: the one path replaced.
from components.pod_meta import MODEL_MOUNT
from tkf_infra.config import ModelEntry
from tkf_infra.names import workload

DATA = Path(__file__).parent / "data"
#: The preset KServe uses for a single-node service, vendored (see data/SOURCES.md).
KSERVE_PRESETS = DATA / "kserve-config-llm-template.yaml"
#: KServe's ``enableLLMInferenceServiceTLS`` ingress setting: unset (false) in the v0.20.0 chart.
KSERVE_ENABLE_TLS = False

Manifests = dict[tuple[str, str], dict[str, Any]]


def kubelet_expand(text: str, env: Mapping[str, str]) -> str:
    """``$(VAR)`` -> the variable's value, ``$$`` -> ``$``, an unknown ``$(VAR)`` left as written: the
    kubelet's expansion of command and args (k8s.io/kubernetes ``third_party/forked/golang/expansion``)."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
            continue
        if text.startswith("$(", i) and (end := text.find(")", i + 2)) != -1:
            name = text[i + 2 : end]
            out.append(env[name] if name in env else text[i : end + 1])
            i = end + 1
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


@dataclass(frozen=True)
class PodCommand:
    """A container's process as the kubelet starts it: argv (command + args) and the env."""

    argv: list[str]
    env: dict[str, str]
    mounts: dict[str, str]  # mountPath -> volume kind ("emptyDir", "persistentVolumeClaim", ...)
    probes: dict[str, dict[str, Any]]  # startupProbe / livenessProbe / readinessProbe -> httpGet

    @property
    def port(self) -> int:
        """The port the cluster talks to: every probe's, which must agree."""
        ports = {int(p["port"]) for p in self.probes.values()}
        assert len(ports) == 1, f"probes disagree on the port: {self.probes}"
        return ports.pop()


def load_manifests(render_dir: Path) -> Manifests:
    out: Manifests = {}
    for path in sorted(render_dir.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out[(doc["kind"], doc["metadata"]["name"])] = doc
    return out


def _main_container(pod_spec: Mapping[str, Any]) -> dict[str, Any]:
    (main,) = [c for c in pod_spec["containers"] if c["name"] == "main"]
    return dict(main)


def resolve_env(env: Sequence[Mapping[str, Any]], manifests: Manifests) -> dict[str, str]:
    """Values as the kubelet sets them; ``secretKeyRef`` read from the rendered Secret."""
    out: dict[str, str] = {}
    for var in env:
        if "valueFrom" not in var:
            out[var["name"]] = str(var.get("value", ""))
            continue
        ref = var["valueFrom"]["secretKeyRef"]  # the only kind of reference the program renders
        secret = manifests[("Secret", ref["name"])]
        if ref["key"] in secret.get("stringData", {}):
            out[var["name"]] = secret["stringData"][ref["key"]]
        else:
            out[var["name"]] = base64.b64decode(secret["data"][ref["key"]]).decode()
    return out


def _mounts(container: Mapping[str, Any], pod_spec: Mapping[str, Any]) -> dict[str, str]:
    kinds = {v["name"]: next(k for k in v if k != "name") for v in pod_spec.get("volumes", [])}
    return {m["mountPath"]: kinds[m["name"]] for m in container.get("volumeMounts", [])}


def _probes(*containers: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """httpGet of each probe; a later container's probe wins (our template over KServe's preset)."""
    out: dict[str, dict[str, Any]] = {}
    for c in containers:
        out.update({k: dict(c[k]["httpGet"]) for k in ("startupProbe", "livenessProbe", "readinessProbe") if k in c})
    return out


def _started(argv: list[str], env: Sequence[Mapping[str, Any]],
             manifests: Manifests) -> tuple[list[str], dict[str, str]]:
    """argv and env as the kubelet starts the process: env resolved, then ``$(VAR)`` expanded in argv."""
    values = resolve_env(env, manifests)
    return [kubelet_expand(a, values) for a in argv], values


def deployment_command(manifests: Manifests, workload: str) -> PodCommand:
    """The ``vllm`` backend: the Deployment's container, command + args, env resolved."""
    spec = manifests[("Deployment", workload)]["spec"]["template"]["spec"]
    main = _main_container(spec)
    argv, env = _started([*main["command"], *main.get("args", [])], main.get("env", []), manifests)
    return PodCommand(argv, env, _mounts(main, spec), _probes(main))


def pod_template(manifests: Manifests, workload: str) -> dict[str, Any]:
    """Our own pod spec of the workload: the Deployment's template, or the LLMInferenceService's."""
    if ("Deployment", workload) in manifests:
        return dict(manifests[("Deployment", workload)]["spec"]["template"]["spec"])
    return dict(manifests[("LLMInferenceService", workload)]["spec"]["template"])


def sidecar_command(manifests: Manifests, workload: str, name: str = "metrics") -> PodCommand:
    """A sidecar of our pod template (the preset has none: KServe adds ours by name), as started."""
    (c,) = [c for c in pod_template(manifests, workload)["containers"] if c["name"] == name]
    argv, env = _started([*c["command"], *c.get("args", [])], c.get("env", []), manifests)
    return PodCommand(argv, env, {}, {})


def project_config_maps(manifests: Manifests, workload: str, root: Path, container: str = "metrics") -> dict[str, Path]:
    """The ConfigMap volumes ``container`` of our pod template mounts, written under ``root`` as the kubelet
    projects them (each key of the rendered ConfigMap a file): mountPath -> that directory. A volume naming
    a ConfigMap the program did not render fails here, as the pod would fail to start."""
    pod = pod_template(manifests, workload)
    (c,) = [c for c in pod["containers"] if c["name"] == container]
    volumes = {v["name"]: v["configMap"] for v in pod.get("volumes", []) if "configMap" in v}
    out: dict[str, Path] = {}
    for mount in c.get("volumeMounts", []):
        if mount["name"] not in volumes:
            continue
        cm_name = volumes[mount["name"]]["name"]
        assert ("ConfigMap", cm_name) in manifests, f"{workload}'s pod mounts ConfigMap {cm_name}, not rendered"
        directory = root / mount["name"]
        directory.mkdir(parents=True, exist_ok=True)
        for key, text in manifests[("ConfigMap", cm_name)].get("data", {}).items():
            (directory / key).write_text(text)
        out[mount["mountPath"]] = directory
    return out


def localize(cmd: PodCommand, *, model_dir: Path, port: int, scratch: Path) -> tuple[list[str], dict[str, str]]:
    """argv and env to run the pod's process on this host. The only substitutions are the model
    path and the port (each must occur exactly once, as a ``vllm serve`` argument; LoRA adapters' paths
    under the model's mount follow the model); the pod's emptyDir
    mounts become fresh directories under ``scratch`` (env values pointing into them follow, and
    ``TMPDIR`` stands for the ``/tmp`` mount, which a host process cannot get otherwise)."""
    serve_model = re.compile(rf"(?<=\bserve ){re.escape(MODEL_MOUNT)}(?=[\s\\]|$)")
    port_flag = re.compile(rf"(?<=--port[ =]){cmd.port}\b")
    argv, hits = [], {"model": 0, "port": 0}
    for i, arg in enumerate(cmd.argv):
        previous = cmd.argv[i - 1]
        if (arg == MODEL_MOUNT and previous == "serve") or (arg == str(cmd.port) and previous == "--port"):
            hits["model" if arg == MODEL_MOUNT else "port"] += 1
            argv.append(str(model_dir) if arg == MODEL_MOUNT else str(port))
            continue
        arg, n_model = serve_model.subn(str(model_dir), arg)
        arg, n_port = port_flag.subn(str(port), arg)
        arg = arg.replace(f"={MODEL_MOUNT}/", f"={model_dir}/")  # LoRA adapters: `--lora-modules name=<mount>/...`
        hits["model"] += n_model
        hits["port"] += n_port
        argv.append(arg)
    assert hits == {"model": 1, "port": 1}, f"expected one model path and one --port {cmd.port} in {cmd.argv}"
    dirs = {mount: scratch / mount.strip("/").replace("/", "_") for mount, kind in cmd.mounts.items()
            if kind == "emptyDir" and mount != "/dev/shm"}
    assert "/tmp" in dirs, f"the pod's /tmp is not an emptyDir: {cmd.mounts}"
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    env = {}
    for name, value in cmd.env.items():
        for mount, d in dirs.items():
            if value == mount or value.startswith(mount + "/"):
                value = str(d) + value[len(mount):]
        env[name] = value
    env["TMPDIR"] = str(dirs["/tmp"])
    return argv, env


def localize_sidecar(cmd: PodCommand, *, port: int, upstream_port: int, files: Mapping[str, Path]) -> list[str]:
    """The metrics sidecar's argv on this host: its ``--listen`` port and, in ``--upstream``, vLLM's port
    (localhost, as in the pod) replaced — each exactly once — and a path under a ConfigMap mount
    (``files``: :func:`project_config_maps`) pointed at its projection; everything else as rendered."""
    argv, hits = list(cmd.argv), {"--listen": 0, "--upstream": 0}
    for i in range(1, len(argv)):
        flag = argv[i - 1]
        if flag == "--listen":
            host, _, _ = argv[i].rpartition(":")
            argv[i] = f"{host}:{port}"
        elif flag == "--upstream":
            argv[i], n = re.subn(r"^(http://127\.0\.0\.1:)\d+/", rf"\g<1>{upstream_port}/", argv[i])
            assert n == 1, f"the sidecar's upstream is not vLLM on localhost: {argv[i]}"
        else:
            for mount, directory in files.items():
                if argv[i].startswith(mount + "/"):
                    argv[i] = str(directory) + argv[i][len(mount):]
            continue
        hits[flag] += 1
    assert hits == {"--listen": 1, "--upstream": 1}, f"expected one --listen and one --upstream in {argv}"
    return argv


# --------------------------------------------------------------------------------------------
# KServe
# --------------------------------------------------------------------------------------------


def llmisvc_doc(entry: ModelEntry, main: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """The fields of our LLMInferenceService that KServe's presets read (components/model_serving.py),
    with ``main`` as the template's container."""
    spec: dict[str, Any] = {"model": {"name": entry.served_name}, "template": {"containers": [dict(main)]}}
    if not entry.is_cpu:
        spec["parallelism"] = {"tensor": entry.tensor_parallel_size}
        if entry.pipeline_parallel_size > 1:
            spec["parallelism"]["pipeline"] = entry.pipeline_parallel_size
    return {"metadata": {"name": workload(entry.name), "namespace": namespace}, "spec": spec}


def kserve_preset(path: Path = KSERVE_PRESETS) -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return dict(doc)


def _shutdown_timeout(template: Mapping[str, Any], pre_stop: int) -> int:
    """KServe's ``shutdownTimeout``: max(0, tgps - preStop - min(5, tgps)), tgps defaulting to 60."""
    tgps = int(template.get("terminationGracePeriodSeconds", 60))
    return max(0, tgps - pre_stop - min(5, tgps))


def template_functions(llmisvc: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, bool]]:
    """Values and conditions of the expressions the v0.20.0 preset uses, for one LLMInferenceService."""
    spec, meta = llmisvc["spec"], llmisvc["metadata"]
    parallelism = spec.get("parallelism") or {}
    values = {
        ".Spec.Model.Name": spec["model"]["name"],
        ".ObjectMeta.Namespace": meta["namespace"],
        ".Spec.Parallelism.Tensor": str(parallelism.get("tensor", "")),
        # Our pipeline-parallel preset (components/data/pipeline-parallel-preset.yaml) uses these two.
        "or .Spec.Parallelism.Tensor 1": str(parallelism.get("tensor") or 1),
        "or .Spec.Parallelism.Pipeline 1": str(parallelism.get("pipeline") or 1),
        "shutdownTimeout .Spec.Template 15": str(_shutdown_timeout(spec.get("template", {}), 15)),
        # No KV-cache offloading in our spec: KServe's kvTransferConfig returns "" for a nil spec.
        "kvTransferConfig .Spec.KVCacheOffloading": "" if "kvCacheOffloading" not in spec else "<unsupported>",
        "ChildName .ObjectMeta.Name `-kserve-self-signed-certs`": f"{meta['name']}-kserve-self-signed-certs",
    }
    conditions = {
        "and .Spec.Parallelism .Spec.Parallelism.Tensor": bool(parallelism.get("tensor")),
        ".GlobalConfig.EnableTLS": KSERVE_ENABLE_TLS,
    }
    if values["kvTransferConfig .Spec.KVCacheOffloading"] == "<unsupported>":
        raise NotImplementedError("spec.kvCacheOffloading is rendered; teach template_functions its flag")
    return values, conditions


_ACTION = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.S)


def render_go_template(text: str, values: Mapping[str, str], conditions: Mapping[str, bool]) -> str:
    """Go ``text/template`` for the subset the preset uses: ``{{ expr }}``, ``{{ if cond }}...{{ end }}``
    (not nested), the ``{{-`` / ``-}}`` whitespace trims, and a raw-string constant (``{{`text`}}``
    prints ``text``: how components/argv_layers.py writes ``{{``). Unknown expressions raise KeyError."""
    out: list[str] = []
    pos, skipping, trim_next = 0, False, False
    for m in _ACTION.finditer(text):
        chunk = text[pos : m.start()]
        if trim_next:
            chunk = chunk.lstrip()
        if m.group(1):
            chunk = chunk.rstrip()
        if not skipping:
            out.append(chunk)
        expr = m.group(2)
        if expr.startswith("if "):
            skipping = not conditions[expr[3:].strip()]
        elif expr in ("end", "else"):
            skipping = (not skipping) if expr == "else" else False
        elif not skipping:
            raw = len(expr) >= 2 and expr[0] == expr[-1] == "`" and "`" not in expr[1:-1]
            out.append(expr[1:-1] if raw else values[expr])
        pos, trim_next = m.end(), bool(m.group(3))
    tail = text[pos:]
    out.append(tail.lstrip() if trim_next else tail)
    return "".join(out)


def kserve_command(manifests: Manifests, workload: str, preset: Mapping[str, Any] | None = None) -> PodCommand:
    """The ``kserve`` backend: the preset's container with our template merged over it, as KServe does
    (default preset: the single-node ``kserve-config-llm-template``).

    KServe templates the preset as JSON text (``json.Marshal`` then ``text/template``), so whitespace
    trims see ``\\n`` escapes, not newlines; the same is done here.
    """
    llmisvc = manifests[("LLMInferenceService", workload)]
    preset = preset or kserve_preset()
    values, conditions = template_functions(llmisvc)
    rendered = json.loads(render_go_template(json.dumps(preset["spec"]), values, conditions))
    base, ours = _main_container(rendered["template"]), _main_container(llmisvc["spec"]["template"])
    command = ours.get("command") or base["command"]
    # KServe templates the merged spec, ours included: our args pass through the same template.
    args: list[str] = (json.loads(render_go_template(json.dumps(ours["args"]), values, conditions)) if "args" in ours
                       else base.get("args", []))
    env = _merge_by_name(base.get("env", []), ours.get("env", []))
    pod = {"volumes": _merge_by_name(rendered["template"].get("volumes", []),
                                     llmisvc["spec"]["template"].get("volumes", []))}
    container = {"volumeMounts": _merge_mounts(base.get("volumeMounts", []), ours.get("volumeMounts", []))}
    argv, values = _started([*command, *args], env, manifests)
    return PodCommand(argv, values, _mounts(container, pod), _probes(base, ours))


def _merge_by_name(base: list[dict[str, Any]], ours: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Strategic merge of a list keyed by ``name`` (env, volumes): ours replaces, order kept."""
    merged = {v["name"]: v for v in base}
    merged.update({v["name"]: v for v in ours})
    return list(merged.values())


def _merge_mounts(base: list[dict[str, Any]], ours: list[dict[str, Any]]) -> list[dict[str, Any]]:
    merged = {m["mountPath"]: m for m in base}
    merged.update({m["mountPath"]: m for m in ours})
    return list(merged.values())
