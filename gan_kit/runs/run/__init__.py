"""``Run``: one training run's components, networks, optimizers and progress, built from a recipe.

The training loop (``gan_kit.runs.engine``) drives a ``Run``; lifecycle hooks receive it. Building
knows no specific component: every loss, penalty, strategy, architecture and dataset comes from
the registry by the name the recipe gives.

One job per module: this one holds the run's progress and what the engine calls per iteration,
tick and phase; ``build`` (``RunBuilding``: components, networks, optimizers, precision),
``images`` (``RunImages``: G_ema's and real images for hooks) and ``state`` (``RunCheckpoints``:
checkpoint state and saving) are the parts ``Run`` is made of.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import torch

from gan_kit.plugin_api.components import set_phase
from gan_kit.training.ema import refresh_batchnorm
from gan_kit.base.errors import GankitError, TrainingError
from gan_kit.base.phase import Phase
from gan_kit.plugin_api.manager import Plugins
from gan_kit.base.randomness import batch_randn, current_shard
from gan_kit.recipe import Recipe
from gan_kit.runs.run.build import RunBuilding
from gan_kit.runs.run.images import RunImages
from gan_kit.runs.run.schedules import RunSchedules
from gan_kit.runs.run.state import RunCheckpoints
from gan_kit.base.stash import Stash
from gan_kit.training.step import StepContext
from gan_kit.training.step.finite import FiniteGuard
from gan_kit.base.threads import ThreadFollower, follows_machine, set_threads, usable_cpus

__all__ = ["Run", "resolve_device", "seed_everything"]


def resolve_device(name: str) -> torch.device:
    """``"auto"`` -> CUDA when present, else CPU; anything else as given."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise GankitError(f"run.device: {name!r} asked for but CUDA is not available on this machine (use the CPU: "
                          f"--device cpu for gankit eval, --set run.device=cpu for gankit run)")
    return dev


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _distributed() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class Run(RunBuilding, RunSchedules, RunImages, RunCheckpoints):
    """One training run.

    What hooks may read: ``recipe``, ``options`` (the ``[run]`` table), ``out_dir`` (Path),
    ``device``, ``precision``, ``G``, ``D``, ``G_ema`` (plain modules, never wrapped), ``opt_G``,
    ``opt_D``, ``dataset``, ``channels``, ``latent_dim``, ``phase`` and ``previous_phase``,
    ``cur_nimg`` (real images shown), ``total_nimg``, ``step`` (iterations done), ``tick``
    (ticks done), ``is_main`` (rank 0), ``rank``, ``world_size``, ``metrics`` (``(spec, metric)``
    pairs), ``last_checkpoint``, ``resumed_from`` (the checkpoint a resumed run started from, else
    None), ``initialized_from`` (the checkpoint a ``--init-from`` run took its weights from),
    ``schedule_values`` (each scheduled option's dotted key -> the value set for the last
    iteration), ``optim_options`` / ``ema_options`` (``[optim]`` / ``[ema]`` with the scheduled
    values in force), and ``stash``: typed per-plugin state (``gan_kit.StashKey``).
    Methods for hooks: ``generate(z)``, ``real_images(n)``, ``save_checkpoint(name)``, ``phases()``.
    """

    def __init__(self, recipe: Recipe, plugins: Plugins, out_dir: str | Path | None = None):
        self.recipe = recipe
        self.plugins = plugins
        self.hook = plugins.hook
        self.registry = plugins.registry
        self.options = recipe.run
        self.out_dir = Path(out_dir or recipe.run.out_dir)
        self.rank, self.world_size = _distributed()
        self.device = resolve_device(recipe.run.device)
        if self.world_size > 1 and self.device.type == "cuda":
            self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        self.is_main = self.rank == 0
        self.stash = Stash()
        self.total_nimg = int(round(recipe.run.total_kimg * 1000))
        self.tick_nimg = max(1, int(round(recipe.run.tick_kimg * 1000)))
        self.cur_nimg = 0
        self.step = 0
        self.d_step = 0
        self.tick = 0
        self.skipped_steps = 0
        #: Seconds spent in the training loop, summed over resumes (``run.max_minutes`` reads it).
        self.train_seconds = 0.0
        #: Sums and counts of the running tick's step stats (the engine's ``Ticks``).
        self.tick_sums: dict[str, float] = {}
        self.tick_counts: dict[str, int] = {}
        self.phase: Phase | None = None
        self.previous_phase: Phase | None = None
        self.last_checkpoint: Path | None = None
        self.resumed_from: Path | None = None
        self.initialized_from: Path | None = None  # --init-from: the checkpoint G, D, G_ema came from
        set_threads(recipe.run.threads, self.device)  # unset: the cores free now (gan_kit/base/threads.py)
        #: Re-chooses the CPU thread count at every tick (None when the count is not gankit's).
        self.thread_follower = (ThreadFollower(usable_cpus()) if follows_machine(recipe.run.threads, self.device)
                                else None)
        seed_everything(recipe.run.seed)
        self._build_data()
        self._build_networks()
        self._build_objectives()
        self._build_optimizers()
        self._build_schedules()
        self._build_precision()
        self._check_batches()
        if recipe.run.compile:
            from gan_kit.training.networks import plan_recompiles

            plan_recompiles(len(self.phases()))  # every phase's graphs fit dynamo's cache
        # Fixed latents for sample grids come from their own generator so that drawing them never
        # moves the training RNG (exact resume).
        gen = torch.Generator().manual_seed(recipe.run.seed + 12345)
        self.fixed_labels: torch.Tensor | None = None
        #: Images per row of the run's sample grids (None: square); a conditional run's grids have
        #: one row per class.
        self.grid_nrow: int | None = None
        n = recipe.run.sample_grid
        if self.num_classes:
            self.grid_nrow = max(1, n // self.num_classes)
            n = self.grid_nrow * self.num_classes
            self.fixed_labels = torch.arange(self.num_classes).repeat_interleave(self.grid_nrow)
        self.fixed_z = torch.randn(n, self.latent_dim, generator=gen)
        #: The non-finite policy's device-side flags (gan_kit.training.step.finite); the engine reads them
        #: at the tick. Sticky under "stop": no step after the first bad one.
        self.finite_guard = FiniteGuard(self.device, sticky=recipe.run.on_nonfinite == "stop")

    # --------------------------------------------------------------------------- per step --

    def step_context(self, phase: Phase, reals: list[torch.Tensor],
                     labels: list[torch.Tensor | None] | None = None) -> StepContext:
        """The ``StepContext`` of the next iteration: ``reals`` are its ``d_steps`` real batches
        ``[N,C,r,r]`` (this process's slice, already faded to ``phase``); ``labels`` their class
        labels ``[N]`` in a conditional run (else None each)."""
        if labels is None:
            labels = [None] * len(reals)
        return StepContext(G=self.G_train, D=self.D_train, opt_G=self.opt_G, opt_D=self.opt_D, loss=self.loss,
                           penalties=self.d_penalties, g_penalties=self.g_penalties, reals=reals, labels=labels,
                           latent=self.latent, phase=phase, autocast=self.autocast, scaler=self.scaler,
                           step=self.step, d_step=self.d_step, rank=self.rank, world_size=self.world_size,
                           D_penalty=self.D_penalty, G_penalty=self.G_penalty,
                           all_reduce_grads=self.all_reduce_grads, augment=self.augment,
                           joint_d_forward=self.arch.joint_d_forward, guard=self.finite_guard)

    def latent(self, n: int) -> torch.Tensor:
        """Latents ``z[n, latent_dim]`` for this process: drawn for all processes together and
        sliced ``[rank::world_size]`` (see gan_kit.training.distributed)."""
        rank, world_size = current_shard()  # a round of StepContext.accumulate is a virtual process
        if world_size == 1:
            rank, world_size = self.rank, self.world_size
        return batch_randn(n, self.latent_dim, device=self.device, rank=rank, world_size=world_size)

    @property
    def phase_finished(self) -> bool:
        """Whether the current phase has shown all its images (the last phase: the run's total).
        False when ``run.max_minutes`` ended the run inside the phase."""
        return self.cur_nimg >= min(self.phase.end_nimg, self.total_nimg)

    def set_phase(self, phase: Phase) -> None:
        self.phase = phase
        for net in (self.G, self.D, self.G_ema):
            set_phase(net, phase.resolution, phase.alpha)

    def check_in_sync(self) -> None:
        """Give every process rank 0's buffers, then raise ``TrainingError`` when G's or D's
        weights differ across processes (collectives; a no-op with one process). Called at
        every tick and phase change, before the hooks that
        write checkpoints: a gradient DDP never saw is the silent multi-GPU bug this catches."""
        if self.world_size < 2:
            return
        from gan_kit.training.distributed import broadcast_buffers, out_of_sync

        # Buffers (BatchNorm running statistics, StyleGAN2's w_avg) follow rank 0 here, at the
        # boundaries where a checkpoint may be written, not after every iteration: no network
        # reads them while it trains (BatchNorm normalises with the batch's own statistics).
        broadcast_buffers(self.G, self.D)
        bad = out_of_sync({"G": self.G, "D": self.D}, self.world_size)
        if bad:
            fix = ('its strategy must make weight gradients with ctx.backward(loss, net), not torch.autograd.grad '
                   'into .grad, or set run.grad_sync = "all-reduce"'
                   if self.recipe.run.grad_sync == "ddp" else "a plugin changed the weights on some processes only")
            raise TrainingError(
                f"step {self.step}: the weights of {' and '.join(bad)} differ across the {self.world_size} processes, "
                f"so gradients were not averaged (update strategy {self.recipe.update.name!r}): {fix}")

    def refresh_G_ema(self) -> None:
        """Give G_ema's BatchNorm layers running statistics of its own (G_ema's weights are an
        average, G's statistics do not fit them): recomputed from G_ema's forwards on latents of a
        private generator, so the training RNG does not move. A no-op without BatchNorm."""
        gen = torch.Generator().manual_seed(self.recipe.run.seed + 54321)
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            refresh_batchnorm(self.G_ema, lambda n: self._refresh_inputs(n, gen), self.autocast)

    def _refresh_inputs(self, n: int, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
        z = torch.randn(n, self.latent_dim, generator=gen).to(self.device)
        if not self.num_classes:
            return (z,)
        return z, torch.randint(self.num_classes, (n,), generator=gen).to(self.device)
