"""A run as pictures (``gankit report RUN_DIR``; the command is ``gan_kit.cli.report``).

Writes ``RUN_DIR/report.html`` and PNG plots under ``RUN_DIR/report/``:

- ``losses.png``: D and G losses per tick (and D's mean logits on reals and fakes) over kimg,
- ``penalties.png``: every ``Loss/D/<penalty>`` and ``Loss/G/<penalty>`` (unweighted values) and
  the augmentation's ``Augment/*`` state (ADA's p) over kimg,
- ``metrics.png``: every ``Metrics/<name>`` (and per-level values such as SWD's) over kimg, with
  the direction the metric declares (``higher_is_better``),
- ``phases.png``: the sample grid of each finished phase side by side, then the final one.

The page also shows samples over time: the tick grids ``samples/tick-<n>.png`` (``run.sample_ticks``)
at up to ``TICK_GRIDS`` evenly spaced ticks, the first and the last among them, each captioned with
its kimg - for a single-phase run the only view of how its images developed.

Plots over kimg mark where each growth phase starts (dashed line, labelled with its resolution)
and shade the fade-ins. Phase boundaries come from the run's resolved ``recipe.toml`` (exact);
without it, from the ``Progress/phase`` and ``Progress/alpha`` columns of metrics.jsonl (to a tick).
Needs matplotlib (``pip install 'gankit[report]'``).
"""

from __future__ import annotations

import html
import json
import math
import re
import tomllib
from pathlib import Path
from typing import Any

import attrs

__all__ = ["write_report", "load_metrics", "phase_spans", "PhaseSpan", "REPORT_CSS"]




@attrs.frozen
class PhaseSpan:
    """One growth phase on the kimg axis: ``[start_kimg, end_kimg)``, fading until ``fade_end_kimg``."""

    index: int
    resolution: int
    start_kimg: float
    fade_end_kimg: float
    end_kimg: float


def load_metrics(run_dir: Path) -> tuple[list[dict[str, Any]], int]:
    """The rows of ``run_dir/metrics.jsonl`` and the number of unreadable lines (a run killed
    mid-write can leave a partial last line). Raises GankitError if the file is missing."""
    from gan_kit.base.errors import GankitError

    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise GankitError(f"{run_dir}: no metrics.jsonl here; give the run directory of a gankit run "
                          f"(run.out_dir, e.g. runs/pggan) that has finished at least one tick")
    rows, bad = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            continue
        if isinstance(row, dict) and isinstance(row.get("Progress/kimg"), (int, float)):
            rows.append(row)
        else:
            bad += 1
    if not rows:
        raise GankitError(f"{path}: no readable tick lines ({bad} unreadable); is the run still at its first tick?")
    return rows, bad


def _spans_from_recipe(run_dir: Path, total_kimg: float) -> list[PhaseSpan] | None:
    """Exact phase spans from the growth schedule of ``run_dir/recipe.toml`` (None if unusable)."""
    try:
        raw = tomllib.loads((run_dir / "recipe.toml").read_text(encoding="utf-8"))
        from gan_kit.plugin_api.components import BuildContext
        from gan_kit.plugin_api.manager import build_plugins
        from gan_kit.recipe import parse_options

        growth = raw.get("growth", {})
        plugins = build_plugins()
        comp = plugins.registry.get("growth", growth.get("name", "progressive"))
        problems: list[str] = []
        options = parse_options(comp.Options, {k: v for k, v in growth.items() if k != "name"}, "recipe.toml",
                                "growth", problems)
        if options is None:
            return None
        resolution = int(raw.get("data", {}).get("resolution", 32))
        sched = comp.factory(options, BuildContext(resolution=resolution))
        total = int(round(total_kimg * 1000))
        spans = []
        for ph in sched.phases(total):
            end = min(ph.end_nimg, total) if math.isfinite(ph.end_nimg) else total
            spans.append(PhaseSpan(ph.index, ph.resolution, ph.start_nimg / 1000, (ph.start_nimg + ph.fade_nimg) / 1000,
                                   end / 1000))
        return spans or None
    except Exception:  # a foreign or old recipe: fall back to the metrics columns
        return None


