"""Loaded by every vLLM process the tests start (``PYTHONPATH``: tests/vllm/server.py ``HOST_ENV``): asks
Linux for the AMX tile state before vLLM's CPU attention may use it.

Why: vLLM 0.32.0 picks its ``amx`` attention kernel for bfloat16 whenever the CPU has AMX
(vllm/v1/attention/backends/cpu_attn.py ``_get_attn_isa``) but never requests the permission Linux
requires before a process touches the AMX tile registers (``arch_prctl(ARCH_REQ_XCOMP_PERM,
XFEATURE_XTILEDATA)``; Documentation/arch/x86/xstate.rst). A compiled model's warm-up runs oneDNN first,
which requests it; a LoRA server runs eagerly, so on an AMX host (Sapphire Rapids and later) its first
request to the base model died with SIGILL in ``cpu_attention_with_kv_cache`` (reproduced here: an
adapter request first, or this request, and it serves). On a CPU without AMX the call fails with EINVAL
and changes nothing. This is vLLM's bug, not the pod's: docs/operations.md says what it means for a dev
CPU model with LoRA adapters.
"""

import ctypes
import platform

SYS_ARCH_PRCTL = 158  # x86_64 syscall number (arch/x86/entry/syscalls/syscall_64.tbl)
ARCH_REQ_XCOMP_PERM = 0x1023  # arch/x86/include/uapi/asm/prctl.h
XFEATURE_XTILEDATA = 18  # arch/x86/include/asm/fpu/types.h

if platform.machine() == "x86_64":
    ctypes.CDLL(None, use_errno=True).syscall(SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)
