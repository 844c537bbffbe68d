"""GPU benchmark: images/s per phase of a 128x128 PGGAN recipe, eager vs torch.compile, bf16 vs
fp32, and peak GPU memory. Run by hand on a CUDA machine, one command:

    python benchmarks/gpu_bench.py                  # writes a markdown table to stdout
    python benchmarks/gpu_bench.py --steps 50 --out docs/performance-gpu.md

Every configuration trains the same networks through the engine's own update strategy on real
digits resized to 128x128 (the embedded data, so nothing is downloaded). For each phase the
networks are set to that resolution mid-fade (alpha 0.5, the most expensive state: both the new
and the old toRGB/fromRGB paths run), warmed up, then timed with CUDA events around whole
iterations. ``--device cpu --resolution 16 --steps 2`` runs a smoke version anywhere.
"""

from __future__ import annotations

import argparse
import time

import torch

from gan_kit.runs.engine import Run
from gan_kit.base.phase import Phase, fade_real
from gan_kit.recipe import load_recipe

RECIPE_OVERRIDES = [
    "run.progress=false",
    "run.total_kimg=10000",
    "metric=[]",
    "architecture.latent_dim=512",
    "architecture.fmap_base=8192",
    "architecture.fmap_max=512",
]


def bench_config(resolution: int, device: str, precision: str, compiled: bool, steps: int, warmup: int,
                 batch: int) -> list[dict]:
    levels = [4 * 2**i for i in range(resolution.bit_length() - 2)]
    batches = "{" + ", ".join(f"{r} = {batch}" for r in levels) + "}"
    recipe, plugins = load_recipe("recipes/pggan.toml", [
        *RECIPE_OVERRIDES, f"data.resolution={resolution}", f"growth.batch_size={batches}",
        f"run.device='{device}'", f"run.precision='{precision}'", f"run.compile={str(compiled).lower()}",
        "run.channels_last=true" if device != "cpu" else "run.channels_last=false"])
    run = Run(recipe, plugins, out_dir="/tmp/gankit-gpu-bench")
    rows = []
    cuda = run.device.type == "cuda"
    for res in levels:
        alpha = 1.0 if res == levels[0] else 0.5
        phase = Phase(index=levels.index(res), resolution=res, alpha=alpha, batch_size=batch)
        run.phase = phase
        run.set_phase(phase)
        reals = run.real_images(batch).to(run.device)
        if recipe.run.channels_last:
            reals = reals.contiguous(memory_format=torch.channels_last)
        real = fade_real(reals, res, alpha)

        def step():
            return run.strategy.step(run.step_context(phase, [real]))

        if cuda:
            torch.cuda.reset_peak_memory_stats()
        for _ in range(warmup):
            step()
        if cuda:
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        if cuda:
            end.record()
            torch.cuda.synchronize()
            seconds = start.elapsed_time(end) / 1000
        else:
            seconds = time.perf_counter() - t0
        rows.append({"resolution": res, "img_s": batch * steps / seconds, "ms_step": 1000 * seconds / steps,
                     "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan")})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--resolution", type=int, default=128)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--configs", default="fp32-eager,bf16-eager,bf16-compiled")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    results = {}
    for cfg in args.configs.split(","):
        precision, mode = cfg.split("-")
        torch._dynamo.reset()
        results[cfg] = bench_config(args.resolution, args.device, precision, mode == "compiled",
                                    args.steps, args.warmup, args.batch)
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU"
    lines = [f"{args.resolution}x{args.resolution} PGGAN (fmap_max 512, latent 512), batch {args.batch}, "
             f"d-then-g + gradient penalty, mid-fade, on {name}, torch {torch.__version__}", "",
             "| resolution | " + " | ".join(f"{c} img/s" for c in results) + " | "
             + " | ".join(f"{c} peak GiB" for c in results) + " |",
             "|---" * (1 + 2 * len(results)) + "|"]
    for i, row in enumerate(next(iter(results.values()))):
        cells = [f"{results[c][i]['img_s']:.0f}" for c in results] + [f"{results[c][i]['peak_gib']:.2f}" for c in results]
        lines.append(f"| {row['resolution']} | " + " | ".join(cells) + " |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
