"""Reporters built on the lifecycle hooks: the rich progress bar and tick log, metrics.jsonl,
and sample grids from G_ema on a fixed latent batch.

A resumed run continues ``metrics.jsonl`` from its checkpoint: rows of ticks written after that
checkpoint (by the run that was interrupted) are dropped first, so curves never double back.
"""

from __future__ import annotations

import json
import math
import time

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn

from gan_kit import StashKey, hookimpl

#: This plugin's per-run state: the console, the progress bar and its task, timing.
state_key = StashKey[dict]()


def _phase_text(phase) -> str:
    return f"phase {phase.index} {phase.resolution}px alpha {phase.alpha:.2f}"


def _hms(seconds: float) -> str:
    s = int(seconds + 0.5)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def run_end(run, img_s: float) -> tuple[float, str]:
    """``(fraction done, time left)`` of a run that ends at ``run.total_kimg`` or after
    ``run.max_minutes`` of training, whichever comes first (``img_s``: the recent images per
    second, 0 = not known yet). The fraction is the larger of kimg shown / total_kimg and
    training time / the limit; the text the time left to the end that comes first: ``0:12:05
    left`` (to total_kimg) or ``0:03:10 left of the 9-minute limit``."""
    done = min(run.cur_nimg / run.total_nimg, 1.0)
    to_total = (run.total_nimg - run.cur_nimg) / img_s if img_s > 0 else math.inf
    limit = run.recipe.run.max_minutes
    if limit is not None:
        left = max(limit * 60.0 - run.train_seconds, 0.0)
        if left < to_total:
            return max(done, min(run.train_seconds / (limit * 60.0), 1.0)), f"{_hms(left)} left of the {limit:g}-minute limit"
    return done, ("-:--:--" if math.isinf(to_total) else _hms(to_total)) + " left"


def drop_rows_after(path, tick: int) -> None:
    """Keep the rows of ``metrics.jsonl`` whose ``Progress/tick`` is below ``tick`` (the ticks a
    checkpoint had finished), rewriting the file atomically."""
    import os

    if not path.is_file():
        return
    lines = path.read_text(encoding="utf-8").splitlines()
    kept = []
    for line in lines:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a row cut short by a kill
        if int(row.get("Progress/tick", 0)) < tick:
            kept.append(line)
    if len(kept) == len(lines):
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(k + "\n" for k in kept), encoding="utf-8")
    os.replace(tmp, path)


@hookimpl
def run_started(run):
    if run.is_main and run.resumed_from is not None:
        drop_rows_after(run.out_dir / "metrics.jsonl", run.tick)
    st = run.stash[state_key] = {"console": Console(stderr=True, soft_wrap=True), "progress": None, "t0": time.perf_counter(),
                            "last_t": time.perf_counter(), "last_nimg": run.cur_nimg, "img_s": 0.0,
                            "start_nimg": run.cur_nimg}
    if run.is_main:
        (run.out_dir / "samples").mkdir(parents=True, exist_ok=True)
        fresh = [n for n in ("G", "D", "G_ema") if n not in (getattr(run, "initialized_networks", ()) or ("G", "D", "G_ema"))]
        start = (f", resuming at kimg {run.cur_nimg / 1000:g}" if run.resumed_from is not None else
                 f", from the weights of {run.initialized_from}" + (f" ({' and '.join(fresh)} fresh: the source holds "
                                                                     f"none)" if fresh else "")
                 if getattr(run, "initialized_from", None) else "")
        import torch

        n = torch.get_num_threads()
        threads = f", {n} thread{'s' if n != 1 else ''}" if run.device.type == "cpu" else ""
        limit = run.recipe.run.max_minutes
        if limit is not None:  # the limit may well end the run first: say so, and how much of it is left
            spent = f", {max(limit - run.train_seconds / 60, 0):.3g} left" if run.train_seconds else ""
            start += f"; or {limit:g} minutes of training (run.max_minutes{spent}), whichever comes first"
        st["console"].print(f"[bold]gankit[/] training {run.recipe.path} -> {run.out_dir} "
                            f"on {run.device} ({run.precision}{threads}), {run.total_nimg / 1000:g} kimg{start}")
    if run.is_main and run.options.progress:
        progress = Progress(
            TextColumn("[bold cyan]{task.fields[phase]}"),
            BarColumn(),
            TextColumn("{task.fields[kimg]} kimg"),
            TextColumn("D {task.fields[d]} G {task.fields[g]}"),
            TextColumn("{task.fields[ips]} img/s"),
            TextColumn("{task.fields[left]}"),  # to total_kimg or to run.max_minutes, whichever is first
            console=st["console"],
            transient=False,
        )
        done, left = run_end(run, 0.0)
        task = progress.add_task("train", total=1.0, completed=done,
                                 phase=_phase_text(run.phase), kimg="", d="-", g="-", ips="-", left=left)
        progress.start()
        st["progress"], st["task"] = progress, task


@hookimpl
def step_finished(run, stats):
    st = run.stash.get(state_key, None)
    if not st or st["progress"] is None:
        return
    now = time.perf_counter()
    if now - st["last_t"] < 0.5:
        return  # reading the stats is a host-device sync: the bar refreshes twice a second at most
    st["img_s"] = (run.cur_nimg - st["last_nimg"]) / (now - st["last_t"])
    st["last_t"], st["last_nimg"] = now, run.cur_nimg
    done, left = run_end(run, st["img_s"])
    st["progress"].update(
        st["task"], completed=done, left=left, phase=_phase_text(run.phase),
        kimg=f"{run.cur_nimg / 1000:.1f}/{run.total_nimg / 1000:g}",
        d=f"{stats.get('Loss/D', math.nan):+.3f}", g=f"{stats.get('Loss/G', math.nan):+.3f}",
        ips=f"{st['img_s']:.0f}")


