"""Whether the Kubernetes provider can write its manifests under a render directory (render mode), said as a
sentence the program's refusal completes (`program.check_render_dir`): a preview writes nothing there, so only
this check tells a user before `up` fails."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def render_dir_problem(path: Path) -> str | None:
    """Why the provider could not write manifests under ``path`` (None when it can: the directory, or the
    nearest existing one above it, is a writable directory)."""
    existing = path
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    where = "is" if existing == path else f"lies under {str(existing)!r}, which is"
    if not existing.exists():  # lexists but not exists: a symbolic link whose target is gone
        return f"{where} a link to {os.readlink(existing)!r}, which does not exist"
    mode = existing.stat().st_mode
    if not stat.S_ISDIR(mode):
        return f"{where} {_FILE_KINDS.get(stat.S_IFMT(mode), 'not a directory')}"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"cannot be written: this user may not write in {str(existing)!r}"
    return None


_FILE_KINDS = {stat.S_IFREG: "a file", stat.S_IFCHR: "a character device (like /dev/null)",
               stat.S_IFBLK: "a block device", stat.S_IFIFO: "a named pipe", stat.S_IFSOCK: "a socket"}
