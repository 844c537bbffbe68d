"""benchmarks/gpu_bench.py's GPU-busy fraction: the union of the GPU's activity intervals in a
torch.profiler Chrome trace (overlaps counted once, host-side events ignored), and what it
reports without a GPU."""

from __future__ import annotations

import importlib.util
import json
import random
import time
from pathlib import Path

import torch

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_bench.py"


def gpu_bench():
    spec = importlib.util.spec_from_file_location("gpu_bench", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def event(cat, ts, dur, tid=7):
    return {"ph": "X", "cat": cat, "name": f"{cat}-{ts}", "pid": 0, "tid": tid, "ts": ts, "dur": dur}


def test_busy_time_is_the_union_of_gpu_intervals_and_ignores_host_events():
    B = gpu_bench()
    rng = random.Random(0)
    gpu, host = [], []
    for _ in range(200):  # kernels on two streams (overlapping), copies and fills; host events around them
        ts, dur = rng.randrange(0, 5000), rng.randrange(1, 60)
        gpu.append(event(rng.choice(B.GPU_CATEGORIES), ts, dur, tid=rng.choice([7, 8])))
        host.append(event(rng.choice(["cpu_op", "cuda_runtime", "gpu_user_annotation", "user_annotation"]),
                          rng.randrange(0, 5000), rng.randrange(1, 500)))
    flow = [{"ph": "s", "cat": "ac2g", "id": 1, "ts": 10}, {"ph": "f", "cat": "ac2g", "id": 1, "ts": 20}]
    trace = {"traceEvents": [*host, *gpu, *flow], "displayTimeUnit": "ms"}
    covered = set()  # the same union, microsecond by microsecond
    for e in gpu:
        covered.update(range(e["ts"], e["ts"] + e["dur"]))
    busy, n = B.busy_time_us(json.loads(json.dumps(trace)))
    assert n == len(gpu)
    assert busy == len(covered)
    assert busy < sum(e["dur"] for e in gpu)  # the overlaps counted once, not summed
    assert B.busy_time_us({"traceEvents": host}) == (0.0, 0)


def test_busy_time_reads_a_real_profiler_trace(tmp_path):
    """On a trace torch.profiler wrote (its CPU ops standing in for kernels): busy lies between the
    longest op and the profiled wall time."""
    B = gpu_bench()
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(64, 64)
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(20):
            x = torch.tanh(x @ x)
    wall_us = (time.perf_counter() - t0) * 1e6
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text(encoding="utf-8"))
    ops = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    busy, n = B.busy_time_us(trace, ("cpu_op",))
    assert n == len(ops) >= 40
    assert max(e["dur"] for e in ops) <= busy <= wall_us
    assert B.busy_time_us(trace) == (0.0, 0)  # a CPU trace holds no GPU activity


def test_without_a_gpu_the_busy_fraction_is_not_measured():
    B = gpu_bench()
    calls = []
    assert B.gpu_time_per_call(lambda: calls.append(1), 3, torch.device("cpu")) is None
    assert calls == []  # nothing profiled, nothing run: the table prints n/a
