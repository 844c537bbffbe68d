"""Ticks: the per-tick averages of the step stats and ``tick_finished`` every ``run.tick_kimg``
thousand images (``Ticks``), and the training-time clock behind ``run.max_minutes``
(``TrainClock``)."""

from __future__ import annotations

import math
import time
from typing import Any

from gan_kit.run import Run

__all__ = ["Ticks", "TrainClock"]


class Ticks:
    """Per-tick averages of the step stats (each stat over the steps that reported it) and the
    tick bookkeeping: ``tick_finished`` every ``run.tick_kimg`` thousand images."""

    def __init__(self, run: Run):
        self.run = run
        # The running tick's sums live on the run, so a checkpoint written mid-tick (an
        # interrupt) resumes with the steps it had already averaged.
        self.sums, self.counts = run.tick_sums, run.tick_counts
        self.start_time = time.perf_counter()
        self.start_nimg = run.cur_nimg
        self.next_nimg = (run.cur_nimg // run.tick_nimg + 1) * run.tick_nimg

    def add(self, stats: dict[str, float]) -> None:
        for k, v in stats.items():
            if k.startswith("Interrupt/") or not math.isfinite(v):
                continue
            self.sums[k] = self.sums.get(k, 0.0) + v
            self.counts[k] = self.counts.get(k, 0) + 1

    def due(self) -> bool:
        return self.run.cur_nimg >= self.next_nimg

    def finish(self, final: bool) -> dict[str, Any]:
        """Fire ``tick_finished`` with the tick's averages and progress; returns those stats.
        ``run.tick`` counts the finished tick before the hooks run, so a checkpoint written by
        them resumes with the next tick number."""
        run = self.run
        run.check_in_sync()  # before the tick's hooks write a checkpoint
        run.refresh_G_ema()
        elapsed = max(time.perf_counter() - self.start_time, 1e-9)
        stats: dict[str, Any] = {k: v / self.counts[k] for k, v in self.sums.items()}
        stats.update({
            "Progress/tick": run.tick,
            "Progress/kimg": run.cur_nimg / 1000.0,
            "Progress/step": run.step,
            "Progress/phase": run.phase.index,
            "Progress/resolution": run.phase.resolution,
            "Progress/alpha": run.phase.alpha,
            "Progress/skipped_steps": run.skipped_steps,
            "Progress/final": final,
            "Timing/sec_per_tick": elapsed,
            "Timing/img_per_s": (run.cur_nimg - self.start_nimg) / elapsed,
            "Timing/train_s": run.train_seconds,
        })
        if run.device.type == "cpu":
            import torch

            stats["Timing/threads"] = torch.get_num_threads()  # what this tick trained with
        if run.thread_follower is not None:
            # The machine's load since the last tick sets the next tick's threads (a job that
            # started beside the run takes cores; one that ended gives them back).
            run.thread_follower.update()
        run.tick += 1
        self.sums.clear()
        self.counts.clear()
        run.hook.tick_finished(run=run, stats=stats)
        self.start_time, self.start_nimg = time.perf_counter(), run.cur_nimg
        self.next_nimg = (run.cur_nimg // run.tick_nimg + 1) * run.tick_nimg
        return stats


class TrainClock:
    """``run.train_seconds``: the training loop's time, added to what the checkpoint had, and
    whether ``run.max_minutes`` of it are spent."""

    def __init__(self, run: Run):
        self.run, self.base, self.start = run, run.train_seconds, time.perf_counter()
        limit = run.recipe.run.max_minutes
        self.limit = None if limit is None else limit * 60.0

    def update(self) -> None:
        self.run.train_seconds = self.base + (time.perf_counter() - self.start)

    def out_of_time(self) -> bool:
        return self.limit is not None and self.base + (time.perf_counter() - self.start) >= self.limit
