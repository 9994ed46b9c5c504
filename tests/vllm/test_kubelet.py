"""tests/vllm/kubelet.py's reading of vLLM's own argv: it must tell a pod shell that ``exec``'d vLLM (the
argv after every parse, byte for byte) from one that forked it, which would leave a shell between the
kubelet's signals and vLLM. A stand-in ``vllm`` that sleeps, no vLLM needed (seconds)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.vllm.kubelet import process_argv


@contextmanager
def running(script: str, bin_dir: Path) -> Iterator[int]:
    """``bash -c script`` with a sleeping ``vllm`` first on PATH; its pid once the stand-in runs."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "vllm").write_text(f'#!/bin/sh\ntouch {bin_dir}/started\nsleep 30\n')
    (bin_dir / "vllm").chmod(0o755)
    proc = subprocess.Popen(["/bin/bash", "-c", script], env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    try:
        deadline = time.monotonic() + 20
        while not (bin_dir / "started").exists():
            assert time.monotonic() < deadline, "the stand-in vllm did not start"
            time.sleep(0.05)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_the_argv_of_an_execd_vllm_is_read_word_for_word(tmp_path: Path) -> None:
    words = ["--chat-template", "{{ x }} $(touch /tmp/x) `y`; 'q' \"d\"\nz", "--port", "8000"]
    script = "exec vllm serve /m " + " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
    with running(script, tmp_path / "bin") as pid:
        assert process_argv(pid) == ["vllm", "serve", "/m", *words]


def test_a_shell_that_forks_vllm_is_refused(tmp_path: Path) -> None:
    with running("vllm serve /m; true", tmp_path / "bin") as pid, pytest.raises(AssertionError, match="not vLLM"):
        process_argv(pid)