def _spans_from_rows(rows: list[dict]) -> list[PhaseSpan]:
    spans: list[PhaseSpan] = []
    prev_kimg = 0.0
    for row in rows:
        idx = int(row.get("Progress/phase", 0))
        res = int(row.get("Progress/resolution", 0))
        kimg = float(row["Progress/kimg"])
        fading = float(row.get("Progress/alpha", 1.0)) < 1.0
        if not spans or spans[-1].index != idx:
            start = prev_kimg if spans else 0.0
            if spans:
                spans[-1] = attrs.evolve(spans[-1], end_kimg=start)
            spans.append(PhaseSpan(idx, res, start, start, kimg))
        last = spans[-1]
        spans[-1] = attrs.evolve(last, end_kimg=kimg, fade_end_kimg=kimg if fading else last.fade_end_kimg)
        prev_kimg = kimg
    return spans


def phase_spans(run_dir: Path, rows: list[dict]) -> list[PhaseSpan]:
    """Phase spans of a run: from its recipe when possible, else from metrics.jsonl."""
    total = max(float(r["Progress/kimg"]) for r in rows)
    return _spans_from_recipe(run_dir, total) or _spans_from_rows(rows)


# ------------------------------------------------------------------------------- plotting --


def _series(rows: list[dict], key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for r in rows:
        v = r.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            xs.append(float(r["Progress/kimg"]))
            ys.append(float(v))
    return xs, ys


def _mark_phases(ax, spans: list[PhaseSpan]) -> None:
    """Dashed line at each phase start, labelled with the resolution; fade-ins shaded."""
    trans = ax.get_xaxis_transform()
    for sp in spans:
        if sp.fade_end_kimg > sp.start_kimg:
            ax.axvspan(sp.start_kimg, sp.fade_end_kimg, color="tab:orange", alpha=0.10, lw=0)
        if sp.start_kimg > 0:
            ax.axvline(sp.start_kimg, color="0.45", ls="--", lw=0.9)
        ax.text(sp.start_kimg, 1.01, f" {sp.resolution}px", transform=trans, fontsize=8, color="0.3",
                ha="left", va="bottom", clip_on=False)


def _figure(nplots: int, height: float = 3.0):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, height * nplots), dpi=110, layout="constrained")
    axes = fig.subplots(nplots, 1, squeeze=False)[:, 0]
    return fig, list(axes)


def _finish_axes(ax, spans, ylabel: str, title: str) -> None:
    _mark_phases(ax, spans)
    ax.set_xlabel("kimg (thousands of real images shown)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, loc="left", fontsize=10, pad=14)
    ax.grid(alpha=0.3)
    if spans:
        ax.set_xlim(0, max(sp.end_kimg for sp in spans))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8, loc="best")


def plot_losses(rows, spans, path: Path) -> bool:
    keys = [k for k in ("Loss/D", "Loss/G") if _series(rows, k)[0]]
    logit_keys = [k for k in ("Logits/real", "Logits/fake") if _series(rows, k)[0]]
    if not keys:
        return False
    fig, axes = _figure(2 if logit_keys else 1)
    for k, color in zip(keys, ("tab:blue", "tab:red")):
        ax = axes[0]
        ax.plot(*_series(rows, k), color=color, lw=1.4, marker="." if len(rows) < 60 else None, label=k)
    _finish_axes(axes[0], spans, "loss (tick mean)", "D and G losses")
    if logit_keys:
        for k, color in zip(logit_keys, ("tab:green", "tab:purple")):
            axes[1].plot(*_series(rows, k), color=color, lw=1.2, marker="." if len(rows) < 60 else None,
                         label=f"D {k.split('/')[1]} logits")
        axes[1].axhline(0, color="0.6", lw=0.7)
        _finish_axes(axes[1], spans, "mean logit", "D's logits on real and fake images")
    fig.savefig(path)
    return True


def _penalty_keys(keys) -> list[str]:
    """The D and G penalties' and the augmentation's keys among ``keys``, in a fixed order."""
    return sorted(k for k in keys if k.startswith(("Loss/D/", "Loss/G/", "Augment/")))


def plot_penalties(rows, spans, path: Path) -> bool:
    keys = _penalty_keys({k for r in rows for k in r})
    keys = [k for k in keys if _series(rows, k)[0]]
    if not keys:
        return False
    fig, axes = _figure(len(keys), 2.6)
    for ax, k in zip(axes, keys):
        xs, ys = _series(rows, k)
        ax.plot(xs, ys, color="tab:brown", lw=1.4, marker="." if len(xs) < 60 else None, label=k)
        if all(y > 0 for y in ys) and max(ys) / max(min(ys), 1e-30) > 100:
            ax.set_yscale("log")
        if k.startswith("Augment/"):
            _finish_axes(ax, spans, "value", f"augmentation {k.split('/', 1)[1]}")
        else:
            _finish_axes(ax, spans, "value (unweighted)", f"{k.split('/')[1]} penalty {k.split('/', 2)[2]}")
    fig.savefig(path)
    return True


