"""``gankit compare``: runs ranked by a metric, with error bars over seeds.

Runs are read through the files every run has (recipe.toml, metrics.jsonl, samples/final.png) and
a sweep trial's sweep.json. Runs whose resolved recipes differ only in ``run.seed`` (and keys that
do not change training: the run directory, threads, reporting intervals) form one configuration.
Per configuration, over its finished runs (n seeds): the mean final value of the metric and its
95% confidence interval (Student's t: mean +- t(0.975, n-1) * sd / sqrt(n), clipped to the values
the metric can take, its ``value_range``: two seeds' t of 12.7 reaches far below 0), the mean of each
seed's best value, kimg, training time and images/s; and Welch's t-test (two-sided, unequal
variances; Welch 1947) of the configuration's final values against the best configuration's,
p < 0.05 read as "differs beyond seed noise".
"""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path
from typing import Any

import attrs

from gan_kit import GankitError
from gankit_sweep.grouping import identity

__all__ = ["RunInfo", "Group", "Comparison", "compare_runs", "to_json", "print_table", "find_runs", "ALPHA"]

#: The significance level of "differs from the best beyond seed noise".
ALPHA = 0.05
#: States of a run whose final value is counted.
FINISHED = ("complete", "finished")


@attrs.frozen
class RunInfo:
    """One run directory as compare sees it (values None where the run has none)."""

    path: Path
    seed: int | None
    state: str
    final: float | None
    best: float | None
    last: float | None
    kimg: float | None
    train_s: float | None
    img_per_s: float | None
    extras: dict
    params: dict | None
    recipe: dict = attrs.field(repr=False)
    rows: list = attrs.field(repr=False)


