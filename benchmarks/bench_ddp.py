"""Gradient synchronisation under several processes: separate DDP wrappers for G and D
(``run.grad_sync = "ddp"``) vs one flattened all-reduce before each optimizer step
(``"all-reduce"``), measured side by side in one process group. Run by hand:

    torchrun --standalone --nproc-per-node 2 benchmarks/bench_ddp.py
    torchrun --standalone --nproc-per-node 2 benchmarks/bench_ddp.py --recipe recipes/dcgan.toml

Both runs are built from the same recipe (the main job by default) in every process and trained
through the engine's own update strategy on the same real batches, at each resolution of the
recipe's growth (mid-fade, both paths running). Rounds alternate between the two so that load on
the machine hits both alike; the table gives the median images/s (global batch) of the rounds
and the ratio ddp / all-reduce. CPU processes use gloo, CUDA ones NCCL (``run.device`` decides).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from gan_kit.training import distributed
from gan_kit.runs.run import Run, build_run
from gan_kit.base.phase import Phase, fade_real
from gan_kit.recipe import load_recipe


def build(recipe_path: str, mode: str, extra: list[str]) -> Run:
    recipe, plugins = load_recipe(recipe_path, ["run.progress=false", "metric=[]", f"run.grad_sync='{mode}'",
                                                *extra])
    return build_run(recipe, plugins, out_dir=f"/tmp/gankit-bench-ddp-{mode}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", default="recipes/pggan.toml")
    ap.add_argument("--steps", type=int, default=5, help="iterations per round")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads per CPU process")
    ap.add_argument("--set", dest="extra", action="append", default=[], help="recipe override, repeatable")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    distributed.init()
    rank, world = distributed.dist.get_rank(), distributed.dist.get_world_size()
    runs = {mode: build(args.recipe, mode, args.extra) for mode in ("ddp", "all-reduce")}
    first = runs["ddp"]
    phases = first.phases()
    resolutions = sorted({p.resolution for p in phases})
    lines = []
    for res in resolutions:
        batch = max(p.batch_size for p in phases if p.resolution == res)
        alpha = 1.0 if res == resolutions[0] else 0.5
        phase = Phase(index=resolutions.index(res), resolution=res, alpha=alpha, batch_size=batch)
        d_steps = first.strategy.d_steps
        reals = first.real_images(batch * d_steps).to(first.device)[rank::world]
        per = reals.shape[0] // d_steps
        reals = [fade_real(reals[j * per:(j + 1) * per], res, alpha) for j in range(d_steps)]
        times: dict[str, list[float]] = {m: [] for m in runs}
        for rnd in range(args.rounds + 1):
            for mode, run in runs.items():
                run.set_phase(phase)
                if run.device.type == "cuda":
                    torch.cuda.synchronize()
                distributed.dist.barrier()
                t0 = time.perf_counter()
                for _ in range(args.steps):
                    run.strategy.step(run.step_context(phase, reals))
                if run.device.type == "cuda":
                    torch.cuda.synchronize()
                distributed.dist.barrier()
                if rnd:  # round 0 warms up (first DDP buckets, allocator, autotuning)
                    times[mode].append(time.perf_counter() - t0)
        img_s = {m: batch * d_steps * args.steps / statistics.median(t) for m, t in times.items()}
        lines.append(f"| {res} | {batch} | {img_s['ddp']:.0f} | {img_s['all-reduce']:.0f} | "
                     f"{img_s['ddp'] / img_s['all-reduce']:.2f} |")
    for run in runs.values():  # both must still hold the same weights on every rank
        run.check_in_sync()
    if rank == 0:
        where = torch.cuda.get_device_name() if first.device.type == "cuda" else f"CPU, {args.threads} thread(s) each"
        print(f"{args.recipe}: {world} processes ({where}), median of {args.rounds} rounds x {args.steps} "
              f"iterations, torch {torch.__version__}\n")
        print("| resolution | global batch | ddp img/s | all-reduce img/s | ddp / all-reduce |")
        print("|---|---|---|---|---|")
        print("\n".join(lines))
    runs.clear()
    first = run = None  # noqa: F841 - DDP wrappers must go before the process group
    distributed.shutdown()


if __name__ == "__main__":
    main()