def metric_families(rows) -> dict[str, list[str]]:
    """``{"swd": ["Metrics/swd", "Metrics/swd/32", "Metrics/swd/16"], ...}`` of the keys present."""
    fams: dict[str, list[str]] = {}
    for r in rows:
        for k in r:
            if k.startswith("Metrics/"):
                fam = k.split("/")[1]
                if k not in fams.setdefault(fam, []):
                    fams[fam].append(k)
    return fams


def metric_directions() -> dict[str, bool]:
    """``{family: higher_is_better}`` as the registered metrics declare it, for each
    ``Metrics/<family>`` key they write (a metric's ``families``, else its name:
    precision-recall writes ``precision`` and ``recall``); {} when the plugins cannot be loaded."""
    try:
        from gan_kit.plugin_api.manager import build_plugins

        out: dict[str, bool] = {}
        for comp in build_plugins().registry:
            if comp.kind == "metric":
                for fam in getattr(comp.factory, "families", ()) or (comp.name,):
                    out[fam] = bool(getattr(comp.factory, "higher_is_better", False))
        return out
    except Exception:  # a broken plugin must not cost the report its plots
        return {}


def _better(directions: dict[str, bool], fam: str) -> str:
    return {True: "higher is better", False: "lower is better"}.get(directions.get(fam), "")


def _metric_row(key: str, kimg: float, value: float, directions: dict[str, bool]) -> str:
    better = _better(directions, key.split("/")[1])
    return (f"<tr><th>{html.escape(key)}</th><td>{value:.4g} <span class='muted'>at {kimg:g} kimg"
            f"{'; ' + better if better else ''}</span></td></tr>")


def plot_metrics(rows, spans, path: Path) -> bool:
    fams = {f: ks for f, ks in metric_families(rows).items() if any(_series(rows, k)[0] for k in ks)}
    if not fams:
        return False
    directions = metric_directions()
    fig, axes = _figure(len(fams))
    for ax, (fam, keys) in zip(axes, fams.items()):
        main = f"Metrics/{fam}"
        subs = [k for k in keys if k != main]
        # Per-level values (SWD's pyramid levels) only add information where a tick has several.
        levels = [k for k in subs if k.split("/")[-1].isdigit()]
        multi = any(sum(k in r for k in levels) > 1 for r in rows)
        shown = [k for k in subs if multi or k not in levels]
        if main in keys:
            ax.plot(*_series(rows, main), lw=2.0, marker="o", ms=4, color="black",
                    label=f"{fam} (mean of levels)" if multi else fam)
        for k in shown:
            tail = k.split("/", 2)[2]
            ax.plot(*_series(rows, k), lw=1.0, ls=":", marker="o", ms=2.5,
                    label=f"{tail}px level" if tail.isdigit() else tail)
        unit = " x1e3" if fam == "swd" else ""
        note = "computed at each phase's resolution" if fam == "swd" else ""
        detail = "; ".join(t for t in (_better(directions, fam), note) if t)
        _finish_axes(ax, spans, f"{fam}{unit}", f"{fam}{unit}" + (f" ({detail})" if detail else ""))
    fig.savefig(path)
    return True


def phase_grids(run_dir: Path) -> list[tuple[str, Path]]:
    """``(caption, path)`` of ``samples/phase-<i>-<res>px.png`` in phase order, then ``final.png``."""
    found = []
    for p in (run_dir / "samples").glob("phase-*-*px.png"):
        m = re.fullmatch(r"phase-(\d+)-(\d+)px\.png", p.name)
        if m:
            found.append((int(m.group(1)), int(m.group(2)), p))
    out = [(f"phase {i}: {res}px", p) for i, res, p in sorted(found)]
    final = run_dir / "samples" / "final.png"
    if final.is_file():
        out.append(("final", final))
    return out


#: The most tick grids the page shows (evenly spaced over the run: a long run writes hundreds).
TICK_GRIDS = 12


