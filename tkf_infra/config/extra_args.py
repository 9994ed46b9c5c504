"""What `extraArgs` may not pass: every spelling vLLM's parser has for a flag the platform or the flag table owns.

Why apart from the flag table (`tkf_infra.config.flags`): the table says what each catalog field
becomes; this module holds the other side of that contract — the flags no catalog field owns that the
platform sets or the fit check depends on (`PLATFORM_FLAGS`), and `vllm serve`'s own option strings at
the pinned release (`serve_options`, generated from its parser), so an alias such as `-tp` or a `--no-`
form cannot slip a sized flag past the check.
"""

from __future__ import annotations

import difflib
import functools
import json
from collections.abc import Mapping
from pathlib import Path

from tkf_infra.config.flags import rows
from tkf_infra.names import SERVING_PORT

# Flags no catalog field owns, which the platform sets itself or which would change what the fit
# check sized without it knowing. `extraArgs` may not pass them (nor any other spelling vLLM's parser
# has for the same argument); the reason is the fix.
PLATFORM_FLAGS: dict[str, str] = {
    "--model": "set `repo` and `revision` instead",
    "--revision": "set `revision` instead",
    "--port": f"the platform serves on port {SERVING_PORT}",
    "--host": "the platform binds vLLM to all interfaces inside the pod",
    "--api-key": "the runtime API key comes from the `apiKey` secret stack setting",
    "--download-dir": "weights come from the shared weight cache",
    "--nnodes": "multi-node placement comes from `nodeCount`",
    "--node-rank": "multi-node placement comes from `nodeCount`",
    "--master-addr": "multi-node placement comes from `nodeCount`",
    "--headless": "multi-node placement comes from `nodeCount`",
    "--config": "a vLLM config file could set any flag behind the fit check's back; use catalog fields",
    "--cpu-offload-gb": "offloading changes the weights on the GPU, which the fit check sizes",
    "--num-gpu-blocks-override": "the KV-cache budget is what the fit check sizes",
    "--compilation-config": "CUDA-graph capture sizes are part of the fit check's overhead",
    "--optimization-level": "CUDA-graph capture sizes are part of the fit check's overhead",
    "--cudagraph-capture-sizes": "CUDA-graph capture sizes are part of the fit check's overhead",
    "--max-cudagraph-capture-size": "CUDA-graph capture sizes are part of the fit check's overhead",
    # vllm/config/parallel.py@v0.32.0:945-949: world size = pipeline x tensor x prefill-context parallel.
    "--prefill-context-parallel-size": "it multiplies the GPUs a replica uses beyond what its pods request and the "
                                       "fit check sizes; set tensorParallelSize / pipelineParallelSize instead",
    "--data-parallel-size-local": "data parallelism comes from `dataParallelSize`",
    "--quantization-config": "online quantization changes the weights the fit check sizes; set `quantization`",
    "--hf-overrides": "it changes the model config the fit check sizes from models.lock.json",
    # The LoRA flags a `lora` block does not set change the slots the fit check sizes (tkf_infra/sizing/lora.py).
    "--fully-sharded-loras": "the fit check sizes vLLM's default LoRA layers (A replicated across TP); use `lora`",
    "--lora-dtype": "the LoRA slots are sized in the model's dtype; use `lora`",
    "--lora-target-modules": "the fit check sizes a LoRA slot on every layer vLLM supports; use `lora`",
    "--max-lora-cls-labels": "LoRA classification heads are not sized; use `lora`",
    "--enable-tower-connector-lora": "LoRA slots on the vision tower are not sized; use `lora`",
    "--specialize-active-lora": "more CUDA graphs per LoRA count than the fit check sizes; use `lora`",
    "--default-mm-loras": "adapters come from `lora.adapters`, pinned and cached",
    "--enable-mixed-moe-lora-format": "MoE LoRA slots are not sized; use `lora` on a dense model",
    "--enable-moe-shared-loras": "MoE LoRA slots are not sized; use `lora` on a dense model",
    "--limit-mm-per-prompt": "the multimodal encoder cache is part of what the fit check sizes",
    "--load-format": "weights are loaded from the weight cache in the format the fit check sized",
    "--cpu-offload-params": "offloading changes the weights on the GPU, which the fit check sizes",
    "--kv-offloading-size": "KV-cache offloading moves KV cache to host memory the pod does not request and the "
                            "fit check does not size",
    "--kv-offloading-backend": "KV-cache offloading moves KV cache to host memory the pod does not request and "
                               "the fit check does not size",
    "--decode-context-parallel-size": "it shards the KV cache across ranks other than the fit check sized",
    "--kv-cache-dtype-skip-layers": "layers kept at full-precision KV change the KV cache the fit check sized with "
                                    "`kvCacheDtype`",
    "--mamba-cache-dtype": "the recurrent state's dtype is part of what the fit check sizes",
    "--mamba-ssm-cache-dtype": "the recurrent state's dtype is part of what the fit check sizes",
}