def tick_keys(stats) -> list[tuple[str, str]]:
    """``(shown name, stat key)`` of what a tick line shows: the D and G losses, every D and G
    penalty (``D/r1``, ``G/path-length``), the augmentation's state (``aug/p``, ADA's p), each
    scheduled option (``optim.lr``) and the metrics' main values."""
    keys = ["Loss/D", "Loss/G"] + [k for k in stats if k.startswith(("Loss/D/", "Loss/G/"))]
    out = [(k.split("/", 1)[1], k) for k in keys if k in stats]
    out += [(f"aug/{k.split('/', 1)[1]}", k) for k in stats if k.startswith("Augment/")]
    out += [(k.split("/", 1)[1], k) for k in stats if k.startswith("Schedule/")]
    out += [(k.split("/")[-1], k) for k in stats if k.startswith("Metrics/") and k.count("/") == 1]
    return out


def _fmt(v):
    return f"{v:.4g}" if isinstance(v, float) else str(v)


@hookimpl(trylast=True)
def tick_finished(run, stats):
    if not run.is_main:
        return
    with open(run.out_dir / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({k: v for k, v in stats.items()}, default=float) + "\n")
    st = run.stash.get(state_key, None)
    if st is not None:
        parts = " ".join(f"{name}={_fmt(stats[k])}" for name, k in tick_keys(stats))
        kimg = stats["Progress/kimg"]
        st["console"].print(f"tick {stats['Progress/tick']:<4} kimg {kimg:<8.{1 if run.total_nimg >= 10_000 else 3}f} "
                            f"{stats['Progress/resolution']}px alpha {stats['Progress/alpha']:.2f}  {parts}  "
                            f"{stats['Timing/img_per_s']:.0f} img/s", highlight=False)
    every = run.options.sample_ticks
    if every and stats["Progress/tick"] % every == 0:
        name = f"tick-{stats['Progress/tick']:04d}.png"
        save_grid(run, run.out_dir / "samples" / name)
        if run.options.sample_G:
            save_grid(run, run.out_dir / "samples" / f"G-{name}", G=run.G)


def save_grid(run, path, phase=None, G=None) -> None:
    """A grid of G_ema's (or ``G``'s) images on the run's fixed latents (at ``phase``, default the
    current one), upscaled to the final resolution and to at least 32 pixels a side; in a
    class-conditional run one row per class (class 0 on top)."""
    from gan_kit.tools.grids import MIN_CELL
    from gan_kit.tools.grids import save_grid as write

    images = run.generate(run.fixed_z, phase=phase, G=G, labels=run.fixed_labels)
    write(images, path, size=max(run.recipe.resolution, MIN_CELL), nrow=run.grid_nrow)


@hookimpl
def phase_started(run, phase):
    if run.is_main and run.previous_phase is not None:
        prev = run.previous_phase
        save_grid(run, run.out_dir / "samples" / f"phase-{prev.index}-{prev.resolution}px.png", phase=prev)
        st = run.stash.get(state_key, None)
        if st is not None:
            st["console"].print(f"[green]phase {prev.index} ({prev.resolution}px) finished[/] at kimg "
                                f"{run.cur_nimg / 1000:g}; growing to {phase.resolution}px")


@hookimpl
def run_finished(run, stats):
    st = run.stash.get(state_key, None)
    if run.is_main:
        if run.phase_finished:  # not a phase a time limit cut short
            save_grid(run, run.out_dir / "samples" / f"phase-{run.phase.index}-{run.phase.resolution}px.png")
        save_grid(run, run.out_dir / "samples" / "final.png")
    if st is not None:
        _stop_progress(st)
        elapsed = time.perf_counter() - st["t0"]
        if run.is_main:
            # This session's images: a resumed run's earlier kimg took time this clock never saw.
            shown = run.cur_nimg - st.get("start_nimg", 0)
            digits = 1 if run.total_nimg >= 10_000 else 3
            total = f" (the run is at {run.cur_nimg / 1000:.{digits}f} kimg)" if shown != run.cur_nimg else ""
            if run.cur_nimg < run.total_nimg:
                # run_finished below total_kimg: the time limit ended it (the first line promised
                # total_kimg, so say why the run stopped short of it)
                total += (f", stopped by run.max_minutes = {run.recipe.run.max_minutes:g} before "
                          f"run.total_kimg = {run.total_nimg / 1000:g}")
            st["console"].print(f"[bold green]done[/]: {shown / 1000:.{digits}f} kimg in {elapsed:.0f} s{total}; "
                                f"samples in {run.out_dir / 'samples'}, checkpoint in {run.out_dir / 'checkpoints'}")


@hookimpl
def run_teardown(run, error):
    """Stop the progress bar whatever ended the run, so the terminal is left clean."""
    st = run.stash.get(state_key, None)
    if st is not None:
        _stop_progress(st)


def _stop_progress(st: dict) -> None:
    if st.get("progress") is not None:
        st["progress"].stop()
        st["progress"] = None


def status(run, text: str) -> None:
    """Show what the run is doing outside its steps (an end-of-run metric) on the progress bar."""
    st = run.stash.get(state_key, None)
    if st is not None and st.get("progress") is not None:
        st["progress"].update(st["task"], phase=text)