def tick_grids(run_dir: Path, rows: list[dict], most: int = TICK_GRIDS) -> list[tuple[str, Path]]:
    """``(caption, path)`` of up to ``most`` of ``samples/tick-<n>.png``, evenly spaced over the
    ticks there (the first and the last included), captioned ``tick n: K kimg`` with the kimg of
    tick n's metrics.jsonl row (``tick n`` alone when the row is missing)."""
    found = sorted((int(m.group(1)), p) for p in (run_dir / "samples").glob("tick-*.png")
                   if (m := re.fullmatch(r"tick-(\d+)\.png", p.name)))
    if len(found) > most:
        found = [found[round(i * (len(found) - 1) / (most - 1))] for i in range(most)]
    kimg = {int(r["Progress/tick"]): r["Progress/kimg"] for r in rows
            if isinstance(r.get("Progress/tick"), int) and isinstance(r.get("Progress/kimg"), (int, float))}
    return [(f"tick {t}: {kimg[t]:g} kimg" if t in kimg else f"tick {t}", p) for t, p in found]


def plot_phase_grids(grids: list[tuple[str, Path]], path: Path) -> bool:
    if not grids:
        return False
    from matplotlib.figure import Figure
    from PIL import Image

    fig = Figure(figsize=(2.6 * len(grids), 3.0), dpi=110, layout="constrained")
    axes = fig.subplots(1, len(grids), squeeze=False)[0]
    for ax, (caption, p) in zip(axes, grids):
        with Image.open(p) as im:
            ax.imshow(im.convert("RGB"), interpolation="nearest")
        ax.set_title(caption, fontsize=10)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.savefig(path)
    return True


# ---------------------------------------------------------------------------------- html --

#: The style sheet of report.html (and of pages that sit beside it, such as compare.html).
REPORT_CSS = """
body { font-family: system-ui, sans-serif; margin: 24px auto; max-width: 1040px; color: #222; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 14px; } td, th { padding: 3px 12px 3px 0; text-align: left; }
th { color: #555; font-weight: 600; } img.plot { width: 100%; max-width: 990px; }
.grids { display: flex; flex-wrap: wrap; gap: 16px; }
.grids figure { margin: 0; text-align: center; font-size: 13px; color: #444; }
.grids img { width: 220px; height: 220px; image-rendering: pixelated; border: 1px solid #ccc; }
.muted { color: #777; font-size: 13px; } pre { background: #f6f6f6; padding: 10px; font-size: 12px; overflow-x: auto; }
"""


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:.4g}"
    return html.escape(str(v))


