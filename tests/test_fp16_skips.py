"""fp16's GradScaler on the CPU (torch's CPU autocast runs float16, as tests/test_precision.py
trains it): the steps it skips for an overflow - every fp16 run's first iterations, at the
initial scale of 2**16 - are counted in ``Progress/skipped_steps``, and a lazy regularisation
step it skips is run again at the next iteration until one is applied, so the lazy R1 and path
length are neither lost nor missing from the first tick's stats."""

from __future__ import annotations

import math

from gan_kit import hookimpl
from gan_kit.runs.run.state import load_state_dict, state_dict
from gan_kit.runs.session import train
from gan_kit.testing import make_run

#: A tiny StyleGAN2 whose lazy R1 and path length are due once in the first tick (interval 8,
#: 8 iterations of batch 8 per tick), under fp16.
SG2 = ["architecture={name='stylegan2', latent_dim=8, w_dim=8, mapping_layers=2, channel_base=64, channel_max=8, "
       "modconv='scaled'}", "data.resolution=16", "growth={name='static', batch_size=8}", "loss.name=bce",
       "penalty=[{name='r1', weight=1.0, interval=8}, {name='path-length', weight=2.0, interval=8}]",
       "run.precision=fp16", "run.tick_kimg=0.064", "run.total_kimg=0.072", "metric=[]", "data.upscale=allow"]


class Record:
    """Each iteration's stats and flags, and each tick's stats."""

    def __init__(self):
        self.steps, self.ticks = [], []

    @hookimpl
    def step_finished(self, run, stats):
        self.steps.append((dict(stats), dict(stats.flags)))

    @hookimpl
    def tick_finished(self, run, stats):
        self.ticks.append(dict(stats))


def test_scaler_skips_are_counted_and_lazy_steps_are_retried_until_applied(tmp_path):
    run = make_run(tmp_path, overrides=SG2)
    record = Record()
    run.plugins.pm.register(record)
    train(run)
    skipped = sum(flags["scaler_skipped"] for _, flags in record.steps)
    assert skipped > 0  # the initial scale overflows: the GradScaler skips the first steps
    assert record.ticks[-1]["Progress/skipped_steps"] == skipped == run.scaler_skipped_steps
    assert record.ticks[-1]["Progress/scaler_skipped_steps"] == skipped
    assert run.skipped_steps == 0  # none of them counts against run.max_skipped

    # The first tick reports both lazy penalties, though their first step (iteration 0) overflowed.
    first = record.ticks[0]
    assert math.isfinite(first["Loss/D/r1"]) and math.isfinite(first["Loss/G/path-length"])
    assert not math.isfinite(record.steps[0][0]["Loss/G/path-length"])
    # Path length's running mean moves only with an applied step: one was applied in the first tick.
    path_length = next(wp.penalty for wp in run.lazy_penalties if wp.name == "path-length")
    assert float(path_length.pl_mean) > 0
    # Retried only until applied: not every iteration runs a lazy step.
    lazy_iterations = [i for i, (stats, _) in enumerate(record.steps) if "Loss/G/path-length" in stats]
    assert lazy_iterations[0] == 0 and 8 in lazy_iterations and len(lazy_iterations) < len(record.steps)


def test_the_skip_count_and_the_pending_retries_travel_with_the_checkpoint(tmp_path):
    run = make_run(tmp_path / "a", overrides=SG2)
    train(run, max_steps=1)  # iteration 0: the lazy steps overflow and are due again
    assert run.lazy_retry == (0, 1) and run.scaler_skipped_steps == 1  # read by the final tick
    run.scaler_skipped_steps = 3
    other = make_run(tmp_path / "b", overrides=SG2)
    load_state_dict(other, state_dict(run))
    assert other.lazy_retry == (0, 1) and other.scaler_skipped_steps == 3
