"""``run.precision = "auto"``: bf16 on CUDA; on the CPU fp32, or bf16 with ``run.cpu_bf16`` where the
CPU has native bf16 instructions."""

from __future__ import annotations

import pytest

from gan_kit.base.cpufeatures import auto_precision, flags_have_native_bf16, native_bf16
from gan_kit.testing import make_run

ZEN4 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx2 avx512f avx512bw avx512_bf16 avx512vl\n"
SKYLAKE = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512bw avx512vl avx512dq\n"  # AVX512, bf16 emulated
SAPPHIRE = "flags\t\t: avx512f amx_tile amx_bf16 amx_int8\n"


@pytest.mark.parametrize("text, native", [(ZEN4, True), (SKYLAKE, False), (SAPPHIRE, True), ("", False),
                                          ("model name\t: avx512_bf16 in a name, not a flag\n", False)])
def test_native_bf16_is_read_from_the_flags_line(text, native):
    assert flags_have_native_bf16(text) is native


def test_an_unreadable_cpuinfo_is_no_native_bf16(tmp_path):
    assert native_bf16(str(tmp_path / "missing")) is False


@pytest.mark.parametrize("device, cpu_bf16, native, expected", [
    ("cuda", False, False, "bf16"), ("cpu", True, True, "bf16"), ("cpu", False, True, "fp32"),
    ("cpu", True, False, "fp32"), ("mps", True, True, "fp32")])
def test_auto_precision(device, cpu_bf16, native, expected):
    assert auto_precision(device, cpu_bf16, native) == expected


def test_a_run_resolves_auto_as_auto_precision_says(tmp_path):
    plain = make_run(tmp_path, overrides=["run.precision=auto"])
    assert plain.precision == "fp32"  # a recipe keeps fp32 on the CPU unless it says cpu_bf16
    opted = make_run(tmp_path / "b", overrides=["run.precision=auto", "run.cpu_bf16=true"])
    assert opted.precision == ("bf16" if native_bf16() else "fp32")
    pinned = make_run(tmp_path / "c", overrides=["run.precision=fp32", "run.cpu_bf16=true"])
    assert pinned.precision == "fp32"
