"""StyleGAN3-T and -R against StyleGAN2 at equal G parameter count, images per second side by
side (run by hand, not a test).

    python benchmarks/stylegan3_speed.py [--rounds 5] [--iterations 4] [--threads 1] [--profile N]
                                         [--num-layers 8] [--modconv scaled|grouped]

The stylegan2 case is ``recipes/stylegan2.toml``; the stylegan3 cases are the same recipe with
``[architecture]`` replaced by stylegan3 (config "t" / "r", the same latent_dim and w_dim, the
given ``--num-layers`` and ``--modconv``: "scaled" by default, as the stylegan2 recipe sets)
whose ``channel_max`` is chosen so G's parameter count is closest to stylegan2's (both counts
printed). Penalties are off in every case, so a training iteration is one
D step and one G step (G + D forward and backward), nothing lazy. Every round times, per case,
``--iterations`` G forwards of one batch (no grad, eval mode) and ``--iterations`` training
iterations (``d-then-g``), the cases in an order rotated by one each round, after a warm-up round.
Printed: the median images/s of the rounds, and stylegan3's time per image over stylegan2's (the
issue's goal: at most 2). With ``--profile N``: stylegan3-T's G forward under torch.profiler, its N
operators of most self CPU time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gan_kit.builtin.architectures.stylegan3 import Generator  # noqa: E402
from gan_kit.tools.bench import operator_table, prepare  # noqa: E402

RECIPE = ROOT / "recipes" / "stylegan2.toml"


def g_params(config: str, channel_max: int, num_layers: int, resolution: int = 16, dim: int = 64) -> int:
    """G's parameter count of ``stylegan3`` with these options (channel_base 4096, as the default)."""
    r = config == "r"
    G = Generator(resolution, 3, dim, dim, channel_base=4096 * (2 if r else 1), channel_max=channel_max * (2 if r else 1),
                  num_layers=num_layers, num_critical=2, margin_size=10, conv_kernel=1 if r else 3,
                  use_radial_filters=r)
    return sum(p.numel() for p in G.parameters())


def matching_channel_max(config: str, num_layers: int, target: int) -> int:
    return min(range(8, 129), key=lambda c: abs(g_params(config, c, num_layers) - target))


class Case:
    def __init__(self, label: str, overrides: list[str]):
        self.label = label
        self.run, self.phase, rows, _ = prepare(RECIPE, "d-then-g", overrides=["metric=[]", "penalty=[]", *overrides],
                                                reference=False)
        self.row = rows[0]
        self.G, self.D = self.row.nets
        self.params = [sum(p.numel() for p in net.parameters()) for net in (self.G, self.D)]
        self.batch_size = self.phase.batch_size
        self.g_times: list[float] = []
        self.step_times: list[float] = []

    def g_round(self, iterations: int, seed: int) -> float:
        z = torch.randn(self.batch_size, self.run.latent_dim, generator=torch.Generator().manual_seed(seed))
        was = self.G.training
        self.G.eval()
        t0 = time.perf_counter()
        with torch.no_grad():
            for _ in range(iterations):
                self.G(z)
        self.G.train(was)
        return (time.perf_counter() - t0) / iterations / self.batch_size

    def step_round(self, iterations: int, seed: int) -> float:
        n = self.batch_size * self.run.strategy.d_steps
        batches = [self.run.real_images(n, seed=seed * iterations + k) for k in range(iterations)]
        t0 = time.perf_counter()
        for reals in batches:
            self.row.step([reals])
        return (time.perf_counter() - t0) / iterations / n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--num-layers", type=int, default=8, help="stylegan3's num_layers (channel_max is matched)")
    ap.add_argument("--modconv", default="scaled", choices=("grouped", "scaled"),
                    help="stylegan3's modconv (default scaled: what recipes/stylegan2.toml sets for stylegan2)")
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    base = Case("stylegan2", [])
    cases = [base]
    for config in ("t", "r"):
        cm = matching_channel_max(config, args.num_layers, base.params[0])
        extra = f', modconv="{args.modconv}"'
        cases.append(Case(f"stylegan3-{config}", [
            f'architecture={{name="stylegan3", config="{config}", latent_dim=64, w_dim=64, channel_max={cm}, '
            f'num_layers={args.num_layers}, mbstd_group_size=4{extra}}}']))
        cases[-1].channel_max = cm
    for i in range(args.rounds + 1):  # round 0 warms up
        k = i % len(cases)
        for case in cases[k:] + cases[:k]:
            g, s = case.g_round(args.iterations, i), case.step_round(args.iterations, i)
            if i:
                case.g_times.append(g)
                case.step_times.append(s)
        print(f"round {i}/{args.rounds} done", file=sys.stderr)
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.rounds} rounds x {args.iterations} "
          f"iterations (batch {base.batch_size}), median of rounds, 16x16, penalties off")
    print("| case | params G / D | G forward images/s | G time / image vs stylegan2 | training images/s | "
          "training time / image vs stylegan2 |")
    print("|---|---|---|---|---|---|")
    g0, s0 = statistics.median(base.g_times), statistics.median(base.step_times)
    for case in cases:
        g, s = statistics.median(case.g_times), statistics.median(case.step_times)
        what = f" (channel_max {case.channel_max}, num_layers {args.num_layers})" if case is not base else ""
        print(f"| {case.label}{what} | {case.params[0]:,} / {case.params[1]:,} | {1 / g:.0f} | {g / g0:.2f} | "
              f"{1 / s:.0f} | {s / s0:.2f} |")
    if args.profile:
        print_profile(cases[1], args.iterations, args.profile)
    return 0


def print_profile(case: Case, iterations: int, top: int) -> None:
    """``case``'s G forward (``iterations`` batches) under torch.profiler: its ``top`` operators
    by self CPU time."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        case.g_round(iterations, 10_000)
    ms, lines = operator_table(prof, iterations, top, "batch")
    print(f"\n{case.label} G forward: {ms:.1f} ms self CPU per batch under the profiler")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
