"""The training loop. It knows no specific loss, strategy, architecture or dataset: it drives the
``Run`` a recipe built and fires the lifecycle hooks that reporters, samplers, metrics and
checkpointers are built on.

Per iteration (``train_step``): the phase's real batches, ``strategy.step(ctx)`` (the order of
the D and G steps), the lazy regularisation steps that are due, the non-finite flags, then G_ema -
with no host-device sync: the stats stay on the device. Per tick (``Ticks.finish``): the stats
are read with one copy and the non-finite policy applied (``Ticks.settle``, also at a phase change
and before an interrupt's checkpoint), the weights are checked across processes, G_ema's BatchNorm
statistics refreshed, and ``tick_finished`` fired (``gan_kit.runs.engine.ticks``). SIGINT / SIGTERM
finish the iteration and write a checkpoint (``gan_kit.runs.engine.interrupts``). ``run_teardown``
fires from a ``finally``, on success, error and interrupt alike. The run directory (lock,
``--overwrite``, resume, ``recipe.toml``) is the session's (``gan_kit.runs.session``), not the loop's.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, Mapping

import torch

from gan_kit.plugin_api.components import DInputs, GInputs, bind_labels
from gan_kit.training.data import GankitLoader, PhaseBatchSampler, auto_num_workers, make_loader, to_float_images
from gan_kit.training.ema import ema_beta, update_ema
from gan_kit.runs.engine.interrupts import interrupts, stop_on_interrupt
from gan_kit.runs.engine.stats import StepStats, stack_stats
from gan_kit.runs.engine.ticks import Ticks, TrainClock
from gan_kit.base.errors import GankitError, Interrupted
from gan_kit.base.phase import Phase, fade_real
from gan_kit.base.randomness import sharded
from gan_kit.runs.run import Run, resolve_device
from gan_kit.runs.rundir import preflight, resume_command
from gan_kit.base.stash import StashKey
from gan_kit.training.step import StepContext
from gan_kit.training.step.finite import scale_of

__all__ = ["Run", "loop", "train_step", "real_loader", "split_reals", "lazy_regularization", "Ticks", "resolve_device", "preflight"]


def loop(run: Run, max_steps: int | None = None) -> dict[str, Any]:
    """The training loop over a ``Run`` whose run directory the session opened
    (``gan_kit.runs.session.train``): until ``run.total_nimg`` images have been shown, or
    ``max_steps`` iterations, or ``run.max_minutes`` of training time (which ends the run as
    reaching ``total_nimg`` does). Fires ``run_started``, ``phase_started``, ``step_finished``,
    ``tick_finished``, ``run_finished`` and, from a ``finally``, ``run_teardown``. SIGINT /
    SIGTERM finish the iteration, write ``checkpoints/latest.pt`` and raise ``Interrupted``; a
    second Ctrl-C stops at once. Returns the stats of the last tick written (a run stopped by
    ``max_steps`` right after a tick writes no empty one). Raises ``TrainingError`` when
    the non-finite policy stops the run."""
    loader = real_loader(run)
    batches = iter(loader)  # make_loader's loader raises a worker's GankitError as its one line
    ticks = Ticks(run)
    error: BaseException | None = None
    try:
        with interrupts() as interrupt:
            start = run.growth.phase_at(run.cur_nimg)
            run.set_phase(start)  # run_started hooks read run.phase
            run.hook.run_started(run=run)
            _enter_phase(run, start, first=True)
            steps = 0
            clock = TrainClock(run)
            timed_out = False
            last_tick: dict[str, Any] | None = None  # the stats of the last tick written in this loop
            while run.cur_nimg < run.total_nimg and not timed_out and (max_steps is None or steps < max_steps):
                phase = run.growth.phase_at(run.cur_nimg)
                if phase.index != run.phase.index:
                    ticks.settle()  # the finished phase's stats and non-finite flags, before its checkpoint
                _enter_phase(run, phase, first=False)
                stats = train_step(run, phase, next(batches))
                steps += 1
                clock.update()
                ticks.add(stats)
                due = ticks.due()
                stop, timed_out, sigterm, near = _stop_flags(run, interrupt.requested, clock.out_of_time(), due,
                                                             interrupt.signal_name == "SIGTERM",
                                                             due and ticks.ends_near(clock))
                # near the time limit a due tick runs on to it as the final tick (no tick of 1 step)
                if due and run.cur_nimg < run.total_nimg and not timed_out and not near:
                    last_tick = ticks.finish(final=False)  # a tick that ends at this step is written before stopping
                if stop:
                    ticks.settle()  # a non-finite "stop" pending wins: no checkpoint after it
                    # A process stopped because another one got SIGTERM (a scheduler's preemption
                    # reaches one rank first) exits as SIGTERM does, 143.
                    stop_on_interrupt(run, "SIGTERM" if sigterm else (interrupt.signal_name or "SIGINT"))
            final = run.cur_nimg >= run.total_nimg or timed_out
            if not final and last_tick is not None and run.cur_nimg == ticks.start_nimg:
                # max_steps ended on a tick boundary: that tick is written; no empty one after it.
                return last_tick
            stats = ticks.finish(final=final)
            if final:
                run.hook.run_finished(run=run, stats=stats)
            return stats
    except KeyboardInterrupt as e:  # a second Ctrl-C: stopped at once, mid-iteration
        error = e
        where = f"the last checkpoint is {run.last_checkpoint}" if run.last_checkpoint else "no checkpoint was written"
        raise Interrupted(f"stopped at once by a second Ctrl-C (kimg {run.cur_nimg / 1000:.3f}); {where}; continue "
                          f"with `{resume_command(run.out_dir)}`", exit_code=130) from None
    except BaseException as e:
        error = e
        raise
    finally:
        loader.close()  # its worker processes, however training ended
        run.hook.run_teardown(run=run, error=error)


#: Under several processes the interrupt and time-limit flags are combined across processes every
#: this many iterations (and at every tick): one small all-reduce, the only host sync in between.
FLAG_EVERY = 8


def _stop_flags(run: Run, requested: bool, out_of_time: bool, tick_due: bool,
                sigterm: bool = False, near_limit: bool = False) -> tuple[bool, bool, bool, bool]:
    """``(stop, timed_out, sigterm, near_limit)`` after an iteration: this process's own flags
    with one process; with several, every process stops at the same iteration, the first (every
    ``FLAG_EVERY`` steps or at a tick) after one of them saw a signal or ran out of time,
    ``sigterm`` says whether the signal was SIGTERM on any of them, and ``near_limit`` (a due
    tick left to run on to the time limit, ``Ticks.ends_near``) whether any of them is near it."""
    if run.world_size == 1:
        return requested, out_of_time, sigterm, near_limit
    if run.step % FLAG_EVERY and not tick_due:
        return False, False, False, False
    from gan_kit.training.distributed import flags_over_processes

    return flags_over_processes([requested, out_of_time, sigterm, near_limit], run.device)


def real_loader(run: Run) -> GankitLoader:
    """The loader of each iteration's real images ``[d_steps * N, C, R, R]`` (final resolution R,
    this process's share; uint8 when the data set has ``uint8_items``), from the data stream
    position ``cur_nimg``, with ``run.num_workers`` worker processes ("auto": by device)."""
    d_steps = run.strategy.d_steps

    def batch_for(position: int) -> tuple[int, int]:
        return run.growth.phase_at(position).batch_size, d_steps

    sampler = PhaseBatchSampler(len(run.dataset), run.recipe.run.seed, run.cur_nimg, batch_for, run.rank,
                                run.world_size)
    workers = run.recipe.run.num_workers
    if workers == "auto":
        workers = auto_num_workers(run.device.type, int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
                                   dataset=run.dataset)
    # uint8 batches: a quarter of the bytes through the workers' queues, the pinned copy and the
    # copy to the device; split_reals converts them to float there.
    return make_loader(run.dataset, sampler, workers, pin_memory=run.device.type == "cuda",
                       with_labels=run.num_classes > 0, uint8=True)  # a conditional run's batches are (images, labels)


def _enter_phase(run: Run, phase: Phase, *, first: bool) -> None:
    """Set the networks to ``phase``; on a phase change fire ``phase_started`` (the finished
    phase's checkpoint and grid) and apply the phase's learning rates."""
    changed = first or phase.index != run.phase.index
    if changed and not first:
        run.check_in_sync()  # before phase_started writes the finished phase's checkpoint
        run.refresh_G_ema()
        run.previous_phase = run.phase
    if first:
        run.previous_phase = None
    run.set_phase(phase)
    if changed:
        run.apply_optim_settings()
        run.hook.phase_started(run=run, phase=phase)


# ------------------------------------------------------------------------------ one step --


def split_reals(run: Run, phase: Phase, batch: torch.Tensor) -> list[torch.Tensor]:
    """The ``d_steps`` real batches of an iteration, on the device, float in [-1, 1] (a uint8
    ``batch`` is converted there, after the copy), at the phase's resolution and fade-in alpha."""
    batch = to_float_images(batch.to(run.device, non_blocking=True))  # uint8 -> [-1, 1] on the device
    if run.recipe.run.channels_last:
        batch = batch.contiguous(memory_format=torch.channels_last)
    d_steps = run.strategy.d_steps
    per = batch.shape[0] // d_steps
    return [fade_real(batch[j * per:(j + 1) * per], phase.resolution, phase.alpha) for j in range(d_steps)]


def split_labels(run: Run, labels: torch.Tensor | None) -> list[torch.Tensor | None]:
    """The class labels ``[N]`` of each of ``split_reals``' batches (None each without labels)."""
    d_steps = run.strategy.d_steps
    if labels is None:
        return [None] * d_steps
    labels = labels.to(run.device, non_blocking=True)
    per = labels.shape[0] // d_steps
    return [labels[j * per:(j + 1) * per] for j in range(d_steps)]


def lazy_regularization(run: Run, ctx: StepContext) -> dict[str, torch.Tensor]:
    """The lazy penalties due at this iteration as steps of their own (StyleGAN2 sec. 3.1;
    stylegan2-ada-pytorch's ``Dreg`` / ``Greg`` phases): one step per network, in which its
    gradients are cleared, ``sum(weight * interval * value)`` over its due penalties (R1 and R2
    together, say) backpropagated - in rounds of ``growth.batch_gpu``, as the strategy's steps -
    and its optimizer stepped once, so ``lazy_ratio``'s k/(k+1) holds however many penalties
    share the interval. Returns their stats.

    Under fp16 a lazy step the GradScaler skips (its scaled gradients overflowed, as they do in
    the first iterations at the initial scale of 2**16, and its stats are NaN) is due again at
    the next iteration, at the lowered scale, until one is applied (``run.lazy_retry``): the
    regularisation is applied and its stats reported as often as the intervals say. Which lazy
    steps the scaler applied is read on the host with one copy, after an iteration that ran one
    (``train_step`` reads it at the iteration's end; none is read in iterations without a lazy
    step, nor outside fp16)."""
    stats, skipped = _lazy_steps(run, ctx)
    run.lazy_retry = skipped()
    return stats


def _lazy_steps(run: Run, ctx: StepContext) -> tuple[dict[str, torch.Tensor], Callable[[], tuple[int, ...]]]:
    """``lazy_regularization``'s steps: their stats, and a function that reads (one host copy)
    which due penalties' steps the GradScaler skipped, as indexes into ``run.lazy_penalties``."""
    stats: dict[str, torch.Tensor] = {}
    due: dict[str, list[int]] = {}
    for i, wp in enumerate(run.lazy_penalties):
        if ctx.step % wp.penalty.interval == 0 or i in run.lazy_retry:
            due.setdefault(wp.penalty.network, []).append(i)
    verdicts: dict[str, Any] = {}
    for net, indexes in due.items():
        wps = [run.lazy_penalties[i] for i in indexes]
        ctx.zero_grad(net)
        stats.update(ctx.accumulate(lambda wps=wps, net=net: _lazy_round(ctx, wps, net)))
        if run.scaler is not None:  # the GradScaler's verdict on this step, a device bool
            ctx.on_step(net, lambda applied, net=net: verdicts.__setitem__(net, applied))
        ctx.opt_step(net)

    def skipped() -> tuple[int, ...]:
        if run.scaler is None or not due:
            return ()
        nets = list(due)
        # A step never taken (the non-finite policy stopped the iteration) counts as skipped.
        # Every process reads the same verdicts: the gradients were averaged before the scaler
        # looked at them.
        values = [verdicts.get(net, False) for net in nets]  # device bools, or Python ones (no gradients)
        on_device = [v.reshape(()) for v in values if isinstance(v, torch.Tensor)]
        read = iter(torch.stack(on_device).tolist() if on_device else [])  # one copy to the host
        applied = [bool(next(read)) if isinstance(v, torch.Tensor) else bool(v) for v in values]
        return tuple(sorted(i for net, ok in zip(nets, applied) if not ok for i in due[net]))

    return stats, skipped


def _lazy_round(ctx: StepContext, wps: list, net: str) -> dict[str, torch.Tensor]:
    """One round of a network's lazy step, on the round's rows of the last real batch (a G
    penalty: the round's batch size, e.g. path length's ``batch_size // batch_shrink``): the
    due penalties' weighted sum backpropagated at once."""
    labels = ctx.labels[-1]  # a conditional run's G penalty generates for the real batch's classes
    if net == "D":
        inputs: Any = DInputs(D=bind_labels(ctx.D_penalty or ctx.D, labels), real=ctx.reals[-1], fake=None,
                              labels=labels)
    else:
        inputs = GInputs(G=bind_labels(ctx.G_penalty or ctx.G, labels), batch_size=ctx.reals[-1].shape[0],
                         labels=labels)
    stats, total = {}, None
    for wp in wps:
        value = wp.penalty(inputs, ctx)
        term = value * (wp.weight * wp.penalty.interval)
        total = term if total is None else total + term
        stats[f"Loss/{net}/{wp.name}"] = value.detach()
    ctx.backward(total, net)
    return stats


def train_step(run: Run, phase: Phase, batch: torch.Tensor | tuple, *, interrupted: Any = None,
               out_of_time: Any = None) -> StepStats:
    """One training iteration on ``batch`` (this process's real images for it, or ``(images,
    labels)`` in a class-conditional run): the strategy's D and G steps, the lazy regularisation
    steps due, the GradScaler update, G_ema, and the progress counters. No host-device sync: the
    returned ``StepStats`` (this process's values) stay on the device until read, and the engine
    reads them at the tick (``Ticks.settle``). ``Interrupt/requested`` / ``Interrupt/out_of_time``
    are 1.0 when ``interrupted()`` / ``out_of_time()`` were true (host flags; omitted when not
    given).

    A non-finite gradient (found on the device before each optimizer step) skips that step, every
    later step of the iteration and its G_ema update, on the device (``gan_kit.training.step.finite``); a
    non-finite stat skips the G_ema update. ``Ticks.settle`` then stops the run with
    ``TrainingError`` (``run.on_nonfinite = "stop"``: no step is taken after the bad one until
    then) or counts the skipped iteration (``"skip"``).
    """
    images, labels = batch if isinstance(batch, (tuple, list)) else (batch, None)
    run.apply_schedules()  # every scheduled option at this iteration's images shown (host floats only)
    ctx = run.step_context(phase, split_reals(run, phase, images), split_labels(run, labels))
    guard = run.finite_guard
    guard.begin()
    halted = guard.halted
    scale = scale_of(run.scaler, run.device).clone() if run.scaler is not None else None
    # Every per-sample draw inside (augmentation, noise maps, mixing latents) is for the global
    # batch, sliced to this process (gan_kit.base.randomness).
    with sharded(run.rank, run.world_size):
        raw = _strategy_stats(run, ctx)
        lazy, skipped_lazy = _lazy_steps(run, ctx)
        raw.update(lazy)
    raw.update(run.augment.end_step(run.step + 1, phase.batch_size * run.strategy.d_steps))
    scaler_skipped = _update_scaler(run, scale)
    run.lazy_retry = skipped_lazy()  # fp16 after a lazy step: one host read, the lazy steps to run again
    if run.buffers_each_step:  # per-process BatchNorm statistics (the CPU: no SyncBatchNorm there)
        from gan_kit.training.distributed import broadcast_buffers

        broadcast_buffers(*run.buffers_each_step)
    host, keys, values = stack_stats(raw, [], run.device)
    no = torch.zeros((), dtype=torch.bool, device=run.device)
    grad_G, grad_D = guard.grad_bad.get("G", no), guard.grad_bad.get("D", no)
    bad = grad_G | grad_D | (~torch.isfinite(values).all() if keys else no)
    if ctx.nonfinite is not None:  # a strategy's own StepContext checked on the host
        bad = bad | torch.ones((), dtype=torch.bool, device=run.device)
    if scaler_skipped is not None:
        bad = bad & ~scaler_skipped  # an fp16 overflow the scaler skipped is normal, not divergence
    if run.world_size > 1:
        from gan_kit.training.distributed import any_over_processes

        bad = any_over_processes(bad)  # every process skips (or stops at) the same iteration
    guard.end(bad)
    flags = [grad_G, grad_D, bad, scaler_skipped if scaler_skipped is not None else no]
    vector = torch.cat([values, torch.stack([f.float() for f in flags])])
    if interrupted is not None:
        host["Interrupt/requested"] = float(bool(interrupted()))
    if out_of_time is not None:
        host["Interrupt/out_of_time"] = float(bool(out_of_time()))
    nimg_before = run.cur_nimg
    run.cur_nimg += phase.batch_size * run.strategy.d_steps
    run.step += 1
    run.d_step += run.strategy.d_steps
    # The ramp-up reads the images shown *before* this iteration (StyleGAN2-ADA's
    # training_loop: beta = 0 at the first step, so G_ema starts as a copy of G). Left as it is
    # for a skipped iteration, decided on the device.
    e = run.ema_options  # the recipe's [ema], scheduled values in force
    skip_ema = bad | halted | (scaler_skipped if scaler_skipped is not None else no)
    update_ema(run.G_ema, run.G, ema_beta(e.decay, e.half_life_kimg, e.rampup, phase.batch_size, nimg_before),
               skip=skip_ema)
    stats = StepStats(host, keys, vector, step=run.step, nimg=run.cur_nimg, resolution=phase.resolution)
    run.hook.step_finished(run=run, stats=stats)
    return stats


_warned_unstepped = StashKey[bool]()
_warned_unaccumulated = StashKey[bool]()


def _strategy_stats(run: Run, ctx: StepContext) -> dict[str, Any]:
    """``strategy.step(ctx)``, checked: it returns a mapping of stats, and a network it never
    steps is named once (a strategy that forgot ``ctx.opt_step``, or one that trains one network
    on purpose)."""
    raw = run.strategy.step(ctx)
    name = run.recipe.update.name
    if not isinstance(raw, Mapping):
        raise GankitError(f"update strategy {name!r}: step(ctx) returned {type(raw).__name__}, not a dict of stats "
                          f"(return e.g. the stats of ctx.d_objective and ctx.g_objective)")
    if ctx.rounds > 1 and not ctx.accumulated and not run.stash.get(_warned_unaccumulated, False):
        run.stash[_warned_unaccumulated] = True
        print(f"warning: update strategy {name!r} does not use ctx.accumulate, so growth.batch_gpu = "
              f"{ctx.phase.batch_gpu} has no effect: each step runs its whole per-process batch of "
              f"{ctx.reals[0].shape[0]} at once", file=sys.stderr)
    missing = [n for n in ("D", "G") if n not in ctx.stepped]
    if missing and not run.stash.get(_warned_unstepped, False):
        run.stash[_warned_unstepped] = True
        print(f"warning: update strategy {name!r} took no optimizer step for {' or '.join(missing)} in iteration "
              f"{run.step + 1}, so {' and '.join(missing)} does not train (call ctx.opt_step(...) if that is not "
              f"intended)", file=sys.stderr)
    return dict(raw)


def _update_scaler(run: Run, scale: torch.Tensor | None) -> torch.Tensor | None:
    """Update the GradScaler after both networks' steps; returns a device bool, true when it
    skipped an overflowed step (the normal fp16 overflow handling, not divergence). A collapsed
    scale is found at the tick (``Ticks.settle``)."""
    if run.scaler is None:
        return None
    run.scaler.update()
    return scale_of(run.scaler, run.device) < scale
