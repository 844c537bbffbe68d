"""TensorBoard events: every scalar of every tick (losses, penalties, metrics, progress, timing)
and G_ema's sample grid (as often as ``run.sample_ticks`` says) written to ``<out_dir>/events`` when the ``tensorboard`` package is installed (optional extra
``gankit[tensorboard]``); without it this plugin does nothing. The step axis is ``cur_nimg``
(real images shown). View with ``tensorboard --logdir runs``.
"""

from __future__ import annotations

import math

from gan_kit import StashKey, hookimpl

#: The run's SummaryWriter (rank 0, when tensorboard is installed).
writer_key = StashKey[object]()


def _writer_class():
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # torch raises ImportError when the tensorboard package is missing
        return None
    return SummaryWriter


@hookimpl
def run_started(run):
    if not run.is_main:
        return
    cls = _writer_class()
    if cls is None:
        return
    # purge_step drops the events a crashed run wrote after the checkpoint it resumes from: every
    # step >= purge_step. The tick at the checkpoint's own step was written before the checkpoint
    # (checkpointing's hooks run last) and this run never writes that step again, so it stays:
    # purge from the next image on. A run extended past its old end keeps its final tick and grid.
    writer = cls(log_dir=str(run.out_dir / "events"), purge_step=run.cur_nimg + 1 if run.cur_nimg else None)
    run.stash[writer_key] = writer


@hookimpl
def tick_finished(run, stats):
    writer = run.stash.get(writer_key, None)
    if writer is None:
        return
    for k, v in stats.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            continue
        writer.add_scalar(k, float(v), global_step=run.cur_nimg)
    if run.options.sample_ticks and stats["Progress/tick"] % run.options.sample_ticks == 0:
        import torchvision.utils as vutils

        images = run.generate(run.fixed_z, labels=run.fixed_labels).clamp(-1, 1)
        nrow = run.grid_nrow or max(1, int(len(images) ** 0.5))  # a conditional run: a row per class
        grid = vutils.make_grid(images, nrow=nrow, normalize=True, value_range=(-1, 1))
        writer.add_image("Samples/G_ema", grid, global_step=run.cur_nimg)
    writer.flush()


@hookimpl
def run_teardown(run, error):
    """Close the writer whatever ended the run (its last events are flushed)."""
    writer = run.stash.get(writer_key, None)
    if writer is not None:
        writer.close()
        del run.stash[writer_key]
