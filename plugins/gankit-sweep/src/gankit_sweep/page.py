"""compare.html: one self-contained page (plots and sample grids embedded as PNG data) for
``gankit compare``: the ranked table, the metric over kimg and over training time per
configuration (mean over seeds, the band spanning the seeds), the D and G losses, extra keys
(ADA's ``Augment/p``, ``Augment/rt``), and every run's final grid side by side.

Plots need matplotlib (the ``report`` extra); without it the page holds the table and the grids.
"""

from __future__ import annotations

import base64
import html
import io
import math
from pathlib import Path

from gan_kit import REPORT_CSS
from gankit_sweep.compare import NOTE, Comparison, Group, fmt, range_note, table_rows

__all__ = ["write_page", "curve"]


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _x(row: dict, axis: str, clock: list[float]) -> float | None:
    if axis == "kimg":
        return row.get("Progress/kimg")
    t = row.get("Timing/train_s")
    if isinstance(t, (int, float)):
        return float(t)
    clock[0] += float(row.get("Timing/sec_per_tick") or 0.0)  # runs from before Timing/train_s existed
    return clock[0]


def curve(group: Group, key: str, axis: str = "kimg") -> tuple[list[float], list[float], list[float], list[float]]:
    """``(x, mean, low, high)`` of ``key`` over ``axis`` ("kimg" or "time", training seconds)
    across the group's runs: each run linearly interpolated onto the union of their x values
    within its own range; mean, minimum and maximum over the runs, at the x where every run has
    a value (seeds that ended at different kimg: a mean of the seeds present would jump where one
    ends, so the curve stops at the shortest seed's end)."""
    import numpy as np

    series = []
    for r in group.runs:
        clock = [0.0]
        pts = [(x, float(v)) for row in r.rows if (v := row.get(key)) is not None
               and (x := _x(row, axis, clock)) is not None and isinstance(v, (int, float)) and math.isfinite(v)]
        if pts:
            series.append((np.array([p[0] for p in pts], dtype=float), np.array([p[1] for p in pts])))
    if not series:
        return [], [], [], []
    grid = np.unique(np.concatenate([xs for xs, _ in series]))
    ys = np.full((len(series), len(grid)), np.nan)
    for i, (xs, vs) in enumerate(series):
        order = np.argsort(xs)
        ys[i] = np.interp(grid, xs[order], vs[order], left=np.nan, right=np.nan)
    every = ~np.isnan(ys).any(0)
    ys = ys[:, every]
    return grid[every].tolist(), ys.mean(0).tolist(), ys.min(0).tolist(), ys.max(0).tolist()


