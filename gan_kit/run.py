"""``Run``: one training run's components, networks, optimizers and progress, built from a recipe.

The training loop (``gan_kit.engine``) drives a ``Run``; lifecycle hooks receive it. Building
knows no specific component: every loss, penalty, strategy, architecture and dataset comes from
the registry by the name the recipe gives.
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from gan_kit.version import __version__
from gan_kit import checkpoint as ckpt
from gan_kit.allocator import retain_freed_memory
from gan_kit.components import BuildContext, WeightedPenalty, set_phase
from gan_kit.datachecks import labels_problem, metric_cap_note, metric_problem
from gan_kit.ema import make_ema, refresh_batchnorm
from gan_kit.networks import apply_spectral_norm, at_precision, training_views
from gan_kit.errors import GankitError, TrainingError
from gan_kit.phase import Phase
from gan_kit.plugins import Plugins
from gan_kit.randomness import batch_randn
from gan_kit.recipe import ComponentSpec, Recipe, recipe_to_toml
from gan_kit.stash import Stash
from gan_kit.threads import set_threads
from gan_kit.step import StepContext

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


class Run:
    """One training run.

    What hooks may read: ``recipe``, ``options`` (the ``[run]`` table), ``out_dir`` (Path),
    ``device``, ``precision``, ``G``, ``D``, ``G_ema`` (plain modules, never wrapped), ``opt_G``,
    ``opt_D``, ``dataset``, ``channels``, ``latent_dim``, ``phase`` and ``previous_phase``,
    ``cur_nimg`` (real images shown), ``total_nimg``, ``step`` (iterations done), ``tick``
    (ticks done), ``is_main`` (rank 0), ``rank``, ``world_size``, ``metrics`` (``(spec, metric)``
    pairs), ``last_checkpoint``, ``resumed_from`` (the checkpoint a resumed run started from, else
    None), ``initialized_from`` (the checkpoint a ``--init-from`` run took its weights from), and
    ``stash``: typed per-plugin state (``gan_kit.StashKey``).
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
        set_threads(recipe.run.threads, self.device)  # unset: the cores free now (gan_kit/threads.py)
        seed_everything(recipe.run.seed)
        self._build_data()
        self._build_networks()
        self._build_objectives()
        self._build_optimizers()
        self._build_precision()
        self._check_batches()
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

    # ------------------------------------------------------------------------------ building --

    def build(self, spec: ComponentSpec) -> Any:
        """The component a recipe table names, built with this run's ``BuildContext``."""
        comp = self.registry.get(spec.kind, spec.name)
        return comp.factory(spec.options, self.build_context())

    def build_context(self) -> BuildContext:
        return BuildContext(resolution=self.recipe.resolution, channels=getattr(self, "channels", 0),
                            recipe=self.recipe, num_classes=getattr(self, "num_classes", 0))

    def _build_data(self) -> None:
        r = self.recipe
        self.dataset = self.build(r.data).build(r.resolution)
        if len(self.dataset) == 0:
            raise GankitError(f"{r.path}: data: the {r.data.name!r} dataset is empty")
        first = self.dataset[0]
        first = first[0] if isinstance(first, (tuple, list)) else first
        self.channels = int(first.shape[0])
        if tuple(first.shape[-2:]) != (r.resolution, r.resolution):
            raise GankitError(f"{r.path}: data: dataset {r.data.name!r} gives {tuple(first.shape)} images, "
                              f"expected [C, {r.resolution}, {r.resolution}]")
        #: Classes of a class-conditional run (``architecture.conditional``), else 0.
        problem = labels_problem(r, self.dataset)
        if problem:
            raise GankitError(f"{r.path}: {problem}")
        self.num_classes = int(getattr(self.dataset, "num_classes", 0) or 0) if r.architecture.slot.conditional else 0
        #: Class names in label order where the data set has them (image-folder's sub-folders).
        self.class_names = [str(c) for c in getattr(self.dataset, "classes", None) or []] if self.num_classes else []

    def _build_networks(self) -> None:
        r = self.recipe
        if self.device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = r.run.tf32
            torch.backends.cudnn.allow_tf32 = r.run.tf32
            torch.backends.cudnn.benchmark = r.run.cudnn_benchmark
        elif self.device.type == "cpu" and r.run.retain_cpu_memory:
            retain_freed_memory()  # process-wide; see gan_kit/allocator.py
        self.growth = self.build(r.growth)
        self.arch = self.build(r.architecture)
        self.latent_dim = int(self.arch.latent_dim)
        G, D = self.arch.build(r.resolution, self.channels)
        self.initializer = self.build(r.init)
        self.initializer.apply(G)
        self.initializer.apply(D)
        sn = r.architecture.slot.spectral_norm
        for name, net in (("G", G), ("D", D)):
            if sn in (name, "both"):
                apply_spectral_norm(net, name, r)
        self.G, self.D = G.to(self.device), D.to(self.device)
        if r.run.channels_last:
            self.G.to(memory_format=torch.channels_last)
            self.D.to(memory_format=torch.channels_last)
        if self.world_size > 1:
            from gan_kit.distributed import broadcast_parameters

            broadcast_parameters(self.G, self.D)
        self.G_ema = make_ema(self.G)
        self.all_reduce_grads = self.world_size > 1 and r.run.grad_sync == "all-reduce"
        self.augment = self.build(r.augment)
        views = training_views(self.G, self.D, recipe=r, device=self.device, world_size=self.world_size,
                               augment=self.augment if r.augment.name != "none" else None)
        self.G_train, self.D_train, self.G_penalty, self.D_penalty = views

    def _build_objectives(self) -> None:
        r = self.recipe
        self.loss = self.build(r.loss)
        penalties = [WeightedPenalty(s.name, self.build(s), s.slot.weight) for s in r.penalties]
        for name, weight, opts in self.loss.implied_penalties():
            comp = self.registry.get("penalty", name)
            penalties.append(WeightedPenalty(name, comp.factory(comp.Options(**opts), self.build_context()), weight))
        self.penalties = penalties
        self.d_penalties = [p for p in penalties if p.penalty.network == "D" and p.penalty.interval == 1]
        self.g_penalties = [p for p in penalties if p.penalty.network == "G" and p.penalty.interval == 1]
        self.lazy_penalties = [p for p in penalties if p.penalty.interval > 1]
        self.strategy = self.build(r.update)
        self.metrics = [(s, self.build(s)) for s in r.metrics]
        for spec, metric in self.metrics:
            problem = metric_problem(spec, metric, len(self.dataset), r.data.name)
            if problem:
                raise GankitError(f"{r.path}: {problem}")
            note = metric_cap_note(spec, metric, len(self.dataset), r.data.name)
            if note and self.is_main:
                print(note, file=sys.stderr)

    def lazy_ratio(self, network: str) -> float:
        """k / (k + 1) for a network regularised lazily every k iterations, else 1: its optimizer
        takes k + 1 steps per k iterations, so lr and betas are corrected (StyleGAN2 sec. 3.1;
        stylegan2-ada-pytorch's ``mb_ratio``)."""
        intervals = {p.penalty.interval for p in self.lazy_penalties if p.penalty.network == network}
        if not intervals:
            return 1.0
        if len(intervals) > 1:
            raise GankitError(f"{self.recipe.path}: penalty: the lazy {network} penalties have different intervals "
                              f"{sorted(intervals)}; give them one interval")
        k = intervals.pop()
        return k / (k + 1)

    def _build_optimizers(self) -> None:
        o = self.recipe.optim
        self.g_lr = o.g_lr if o.g_lr is not None else o.lr
        self.d_lr = o.d_lr if o.d_lr is not None else o.lr
        self.opt_G = self._optimizer(self.G, self.g_lr, self.lazy_ratio("G"))
        self.opt_D = self._optimizer(self.D, self.d_lr, self.lazy_ratio("D"))

    def _optimizer(self, net: nn.Module, lr: float, ratio: float = 1.0) -> torch.optim.Optimizer:
        o = self.recipe.optim
        params = list(net.parameters())
        if o.name == "sgd":
            return torch.optim.SGD(params, lr=lr * ratio)
        kwargs = {"fused": True} if self.device.type == "cuda" else {}
        betas = (o.betas[0] ** ratio, o.betas[1] ** ratio)
        return torch.optim.Adam(params, lr=lr * ratio, betas=betas, eps=o.eps, **kwargs)

    def apply_optim_settings(self) -> None:
        """Set each optimizer's lr (base x phase scale x lazy ratio), betas and eps from the
        recipe: after every phase change, and after a resume (a loaded optimizer state brings
        the old hyper-parameters with it)."""
        o = self.recipe.optim
        scale = self.phase.lr_scale if self.phase is not None else 1.0
        for opt, base, net in ((self.opt_G, self.g_lr, "G"), (self.opt_D, self.d_lr, "D")):
            ratio = self.lazy_ratio(net)
            for group in opt.param_groups:
                group["lr"] = base * scale * ratio
                if "betas" in group:
                    group["betas"] = (o.betas[0] ** ratio, o.betas[1] ** ratio)
                    group["eps"] = o.eps

    def _build_precision(self) -> None:
        precision = self.recipe.run.precision
        if precision == "auto":
            precision = "bf16" if self.device.type == "cuda" else "fp32"
        self.precision = precision
        self.scaler = torch.amp.GradScaler(self.device.type) if precision == "fp16" else None
        if precision in ("bf16", "fp16"):
            dtype = torch.bfloat16 if precision == "bf16" else torch.float16
            device_type = self.device.type
            self.autocast = lambda: torch.autocast(device_type, dtype=dtype)
            # Plugin code sees float32 networks whose forwards run at the run's precision, so
            # plain-PyTorch strategies and penalties train (gan_kit.networks.AtPrecision).
            self.G_train, self.D_train, self.G_penalty, self.D_penalty = at_precision(
                (self.G_train, self.D_train, self.G_penalty, self.D_penalty), self.autocast)
        else:
            self.autocast = contextlib.nullcontext

    def phases(self) -> list[Phase]:
        """Every phase the schedule visits before ``total_nimg`` (first image of each)."""
        return self.growth.phases(self.total_nimg)

    def _check_batches(self) -> None:
        from gan_kit.rundir import batch_problem

        problem = batch_problem(self.recipe, self.phases(), self.arch, self.world_size)
        if problem:
            raise GankitError(problem)

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
                           joint_d_forward=self.arch.joint_d_forward)

    def latent(self, n: int) -> torch.Tensor:
        """Latents ``z[n, latent_dim]`` for this process: drawn for all processes together and
        sliced ``[rank::world_size]`` (see gan_kit.distributed)."""
        return batch_randn(n, self.latent_dim, device=self.device, rank=self.rank, world_size=self.world_size)

    def set_phase(self, phase: Phase) -> None:
        self.phase = phase
        for net in (self.G, self.D, self.G_ema):
            set_phase(net, phase.resolution, phase.alpha)

    def check_in_sync(self) -> None:
        """Raise ``TrainingError`` when G's or D's weights differ across processes (a collective;
        a no-op with one process). Called at every tick and phase change, before the hooks that
        write checkpoints: a gradient DDP never saw is the silent multi-GPU bug this catches."""
        if self.world_size < 2:
            return
        from gan_kit.distributed import out_of_sync

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

    # ------------------------------------------------------------------------ for plugins --

    @torch.no_grad()
    def generate(self, z: torch.Tensor, phase: Phase | None = None, batch: int = 64,
                 G: nn.Module | None = None, labels: torch.Tensor | None = None) -> torch.Tensor:
        """Images ``[N,C,r,r]`` (float32, CPU) from G_ema (or ``G``, e.g. ``run.G`` for raw-G
        grids, run in eval mode) for latents ``z`` (at ``phase``, default the current one).
        ``labels[N]``: the classes, in a conditional run (required there)."""
        phase = phase or self.phase
        net = G if G is not None else self.G_ema
        was_training = net.training
        net.eval()
        set_phase(net, phase.resolution, phase.alpha)
        out = []
        # A generator may draw noise (StyleGAN2's noise inputs): from a forked RNG, so sampling
        # never moves the training RNG (exact resume).
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            for i in range(0, z.shape[0], batch):
                args = [z[i:i + batch].to(self.device)]
                if labels is not None:
                    args.append(labels[i:i + batch].to(self.device))
                with self.autocast():
                    out.append(net(*args).float().cpu())
        net.train(was_training)
        if self.phase is not None:
            set_phase(net, self.phase.resolution, self.phase.alpha)
        return torch.cat(out)

    def _real_draw(self, n: int, seed: int) -> torch.Tensor:
        """The data set indices ``[n]`` that ``real_images`` and ``real_labels`` take for ``seed``."""
        return torch.randperm(len(self.dataset), generator=torch.Generator().manual_seed(seed))[:n]

    def real_labels(self, n: int, seed: int = 0) -> torch.Tensor | None:
        """The class labels ``[n]`` of ``real_images(n, seed)`` (same draw), or None when the
        data set has no labels."""
        labels = getattr(self.dataset, "labels", None)
        return None if labels is None else labels[self._real_draw(n, seed)]

    def real_images(self, n: int, seed: int = 0) -> torch.Tensor:
        """``n`` real images at the final resolution, drawn without replacement with ``seed``."""
        items = [self.dataset[i] for i in self._real_draw(n, seed).tolist()]
        return torch.stack([it[0] if isinstance(it, (tuple, list)) else it for it in items])

    # -------------------------------------------------------------------------- checkpoints --

    def _stateful(self) -> dict[str, Any]:
        """Components with state of their own (a penalty's running mean, an augmentation's p)."""
        out = {}
        for i, wp in enumerate(self.penalties):
            if hasattr(wp.penalty, "state_dict"):
                out[f"penalty[{i}].{wp.name}"] = wp.penalty
        for name in ("strategy", "loss", "augment"):
            comp = getattr(self, name)
            if hasattr(comp, "state_dict"):
                out[name] = comp
        return out

    def state_dict(self) -> dict:
        return {
            "gankit_version": __version__,
            "channels": self.channels,
            "num_classes": self.num_classes,
            "class_names": self.class_names,
            "recipe": recipe_to_toml(self.recipe),
            "G": self.G.state_dict(),
            "D": self.D.state_dict(),
            "G_ema": self.G_ema.state_dict(),
            "opt_G": self.opt_G.state_dict(),
            "opt_D": self.opt_D.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "components": {k: c.state_dict() for k, c in self._stateful().items()},
            "cur_nimg": self.cur_nimg,
            "step": self.step,
            "d_step": self.d_step,
            "tick": self.tick,
            "skipped_steps": self.skipped_steps,
            "train_seconds": self.train_seconds,
            "tick_stats": {k: [v, self.tick_counts[k]] for k, v in self.tick_sums.items()},
            "phase": _phase_dict(self.phase),
            "rng": ckpt.rng_state(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.G.load_state_dict(state["G"])
        self.D.load_state_dict(state["D"])
        self.G_ema.load_state_dict(state["G_ema"])
        self.opt_G.load_state_dict(state["opt_G"])
        self.opt_D.load_state_dict(state["opt_D"])
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        saved = state.get("components", {})
        for key, comp in self._stateful().items():
            if key in saved:
                comp.load_state_dict(saved[key])
        self.cur_nimg = int(state["cur_nimg"])
        self.step = int(state["step"])
        self.d_step = int(state["d_step"])
        self.tick = int(state["tick"])
        self.skipped_steps = int(state["skipped_steps"])
        self.train_seconds = float(state.get("train_seconds", 0.0))  # absent in checkpoints before max_minutes
        self.tick_sums.clear()
        self.tick_counts.clear()
        for k, (v, n) in state.get("tick_stats", {}).items():
            self.tick_sums[k], self.tick_counts[k] = float(v), int(n)
        ckpt.set_rng_state(state["rng"])

    def save_checkpoint(self, name: str = "latest", phase: Phase | None = None) -> Path | None:
        """Write ``checkpoints/<name>.pt`` atomically (rank 0 only) and fire ``checkpoint_saved``.

        ``phase``: the phase the weights are to be shown at (``gankit sample`` / ``eval``), when
        not the current one: a phase's own checkpoint, written as the next phase starts, records
        the finished phase (resuming goes by ``cur_nimg``, not by this). Refuses
        (``TrainingError``) to write weights that hold NaN/inf: a checkpoint is always one a run
        can continue from.
        """
        if not self.is_main:
            return None
        bad = [label for label, net in (("G", self.G), ("D", self.D), ("G_ema", self.G_ema))
               if not all(torch.isfinite(t).all() for t in net.state_dict().values() if t.is_floating_point())]
        if bad:
            where = f" (last good checkpoint: {self.last_checkpoint})" if self.last_checkpoint else ""
            raise TrainingError(f"step {self.step}: non-finite weights in {' and '.join(bad)}; not writing "
                                f"checkpoints/{name}.pt{where}")
        state = self.state_dict()
        if phase is not None:
            state["phase"] = _phase_dict(phase)
        path = ckpt.save_atomic(state, self.out_dir / "checkpoints" / f"{name}.pt")
        self.last_checkpoint = path
        self.hook.checkpoint_saved(run=self, path=path)
        return path


def _phase_dict(phase: Phase | None) -> dict | None:
    if phase is None:
        return None
    import attrs

    return {k: (float(v) if isinstance(v, float) else v) for k, v in attrs.asdict(phase).items()}
