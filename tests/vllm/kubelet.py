"""A container of a pod the API server stores, run on this host the way the kubelet execs it.

Why: on the ``kserve`` backend the pod that runs vLLM is written by KServe's controller (its preset
merged with our ``spec.template``, its Go template evaluated), on the ``vllm`` backend by the
kube-controller-manager from our Deployment. Running what those controllers wrote, read back from the
server, checks the whole chain; running our render (or tests/vllm/pod.py's emulation of KServe's merge)
checks only our half of it.

What the kubelet does to the container, and what is done here:

- env: ``value`` as written, ``valueFrom.secretKeyRef`` read from the Secret *on the server*
  (:func:`server_secrets`, then tests/vllm/pod.py's ``resolve_env``);
- argv: ``command`` + ``args``, each ``$(VAR)`` expanded from that env (``kubelet_expand``), then
  exec'd with no shell of the kubelet's own: KServe's preset's ``/bin/bash -c`` is this host's real
  bash, and ``vllm`` is found on ``PATH`` as in the image, the vLLM virtualenv's ``bin`` first.

The only substitutions (tests/vllm/pod.py ``localize``, each counted, each exactly once): the model
path ``/mnt/models`` after ``serve`` becomes the tests' tiny model directory, the ``--port`` of the
probes 0, so that vLLM binds a port of its own (tests/ports.py); the pod's emptyDir mounts become fresh
directories (``TMPDIR`` for ``/tmp``); and ``HOST_ENV`` (tests/vllm/server.py says why) is added.
Nothing else of the pod spec is changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.kube.client import KubeClient
from tests.vllm.pod import Manifests, PodCommand, _mounts, _probes, kubelet_expand, localize, resolve_env
from tests.vllm.server import Service, start_vllm


def server_secrets(kube: KubeClient, namespace: str, env: list[dict[str, Any]]) -> Manifests:
    """The Secrets a container's env references, as the server stores them (by ``("Secret", name)``).
    A reference to a Secret that does not exist fails here, as the kubelet would refuse to start it."""
    refs = {v["valueFrom"]["secretKeyRef"]["name"] for v in env if "secretKeyRef" in v.get("valueFrom", {})}
    out: Manifests = {}
    for name in sorted(refs):
        secret = kube.get("v1", "Secret", name, namespace)
        assert secret is not None, f"the pod's env references Secret {namespace}/{name}, which the server does not have"
        out[("Secret", name)] = secret
    return out


def _container(pod_spec: Mapping[str, Any], name: str) -> dict[str, Any]:
    found = [c for c in pod_spec["containers"] if c["name"] == name]
    assert len(found) == 1, f"expected one container {name!r}, found {[c['name'] for c in pod_spec['containers']]}"
    return dict(found[0])


def pod_process(kube: KubeClient, namespace: str, pod_spec: Mapping[str, Any], container: str = "main") -> PodCommand:
    """``container``'s process as the kubelet starts it from ``pod_spec`` (a Pod's, or a workload's template):
    argv (command + args, ``$(VAR)`` expanded), env (Secrets read from the server), mounts and probes."""
    main = _container(pod_spec, container)
    unsupported = [v["name"] for v in main.get("env", []) if set(v.get("valueFrom", {})) - {"secretKeyRef"}]
    assert not unsupported, f"env {unsupported} use a valueFrom other than secretKeyRef: teach pod_process it"
    env = resolve_env(main.get("env", []), server_secrets(kube, namespace, main.get("env", [])))
    argv = [kubelet_expand(a, env) for a in [*main.get("command", []), *main.get("args", [])]]
    assert argv, f"container {container!r} has neither command nor args: the image's entrypoint would run"
    return PodCommand(argv, env, _mounts(main, pod_spec), _probes(main))


def run_pod(cmd: PodCommand, *, venv: Path, model_dir: Path, workdir: Path) -> Service:
    """Start the container's process with the real vLLM (see the module doc for the substitutions) and
    wait for ``/health``."""
    argv, env = localize(cmd, model_dir=model_dir, port=0, scratch=workdir)
    return start_vllm(argv, env, port=None, api_key=cmd.env.get("VLLM_API_KEY"), venv=venv, workdir=workdir)


def process_argv(pid: int) -> list[str]:
    """What vLLM itself was started with, from ``/proc/PID/cmdline``: ``["vllm", "serve", ...]``.

    The pod's first process is a shell (KServe's preset) that must ``exec`` vLLM, so ``pid`` is vLLM's own
    process once it answers: its cmdline is the interpreter, the ``vllm`` script, then vLLM's argv — the
    words after every shell's parsing, byte for byte. A shell that forked instead fails here."""
    words = [w.decode() for w in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]]
    scripts = [i for i, w in enumerate(words) if Path(w).name == "vllm"]
    assert scripts, f"process {pid} is not vLLM (did the pod's shell exec it?): {words[:4]}"
    return ["vllm", *words[scripts[0] + 1 :]]
