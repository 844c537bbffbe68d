"""Quality per minute: a metric against training time for groups of runs (seeds), with a seed band
(the old and the new main recipe, 3 seeds each).

    python benchmarks/quality_per_minute.py --group "old main recipe" runs/old-s0 runs/old-s1 runs/old-s2 \
        --group "new main recipe" runs/new-s0 runs/new-s1 runs/new-s2 -o docs/quality-per-minute.png

Each run's metric values (``Metrics/swd`` unless ``--metric``) are placed at their tick's training
time (``Timing/train_s``, seconds of training, metric passes and start-up excluded); per group the
runs are interpolated onto the union of their times and drawn as the mean with the min-max band
(``--per-seed``: each run's own curve instead, a line per seed). Prints, per group, the mean
metric at whole minutes and at each run's end (``--per-seed``: each seed's too).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--group", nargs="+", action="append", required=True, metavar=("LABEL", "RUN_DIR"),
                   help="a label, then the run directories of that group (its seeds)")
    p.add_argument("--metric", default="Metrics/swd")
    p.add_argument("--per-seed", action="store_true",
                   help="draw each run's own curve (a line per seed) instead of the mean and its band")
    p.add_argument("--real", type=float, default=None, help="draw this value (real vs real) as a line")
    p.add_argument("-o", "--out", type=Path, required=True, help="the PNG to write")
    args = p.parse_args(argv)

    import numpy as np
    from matplotlib.figure import Figure

    from gankit_sweep.compare import Group, compare_runs
    from gankit_sweep.page import curve

    fig = Figure(figsize=(7.5, 4.0), dpi=110, layout="constrained")
    ax = fig.subplots()
    for i, (label, *dirs) in enumerate(args.group):
        c = compare_runs([Path(d) for d in dirs], metric=args.metric)
        runs = [r for g in c.groups for r in g.runs]
        xs, mean, lo, hi = curve(Group("all", runs), args.metric, "time")
        if not xs:
            print(f"{label}: no {args.metric} values", file=sys.stderr)
            return 2
        minutes = np.asarray(xs) / 60.0
        color = f"C{i}"
        if args.per_seed:
            for j, r in enumerate(runs):
                rx, ry, _, _ = curve(Group("one", [r]), args.metric, "time")
                rm = np.asarray(rx) / 60.0
                ax.plot(rm, ry, color=color, lw=1.0, ls=("-", "--", ":", "-.")[j % 4],
                        label=f"{label}, seed {r.seed}")
                print(f"{label} seed {r.seed}: " + ", ".join(
                    f"{m} min {float(np.interp(m, rm, ry)):.2f}" for m in range(1, int(rm.max()) + 1)))
        else:
            ax.plot(minutes, mean, color=color, lw=1.6, label=f"{label} ({len(runs)} seeds)")
            ax.fill_between(minutes, lo, hi, color=color, alpha=0.18, lw=0)
        ends = [(r.train_s / 60.0, r.final) for r in runs if r.final is not None and r.train_s]
        ax.scatter([e[0] for e in ends], [e[1] for e in ends], color=color, s=14, zorder=3)
        marks = {m: float(np.interp(m, minutes, mean)) for m in range(1, int(minutes.max()) + 1)}
        finals = ", ".join(f"{v:.2f} at {t:.1f} min" for t, v in ends)
        print(f"{label}: mean {args.metric} " + ", ".join(f"{m} min {v:.2f}" for m, v in marks.items())
              + f"; ends: {finals}")
    if args.real is not None:
        ax.axhline(args.real, color="0.3", ls="--", lw=1, label=f"real vs real ({args.real:g})")
        ax.axhline(1.3 * args.real, color="0.6", ls=":", lw=1, label=f"1.3 x real vs real ({1.3 * args.real:.3g})")
    ax.set_xlabel("training time (minutes)")
    ax.set_ylabel(f"{args.metric} (lower is better)")
    ax.set_yscale("log")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
