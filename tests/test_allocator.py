"""run.retain_cpu_memory: freed CPU tensor memory stays in the process, so repeated
large allocations stop page-faulting (gan_kit/base/allocator.py)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

import gan_kit.runs.run.build as run_module
from gan_kit.testing import make_run

PROGRAM = """
import resource, torch
from gan_kit.base.allocator import ordinary_allocation, retain_freed_memory

def faults():
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        t = torch.empty(16 << 20)  # 64 MiB, above glibc's largest dynamic mmap threshold
        t.fill_(1.0)
        del t
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0

before = faults()
applied = retain_freed_memory()
faults()  # the heap grows once
after = faults()
def rss_pages():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1])

kept = rss_pages()
with ordinary_allocation():  # a metric pass: the kept free pages go back to the kernel first
    returned = kept - rss_pages()
    faults()
faults()  # the heap grows once more
print(before, applied, after, returned, faults())
"""


def test_repeated_large_allocations_stop_page_faulting():
    """Ten 64 MiB tensors allocated and freed in turn: page by page faulted in each time with
    glibc's defaults, reused after retain_freed_memory; entering ordinary_allocation returns the
    kept pages to the kernel."""
    out = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=120, check=True)
    before, applied, after, returned, again = out.stdout.split()
    glibc = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert applied == str(glibc)
    pages = 10 * (64 << 20) // 4096
    if glibc:
        # each 64 MiB tensor was unmapped at free and faulted back in page by page; now reused
        assert int(before) > 0.9 * pages and int(after) < 0.02 * pages, (before, after)
        # entering ordinary_allocation hands the kept 64 MiB back (malloc_trim), and blocks are
        # kept again after it
        assert int(returned) >= 0.9 * (64 << 20) // 4096 and int(again) < 0.02 * pages, (returned, again)
    else:  # nothing changed where the C library is not glibc
        assert int(after) > 0.9 * pages


@pytest.mark.parametrize("keep", [True, False])
def test_cpu_run_applies_the_option(tmp_path, monkeypatch, keep):
    calls = []
    monkeypatch.setattr(run_module, "retain_freed_memory", lambda: calls.append(1) or True)
    make_run(tmp_path, overrides=[f"run.retain_cpu_memory={str(keep).lower()}"])
    assert calls == ([1] if keep else [])

