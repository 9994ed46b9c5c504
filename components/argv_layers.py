"""What each program between a catalog string and vLLM's argv does to a word, and the encoding that undoes it.

Why this exists: an ``extraArgs`` value or a JSON flag (``--speculative-config``,
``--override-generation-config``) is re-read by up to three programs before vLLM sees it, and each
would change it silently — or run it:

- **KServe's controller** renders the merged ``LLMInferenceService`` spec (our ``spec.template``
  included) as one Go ``text/template`` (``ReplaceVariables``, ``pkg/controller/v1alpha2/llmisvc/
  config_merge.go`` at v0.20.0, over the ``json.Marshal`` of the spec): a ``{{`` in any of our
  strings is an action, evaluated with ``missingkey=error``;
- **the kubelet** expands ``$(VAR)`` in ``command`` and ``args`` from the container's env and turns
  ``$$`` into ``$`` (k8s.io/kubernetes ``third_party/forked/golang/expansion``);
- **KServe's single-node preset** (``kserve-config-llm-template``) ends in ``eval "exec vllm serve …
  $@"``: bash joins the arguments with spaces and parses the result again, so a space splits a
  word and ``$(…)``, backticks or ``;`` run in the pod that holds the API key and the HF token.

Each ``for_*`` function is the inverse of one layer; a path composes them innermost (last reader)
first. ``tests/test_argv_layers.py`` runs the layers for real (bash, and the kubelet's and Go's
rules as written upstream) over hostile strings; the API-server tier reads back what KServe's own
controller wrote.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from enum import Enum

#: Go text/template: an action that prints the two braces, in a raw string (json.Marshal leaves
#: backticks alone, and a raw string cannot hold an escape that JSON would alter).
_GO_TEMPLATE_BRACES = "{{`{{`}}"
#: A ``$`` the kubelet reads as syntax: followed by ``$`` (an escaped ``$``) or ``(`` (a reference).
_KUBELET_SPECIAL = re.compile(r"\$(?=[$(])")


def for_go_template(word: str) -> str:
    """Survives KServe's ``ReplaceVariables``: every ``{{`` becomes an action printing ``{{``."""
    return word.replace("{{", _GO_TEMPLATE_BRACES)


def for_kubelet(word: str) -> str:
    """Survives the kubelet's expansion: a ``$`` it would read as the start of ``$$`` or ``$(VAR)`` is
    written ``$$`` (which it turns back into ``$``); any other ``$`` is left as it is, as the kubelet
    leaves it, so a shell line such as ``${LWS_GROUP_SIZE}`` stays readable in the pod spec."""
    return _KUBELET_SPECIAL.sub("$$", word)


def for_shell(word: str) -> str:
    """Survives one parse by a POSIX shell (``eval``): one word, nothing expanded (``shlex.quote``)."""
    return shlex.quote(word)


class ArgvPath(Enum):
    """The programs a container's ``args`` pass through before they are vLLM's argv."""

    EXEC = "exec"
    """Our own Deployment: the kubelet, then exec (no shell)."""
    KSERVE_EVAL = "kserve-eval"
    """KServe's single-node preset: Go template, kubelet, then ``eval "… $@"``."""
    KSERVE_ARGS = "kserve-args"
    """Our pipeline-parallel preset (components/data/pipeline-parallel-preset.yaml): Go template,
    kubelet, then ``"$@"`` (quoted: no second parse)."""


def encode(words: Iterable[str], path: ArgvPath) -> list[str]:
    """The ``args`` to write so that vLLM receives exactly ``words``."""
    if path is ArgvPath.EXEC:
        return [for_kubelet(w) for w in words]
    if path is ArgvPath.KSERVE_EVAL:
        return [for_go_template(for_kubelet(for_shell(w))) for w in words]
    return [for_go_template(for_kubelet(w)) for w in words]


def env_reference(var: str, path: ArgvPath) -> str:
    """One argv word holding an env var's value, whatever the value is.

    Through a shell that parses again (``KSERVE_EVAL``) the reference is the shell's own, in double
    quotes, so the value is never parsed as code; elsewhere it is the kubelet's ``$(VAR)``.
    """
    if path is ArgvPath.KSERVE_EVAL:
        return for_go_template(for_kubelet(f'"${var}"'))
    return f"$({var})"


def shell_line(words: Iterable[str]) -> str:
    """Words as one ``sh -c`` line that a shell reads back as exactly those words."""
    return " ".join(for_shell(w) for w in words)
