"""``gankit bench``: time every update strategy side by side on a recipe. The benchmark
(``gan_kit.tools.bench``, and its hand-written reference loop) stays out of the import path of
training: the command imports it only when it runs. The group's ``bench`` entry hands its
arguments to ``bench`` as a program of its own (usage lines read ``gankit bench``)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click

from gan_kit.base.errors import GankitError

__all__ = ["bench", "bench_entry"]


@click.command("bench", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("recipe", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--strategies", default="all", show_default=True,
              help="Strategies to time: all, or comma-separated names (e.g. d-then-g,shared-fake).")
@click.option("--steps", type=click.IntRange(1), default=20, show_default=True, help="Timed iterations per strategy.")
@click.option("--warmup", type=click.IntRange(0), default=3, show_default=True,
              help="Untimed iterations per strategy first.")
@click.option("--resolution", type=int, default=None,
              help="Phase resolution to time at (alpha 1); default: the final phase.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a recipe value.")
@click.option("--no-reference", is_flag=True, help="Skip the hand-written reference loop.")
@click.option("--debug", is_flag=True, help="Show full tracebacks.")
def bench(recipe: Path, strategies: str, steps: int, warmup: int, resolution: int | None,
          overrides: tuple[str, ...], no_reference: bool, debug: bool) -> None:
    """Time each update strategy on RECIPE's model, data, resolution and device, next to a
    hand-written plain-PyTorch d-then-g loop; the last line is the engine/hand-written ratio."""
    import torch
    from rich.console import Console

    from gan_kit.tools.bench import result_table, run_bench

    console = Console(highlight=False)
    try:
        with console.status("building the networks of every row") as status:
            t0 = time.perf_counter()

            def progress(i: int, n: int) -> None:
                left = (time.perf_counter() - t0) / i * (n - i)
                status.update(f"benchmarking: round {i}/{n}, about {left:.0f} s left")

            result = run_bench(recipe, strategies, steps=steps, warmup=warmup, overrides=overrides,
                               resolution=resolution, reference=not no_reference, progress=progress)
    except GankitError as e:
        if debug or os.environ.get("GANKIT_DEBUG"):
            raise
        for line in str(e).splitlines():
            click.echo(f"error: {line}", err=True)
        sys.exit(e.exit_code)
    console.print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; warm-up {warmup} "
                  f"iterations; rows interleaved per iteration")
    console.print(result_table(result))
    ratio = result.ratio
    if ratio is None:
        why = result.reference_note or ("d-then-g not benchmarked" if result.row("d-then-g") is None
                                        else "reference skipped")
        click.echo(f"engine/hand-written throughput: n/a ({why})")
    else:
        click.echo(f"engine/hand-written throughput: {ratio:.2f}")


@click.command("bench", context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                         "help_option_names": []})
@click.pass_context
def bench_entry(ctx: click.Context) -> None:
    """Time every update strategy side by side on a recipe (see `gankit bench --help`)."""
    bench.main(args=ctx.args, prog_name="gankit bench", standalone_mode=True)
