"""Time one call of ADA's augmentation - stylegan2-ada-pytorch's 'bgc', R3GAN's 'r3gan' ('bgc'
plus cutout, colour at p / 2) and gankit 0.2's 'gankit-subset' - on the CPU (one thread).

    python benchmarks/ada_speed.py                   # ms per call, batch of 32, three image sizes
    python benchmarks/ada_speed.py --calls 5 --shapes 32x1x16x16
"""

from __future__ import annotations

import argparse
import time

import torch

from gan_kit.builtin.augment.ada import AdaptiveAugment

#: The table's columns: (pipeline, p).
CASES = [("bgc", 0.0), ("bgc", 0.3), ("bgc", 1.0), ("r3gan", 0.3), ("r3gan", 1.0), ("gankit-subset", 0.3),
         ("gankit-subset", 1.0)]
SHAPES = [(32, 1, 16, 16), (32, 3, 32, 32), (32, 3, 64, 64)]


def per_call_ms(pipeline: str, p: float, x: torch.Tensor, calls: int = 20) -> float:
    aug = AdaptiveAugment(AdaptiveAugment.Options(pipeline=pipeline, p_init=p))
    for _ in range(3):  # warm-up
        aug(x)
    start = time.perf_counter()
    for _ in range(calls):
        aug(x)
    return (time.perf_counter() - start) / calls * 1e3


def table(shapes=SHAPES, calls: int = 20, cases=CASES) -> list[str]:
    """The markdown table's lines: one row per image shape ``(N, C, H, W)``, one column per case."""
    lines = ["| images | " + " | ".join(f"{pipe} p={p:g}" for pipe, p in cases) + " |",
             "|---|" + "---|" * len(cases)]
    for shape in shapes:
        x = torch.rand(*shape) * 2 - 1
        cells = [per_call_ms(pipe, p, x, calls) for pipe, p in cases]
        lines.append(f"| {'x'.join(map(str, shape))} | " + " | ".join(f"{c:.1f} ms" for c in cells) + " |")
    return lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20, help="timed calls per cell (after 3 warm-up calls)")
    ap.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES),
                    help="comma-separated NxCxHxW batches")
    args = ap.parse_args(argv)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    torch.set_num_threads(1)
    print("\n".join(table(shapes, args.calls)))


if __name__ == "__main__":
    main()
