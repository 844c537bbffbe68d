"""Side-by-side speed of the update strategies on several recipes (run by hand, not a test).

    python benchmarks/bench_strategies.py [RECIPE ...] [--steps 20] [--warmup 3] [--strategies all]

Default recipes: recipes/pggan.toml and, when present, recipes/dcgan.toml. For each recipe every
strategy and the hand-written plain-PyTorch d-then-g loop are timed in one process, interleaved
per iteration (see gan_kit/tools/bench.py for exactly what is timed). Prints, per strategy and recipe,
the best ms per iteration and the throughput relative to the hand-written loop and to the
engine's d-then-g, then one line per recipe: ``<recipe>: engine/hand-written throughput: X.XX``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gan_kit.tools.bench import REFERENCE, result_table, run_bench  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recipes", nargs="*", type=Path)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--strategies", default="all")
    args = ap.parse_args(argv)
    recipes = args.recipes or [p for p in (ROOT / "recipes/pggan.toml", ROOT / "recipes/dcgan.toml") if p.is_file()]
    console = Console(highlight=False)
    results = []
    for path in recipes:
        with console.status(f"benchmarking {path.name}"):
            results.append(run_bench(path, args.strategies, steps=args.steps, warmup=args.warmup))
        console.print(result_table(results[-1]))

    names = [r.name for r in results[0].rows]
    table = Table(title="throughput relative to the hand-written loop (and to the engine's d-then-g)")
    table.add_column("strategy")
    for res in results:
        table.add_column(f"{res.recipe.name} ({res.resolution}px, batch {res.batch_size})", justify="right")
    for name in names:
        cells = []
        for res in results:
            row, eng = res.row(name), res.row("d-then-g")
            if row is None:
                cells.append("-")
                continue
            rel_hand = res.relative(row)
            rel_eng = eng.best_s / row.best_s if eng is not None else None
            text = f"{row.best_s * 1e3:.0f} ms"
            text += f"  x{rel_hand:.2f}" if rel_hand is not None else ""
            text += f" (x{rel_eng:.2f})" if rel_eng is not None and name != REFERENCE else ""
            cells.append(text)
        table.add_row(name, *cells)
    console.print(table)
    for res in results:
        ratio = res.ratio
        print(f"{res.recipe}: engine/hand-written throughput: " + (f"{ratio:.2f}" if ratio is not None else "n/a"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
