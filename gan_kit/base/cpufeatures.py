"""Whether this CPU computes bf16 natively, for ``run.precision = "auto"``.

bf16 autocast on a CPU is fast only where the instructions exist: AVX512-BF16 (Intel Cooper Lake
and later Xeons, AMD Zen 4 and later) or AMX-BF16 (Intel Sapphire Rapids and later). Elsewhere
oneDNN emulates bf16 through float32 conversions and a bf16 run is no faster, often slower, than
fp32. torch's ``torch.ops.mkldnn._is_mkldnn_bf16_supported()`` is not that test: it is true on
every AVX512 CPU, emulation included. So the CPU's own feature flags are read (``/proc/cpuinfo``
on Linux); any other system reports False, and ``"auto"`` stays fp32 there.
"""

from __future__ import annotations

import functools
from pathlib import Path

__all__ = ["NATIVE_BF16_FLAGS", "native_bf16", "flags_have_native_bf16", "auto_precision"]

#: x86 feature flags (as /proc/cpuinfo spells them) that mean bf16 matrix/vector instructions.
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def flags_have_native_bf16(cpuinfo: str) -> bool:
    """True when the first ``flags`` line of ``cpuinfo`` (the text of /proc/cpuinfo) lists one of
    ``NATIVE_BF16_FLAGS``."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return any(flag in value.split() for flag in NATIVE_BF16_FLAGS)
    return False


@functools.cache
def native_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether this machine's CPU has native bf16 instructions (False when it cannot be told)."""
    try:
        return flags_have_native_bf16(Path(cpuinfo).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return False


def auto_precision(device_type: str, cpu_bf16: bool = False, native: bool | None = None) -> str:
    """What ``run.precision = "auto"`` means on ``device_type`` ("cuda", "cpu", ...): bf16 autocast
    on CUDA; on a CPU bf16 only when the recipe says its quality holds there (``cpu_bf16``, the
    recipe's ``run.cpu_bf16``) and the CPU has native bf16 (``native``, default
    ``native_bf16()``); else fp32. bf16 changes the math (8-bit mantissas), so a recipe keeps fp32
    on the CPU until measured: the main recipe trained as well in bf16 as in fp32 at the same kimg,
    1.6x faster (docs/performance.md, "bf16 on the CPU")."""
    if device_type == "cuda":
        return "bf16"
    if device_type == "cpu" and cpu_bf16 and (native_bf16() if native is None else native):
        return "bf16"
    return "fp32"