@attrs.define
class Group:
    """The runs of one configuration and their statistics over seeds."""

    key: str
    runs: list
    label: str = ""
    n: int = 0
    mean: float | None = None
    sd: float | None = None
    ci95: tuple | None = None
    best: float | None = None
    kimg: float | None = None
    train_s: float | None = None
    img_per_s: float | None = None
    extras: dict = attrs.field(factory=dict)
    p_vs_best: float | None = None
    differs: bool | None = None
    rank: int | None = None

    @property
    def finals(self) -> list[float]:
        return [r.final for r in self.runs if r.state in FINISHED and r.final is not None]

    def states(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.runs:
            out[r.state] = out.get(r.state, 0) + 1
        return out


@attrs.frozen
class Comparison:
    metric: str
    higher_is_better: bool
    groups: list
    extras: list
    default_html: Path
    direction_note: str = ""
    #: Warnings for the terminal: a ``--show`` key that no run has.
    warnings: tuple = ()
    #: The sweep parameters every configuration shares (``k=v, ...``), left out of the labels.
    common: str = ""
    #: The values the metric can take (its ``value_range``); the intervals are clipped to it.
    value_range: tuple = (-math.inf, math.inf)


def _is_run(path: Path) -> bool:
    return any((path / n).exists() for n in ("metrics.jsonl", "recipe.toml", "sweep.json"))


def find_runs(paths: list[Path]) -> tuple[list[Path], Path]:
    """The run directories named by ``paths`` (a run directory, or a folder of them such as a study
    folder) and where compare.html goes by default."""
    runs: list[Path] = []
    for p in paths:
        if not p.exists():
            raise GankitError(f"{p}: does not exist; give run directories or a folder of them (a sweep's study "
                              f"folder, e.g. runs/pggan-sweep)")
        if not p.is_dir():
            raise GankitError(f"{p}: is a file, not a folder; give run directories or a folder of them (a sweep's "
                              f"study folder, e.g. runs/pggan-sweep)")
        found = [p] if _is_run(p) else sorted(d for d in p.iterdir() if d.is_dir() and _is_run(d))
        if not found:
            raise GankitError(f"{p}: holds no run (no metrics.jsonl, recipe.toml or sweep.json here or in its "
                              f"sub-folders)")
        runs += [r for r in found if r not in runs]
    single = len(paths) == 1 and not _is_run(paths[0])
    return runs, (paths[0] / "compare.html") if single else Path("compare.html")


def _flatten(table: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in table.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _with_current_defaults(path: Path, saved: dict) -> dict:
    """``saved`` (a run's recipe.toml) resolved again by this gankit, so an option added since the
    run was written reads as its default in every run, instead of splitting one configuration
    into "runs that have the key" and "runs that do not"; ``saved`` as it is when it no longer
    loads (a plugin not installed here, an option since removed)."""
    if not saved:
        return saved
    from gan_kit import load_recipe, recipe_to_dict

    try:
        return recipe_to_dict(load_recipe(path)[0])
    except Exception:  # noqa: BLE001 - any failure leaves the recipe as saved
        return saved


def _number(v: Any) -> float | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    return float(v) if ok else None


def _read_run(path: Path, key: str, higher: bool, extras: list[str]) -> RunInfo:
    from gankit_sweep.trials import read_rows, read_state

    try:
        recipe = tomllib.loads((path / "recipe.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        recipe = {}
    recipe = _with_current_defaults(path / "recipe.toml", recipe)
    rows, sweep = read_rows(path), read_state(path)
    last = rows[-1] if rows else {}
    finished = bool(last.get("Progress/final"))
    values = [v for r in rows if (v := _number(r.get(key))) is not None]
    state = sweep.get("state") or ("finished" if finished else "unfinished")
    if state not in ("pruned", "failed") and finished and state != "complete":
        state = "finished"
    final = _number(last.get(key)) if finished else None
    computed = any(isinstance(m, dict) and f"Metrics/{m.get('name')}" == key for m in recipe.get("metric") or [])
    if finished and final is None and state in FINISHED and (computed or any(key in r for r in rows)):
        # NaN or missing in the final row: no result (the sweep fails such a trial the same way),
        # never an earlier tick's value
        state = "failed"
    kimg = _number(last.get("Progress/kimg"))
    train_s = _number(last.get("Timing/train_s"))
    if train_s is None and rows:
        train_s = sum(_number(r.get("Timing/sec_per_tick")) or 0.0 for r in rows)
    seed = sweep.get("seed", recipe.get("run", {}).get("seed"))
    return RunInfo(path=path, seed=seed, state=state, final=final,
                   best=(max if higher else min)(values) if values else None, last=values[-1] if values else None,
                   kimg=kimg, train_s=train_s, img_per_s=kimg * 1000 / train_s if kimg and train_s else None,
                   extras=_last_values(rows, extras), params=sweep.get("params"), recipe=_flatten(recipe),
                   rows=rows)


def _last_values(rows: list[dict], keys: list[str]) -> dict[str, float]:
    """The last number each of ``keys`` has in ``rows`` (keys without one left out)."""
    out = {}
    for k in keys:
        vals = [v for r in rows if (v := _number(r.get(k))) is not None]
        if vals:
            out[k] = vals[-1]
    return out


def _metric_and_direction(paths: list[Path], metric: str | None) -> tuple[str, bool, str]:
    """The metric key, whether higher is better, and a note when the direction is a guess."""
    from gankit_sweep.trials import read_state

    states = [read_state(p) for p in paths]
    key = None
    if metric is not None:
        key = metric if metric.startswith("Metrics/") else f"Metrics/{metric}"
    else:
        key = next((s["metric"] for s in states if s.get("metric")), None)
        if key is None:
            for p in paths:
                try:
                    metrics = tomllib.loads((p / "recipe.toml").read_text(encoding="utf-8")).get("metric") or []
                except (OSError, tomllib.TOMLDecodeError):
                    continue
                if metrics and isinstance(metrics[0], dict) and metrics[0].get("name"):
                    key = f"Metrics/{metrics[0]['name']}"
                    break
    if key is None:
        raise GankitError("gankit compare: the runs compute no metric (no [[metric]] in their recipe.toml); give "
                          "--metric KEY for a metrics.jsonl key")
    known = [s["higher_is_better"] for s in states if s.get("metric") == key and "higher_is_better" in s]
    if known:
        return key, bool(known[0]), ""
    try:
        from gan_kit import component_class

        hib = getattr(component_class("metric", key.split("/")[1]), "higher_is_better", False)
        if isinstance(hib, bool):
            return key, hib, ""
    except Exception:  # noqa: BLE001 - a metric of a plugin this process does not load
        pass
    return key, False, f"direction of {key} unknown here: taken as lower is better"


#: Above this many differing recipe keys a configuration is labelled by its runs' folder.
MAX_LABEL_KEYS = 4


def _labels(groups: list[Group]) -> str:
    """``k=v`` labels: the sweep's parameters where every run has them (only those whose values
    differ between the configurations, so a narrow terminal can show them), else the recipe keys
    in which the configurations differ (more than ``MAX_LABEL_KEYS`` of them: the runs' folder,
    e.g. the study folder of a seeds-only sweep of one recipe). Returns the sweep parameters all
    configurations share, ``k=v, ...`` ("" when none were left out)."""
    from gankit_sweep.spaces import config_label

    known = [g for g in groups if g.runs[0].recipe]  # a trial without its recipe.toml yet differs in nothing
    idents = {id(g): identity(g.runs[0].recipe) for g in known}
    keys = set().union(*idents.values()) if known else set()
    differ = sorted(k for k in keys if len({json.dumps(idents[id(g)].get(k), sort_keys=True, default=str)
                                            for g in known}) > 1)

    def diff_label(g: Group) -> str:
        ident = idents.get(id(g), {})
        if len(differ) > MAX_LABEL_KEYS:
            # Whole recipes compared (r3gan against stylegan2): dozens of keys differ; the folder
            # the runs sit in - a study's, named by --out - says which one it is.
            return g.runs[0].path.parent.name
        return ", ".join(f"{k}={ident.get(k)}" for k in differ) or g.runs[0].path.parent.name

    swept = {id(g): g.runs[0].params for g in groups
             if g.runs[0].params and all(r.params == g.runs[0].params for r in g.runs)}
    shared: dict = {}
    if len(swept) == len(groups) > 1:
        # One sweep's configurations: a parameter with one value in all of them names none.
        first = next(iter(swept.values()))
        shared = {k: v for k, v in first.items()
                  if all(k in p and json.dumps(p[k], default=str) == json.dumps(v, default=str) for p in swept.values())}
        if len(shared) == len(first):
            shared = {}
    for g in groups:
        params = swept.get(id(g))
        g.label = config_label({k: v for k, v in params.items() if k not in shared}) if params else diff_label(g)
    seen: dict[str, int] = {}
    for g in groups:
        seen[g.label] = seen.get(g.label, 0) + 1
    for g in groups:
        if seen[g.label] > 1:
            g.label = f"{g.label} | {diff_label(g)}"
    return config_label(shared) if shared else ""


def metric_range(key: str) -> tuple[float, float]:
    """``(low, high)``, the values the metric of ``Metrics/<name>`` can take as its class declares
    them (``Metric.value_range``; SWD and FID ``(0, inf)``); unbounded for a metric this process
    cannot load."""
    try:
        from gan_kit import component_class

        low, high = getattr(component_class("metric", key.split("/")[1]), "value_range", (-math.inf, math.inf))
        return float(low), float(high)
    except Exception:  # noqa: BLE001 - a metric of a plugin this process does not load
        return -math.inf, math.inf


def _mean(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def _statistics(g: Group, higher: bool, value_range: tuple[float, float] = (-math.inf, math.inf)) -> None:
    from scipy import stats

    finals = g.finals
    g.n = len(finals)
    counted = [r for r in g.runs if r.state in FINISHED and r.final is not None]
    if finals:
        g.mean = sum(finals) / g.n
    if g.n >= 2:
        g.sd = math.sqrt(sum((x - g.mean) ** 2 for x in finals) / (g.n - 1))
        h = float(stats.t.ppf(0.975, g.n - 1)) * g.sd / math.sqrt(g.n)
        # t(0.975, 1) = 12.7: two seeds' interval of a distance would reach far below 0
        g.ci95 = (max(g.mean - h, value_range[0]), min(g.mean + h, value_range[1]))
    g.best = _mean([r.best for r in counted])
    g.kimg, g.train_s = _mean([r.kimg for r in counted]), _mean([r.train_s for r in counted])
    g.img_per_s = _mean([r.img_per_s for r in counted])
    keys = {k for r in g.runs for k in r.extras}
    g.extras = {k: _mean([r.extras.get(k) for r in (counted or g.runs)]) for k in sorted(keys)}


def welch_p(a: list[float], b: list[float]) -> float | None:
    """Two-sided p-value of Welch's t-test (unequal variances) of samples ``a`` and ``b``; None
    when either has fewer than 2 values. Two samples without spread: 0 if their means differ,
    else 1."""
    from scipy import stats

    if len(a) < 2 or len(b) < 2:
        return None
    if _var(a) == 0 and _var(b) == 0:
        return 0.0 if sum(a) / len(a) != sum(b) / len(b) else 1.0
    return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


def _var(xs: list[float]) -> float:
    m = sum(xs) / len(xs)
    return sum((x - m) ** 2 for x in xs)


def compare_runs(paths: list[Path], metric: str | None = None, extras: list[str] = ()) -> Comparison:
    """Read, group, rank and test the runs under ``paths``."""
    runs, default_html = find_runs(paths)
    key, higher, note = _metric_and_direction(runs, metric)
    extra_keys = list(extras)
    infos = [_read_run(p, key, higher, extra_keys) for p in runs]
    row_keys = {k for i in infos for r in i.rows for k in r}
    if metric is not None:
        _check_metric(metric, key, infos, row_keys)
    warnings = tuple(_missing_extra(k, row_keys) for k in extras if k not in row_keys)
    found = sorted(k for k in row_keys if k.startswith("Augment/"))
    extra_keys += [k for k in found if k not in extra_keys]
    if found:  # the Augment/* columns, from the rows already read
        infos = [attrs.evolve(i, extras=_last_values(i.rows, extra_keys)) for i in infos]
    by_key: dict[str, Group] = {}
    for info in sorted(infos, key=lambda i: not i.recipe):
        if info.recipe:
            ident = identity(info.recipe)
        else:  # a trial that has not written its recipe.toml yet: its sweep configuration's group
            mates = next((gk for gk, g in by_key.items() if info.params and g.runs[0].params == info.params), None)
            ident = json.loads(mates) if mates else {"params": info.params or None, "path": None if info.params
                                                     else str(info.path)}
        gk = json.dumps(ident, sort_keys=True, default=str)
        by_key.setdefault(gk, Group(gk, [])).runs.append(info)
    groups = list(by_key.values())
    common = _labels(groups)
    value_range = metric_range(key)
    for g in groups:
        g.runs.sort(key=lambda r: (r.seed if isinstance(r.seed, int) else 1 << 40, str(r.path)))
        _statistics(g, higher, value_range)
    sign = -1.0 if higher else 1.0
    groups.sort(key=lambda g: (g.mean is None, sign * g.mean if g.mean is not None else 0.0, g.label))
    for i, g in enumerate(groups):
        g.rank = i + 1 if g.mean is not None else None
    if groups and groups[0].mean is not None:
        best = groups[0].finals
        for g in groups[1:]:
            g.p_vs_best = welch_p(g.finals, best)
            g.differs = None if g.p_vs_best is None else g.p_vs_best < ALPHA
    return Comparison(metric=key, higher_is_better=higher, groups=groups, extras=extra_keys,
                      default_html=default_html, direction_note=note, warnings=warnings, common=common,
                      value_range=value_range)


def _check_metric(metric: str, key: str, infos: list[RunInfo], row_keys: set[str]) -> None:
    """``--metric``: refuse a metric no run has - in its metrics.jsonl rows, or as a ``[[metric]]``
    of its recipe (a run still training has no value yet) - naming those the runs have."""
    computed = {f"Metrics/{m.get('name')}" for i in infos for m in (i.recipe.get("metric") or [])
                if isinstance(m, dict)}
    if key in row_keys or key in computed:
        return
    have = sorted(k for k in row_keys | computed if k.startswith("Metrics/"))
    raise GankitError(f"--metric {metric}: no run has {key}; the runs have "
                      f"{', '.join(have) if have else 'no Metrics/ key yet'} (give --metric one of them)")


def _missing_extra(key: str, row_keys: set[str]) -> str:
    import difflib

    close = difflib.get_close_matches(key, sorted(row_keys), n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"--show {key}: no run has {key} in its metrics.jsonl; its column is empty{hint}"


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    return v


def to_json(c: Comparison) -> dict:
    """Every number of the comparison (null where there is none)."""
    out = {
        "metric": c.metric, "higher_is_better": c.higher_is_better, "alpha": ALPHA,
        "ci": "95% Student's t interval of the mean final value over seeds" + range_note(c),
        "test": "Welch's t-test (two-sided, unequal variances) of final values against the rank-1 configuration",
        "configurations": [],
    }
    for g in c.groups:
        out["configurations"].append({
            "rank": g.rank, "label": g.label, "params": g.runs[0].params, "n": g.n, "mean": g.mean, "sd": g.sd,
            "ci95": list(g.ci95) if g.ci95 else None, "best": g.best, "final_values": g.finals, "kimg": g.kimg,
            "train_s": g.train_s, "img_per_s": g.img_per_s, "p_vs_best": g.p_vs_best,
            "differs_from_best": g.differs, "extras": g.extras, "states": g.states(),
            "runs": [{"dir": str(r.path), "seed": r.seed, "state": r.state, "final": r.final, "best": r.best,
                      "last": r.last, "kimg": r.kimg, "train_s": r.train_s, "img_per_s": r.img_per_s,
                      "extras": r.extras} for r in g.runs],
        })
    return _clean(out)


def fmt(v: Any, digits: int = 4) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)


def table_rows(c: Comparison) -> tuple[list[str], list[list[str]]]:
    """The comparison as a header and text rows (the terminal table and compare.html share it)."""
    head = ["rank", "configuration", "n", f"{c.metric} mean", "95% CI", "sd", "best", "kimg", "train s", "img/s",
            "p vs best", "beyond noise", *c.extras, "other runs"]
    rows = []
    for g in c.groups:
        other = ", ".join(f"{n} {s}" for s, n in g.states().items() if s not in FINISHED)
        beyond = "-" if g.rank == 1 else {True: "yes", False: "no", None: "n/a"}[g.differs]
        rows.append([fmt(g.rank), g.label, str(g.n), fmt(g.mean),
                     f"[{fmt(g.ci95[0])}, {fmt(g.ci95[1])}]" if g.ci95 else "-", fmt(g.sd), fmt(g.best),
                     fmt(g.kimg), "-" if g.train_s is None else f"{g.train_s:.1f}",
                     "-" if g.img_per_s is None else f"{g.img_per_s:.0f}", fmt(g.p_vs_best, 2), beyond,
                     *(fmt(g.extras.get(k)) for k in c.extras), other or "-"])
    return head, rows


NOTE = ("n: finished seeds. 95% CI: Student's t interval of the mean over seeds. p vs best: Welch's t-test of the "
        "final values against rank 1; 'yes' when p < 0.05 (a difference larger than seed noise; with many "
        "configurations about 1 in 20 'yes' is chance). Needs 2+ seeds on both sides.")


def range_note(c: Comparison) -> str:
    """What the intervals were clipped to ("" for an unbounded metric)."""
    low, high = c.value_range
    if math.isinf(low) and math.isinf(high):
        return ""
    return f", clipped to the values {c.metric} can take, [{low:g}, {high:g}]"


def print_table(c: Comparison, console: Any = None) -> None:
    """The table on ``console`` (default: the terminal, or 240 columns when not one). Each
    configuration's ``k=v`` on a line of its own; where the table with them would not fit the
    terminal without cutting one, the configurations go under the table, one line each, and the
    table names them by rank. The parameters all configurations share go in the caption."""
    import io
    import sys

    from rich.console import Console
    from rich.table import Table

    console = console or Console(width=None if sys.stdout.isatty() else 240, highlight=False)
    head, rows = table_rows(c)
    rows = [[row[0], row[1].replace(", ", "\n"), *row[2:]] for row in rows]
    if all(row[-1] == "-" for row in rows):  # no unfinished or failed run: the column says nothing
        head, rows = head[:-1], [row[:-1] for row in rows]
    direction = "higher" if c.higher_is_better else "lower"

    def build(legend: bool) -> Table:
        table = Table(title=f"{c.metric}: final value, {direction} is better",
                      caption=f"every configuration: {c.common}" if c.common else None)
        for i, name in enumerate(head):
            if i == 1 and legend:
                continue
            # a fixed width: rich narrows the widest column first, which would cut the labels
            table.add_column(name, width=longest if i == 1 else None)
        for row in rows:
            table.add_row(*(cell for i, cell in enumerate(row) if i != 1 or not legend))
        return table

    longest = max(len(line) for row in rows for line in row[1].split("\n")) if rows else 0
    table = build(legend=False)
    trial = Console(file=io.StringIO(), width=console.width)
    trial.print(table)
    shown = trial.file.getvalue()  # every label line and every number whole, else the labels go under the table
    legend = not (all(line in shown for row in rows for line in row[1].split("\n"))
                  and all(word in shown for row in rows for cell in row[2:] for word in cell.split()))
    if legend:
        table = build(legend=True)
    console.print(table)
    if legend:
        for row in rows:  # the labels whole, one configuration a line
            console.print(f"{row[0]}: {row[1].replace(chr(10), ', ')}", soft_wrap=True)
    console.print(NOTE.replace("over seeds.", f"over seeds{range_note(c)}.", 1)
                  + (f" Note: {c.direction_note}." if c.direction_note else ""), soft_wrap=True)