def write_report(run_dir: str | Path) -> Path:
    """Write ``report.html`` and the PNG plots of ``run_dir``; return the HTML path.

    Raises GankitError for a folder without metrics.jsonl or when matplotlib is missing.
    """
    # One function on purpose: it writes the page top to bottom, section by section, as it reads.
    from gan_kit.base.atomic import write_atomic
    from gan_kit.base.errors import GankitError
    from gan_kit.tools.outputs import check_folder, staged_outputs

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise GankitError(f"{run_dir}: not a folder; give a run directory such as runs/pggan")
    rows, bad = load_metrics(run_dir)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise GankitError("gankit report needs matplotlib for its plots: pip install 'gankit[report]' (or "
                          "'gankit[tools]': every after-training command's packages at once)") from None
    spans = phase_spans(run_dir, rows)
    out = check_folder(run_dir / "report", "report")  # before any plot is drawn
    grids = phase_grids(run_dir)
    with staged_outputs("report") as staged:  # the plots appear together, each whole

        def plot(draw, name: str, *args) -> bool:
            tmp = staged.path(out / f"{name}.png")
            drawn = draw(*args, tmp)
            if not drawn:
                staged.drop(tmp)
            return drawn

        made = {
            "losses": plot(plot_losses, "losses", rows, spans),
            "penalties": plot(plot_penalties, "penalties", rows, spans),
            "metrics": plot(plot_metrics, "metrics", rows, spans),
            "phases": plot(plot_phase_grids, "phases", grids),
        }
    last = rows[-1]
    finished = bool(last.get("Progress/final"))
    summary = [
        ("run", run_dir.resolve().name),
        ("status", "finished" if finished else "not finished (last tick shown)"),
        ("kimg", f"{float(last['Progress/kimg']):g}"),
        ("ticks", str(len(rows))),
        ("phase", f"{last.get('Progress/phase', '?')} at {last.get('Progress/resolution', '?')}px, "
                  f"alpha {float(last.get('Progress/alpha', 1.0)):.2f}"),
    ]
    if isinstance(last.get("Timing/img_per_s"), (int, float)):
        summary.append(("speed (last tick)", f"{last['Timing/img_per_s']:.0f} img/s"))
    final_keys = ["Loss/D", "Loss/G"] + _penalty_keys(last)
    directions = metric_directions() if made["metrics"] else {}
    latest_metric: dict[str, tuple[float, float]] = {}
    for r in rows:
        for k, v in r.items():
            if k.startswith("Metrics/") and isinstance(v, (int, float)):
                latest_metric[k] = (float(r["Progress/kimg"]), float(v))

    def img(name: str, alt: str) -> str:
        if not made[name]:
            return f'<p class="muted">No {alt} in metrics.jsonl.</p>'
        return f'<img class="plot" src="report/{name}.png" alt="{html.escape(alt)}">'

    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>gankit report: {html.escape(run_dir.name)}"
             f"</title><style>{REPORT_CSS}</style></head><body>",
             f"<h1>gankit run {html.escape(run_dir.resolve().name)}</h1>",
             f'<p class="muted">{html.escape(str(run_dir.resolve()))}'
             + (f"; {bad} unreadable line(s) of metrics.jsonl skipped" if bad else "") + "</p>",
             "<table>" + "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in summary),
             "".join(f"<tr><th>{html.escape(k)} (last tick)</th><td>{_fmt(last[k])}</td></tr>"
                     for k in final_keys if k in last),
             "".join(_metric_row(k, x, v, directions) for k, (x, v) in latest_metric.items() if k.count("/") == 1),
             "</table>"]
    if spans:
        parts.append("<h2>Growth phases</h2><table><tr><th>phase</th><th>resolution</th><th>kimg</th>"
                     "<th>fade-in until kimg</th></tr>")
        for s in spans:
            fade = f"{s.fade_end_kimg:g}" if s.fade_end_kimg > s.start_kimg else "-"
            parts.append(f"<tr><td>{s.index}</td><td>{s.resolution}px</td><td>{s.start_kimg:g} - {s.end_kimg:g}</td>"
                         f"<td>{fade}</td></tr>")
        parts.append("</table>")
    parts.append("<h2>Samples at the end of each phase</h2>")
    if grids:
        parts.append('<div class="grids">' + "".join(
            f'<figure><img src="{html.escape(p.relative_to(run_dir).as_posix())}" alt="{html.escape(c)}">'
            f"<figcaption>{html.escape(c)}</figcaption></figure>" for c, p in grids) + "</div>")
        parts.append('<p class="muted">G_ema on a fixed latent batch; earlier phases upscaled (nearest) to the '
                     'final resolution. Side by side as one picture: report/phases.png.</p>')
    else:
        parts.append('<p class="muted">No phase grids in samples/ yet.</p>')
    over_time = tick_grids(run_dir, rows)
    if over_time:
        parts.append("<h2>Samples over time</h2>" + '<div class="grids">' + "".join(
            f'<figure><img src="{html.escape(p.relative_to(run_dir).as_posix())}" alt="{html.escape(c)}">'
            f"<figcaption>{html.escape(c)}</figcaption></figure>" for c, p in over_time) + "</div>")
        parts.append('<p class="muted">G_ema on the same fixed latent batch at the end of the ticks shown (samples/'
                     f'tick-*.png; up to {TICK_GRIDS}, evenly spaced).</p>')
    parts.append("<h2>Losses</h2>" + '<p class="muted">In every plot over kimg, a dashed line marks where a '
                 "growth phase starts (its resolution on top) and the shaded span is its fade-in.</p>"
                 + img("losses", "loss values"))
    parts.append("<h2>Penalties and augmentation</h2>" + img("penalties", "penalty or augmentation values"))
    parts.append("<h2>Metrics</h2>" + img("metrics", "metric values"))
    recipe = run_dir / "recipe.toml"
    if recipe.is_file():
        parts.append("<h2>Recipe</h2><details><summary>recipe.toml (resolved)</summary><pre>"
                     + html.escape(recipe.read_text(encoding="utf-8")) + "</pre></details>")
    parts.append("</body></html>\n")
    path = run_dir / "report.html"
    write_atomic(path, lambda f: f.write("\n".join(parts).encode("utf-8")))  # whole, or the previous page
    return path
