"""R3GAN against StyleGAN2 (and any other recipe), images per second side by side (run by hand,
not a test).

    python benchmarks/r3gan_speed.py [--rounds 7] [--iterations 16] [--threads 1] [--profile N] [CASE ...]

A CASE is ``label=recipe.toml[,key=value,...]`` (``--set`` overrides after the recipe); the
default cases are the shipped ``stylegan2`` and ``r3gan`` recipes and ``r3gan`` with R1 + R2 at
every step (the paper's). Each case is a run built from its recipe (no metric), at its final
resolution and batch. Every round runs each case for ``--iterations`` whole training iterations
(``gan_kit.runs.engine.train_step``: the strategy, the lazy regularisation steps that are due,
G_ema), the cases in an order rotated by one each round, after a warm-up round; a round's figure
is its mean time per iteration (16 iterations hold one lazy R1 / R1 + R2 step and four lazy
path-length steps, so lazy costs are counted in proportion). Printed: the parameters of G and D,
the multiply-adds of one G and one D forward per image, the median ms per iteration over the
rounds, images/s, and each case's images/s over the first case's; with ``--profile N``, then each
case's N operators of most self CPU time in one more round (torch.profiler).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gan_kit.base.phase import fade_real  # noqa: E402
from gan_kit.tools.bench import operator_table, prepare  # noqa: E402

DEFAULT_CASES = [
    "stylegan2=recipes/stylegan2.toml",
    "r3gan=recipes/r3gan.toml",
    "r3gan-every-step=recipes/r3gan.toml,penalty.0.interval=1,penalty.1.interval=1",
]


def multiply_adds(fn) -> int:
    """Multiply-adds of the convolutions and matrix products ``fn()`` runs (torch's FLOP formulas,
    halved)."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_map
    from torch.utils.flop_counter import flop_registry

    class Count(TorchDispatchMode):
        total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            formula = flop_registry.get(func._overloadpacket)
            if formula is not None:
                shape = lambda t: t.shape if isinstance(t, torch.Tensor) else t  # noqa: E731
                Count.total += formula(*tree_map(shape, args), **tree_map(shape, kwargs), out_val=tree_map(shape, out))
            return out

    with Count():
        fn()
    return Count.total // 2


class Case:
    def __init__(self, spec: str):
        self.label, _, rest = spec.partition("=")
        # A comma starts the next KEY=VALUE only where a dotted key follows it, so a value may hold
        # commas: architecture.width_by_resolution={4=56, 8=24, 16=8}.
        path, *sets = re.split(r",(?=[A-Za-z_][A-Za-z0-9_.]*=)", rest)
        if not path:
            raise SystemExit(f"case {spec!r}: expected label=recipe.toml[,key=value,...]")
        self.run, self.phase, rows, _ = prepare(ROOT / path if not Path(path).is_absolute() else path, "d-then-g",
                                                overrides=["metric=[]", *sets], reference=False)
        # prepare builds every strategy's row on a run of its own; the recipe's own strategy is
        # the one measured.
        self.row = next((r for r in rows if r.name == self.run.recipe.update.name), rows[0])
        self.times: list[float] = []
        G, D = self.row.nets
        self.params = [sum(p.numel() for p in net.parameters()) for net in (G, D)]
        self.frozen = sum(p.numel() for net in (G, D) for p in net.parameters() if not p.requires_grad)
        n = 4
        z = torch.randn(n, self.run.latent_dim)
        x = torch.zeros(n, self.run.channels, self.phase.resolution, self.phase.resolution)
        labels = torch.zeros(n, dtype=torch.long) if self.run.num_classes else None
        with torch.no_grad():
            self.g_macs = multiply_adds(lambda: G(z) if labels is None else G(z, labels)) / n
            self.d_macs = multiply_adds(lambda: D(x) if labels is None else D(x, labels)) / n

    def batch(self, i: int) -> list[torch.Tensor]:
        n = self.phase.batch_size * self.run.strategy.d_steps
        images = fade_real(self.run.real_images(n, seed=i), self.phase.resolution, 1.0)
        return [images[j * self.phase.batch_size:(j + 1) * self.phase.batch_size]
                for j in range(self.run.strategy.d_steps)]

    def round(self, iterations: int, seed: int) -> float:
        batches = [self.batch(seed * iterations + k) for k in range(iterations)]
        t0 = time.perf_counter()
        for reals in batches:
            self.row.step(reals)
        return (time.perf_counter() - t0) / iterations


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*", default=DEFAULT_CASES)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iterations", type=int, default=16, help="iterations per round (a multiple of 16 counts "
                                                               "lazy steps in proportion)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="after the timing, profile one round of each case (torch.profiler) and print its N "
                         "operators of most self CPU time")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    cases = [Case(spec) for spec in args.cases]
    for i in range(args.rounds + 1):  # round 0 warms up
        k = i % len(cases)
        for case in cases[k:] + cases[:k]:
            t = case.round(args.iterations, i)
            if i:
                case.times.append(t)
        print(f"round {i}/{args.rounds} done", file=sys.stderr)
    base = cases[0]
    base_ips = base.phase.batch_size * base.run.strategy.d_steps / statistics.median(base.times)
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.rounds} rounds x {args.iterations} iterations, "
          f"median of rounds")
    print("| case | params G / D | MMAC per image (G + D forward) | batch | ms / iteration | images/s | "
          f"images/s vs {base.label} |")
    print("|---|---|---|---|---|---|---|")
    for case in cases:
        ms = statistics.median(case.times) * 1e3
        ips = case.phase.batch_size * case.run.strategy.d_steps / (ms / 1e3)
        frozen = f" ({case.frozen:,} frozen)" if case.frozen else ""
        print(f"| {case.label} | {case.params[0]:,} / {case.params[1]:,}{frozen} | {case.g_macs / 1e6:.2f} + "
              f"{case.d_macs / 1e6:.2f} | {case.phase.batch_size} | {ms:.1f} (min {min(case.times) * 1e3:.1f}) | "
              f"{ips:.0f} | {ips / base_ips:.2f} |")
    for case in cases if args.profile else []:
        print_profile(case, args.iterations, args.profile)
    return 0


def print_profile(case: Case, iterations: int, top: int) -> None:
    """One round of ``case`` under torch.profiler: its ``top`` operators by self CPU time, as a
    share of the round (the double backward of R1 / R2 shows as the ``*_backward`` operators run
    inside the penalty's autograd.grad)."""
    from torch.profiler import ProfilerActivity, profile

    batches = [case.batch(10_000 + k) for k in range(iterations)]
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for reals in batches:
            case.row.step(reals)
    ms, lines = operator_table(prof, iterations, top, "iteration")
    print(f"\n{case.label}: {iterations} iterations, {ms:.1f} ms self CPU per iteration under the profiler")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
