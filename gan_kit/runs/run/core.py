"""``Run``: one training run's state - its parts (data, networks, objectives, optimizers,
schedules, precision), built once by ``gan_kit.runs.run.build.build_run``, and its progress - with
what the engine calls per iteration, tick and phase and what hooks may call.

Behaviour lives in the parts' own modules (``data``, ``optimizers``, ``schedules``, ``images``,
``state``); ``Run`` holds them and keeps the names hooks read (docs/hooks.md) on one object.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, ContextManager

import attrs
import torch
from torch import nn

from gan_kit.base.errors import TrainingError
from gan_kit.base.phase import Phase
from gan_kit.base.randomness import batch_randn, current_shard
from gan_kit.base.stash import Stash
from gan_kit.plugin_api.components import WeightedPenalty, set_phase
from gan_kit.plugin_api.manager import Plugins
from gan_kit.recipe import Recipe
from gan_kit.runs.layout import CheckpointLayout
from gan_kit.runs.run import images, state
from gan_kit.runs.run.data import RunData
from gan_kit.runs.run.optimizers import Optimizers
from gan_kit.runs.run.schedules import Schedules
from gan_kit.training.ema import refresh_batchnorm
from gan_kit.training.step import StepContext
from gan_kit.training.step.finite import FiniteGuard

__all__ = ["Run", "Networks", "Objectives", "Precision", "SampleGrid"]


@attrs.define(eq=False)
class Networks:
    """G, D and G_ema (plain modules, on the run's device) with what trains them: the
    architecture and growth components, the initializer applied, the augmentation, the views
    strategies and penalties run forwards through (``G_train`` / ``D_train`` / ``G_penalty`` /
    ``D_penalty``: DDP, compile and precision wrappers as the recipe asks, see
    ``gan_kit.training.networks``), whether gradients are all-reduced by gankit
    (``run.grad_sync = "all-reduce"``), and the networks whose buffers are broadcast every
    iteration (BatchNorm without SyncBatchNorm under several processes)."""

    arch: Any
    growth: Any
    initializer: Any
    augment: Any
    G: nn.Module
    D: nn.Module
    G_ema: nn.Module
    G_train: nn.Module
    D_train: nn.Module
    G_penalty: nn.Module
    D_penalty: nn.Module
    all_reduce_grads: bool
    buffers_each_step: list


@attrs.define(eq=False)
class Objectives:
    """The loss, every penalty (the recipe's ``[[penalty]]`` in order, then those the loss
    implies), the update strategy, the metrics and the trackers (``(spec, component)`` pairs)."""

    loss: Any
    penalties: list[WeightedPenalty]
    strategy: Any
    metrics: list
    trackers: list

    @property
    def d_penalties(self) -> list[WeightedPenalty]:
        """D's penalties taken every iteration, inside the D objective."""
        return [p for p in self.penalties if p.penalty.network == "D" and p.penalty.interval == 1]

    @property
    def g_penalties(self) -> list[WeightedPenalty]:
        """G's penalties taken every iteration, inside the G objective."""
        return [p for p in self.penalties if p.penalty.network == "G" and p.penalty.interval == 1]

    @property
    def lazy_penalties(self) -> list[WeightedPenalty]:
        """Penalties taken every k-th iteration in a step of their own (StyleGAN2 sec. 3.1)."""
        return [p for p in self.penalties if p.penalty.interval > 1]


@attrs.define(eq=False)
class Precision:
    """The run's precision (``"fp32"``, ``"bf16"`` or ``"fp16"``), its GradScaler (fp16 only, else
    None) and ``autocast()``, the context forwards run in."""

    name: str
    scaler: Any
    autocast: Callable[[], ContextManager]


@attrs.define(eq=False)
class SampleGrid:
    """The fixed latents ``z[n, latent_dim]`` of the run's sample grids (their own generator, so
    drawing them never moves the training RNG), their labels ``[n]`` in a conditional run (one row
    per class), and the images per row (None: square)."""

    z: torch.Tensor
    labels: torch.Tensor | None
    nrow: int | None


class Run:
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
    values in force), ``checkpoints`` (the run directory's ``CheckpointLayout``) and ``stash``:
    typed per-plugin state (``gan_kit.StashKey``).
    Methods for hooks: ``generate(z)``, ``real_images(n)``, ``save_checkpoint(name)``, ``phases()``.

    Made by ``build_run(recipe, plugins, out_dir=None)`` (``Run(recipe, plugins, out_dir)`` calls
    it too); the parts are ``data`` (``RunData``), ``nets``
    (``Networks``), ``objectives`` (``Objectives``), ``optimizers`` (``Optimizers``),
    ``schedules`` (``Schedules``) and ``grid`` (``SampleGrid``).
    """

    #: ``build_run``, set by ``gan_kit.runs.run`` (the builder sits a layer above this module).
    builder: Callable[..., "Run"] | None = None

    def __init__(self, recipe: Recipe, plugins: Plugins, out_dir: str | Path | None = None, *,
                 device: torch.device | None = None, rank: int = 0, world_size: int = 1,
                 data: RunData | None = None, nets: Networks | None = None, objectives: Objectives | None = None,
                 optimizers: Optimizers | None = None, schedules: Schedules | None = None,
                 precision: Precision | None = None, grid: SampleGrid | None = None, latent_dim: int = 0,
                 thread_follower: Any = None):
        if data is None:
            # Run(recipe, plugins[, out_dir]) as before build_run existed: the same run, built.
            self.__dict__.update(type(self).builder(recipe, plugins, out_dir).__dict__)
            return
        out_dir = Path(out_dir)
        self.recipe, self.plugins, self.out_dir, self.device = recipe, plugins, out_dir, device
        self.hook, self.registry, self.options = plugins.hook, plugins.registry, recipe.run
        self.rank, self.world_size, self.is_main = rank, world_size, rank == 0
        self.data, self.nets, self.objectives, self.optimizers = data, nets, objectives, optimizers
        self.schedules, self.grid, self.latent_dim = schedules, grid, latent_dim
        #: Re-chooses the CPU thread count at every tick (None when the count is not gankit's).
        self.thread_follower = thread_follower
        self.stash = Stash()
        # The names hooks and the engine read, each the part's own object (never reassigned).
        self.dataset, self.metric_dataset = data.dataset, data.metric_dataset
        self.channels, self.num_classes, self.class_names = data.channels, data.num_classes, data.class_names
        self.arch, self.growth, self.initializer, self.augment = nets.arch, nets.growth, nets.initializer, nets.augment
        self.G, self.D, self.G_ema = nets.G, nets.D, nets.G_ema
        self.G_train, self.D_train, self.G_penalty, self.D_penalty = nets.G_train, nets.D_train, nets.G_penalty, \
            nets.D_penalty
        self.all_reduce_grads, self.buffers_each_step = nets.all_reduce_grads, nets.buffers_each_step
        self.loss, self.penalties, self.strategy = objectives.loss, objectives.penalties, objectives.strategy
        self.d_penalties, self.g_penalties = objectives.d_penalties, objectives.g_penalties
        self.lazy_penalties = objectives.lazy_penalties
        self.metrics, self.trackers = objectives.metrics, objectives.trackers
        self.opt_G, self.opt_D = optimizers.opt_G, optimizers.opt_D
        self.precision, self.scaler, self.autocast = precision.name, precision.scaler, precision.autocast
        self.fixed_z, self.fixed_labels, self.grid_nrow = grid.z, grid.labels, grid.nrow
        #: The non-finite policy's device-side flags (gan_kit.training.step.finite); the engine reads them
        #: at the tick. Sticky under "stop": no step after the first bad one.
        self.finite_guard = FiniteGuard(device, sticky=recipe.run.on_nonfinite == "stop")
        # Progress: what a checkpoint saves and a resume restores (gan_kit.runs.run.state).
        self.total_nimg = int(round(recipe.run.total_kimg * 1000))
        self.tick_nimg = max(1, int(round(recipe.run.tick_kimg * 1000)))
        self.cur_nimg = self.step = self.d_step = self.tick = self.skipped_steps = 0
        #: Iterations in which fp16's GradScaler skipped an optimizer step (its overflow handling,
        #: not divergence: never counted against ``run.max_skipped``).
        self.scaler_skipped_steps = 0
        #: Indexes into ``lazy_penalties`` whose lazy step the GradScaler skipped in the last
        #: iteration: they run again in the next one (``gan_kit.runs.engine.lazy_regularization``).
        self.lazy_retry: tuple[int, ...] = ()
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
        self.initialized_networks: tuple[str, ...] = ()  # --init-from: which of G, D, G_ema it held
        # a model imported from another codebase that this run's weights descend from (format,
        # file, SHA-256, licence), carried into every checkpoint and export of the run
        self.derived_from: dict | None = None

    # ------------------------------------------------------------------------ scheduled --

    @property
    def optim_options(self) -> Any:
        """``[optim]`` with the scheduled values in force."""
        return self.schedules.optim

    @property
    def ema_options(self) -> Any:
        """``[ema]`` with the scheduled values in force."""
        return self.schedules.ema

    @property
    def schedule_values(self) -> dict[str, float]:
        """Each scheduled option's dotted key -> the value set for the last iteration."""
        return self.schedules.values

    def apply_schedules(self, nimg: int | None = None) -> None:
        """Set every scheduled option to its value at ``nimg`` images (default ``cur_nimg``):
        before every iteration, and when a run is built or resumed."""
        if not self.schedules:
            return
        self.schedules.apply(self.cur_nimg if nimg is None else nimg, self.total_nimg)
        if self.schedules.drives_optim:
            self.apply_optim_settings()

    def apply_optim_settings(self) -> None:
        """The optimizers' lr, betas and eps from ``optim_options`` at the current phase
        (``Optimizers.apply``)."""
        self.optimizers.apply(self.optim_options, self.phase)

    def phases(self) -> list[Phase]:
        """Every phase the schedule visits before ``total_nimg`` (first image of each)."""
        return self.growth.phases(self.total_nimg)

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

        def inputs(n: int) -> tuple[torch.Tensor, ...]:
            z = torch.randn(n, self.latent_dim, generator=gen).to(self.device)
            if not self.num_classes:
                return (z,)
            return z, torch.randint(self.num_classes, (n,), generator=gen).to(self.device)

        with torch.random.fork_rng(devices=devices):
            refresh_batchnorm(self.G_ema, inputs, self.autocast)

    # ------------------------------------------------------------------------ for hooks --

    def generate(self, z: torch.Tensor, phase: Phase | None = None, batch: int = 64,
                 G: nn.Module | None = None, labels: torch.Tensor | None = None,
                 seed: int | None = None) -> torch.Tensor:
        """Images ``[N,C,r,r]`` (float32, CPU) from G_ema (or ``G``, e.g. ``run.G`` for raw-G
        grids, run in eval mode) for latents ``z`` (at ``phase``, default the current one).
        ``labels[N]``: the classes, in a conditional run (required there). ``seed``: see
        ``gan_kit.runs.run.images.generate``. Never moves the training RNG."""
        return images.generate(G if G is not None else self.G_ema, z, phase=phase or self.phase, device=self.device,
                               autocast=self.autocast, batch=batch, labels=labels, seed=seed, restore=self.phase)

    def real_images(self, n: int, seed: int = 0) -> torch.Tensor:
        """``n`` real images at the final resolution, drawn without replacement with ``seed``
        from the data set metrics use (``metric_dataset``: the training set unless
        ``data.metric_reals = "full"``)."""
        return self.data.real_images(n, seed)

    def real_indices(self, n: int, seed: int) -> torch.Tensor:
        """The indices ``[n]`` into ``metric_dataset`` that ``real_images(n, seed)`` takes."""
        return self.data.real_indices(n, seed)

    def real_images_at(self, indices: torch.Tensor) -> torch.Tensor:
        """The real images ``[len(indices), C, R, R]`` of ``metric_dataset`` at ``indices``."""
        return self.data.real_images_at(indices)

    def real_labels(self, n: int, seed: int = 0) -> torch.Tensor | None:
        """The class labels ``[n]`` of ``real_images(n, seed)``, or None without labels."""
        return self.data.real_labels(n, seed)

    @property
    def checkpoints(self) -> CheckpointLayout:
        """Where this run's checkpoint files go (``gan_kit.runs.layout``)."""
        return CheckpointLayout(self.out_dir)

    def save_checkpoint(self, path: Path | str | None = None, phase: Phase | None = None) -> Path | None:
        """Write the run's state atomically, rank 0 only, and fire ``checkpoint_saved``
        (``gan_kit.runs.run.state.save_checkpoint``: ``path`` default ``checkpoints/latest.pt``,
        a str a name in the checkpoint folder). Returns the path (None on other ranks)."""
        return state.save_checkpoint(self, path, phase)

    def state_dict(self) -> dict:
        """Everything ``load_state_dict`` restores (``gan_kit.runs.run.state``)."""
        return state.state_dict(self)

    def load_state_dict(self, saved: dict) -> None:
        """Restore a ``state_dict`` exactly (``gan_kit.runs.run.state``)."""
        state.load_state_dict(self, saved)

    def frozen_files(self) -> dict[str, Any]:
        """G's and D's frozen sub-networks loaded from local files, by module name
        (``gan_kit.runs.run.state.frozen_files``)."""
        return state.frozen_files(self)
