"""Reporters built on the lifecycle hooks: the rich progress bar and tick log, metrics.jsonl,
and sample grids from G_ema on a fixed latent batch."""

from __future__ import annotations

import json
import math
import time

import torch.nn.functional as F
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from gan_kit import hookimpl

_KEY = __name__


def _phase_text(phase) -> str:
    return f"phase {phase.index} {phase.resolution}px alpha {phase.alpha:.2f}"


@hookimpl
def run_started(run):
    st = run.state[_KEY] = {"console": Console(stderr=True, soft_wrap=True), "progress": None, "t0": time.perf_counter(),
                            "last_t": time.perf_counter(), "last_nimg": run.cur_nimg, "img_s": 0.0}
    if run.is_main:
        (run.out_dir / "samples").mkdir(parents=True, exist_ok=True)
        st["console"].print(f"[bold]gankit[/] training {run.recipe.path} -> {run.out_dir} "
                            f"on {run.device} ({run.precision}), {run.total_nimg / 1000:g} kimg")
    if run.is_main and run.options.progress:
        progress = Progress(
            TextColumn("[bold cyan]{task.fields[phase]}"),
            BarColumn(),
            TextColumn("{task.fields[kimg]} kimg"),
            TextColumn("D {task.fields[d]} G {task.fields[g]}"),
            TextColumn("{task.fields[ips]} img/s"),
            TimeRemainingColumn(),
            console=st["console"],
            transient=False,
        )
        task = progress.add_task("train", total=run.total_nimg, completed=run.cur_nimg,
                                 phase=_phase_text(run.phase), kimg="", d="-", g="-", ips="-")
        progress.start()
        st["progress"], st["task"] = progress, task


@hookimpl
def step_finished(run, stats):
    st = run.state.get(_KEY)
    if not st or st["progress"] is None:
        return
    now = time.perf_counter()
    if now - st["last_t"] >= 0.5:
        st["img_s"] = (run.cur_nimg - st["last_nimg"]) / (now - st["last_t"])
        st["last_t"], st["last_nimg"] = now, run.cur_nimg
    st["progress"].update(
        st["task"], completed=min(run.cur_nimg, run.total_nimg), phase=_phase_text(run.phase),
        kimg=f"{run.cur_nimg / 1000:.1f}/{run.total_nimg / 1000:g}",
        d=f"{stats.get('Loss/D', math.nan):+.3f}", g=f"{stats.get('Loss/G', math.nan):+.3f}",
        ips=f"{st['img_s']:.0f}")


def _fmt(v):
    return f"{v:.4g}" if isinstance(v, float) else str(v)


@hookimpl(trylast=True)
def tick_finished(run, stats):
    if not run.is_main:
        return
    with open(run.out_dir / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({k: v for k, v in stats.items()}, default=float) + "\n")
    st = run.state.get(_KEY)
    if st is not None:
        keys = ["Loss/D", "Loss/G"] + [k for k in stats if k.startswith("Loss/D/")] + \
               [k for k in stats if k.startswith("Metrics/") and k.count("/") == 1]
        parts = " ".join(f"{k.split('/', 1)[1] if k.startswith('Loss/') else k.split('/')[-1]}={_fmt(stats[k])}"
                         for k in keys if k in stats)
        st["console"].print(f"tick {stats['Progress/tick']:<4} kimg {stats['Progress/kimg']:<8.1f} "
                            f"{stats['Progress/resolution']}px alpha {stats['Progress/alpha']:.2f}  {parts}  "
                            f"{stats['Timing/img_per_s']:.0f} img/s", highlight=False)
    save_grid(run, run.out_dir / "samples" / f"tick-{stats['Progress/tick']:04d}.png")


def save_grid(run, path, phase=None) -> None:
    """A grid of G_ema images on the fixed latents, upscaled (nearest) to the final resolution and
    to at least 32 pixels a side, so early phases and small images stay visible."""
    import torchvision.utils as vutils

    images = run.generate(run.fixed_z, phase=phase)
    size = max(run.recipe.resolution, 32)
    if images.shape[-1] != size:
        images = F.interpolate(images, size=size, mode="nearest")
    nrow = max(1, int(math.sqrt(images.shape[0])))
    path.parent.mkdir(parents=True, exist_ok=True)
    vutils.save_image(images.clamp(-1, 1), path, nrow=nrow, normalize=True, value_range=(-1, 1), padding=1)


@hookimpl
def phase_started(run, phase):
    if run.is_main and run.previous_phase is not None:
        prev = run.previous_phase
        save_grid(run, run.out_dir / "samples" / f"phase-{prev.index}-{prev.resolution}px.png", phase=prev)
        st = run.state.get(_KEY)
        if st is not None:
            st["console"].print(f"[green]phase {prev.index} ({prev.resolution}px) finished[/] at kimg "
                                f"{run.cur_nimg / 1000:.1f}; growing to {phase.resolution}px")


@hookimpl
def run_finished(run, stats):
    st = run.state.get(_KEY)
    if run.is_main:
        save_grid(run, run.out_dir / "samples" / f"phase-{run.phase.index}-{run.phase.resolution}px.png")
        save_grid(run, run.out_dir / "samples" / "final.png")
    if st is not None:
        if st["progress"] is not None:
            st["progress"].stop()
            st["progress"] = None
        elapsed = time.perf_counter() - st["t0"]
        if run.is_main:
            st["console"].print(f"[bold green]done[/]: {run.cur_nimg / 1000:.1f} kimg in {elapsed:.0f} s; "
                                f"samples in {run.out_dir / 'samples'}, checkpoint in {run.out_dir / 'checkpoints'}")


def stop_progress(run) -> None:
    """Stop the progress bar (on errors) so the terminal is left clean."""
    st = run.state.get(_KEY)
    if st is not None and st.get("progress") is not None:
        st["progress"].stop()
        st["progress"] = None
