"""Run by tests/test_distributed.py under torchrun: trains several configurations of one recipe in
one process group (one torchrun start for all of them) and records each outcome.

usage: torchrun --nproc-per-node 2 tests/ddp_worker.py RECIPE OUT_DIR NAME=OVERRIDE;OVERRIDE ...

Each configuration trains into OUT_DIR/NAME; a run stopped by a GankitError writes its one-line
message to OUT_DIR/NAME/error.txt (rank 0) instead of failing the whole launch. A NAME ending in
``@resume`` resumes the run in OUT_DIR/NAME-without-it (``train(run, resume=True)``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import attrs
import torch

from gan_kit.training import distributed
from gan_kit.runs.run import build_run
from gan_kit.runs.session import train
from gan_kit.base.errors import GankitError
from gan_kit.recipe import load_recipe


def main(recipe: str, out: str, configs: list[str]) -> None:
    torch.set_num_threads(1)
    distributed.init()
    try:
        for config in configs:
            name, _, overrides = config.partition("=")
            resume = name.endswith("@resume")
            out_dir = Path(out) / name.removesuffix("@resume")
            r, plugins = load_recipe(recipe, [o for o in overrides.split(";") if o])
            r = attrs.evolve(r, run=attrs.evolve(r.run, out_dir=str(out_dir)))
            try:
                run = build_run(r, plugins)
                train(run, resume=resume)
            except GankitError as e:
                if distributed.dist.get_rank() == 0:
                    out_dir.mkdir(parents=True, exist_ok=True)
                    (out_dir / "error.txt").write_text(str(e))
            run = None  # its DDP wrappers must go before the process group
    finally:
        distributed.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
