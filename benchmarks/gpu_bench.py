"""GPU benchmark of the engine's whole iteration: images/s and ms per iteration of
``gan_kit.runs.engine.train_step`` (data on the device, the strategy, lazy penalties, GradScaler,
non-finite policy, G_ema, the stats - everything but the loader and the tick), host syncs per
iteration (``gan_kit.base.syncs.SyncCounter``), the GPU-busy fraction (the time the GPU ran
kernels, copies or fills - CUPTI's record through ``torch.profiler`` - over the wall time of the
same iterations), peak CUDA memory against batch size for a 1024-px StyleGAN2 at config F sizes,
and torch.compile's graphs per growth phase (dynamo's counters).

    python benchmarks/gpu_bench.py                 # on CUDA: markdown tables on stdout
    python benchmarks/gpu_bench.py --tiny          # the same sections at tiny sizes, on the CPU

``--tiny`` exists to check that the script runs (CI, a machine without a GPU): its figures
measure nothing. On the CPU the memory section says so instead of printing numbers. Every
section prints what it ran; one that fails prints its one-line error and the rest still run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time

import torch

from gan_kit.tools.census import sync_census
from gan_kit.runs.engine import train_step
from gan_kit.runs.run import build_run
from gan_kit.base.phase import Phase
from gan_kit.recipe import load_recipe
from gan_kit.base.syncs import SyncCounter

COMMON = ["run.progress=false", "metric=[]", "run.max_minutes=none", "run.snapshot_ticks=0"]
#: StyleGAN2 config F (stylegan2-ada-pytorch's `--cfg stylegan2`): 512-d z and W, 8 mapping
#: layers, cbase 32768, cmax 512, minibatch-stddev group 4.
CONFIG_F = ["architecture.latent_dim=512", "architecture.w_dim=512", "architecture.mapping_layers=8",
            "architecture.channel_base=32768", "architecture.channel_max=512", "architecture.modconv='grouped'"]
TINY_SG2 = ["architecture.latent_dim=16", "architecture.w_dim=16", "architecture.mapping_layers=2",
            "architecture.channel_base=128", "architecture.channel_max=16"]


#: Chrome-trace categories of work the GPU itself runs: kernels, device copies and fills (not the
#: host's CUDA runtime calls, annotations or flow arrows).
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
#: Iterations the GPU-busy pass profiles (at most): enough to average, a trace of bounded size.
PROFILED_STEPS = 10


def _device_sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def busy_time_us(trace: dict, categories: tuple[str, ...] = GPU_CATEGORIES) -> tuple[float, int]:
    """``(busy, n)``: the time in microseconds during which at least one activity of
    ``categories`` (default: the GPU's own work) ran in a Chrome trace (``torch.profiler``'s
    ``export_chrome_trace``: complete events, ``ph = "X"``, ``ts`` and ``dur`` in us), and the
    number of such activities. The union of their intervals, so kernels overlapping on several
    streams count once: busy never exceeds the span they cover."""
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0.0))) for e in trace.get("traceEvents", [])
                   if e.get("ph") == "X" and e.get("cat") in categories)
    busy, end = 0.0, -math.inf
    for start, stop in spans:
        if stop > end:
            busy += stop - max(start, end)
            end = stop
    return busy, len(spans)


def gpu_time_per_call(fn, calls: int, device: torch.device) -> float | None:
    """GPU-busy milliseconds per call of ``fn`` (``busy_time_us`` of a ``torch.profiler`` trace of
    ``calls`` calls, divided by ``calls``); None on a device other than CUDA (not run) or when the
    trace holds no GPU activity (CUPTI unavailable: the profiler says why on stderr). The profiler
    records CUPTI's device timestamps, so a kernel's duration does not depend on the profiler's
    host overhead; only the wall time of a profiled pass would."""
    from torch.profiler import ProfilerActivity, profile

    if device.type != "cuda":
        return None
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        _device_sync(device)
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as f:
            busy_us, n = busy_time_us(json.load(f))
    finally:
        os.unlink(path)
    return busy_us / 1000 / calls if n else None


def time_iterations(recipe: str, overrides: list[str], steps: int, warmup: int, batch: int) -> dict:
    """Images/s, ms/iteration and syncs/iteration of ``train_step`` on ``recipe`` at its first
    phase with ``batch`` images per step; ``gpu_ms`` (GPU-busy ms per iteration, from a second,
    profiled pass of up to ``PROFILED_STEPS`` iterations) and ``busy`` (``gpu_ms`` over the timed
    pass's ms per iteration), both None without GPU activity (the CPU)."""
    with tempfile.TemporaryDirectory() as tmp:
        r, plugins = load_recipe(recipe, [*COMMON, f"run.out_dir='{tmp}'", *overrides])
        run = build_run(r, plugins)
        p0 = run.growth.phase_at(0)
        phase = Phase(index=p0.index, resolution=p0.resolution, alpha=1.0, batch_size=batch)
        run.set_phase(phase)
        run.apply_optim_settings()
        d = run.strategy.d_steps
        pool = run.real_images(batch * d)
        labels = torch.zeros(batch * d, dtype=torch.int64) if run.num_classes else None
        pool = pool.pin_memory() if run.device.type == "cuda" else pool
        item = (pool, labels) if labels is not None else pool
        for _ in range(warmup):
            train_step(run, phase, item)
        _device_sync(run.device)
        counter = SyncCounter()
        t0 = time.perf_counter()
        with counter:
            for _ in range(steps):
                train_step(run, phase, item)
        _device_sync(run.device)
        seconds = time.perf_counter() - t0
        # A pass of its own: the timed pass above stays free of the profiler's host overhead, the
        # kernels' device time is the same in both (same iterations, same shapes, warmed up).
        gpu_ms = gpu_time_per_call(lambda: train_step(run, phase, item), min(steps, PROFILED_STEPS), run.device)
    ms = 1000 * seconds / steps
    return {"img_s": batch * d * steps / seconds, "ms": ms, "syncs": counter.total / steps,
            "resolution": phase.resolution, "gpu_ms": gpu_ms, "busy": None if gpu_ms is None else gpu_ms / ms}


def peak_memory(resolution: int, batches: list[int], device: str, overrides: list[str]) -> list[tuple[int, str]]:
    """Peak CUDA memory of one StyleGAN2 iteration (G, D, R1 and path length due) per batch."""
    rows = []
    for batch in batches:
        with tempfile.TemporaryDirectory() as tmp:
            r, plugins = load_recipe("recipes/stylegan2.toml", [
                *COMMON, f"run.out_dir='{tmp}'", f"data.resolution={resolution}", f"growth.batch_size={batch}",
                f"run.device='{device}'", "data.interpolation='bilinear'", *overrides])
            run = build_run(r, plugins)
            phase = run.growth.phase_at(0)
            reals = run.real_images(batch)
            if run.device.type != "cuda":
                rows.append((batch, "n/a (CPU: no CUDA allocator)"))
                train_step(run, phase, reals)  # the iteration still runs
                continue
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(run.device)
            try:
                for _ in range(2):
                    run.step = 0  # both lazy penalties are due at step 0
                    train_step(run, phase, reals)
                torch.cuda.synchronize(run.device)
                rows.append((batch, f"{torch.cuda.max_memory_allocated(run.device) / 2**30:.2f} GiB"))
            except torch.cuda.OutOfMemoryError:
                rows.append((batch, "out of memory"))
            del run
    return rows


def compile_graphs(overrides: list[str], steps: int) -> dict[int, int]:
    """Graphs dynamo compiled by the end of each phase of a compiled progressive run (the
    'aot_eager' backend: capture and AOTAutograd without code generation)."""
    from torch._dynamo.utils import counters

    from gan_kit import hookimpl
    from gan_kit.runs.session import train

    seen: dict[int, int] = {}

    class Watch:
        @hookimpl
        def step_finished(self, run, stats):
            seen[run.phase.index] = counters["stats"]["unique_graphs"]

    torch._dynamo.reset()
    counters.clear()
    with tempfile.TemporaryDirectory() as tmp:
        r, plugins = load_recipe("recipes/pggan.toml", [*COMMON, f"run.out_dir='{tmp}'", "run.compile=true",
                                                        *overrides], extra_plugins=[Watch()])
        train(build_run(r, plugins), max_steps=steps)
    return seen


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Times the engine's whole iteration on CUDA (img/s, ms, host syncs, GPU-busy fraction), peak memory against batch at 1024 px, and torch.compile graphs per phase; "
                                 "--tiny runs tiny sizes on the CPU (the figures then measure nothing).")
    ap.add_argument("--tiny", action="store_true", help="tiny sizes on the CPU: checks that the script runs")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--batches", default=None, help="comma-separated batch sizes for the 1024-px memory table")
    args = ap.parse_args(argv)
    tiny = args.tiny or not torch.cuda.is_available()
    device = "cpu" if tiny else "cuda"
    steps = args.steps or (3 if tiny else 30)
    warmup = args.warmup or (1 if tiny else 5)
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU (tiny sizes: the figures measure nothing)"
    print(f"# gpu_bench on {name}, torch {torch.__version__}\n")
    if tiny and not args.tiny:
        print("no CUDA device: running the tiny CPU version\n")
    dev = [f"run.device='{device}'"]
    configs = {
        "pggan bf16 (its first phase)": ("recipes/pggan.toml", [*dev, "run.precision='bf16'", "data.resolution=16"], 32),
        "stylegan2 bf16": ("recipes/stylegan2.toml", [*dev, "run.precision='bf16'"], 32),
        "stylegan2 config F bf16": ("recipes/stylegan2.toml",
                                          [*dev, "run.precision='bf16'", "data.resolution=256",
                                           "data.interpolation='bilinear'", *CONFIG_F], 16),
        "stylegan2 ada fp16": ("recipes/stylegan2.toml", [*dev, "run.precision='fp16'", "augment.name='ada'"], 32),
    }
    if tiny:
        configs = {k: (p, [*o, "data.resolution=8", "growth.batch_size=8", *([] if "pggan" in k else TINY_SG2)], 8)
                   for k, (p, o, _) in configs.items() if "config F" not in k}
    sections = []

    def section(title, fn):
        print(f"## {title}\n", flush=True)
        try:
            fn()
        except Exception as e:  # a section that fails says why; the others still run
            print(f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            sections.append(title)
        print(flush=True)

    def engine():
        print("GPU busy: the time the GPU ran kernels, copies or fills (the union of their intervals, "
              "CUPTI through torch.profiler, in a profiled pass of the same iterations) over the wall time "
              "of the timed pass; 1 - busy is the share the GPU waited for the host (Python, launches, "
              "syncs). n/a: no GPU.\n")
        print("| configuration | px | batch | img/s | ms/iteration | host syncs/iteration | GPU ms/iteration | "
              "GPU busy |")
        print("|---|---|---|---|---|---|---|---|")
        for label, (path, overrides, batch) in configs.items():
            row = time_iterations(path, overrides, steps, warmup, batch)
            gpu = "n/a" if row["gpu_ms"] is None else f"{row['gpu_ms']:.1f}"
            busy = "n/a" if row["busy"] is None else f"{row['busy']:.2f}"
            print(f"| {label} | {row['resolution']} | {batch} | {row['img_s']:.0f} | {row['ms']:.1f} | "
                  f"{row['syncs']:.2f} | {gpu} | {busy} |", flush=True)

    def census():
        print("| recipe | syncs per iteration (between ticks) | at ticks |")
        print("|---|---|---|")
        for label, path, overrides in (
                ("pggan", "recipes/pggan.toml", ["growth.batch_size={4 = 8, 8 = 8, 16 = 8}"]),
                ("dcgan", "recipes/dcgan.toml", ["growth.batch_size=8", "data.resolution=16"]),
                ("stylegan2", "recipes/stylegan2.toml", ["growth.batch_size=8", "data.resolution=8", *TINY_SG2]),
                ("stylegan2 + ada", "recipes/stylegan2.toml",
                 ["growth.batch_size=8", "data.resolution=8", *TINY_SG2, "augment.name='ada'"]),
                ("pggan fp16", "recipes/pggan.toml", ["growth.batch_size={4 = 8, 8 = 8, 16 = 8}", "run.precision='fp16'"])):
            c = sync_census(path, [*dev, "run.tick_kimg=0.032", *overrides], steps=9)
            ticks = [c.per_iteration[i - 1] for i in sorted(c.boundary) if i <= len(c.per_iteration)]
            print(f"| {label} | {c.mean:.2f} | {ticks} |", flush=True)

    def memory():
        res = 32 if tiny else 1024
        batches = [int(b) for b in (args.batches or ("2" if tiny else "4,8,16,32")).split(",")]
        over = [*dev, "run.precision='bf16'", *(TINY_SG2 if tiny else CONFIG_F)]
        print(f"StyleGAN2 {res}px ({'tiny' if tiny else 'config F'}), bf16, one iteration with R1 and path length\n")
        print("| batch | peak memory |")
        print("|---|---|")
        for batch, text in peak_memory(res, batches, device, over):
            print(f"| {batch} | {text} |", flush=True)

    def graphs():
        over = [*dev, "run.compile_backend='aot_eager'", "growth.batch_size={4 = 8, 8 = 8, 16 = 8}",
                "growth.fade_kimg=0.016", "growth.stable_kimg=0.016"]
        seen = compile_graphs(over, steps=12)
        print("| phase | graphs compiled by its end |")
        print("|---|---|")
        for phase, n in sorted(seen.items()):
            print(f"| {phase} | {n} |")

    section("Engine iteration", engine)
    section("Host syncs per iteration (the census)", census)
    section("Peak memory against batch", memory)
    section("torch.compile graphs per phase", graphs)
    if sections:
        print(f"sections that failed: {', '.join(sections)}")
    return 1 if sections else 0


if __name__ == "__main__":
    sys.exit(main())
