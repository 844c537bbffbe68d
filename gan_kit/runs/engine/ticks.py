"""Ticks: the per-tick averages of the step stats and ``tick_finished`` every ``run.tick_kimg``
thousand images (``Ticks``), and the training-time clock behind ``run.max_minutes``
(``TrainClock``).

The iterations' stats stay on the device until ``Ticks.settle`` reads them all with one copy
(at the tick, at a phase change, before an interrupt's checkpoint): the one host-device sync of
the iterations between two ticks (docs/performance.md, "Host syncs"). ``settle`` also applies
``run.on_nonfinite`` to the flags the device recorded (``gan_kit.training.step.finite``).
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch

from gan_kit.runs.engine.stats import StepStats
from gan_kit.base.errors import TrainingError
from gan_kit.runs.run import Run

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
        self.pending: list[StepStats | dict[str, float]] = []
        #: How long the last ``finish`` (its hooks: metrics, checkpoints, grids) took, seconds.
        self.finish_seconds = 0.0

    def add(self, stats: StepStats | dict[str, float]) -> None:
        """Keep an iteration's stats for the tick (read at ``settle``, not now)."""
        self.pending.append(stats)

    def settle(self) -> None:
        """Read every pending iteration's stats (one device-to-host copy for all), apply the
        non-finite policy to them in order, and add the finite ones to the tick's sums.

        Raises ``TrainingError`` under ``run.on_nonfinite = "stop"`` at the first bad iteration
        (the guard took no step after it, so the weights are those from before it), under
        ``"skip"`` when more than ``run.max_skipped`` iterations were skipped, and when the fp16
        loss scale collapsed."""
        run = self.run
        pending, self.pending = self.pending, []
        several = run.world_size > 1
        # With several processes every iteration is read again, averaged over the processes (its
        # flags OR-ed), so all of them apply the same policy with the same message.
        lazy = [s for s in pending if isinstance(s, StepStats) and (several or not s.materialised)]
        if lazy:
            flat = torch.cat([s.vector for s in lazy])
            if several:
                from gan_kit.training.distributed import sum_tensor_over_processes

                flat = sum_tensor_over_processes(flat)
            values = flat.cpu().tolist()
            at = 0
            for s in lazy:
                n, k = s.vector.numel(), len(s.keys_)
                chunk = values[at:at + n]
                if several:  # stats: the mean over processes; flags (the rest): set on any
                    chunk = [v / run.world_size for v in chunk[:k]] + chunk[k:]
                s.materialise(chunk, replace=True)
                s.vector = None  # read: its device memory goes
                at += n
        for s in pending:
            floats = s.materialise() if isinstance(s, StepStats) else s
            bad = s.flags.get("bad", False) if isinstance(s, StepStats) else _first_nonfinite(floats) is not None
            if bad:
                _on_nonfinite(run, s, floats)
            elif isinstance(s, StepStats) and s.flags.get("scaler_skipped", False):
                run.scaler_skipped_steps += 1  # fp16's normal overflow skip (never also "bad")
            for k, v in floats.items():
                if k.startswith("Interrupt/") or not math.isfinite(v):
                    continue
                self.sums[k] = self.sums.get(k, 0.0) + v
                self.counts[k] = self.counts.get(k, 0) + 1
        if run.scaler is not None and pending and run.scaler.get_scale() < 1e-6:
            raise TrainingError(f"step {run.step}: the fp16 loss scale collapsed to {run.scaler.get_scale():.3g}; "
                                f"training diverged (try precision = \"bf16\")")

    def due(self) -> bool:
        return self.run.cur_nimg >= self.next_nimg

    def ends_near(self, clock: TrainClock) -> bool:
        """Whether ``run.max_minutes`` will end the run less than half this tick's training time
        (plus the last tick's hooks) after it: then the due tick is not finished but runs on to
        the limit as the final tick, instead of leaving a final tick of a step or two whose
        averages spike the plots and whose metric repeats the tick's."""
        left = clock.seconds_left()
        return left is not None and left < (time.perf_counter() - self.start_time) / 2 + self.finish_seconds

    def finish(self, final: bool) -> dict[str, Any]:
        """Fire ``tick_finished`` with the tick's averages and progress; returns those stats.
        ``run.tick`` counts the finished tick before the hooks run, so a checkpoint written by
        them resumes with the next tick number."""
        run = self.run
        began = time.perf_counter()
        self.settle()  # the tick's one read of the device: stats and non-finite flags
        run.check_in_sync()  # before the tick's hooks write a checkpoint
        run.refresh_G_ema()
        elapsed = max(time.perf_counter() - self.start_time, 1e-9)
        stats: dict[str, Any] = self._averages()
        stats.update({
            "Progress/tick": run.tick,
            "Progress/kimg": run.cur_nimg / 1000.0,
            "Progress/step": run.step,
            "Progress/phase": run.phase.index,
            "Progress/resolution": run.phase.resolution,
            "Progress/alpha": run.phase.alpha,
            # Every iteration with a step not taken: the non-finite policy's and the GradScaler's.
            "Progress/skipped_steps": run.skipped_steps + run.scaler_skipped_steps,
            "Progress/final": final,
            "Timing/sec_per_tick": elapsed,
            "Timing/img_per_s": (run.cur_nimg - self.start_nimg) / elapsed,
            "Timing/train_s": run.train_seconds,
        })
        if run.scaler is not None:  # fp16: the GradScaler's part of Progress/skipped_steps
            stats["Progress/scaler_skipped_steps"] = run.scaler_skipped_steps
        # each scheduled option's value in the tick's last iteration, keyed as --set spells it
        # (Schedule/optim.lr, Schedule/penalty.0.weight: no brackets, which trackers refuse)
        stats.update({"Schedule/" + k.replace("[", ".").replace("]", ""): v for k, v in run.schedule_values.items()})
        if run.device.type == "cpu":
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
        self.finish_seconds = self.start_time - began
        self.next_nimg = (run.cur_nimg // run.tick_nimg + 1) * run.tick_nimg
        return stats


    def _averages(self) -> dict[str, float]:
        """Each stat's mean over the tick's iterations (and, with several processes, over all
        of them: one all-reduce of the sums and counts)."""
        keys = sorted(self.sums)
        if self.run.world_size > 1:
            from gan_kit.training.distributed import sum_over_processes

            both = sum_over_processes([self.sums[k] for k in keys] + [float(self.counts[k]) for k in keys],
                                      self.run.device)
            sums, counts = both[:len(keys)], both[len(keys):]
            return {k: v / n for k, v, n in zip(keys, sums, counts) if n}
        return {k: self.sums[k] / self.counts[k] for k in self.sums}


def _first_nonfinite(stats: dict[str, float]) -> str | None:
    return next((k for k, v in stats.items() if isinstance(v, float) and not math.isfinite(v)), None)


def _on_nonfinite(run: Run, s: Any, stats: dict[str, float]) -> None:
    """``run.on_nonfinite`` for the bad iteration ``s`` (its stats ``stats``)."""
    step = getattr(s, "step", run.step)
    bad = _first_nonfinite(stats)
    if bad is None:
        what, value = "a value on another process", "non-finite"
    else:
        what = f"the {bad[5:]} gradient" if bad.startswith("Grad/") else bad
        value = stats[bad]
    if run.recipe.run.on_nonfinite == "stop":
        where = f" (last good checkpoint: {run.last_checkpoint})" if run.last_checkpoint else ""
        kimg, res = getattr(s, "nimg", run.cur_nimg) / 1000, getattr(s, "resolution", run.phase.resolution)
        raise TrainingError(
            f"step {step} (kimg {kimg:.3f}, {res}px): {what} is {value}; stopped before any update with it{where}. "
            f"Lower optim.lr, add a penalty, or set run.on_nonfinite = \"skip\"")
    run.skipped_steps += 1
    if run.skipped_steps > run.recipe.run.max_skipped:
        raise TrainingError(
            f"step {step}: {run.skipped_steps} steps skipped for non-finite values (last: {what}), "
            f"more than run.max_skipped = {run.recipe.run.max_skipped}; training diverged")


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

    def seconds_left(self) -> float | None:
        """Training seconds left before ``run.max_minutes`` (None: no limit)."""
        return None if self.limit is None else self.limit - self.base - (time.perf_counter() - self.start)
