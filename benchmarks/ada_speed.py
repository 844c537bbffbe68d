"""Time one call of ADA's augmentation, 'bgc' against 'gankit-subset', on the CPU (one thread).

    python benchmarks/ada_speed.py      # prints ms per call for a batch of 32, three image sizes
"""

from __future__ import annotations

import time

import torch

from gan_kit.builtin.augment.ada import AdaptiveAugment


def per_call_ms(pipeline: str, p: float, x: torch.Tensor, calls: int = 20) -> float:
    aug = AdaptiveAugment(AdaptiveAugment.Options(pipeline=pipeline, p_init=p))
    for _ in range(3):  # warm-up
        aug(x)
    start = time.perf_counter()
    for _ in range(calls):
        aug(x)
    return (time.perf_counter() - start) / calls * 1e3


def main() -> None:
    torch.set_num_threads(1)
    print("| images | bgc p=0 | bgc p=0.3 | bgc p=1 | gankit-subset p=0.3 | gankit-subset p=1 |")
    print("|---|---|---|---|---|---|")
    for shape in [(32, 1, 16, 16), (32, 3, 32, 32), (32, 3, 64, 64)]:
        x = torch.rand(*shape) * 2 - 1
        cells = [per_call_ms(pipe, p, x) for pipe, p in
                 [("bgc", 0.0), ("bgc", 0.3), ("bgc", 1.0), ("gankit-subset", 0.3), ("gankit-subset", 1.0)]]
        print(f"| {'x'.join(map(str, shape))} | " + " | ".join(f"{c:.1f} ms" for c in cells) + " |")


if __name__ == "__main__":
    main()
