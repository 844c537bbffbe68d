"""Experiment trackers: the ``[[tracker]]`` components a recipe names, driven from the lifecycle
hooks on rank 0 - the resolved recipe as parameters when the run starts, every finite number of
every tick's metrics.jsonl line (step = ``cur_nimg``, real images shown, as TensorBoard's events),
each sample grid as an artifact (and checkpoints where a tracker's options ask), and the run's end
as FINISHED (it reached its length), KILLED (Ctrl-C / SIGTERM, or stopped early: resumable) or
FAILED (an error).

A run directory remembers its tracked runs in ``trackers.json`` (``{"tracker[0].mlflow": id}``),
so ``gankit run --resume`` continues the same tracked run instead of starting a second one.
Built-in trackers: ``mlflow`` (``pip install 'gankit[mlflow]'``) and ``wandb``
(``pip install 'gankit[wandb]'``); docs/trackers.md.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tomllib
from pathlib import Path
from typing import Any

from gan_kit import Interrupted, StashKey, hookimpl
from gan_kit.builtin.reporting.trackers.mlflow import MLflowTracker
from gan_kit.builtin.reporting.trackers.wandb import WandbTracker

__all__ = ["MLflowTracker", "WandbTracker", "flat_params", "IDS_FILE"]

#: The run directory's record of its tracked runs: ``{"tracker[i].<name>": run id}``.
IDS_FILE = "trackers.json"

#: The trackers that started, in recipe order: ``[(key, tracker)]``.
started_key = StashKey[list]()
#: True once run_finished fired (the run reached its length).
finished_key = StashKey[bool]()


def flat_params(table: Any, prefix: str = "") -> dict[str, Any]:
    """A TOML table as flat dotted keys, array items by number as ``--set`` writes them:
    ``{"optim.lr": 0.001, "penalty.0.weight": 10.0}`` (MLflow allows no brackets in a key);
    arrays of scalars become their JSON text (``"[0.0, 0.99]"``)."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat_params(value, name + "."))
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for i, item in enumerate(value):
                out.update(flat_params(item, f"{name}.{i}."))
        elif isinstance(value, list):
            out[name] = json.dumps(value)
        else:
            out[name] = value
    return out


def _ids(run) -> dict[str, str]:
    path = run.out_dir / IDS_FILE
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _sweep_study(run_dir: Path) -> str | None:
    """The study of a ``gankit sweep`` trial (its run directory's sweep.json), else None."""
    try:
        return json.loads((run_dir / "sweep.json").read_text(encoding="utf-8")).get("study")
    except (OSError, ValueError, AttributeError):
        return None


def _warn(key: str, what: str, error: BaseException) -> None:
    # One line, never the exception's repr: a tracking URI in it may hold credentials.
    print(f"warning: {key}: {what} failed ({type(error).__name__}); the run's own files stay the record",
          file=sys.stderr)


@hookimpl
def run_started(run):
    if not run.is_main or not getattr(run, "trackers", None):
        return
    params = flat_params(tomllib.loads((run.out_dir / "recipe.toml").read_text(encoding="utf-8")))
    study = _sweep_study(run.out_dir)
    if study is not None:
        params["gankit.study"] = study
    ids = _ids(run)
    started = []
    for i, (spec, tracker) in enumerate(run.trackers):
        key = f"tracker[{i}].{spec.name}"
        # A tracker that cannot start (no client installed, server refused) stops the run here
        # with its one-line GankitError, before any training time is spent.
        ids[key] = tracker.start(params, run.out_dir, ids.get(key))
        started.append((key, tracker))
    run.stash[started_key] = started
    tmp = run.out_dir / f".{IDS_FILE}.tmp"
    tmp.write_text(json.dumps(ids, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, run.out_dir / IDS_FILE)


def _each(run, what: str, call) -> None:
    for key, tracker in run.stash.get(started_key, []):
        try:
            call(tracker)
        except Exception as e:  # a tracker's network error must not stop training
            _warn(key, what, e)


def _grid(run, name: str) -> None:
    path = run.out_dir / "samples" / name
    if path.is_file():
        _each(run, f"logging {name}", lambda t: t.log_artifact(path, "samples"))


@hookimpl(trylast=True)  # after the reporting plugin wrote the tick's grid
def tick_finished(run, stats):
    if started_key not in run.stash:
        return
    metrics = {k: float(v) for k, v in stats.items()
               if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
    _each(run, "logging metrics", lambda t: t.log_metrics(metrics, run.cur_nimg))
    _grid(run, f"tick-{stats['Progress/tick']:04d}.png")


@hookimpl
def checkpoint_saved(run, path):
    for key, tracker in run.stash.get(started_key, []):
        if getattr(tracker.options, "log_checkpoints", False):
            try:
                tracker.log_artifact(Path(path), "checkpoints")
            except Exception as e:
                _warn(key, f"logging {Path(path).name}", e)


@hookimpl(trylast=True)  # after the reporting plugin wrote the final and phase grids
def run_finished(run, stats):
    if started_key not in run.stash:
        return
    run.stash[finished_key] = True
    for path in sorted((run.out_dir / "samples").glob("phase-*.png")):
        _grid(run, path.name)
    _grid(run, "final.png")


@hookimpl
def run_teardown(run, error):
    started = run.stash.get(started_key, None)
    if started is None:
        return
    if error is None:
        status = "FINISHED" if run.stash.get(finished_key, False) else "KILLED"
    elif isinstance(error, (Interrupted, KeyboardInterrupt)):
        status = "KILLED"
    else:
        status = "FAILED"
    for key, tracker in started:
        try:
            tracker.finish(status)
        except Exception as e:
            _warn(key, f"marking the run {status}", e)
    del run.stash[started_key]


@hookimpl
def register_trackers(register):
    register("mlflow", MLflowTracker)
    register("wandb", WandbTracker)