#: The release the option table below was generated from (tests/test_extra_args_spellings.py: = VLLM_RELEASE).
SERVE_OPTIONS_VLLM = "0.32.0"
SERVE_OPTIONS_FILE = Path(__file__).parent / "data" / f"vllm_serve_options-{SERVE_OPTIONS_VLLM}.json"


@functools.cache
def serve_options() -> Mapping[str, str]:
    """Every option string of `vllm serve`'s parser → its argparse dest, at the pinned release.

    Generated from vLLM's own parser by scripts/vllm_serve_options.py (aliases such as `-q`, `-tp`,
    `-sc`, `-cc`, the `--no-` forms of boolean flags); tests/vllm/test_serve_options.py regenerates it
    from the installed vLLM and fails when it differs."""
    data = json.loads(SERVE_OPTIONS_FILE.read_text())
    options: dict[str, str] = data["options"]
    return options


def _owned_dests() -> dict[str, str]:
    """argparse dest → the reason `extraArgs` may not set it."""
    options = serve_options()
    out: dict[str, str] = {}
    named = [(name, why) for name, why in PLATFORM_FLAGS.items()]
    for r in rows():
        why = f"set `{r.key}` instead" + (" (the fit check sizes the model with it)" if r.flag.sized else "")
        named += [(name, why) for name in (r.flag.flag, *r.flag.aliases) if name]
    for name, why in named:
        if name in options:
            out.setdefault(options[name], why)
    return out


def owned_flags() -> dict[str, str]:
    """Every spelling `extraArgs` may not use, with the reason a user reads.

    Every option string of vLLM's parser whose dest is an owned flag's dest (so `-q`, `-tp`, `-sc`,
    `--no-enable-expert-parallel` …), plus the table's own names."""
    return dict(_owned_flags())


@functools.cache
def _owned_flags() -> dict[str, str]:
    dests = _owned_dests()
    out = {opt: dests[dest] for opt, dest in serve_options().items() if dest in dests}
    out.update({name: why for name, why in PLATFORM_FLAGS.items() if name not in out})
    for r in rows():
        why = f"set `{r.key}` instead" + (" (the fit check sizes the model with it)" if r.flag.sized else "")
        out.update({name: why for name in (r.flag.flag, *r.flag.aliases) if name and name not in out})
    return out


def _spelled(arg: str) -> str | None:
    """The option name an argv word spells after vLLM's FlexibleArgumentParser rewrote it, else None (a value).

    Read at vLLM 0.32.0, vllm/utils/argparse_utils.py `FlexibleArgumentParser.parse_args`:
    - a `--` word has underscores turned into dashes between the `--` and its first `.`, in the part
      before `=` only (lines 337-357: `--max_num_seqs=8` is `--max-num-seqs=8`);
    - a dotted `--x.y[+] v` / `--x.y=v` is folded into `--x '{"y": v}'` (lines 425-463), so its option is
      `--x` (`--speculative-config.method mtp` sets `--speculative-config`);
    - `-O3`, `-O=3`, `-Odecode` and `-O 3` become `--optimization-level` (lines 358-369).
    argparse then splits `--opt=value` / `-o=value` at the first `=`.
    """
    if not arg.startswith("-") or arg in ("-", "--") or arg.lstrip("-").replace(".", "").isdigit():
        return None
    if arg.startswith("--"):
        key = arg.split("=", 1)[0]
        return "--" + key[2:].split(".", 1)[0].replace("_", "-")
    if arg.startswith("-O"):
        return "--optimization-level"
    return arg.split("=", 1)[0]