def _plot(c: Comparison, keys: list[tuple[str, str, str]]) -> str | None:
    """One figure, a row per ``(key, axis, title)``, a line and seed band per configuration."""
    from matplotlib.figure import Figure

    shown = [(k, ax, t) for k, ax, t in keys
             if any(curve(Group(g.key, [r]), k, ax)[0] for g in c.groups for r in g.runs)]
    if not shown:
        return None
    fig = Figure(figsize=(9, 3.0 * len(shown)), dpi=100, layout="constrained")
    axes = fig.subplots(len(shown), 1, squeeze=False)[:, 0]
    for ax, (key, axis, title) in zip(axes, shown):
        for i, g in enumerate(c.groups):
            color, label = f"C{i % 10}", f"{g.rank or '-'}: {g.label}"[:70]
            if axis == "time":  # seeds reach a tick at different times: each seed its own line
                for j, r in enumerate(g.runs):
                    xs, ys, _, _ = curve(Group(g.key, [r]), key, axis)
                    ax.plot(xs, ys, color=color, lw=1.0, marker="o" if len(xs) < 30 else None, ms=3,
                            label=label if j == 0 else None)
                continue
            xs, mean, lo, hi = curve(g, key, axis)
            pts = [curve(Group(g.key, [r]), key, axis) for r in g.runs]
            if not any(p[0] for p in pts):
                continue
            if all(len(p[0]) <= 1 for p in pts):
                # one value per seed (a metric computed only at the end): dots, never a line that
                # would join different seeds' end points as if they were one curve
                ax.scatter([p[0][0] for p in pts if p[0]], [p[1][0] for p in pts if p[0]], color=color, s=14,
                           label=label)
                continue
            if not xs:  # no kimg every seed reached: each seed its own thin line, no mean
                for j, (px, py, _, _) in enumerate(pts):
                    ax.plot(px, py, color=color, lw=0.8, ls="--", alpha=0.6, label=label if j == 0 else None)
                continue
            ax.plot(xs, mean, color=color, lw=1.5, marker="o" if len(xs) < 30 else None, ms=3, label=label)
            for px, py, _, _ in pts:  # a seed past the shortest one's end: its own thin line on from there
                tail = [(x, y) for x, y in zip(px, py) if x >= xs[-1]]
                if len(tail) > 1:
                    ax.plot(*zip(*tail), color=color, lw=0.8, ls="--", alpha=0.6)
            if len(g.runs) > 1 and len(xs) > 1:
                ax.fill_between(xs, lo, hi, color=color, alpha=0.15, lw=0)
            elif len(g.runs) > 1:  # one point (a metric computed only at the end): the range as a bar
                ax.errorbar(xs, mean, yerr=[[mean[0] - lo[0]], [hi[0] - mean[0]]], color=color, capsize=4, lw=1)
        ax.set_xlabel("kimg (thousands of real images shown)" if axis == "kimg" else "training time (s)")
        ax.set_ylabel(key)
        ax.set_title(title, loc="left", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    return _png(fig)


def _finals(c: Comparison) -> str | None:
    """Each configuration's final values: one dot per seed, the mean with its 95% confidence
    interval as a bar, configurations in rank order (the table's numbers, drawn)."""
    from matplotlib.figure import Figure

    shown = [g for g in c.groups if g.finals]
    if not shown:
        return None
    fig = Figure(figsize=(9, 0.9 + 0.32 * len(shown)), dpi=100, layout="constrained")
    ax = fig.subplots()
    for i, g in enumerate(shown):
        y = len(shown) - 1 - i
        ax.scatter(g.finals, [y] * len(g.finals), color="C0", s=18, alpha=0.7, zorder=3,
                   label="one seed" if i == 0 else None)
        if g.ci95 is not None:
            ax.errorbar([g.mean], [y], xerr=[[g.mean - g.ci95[0]], [g.ci95[1] - g.mean]], color="C3", capsize=4,
                        lw=1.2, marker="|", ms=12, zorder=4, label="mean, 95% CI" if i == 0 else None)
        elif g.mean is not None:
            ax.plot([g.mean], [y], color="C3", marker="|", ms=12, zorder=4)
    ax.set_yticks(range(len(shown)), [f"{g.rank}: {g.label}"[:60] for g in reversed(shown)], fontsize=8)
    ax.set_xlabel(f"final {c.metric} ({'higher' if c.higher_is_better else 'lower'} is better)")
    ax.grid(alpha=0.3, axis="x")
    ax.legend(fontsize=7, loc="best")
    return _png(fig)


def _grids(c: Comparison) -> str:
    parts = []
    for g in c.groups:
        cells = []
        for r in g.runs:
            p = r.path / "samples" / "final.png"
            if p.is_file():
                data = base64.b64encode(p.read_bytes()).decode("ascii")
                cells.append(f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(str(p))}">'
                             f"<figcaption>seed {fmt(r.seed)} ({html.escape(r.state)}, {fmt(r.final)})"
                             f"</figcaption></figure>")
        if cells:
            parts.append(f"<h3>{fmt(g.rank)}: {html.escape(g.label)}</h3><div class='grids'>{''.join(cells)}</div>")
    return "".join(parts) or "<p class='muted'>No samples/final.png in these runs yet.</p>"


def write_page(c: Comparison, path: Path) -> str | None:
    """Write compare.html to ``path``; returns a note when the plots were left out."""
    head, rows = table_rows(c)
    direction = "higher" if c.higher_is_better else "lower"
    table = ("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"
             + "".join("<tr>" + "".join(f"<td>{html.escape(x)}</td>" for x in row) + "</tr>" for row in rows)
             + "</table>")
    note = None
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        note = "matplotlib is missing (pip install 'gankit[report]'): table and grids only"
        plots = []
    else:
        metric = c.metric
        plots = [
            ("Final values", _finals(c)),
            ("The metric", _plot(c, [(metric, "kimg", f"{metric} over kimg (line: mean over seeds where every seed has "
                                                       "a value; band: their range; dashed: a seed past the "
                                                       "shortest one's end)"),
                                     (metric, "time", f"{metric} over training time (one line per seed)")])),
            ("Losses", _plot(c, [("Loss/D", "kimg", "D loss (tick mean)"), ("Loss/G", "kimg", "G loss (tick mean)")])),
        ]
        if c.extras:
            plots.append(("Other keys", _plot(c, [(k, "kimg", k) for k in c.extras])))
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>gankit compare: {html.escape(c.metric)}"
             f"</title><style>{REPORT_CSS} td {{ white-space: nowrap; }}</style></head><body>",
             f"<h1>gankit compare: {html.escape(c.metric)} ({direction} is better)</h1>",
             f"<p class='muted'>{sum(len(g.runs) for g in c.groups)} runs in {len(c.groups)} configurations"
             + (f"; {html.escape(c.direction_note)}" if c.direction_note else "") + "</p>",
             table, f"<p class='muted'>{html.escape(NOTE.replace('over seeds.', f'over seeds{range_note(c)}.', 1))}</p>"]
    if note:
        parts.append(f"<p class='muted'>{html.escape(note)}.</p>")
    for title, data in plots:
        if data:
            parts.append(f"<h2>{title}</h2><img class='plot' src='data:image/png;base64,{data}' alt='{title}'>")
    parts.append("<h2>Final samples</h2>" + _grids(c))
    parts.append("</body></html>\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts), encoding="utf-8")
    return note
