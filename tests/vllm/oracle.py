"""vLLM's own command-line checks, run in the vLLM virtualenv: the oracle for every flag we render.

``<vllm-venv>/bin/python tests/vllm/oracle.py < cases.json`` reads ``[{"id": ..., "argv": ["vllm",
"serve", ...]}, ...]`` and prints ``{"results": {id: {"ok", "stage", "error"}}, "allowed": {...}}``.
A case may add ``"show": [dest, ...]``: the parsed values of those arguments come back in ``values``
(e.g. ``api_key``: what vLLM will compare the Bearer token with).

Each command line goes through what ``vllm serve`` itself does before it loads anything, in order
(read at vLLM 0.32.0, ``vllm/entrypoints/cli/main.py`` and ``cli/serve.py``):

1. ``parse``: the CLI's own parser, built the way ``main()`` builds it (top-level parser, the
   ``serve`` subcommand's ``subparser_init`` = ``make_arg_parser``), so unknown flags, bad
   ``choices`` (``--dtype``, ``--kv-cache-dtype``, ``--runner``) and bad types fail here;
2. ``serve-args``: ``ServeSubcommand.validate`` = ``validate_parsed_serve_args``
   (``vllm/entrypoints/launchers/cli_args.py``), e.g. ``--enable-auto-tool-choice`` without a parser;
3. ``api-server-args``: ``validate_api_server_args`` (``vllm/entrypoints/launchers/launcher.py``),
   the only place an unknown ``--tool-call-parser`` name fails;
4. ``quantization``: the registry ``ModelConfig._verify_quantization`` consults when the engine
   starts (``QUANTIZATION_METHODS``, minus ``DEPRECATED_QUANTIZATION_METHODS`` unless
   ``--allow-deprecated-quantization``). The platform's own check is left out on purpose: it needs
   the GPU the flag is meant for, and GPU flags must be judged here without one.

Nothing here needs a GPU or a model: no engine is built.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from typing import Any


def _parser() -> tuple[Any, Any]:
    import vllm.entrypoints.cli.serve as serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(description="vLLM CLI")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    (cmd,) = serve.cmd_init()
    cmd.subparser_init(subparsers).set_defaults(dispatch_function=cmd.cmd)
    return parser, cmd


def check(parser: Any, cmd: Any, argv: list[str], show: tuple[str, ...] = ()) -> dict[str, Any]:
    from vllm.entrypoints.launchers.launcher import validate_api_server_args
    from vllm.model_executor.layers import quantization as quant

    if argv[:2] != ["vllm", "serve"]:
        return {"ok": False, "stage": "parse", "error": f"not a `vllm serve` command line: {argv[:2]}"}
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args: argparse.Namespace = parser.parse_args(argv[1:])
    except SystemExit:
        lines = [line for line in stderr.getvalue().splitlines() if line.strip()]
        return {"ok": False, "stage": "parse", "error": lines[-1] if lines else "argparse exited"}
    for stage, validate in (("serve-args", cmd.validate), ("api-server-args", validate_api_server_args)):
        try:
            validate(args)
        except Exception as exc:
            return {"ok": False, "stage": stage, "error": f"{type(exc).__name__}: {exc}"}
    method = args.quantization
    if method is not None:
        if method not in quant.QUANTIZATION_METHODS:
            return {"ok": False, "stage": "quantization", "error": f"Unknown quantization method: {method}"}
        if method in quant.DEPRECATED_QUANTIZATION_METHODS and not args.allow_deprecated_quantization:
            return {"ok": False, "stage": "quantization", "error": f"deprecated quantization method: {method}"}
    return {"ok": True, "stage": "", "error": "", "values": {d: getattr(args, d, None) for d in show}}


def allowed(parser: Any) -> dict[str, list[str]]:
    """The value sets vLLM accepts for the catalog's enumerated fields, straight from vLLM."""
    from vllm.model_executor.layers import quantization as quant
    from vllm.tool_parsers import ToolParserManager

    serve_parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["serve"]
    choices = {opt: sorted(str(c) for c in a.choices if c is not None)
               for a in serve_parser._actions for opt in a.option_strings if a.choices}
    return {
        "toolCallParser": sorted(ToolParserManager.list_registered()),
        "quantization": sorted(set(quant.QUANTIZATION_METHODS) - set(quant.DEPRECATED_QUANTIZATION_METHODS)),
        "kvCacheDtype": choices["--kv-cache-dtype"],
        "dtype": choices["--dtype"],
        "runner": choices["--runner"],
        "convert": choices["--convert"],
    }


def main() -> None:
    cases = json.load(sys.stdin)
    with contextlib.redirect_stdout(sys.stderr):  # vLLM logs at import; keep stdout for the JSON
        parser, cmd = _parser()
        results = {case["id"]: check(parser, cmd, case["argv"], tuple(case.get("show", ()))) for case in cases}
        sets = allowed(parser)
    json.dump({"results": results, "allowed": sets}, sys.stdout)


if __name__ == "__main__":
    main()