def resolve_option(arg: str) -> tuple[str, ...]:
    """The option strings of vLLM's parser an argv word may set: none for a value or an unknown flag.

    One entry for an exact spelling; for an abbreviation every option it may expand to. argparse (with
    vLLM's `allow_abbrev` on) expands an unambiguous prefix of a long option (`--quant` is
    `--quantization`), and for a single-dash word takes an option it prefixes (`-t` is `-tp`) or, for a
    one-letter option, the rest of the word as its value (`-qawq` is `-q awq`): Lib/argparse.py
    `_parse_optional` / `_get_option_tuples` (Python 3.11-3.13)."""
    name = _spelled(arg)
    if name is None or name in ("-", "--"):
        return ()
    options = serve_options()
    if name in options:
        return (name,)
    if name.startswith("--"):
        return tuple(sorted(o for o in options if o.startswith(name) and o.startswith("--")))
    hits = {o for o in options if o.startswith(name) and not o.startswith("--")}
    if name[:2] in options:
        hits.add(name[:2])
    return tuple(sorted(hits))


def extra_args_dests(args: list[str]) -> dict[str, str]:
    """argparse dest → the option string each `extraArgs` word sets (exact spellings and unambiguous
    abbreviations only: what vLLM will really receive)."""
    options = serve_options()
    out: dict[str, str] = {}
    for arg in args:
        hits = resolve_option(arg)
        if len({options[h] for h in hits}) == 1:
            out[options[hits[0]]] = hits[0]
    return out


def extra_args_problems(args: list[str]) -> list[str]:
    """Why each `extraArgs` word may not be passed (empty when all are allowed)."""
    owned = _owned_flags()
    problems: list[str] = []
    for arg in args:
        name = _spelled(arg)
        if name is None:
            continue
        hits = resolve_option(arg)
        hit = owned.get(name)
        if hit is None and name.startswith("--no-"):  # a negation vLLM does not define is still ours to refuse
            hit = owned.get("--" + name.removeprefix("--no-"))
        if hit is None:
            ours = [h for h in hits if h in owned]
            several = len({serve_options()[h] for h in hits}) > 1
            if ours and several:  # argparse refuses it as ambiguous, at start-up: say so now, with our flag
                hit = (f"it abbreviates several options ({', '.join(hits[:4])}{' …' if len(hits) > 4 else ''}), "
                       f"among them {ours[0]} ({owned[ours[0]]})")
            elif ours:
                hit = f"vLLM's parser reads it as {ours[0]} ({owned[ours[0]]})"
        if hit is not None:
            problems.append(f"extraArgs contains {arg!r}, a flag the platform owns: {hit}; remove it")
    return problems


def unknown_option_problems(args: list[str]) -> list[str]:
    """`extraArgs` words vLLM's parser would refuse at start-up (the pod then restarts forever), named at preview:
    a word that looks like a flag but is no option of `vllm serve` at the release of `serve_options` (two flags
    typed as one word, a typo), or that abbreviates several of its options. Owned flags are `extra_args_problems`'.

    argparse reads such a word as an unknown option, or (with a space in it) as one more positional, and exits
    with "unrecognized arguments" or "ambiguous option" (Lib/argparse.py `_parse_optional`, Python 3.11-3.13)."""
    owned = _owned_flags()
    options = serve_options()
    problems: list[str] = []
    for arg in args:
        name = _spelled(arg)
        if name is None or name in owned or any(h in owned for h in resolve_option(arg)):
            continue
        hits = resolve_option(arg)
        vllm = f"`vllm serve` of vLLM {SERVE_OPTIONS_VLLM}"
        if len({options[h] for h in hits}) > 1:
            problems.append(f"word {arg!r} abbreviates several options of {vllm} ({', '.join(hits[:4])}"
                            f"{' …' if len(hits) > 4 else ''}), which vLLM refuses as ambiguous at start-up; spell the "
                            "option out")
        elif not hits and len(words := arg.split()) > 1:
            problems.append(f"word {arg!r} holds {len(words)} words in one: vLLM receives it as one "
                            f"argument, which is no option of {vllm}, and exits at start-up; give each flag and "
                            f"each value as its own list item: {words!r}")
        elif not hits:
            close = difflib.get_close_matches(name, [o for o in options if o.startswith("--")], n=1, cutoff=0.75)
            hint = f"did you mean {close[0]}? " if close else ""
            problems.append(f"word {arg!r} is no option of {vllm}, which exits at start-up on it; {hint}"
                            "list the options with `vllm serve --help`")
    return problems
