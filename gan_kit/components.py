"""Base classes and contracts of every component kind, and the per-step context.

Plugins subclass these (or just follow the same duck-typed contract) and register the class
through the matching hook. Each class declares a nested frozen attrs ``Options`` class; the
engine instantiates it as ``Factory(options, context)``.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager, Iterable, Mapping

import attrs
import torch
from torch import nn

from gan_kit.phase import Phase

__all__ = [
    "BuildContext",
    "ComponentBase",
    "Loss",
    "Penalty",
    "WeightedPenalty",
    "UpdateStrategy",
    "GrowthScheduler",
    "Initializer",
    "Architecture",
    "DatasetFactory",
    "Metric",
    "StepContext",
    "d_objective",
    "g_objective",
    "set_phase",
]


@attrs.frozen
class BuildContext:
    """What a component may know about the run when it is built.

    resolution: final image side in pixels (``data.resolution``).
    channels:   image channels (1 for digits), known once the dataset is built (0 before).
    recipe:     the whole resolved ``Recipe`` (read-only), or None in unit tests.
    """

    resolution: int = 32
    channels: int = 0
    recipe: Any = None


class ComponentBase:
    """Stores ``options`` and ``context``; subclasses declare ``Options``."""

    @attrs.frozen
    class Options:
        pass

    def __init__(self, options: Any = None, context: BuildContext | None = None):
        self.options = options if options is not None else type(self).Options()
        self.context = context if context is not None else BuildContext()

    @classmethod
    def problems(cls, options: Any, recipe: Any) -> Iterable[tuple[str, str]]:
        """Cross-option problems found at recipe load: ``(key, message)`` pairs, ``key`` relative
        to the component's table. Checked together with every other problem of the recipe."""
        return ()


class Loss(ComponentBase):
    """An adversarial loss computed from D's raw logits (never from a sigmoid output).

    ``d_loss(real_logits[N], fake_logits[N]) -> scalar`` is minimised by D;
    ``g_loss(fake_logits[N], real_logits=None) -> scalar`` is minimised by G.
    ``implied_penalties()`` lists ``(penalty name, weight, options dict)`` that come with the
    loss (the ``wgan-gp`` preset adds the gradient penalty and drift this way).
    A loss whose G side needs D's logits on real images (relativistic losses) sets
    ``needs_real_logits = True``; every update strategy then passes ``real_logits`` (computed on
    the iteration's last real batch, without gradient) through ``g_objective``.
    """

    needs_real_logits: bool = False

    def d_loss(self, real_logits: torch.Tensor, fake_logits: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def g_loss(self, fake_logits: torch.Tensor, real_logits: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError

    def implied_penalties(self) -> list[tuple[str, float, dict]]:
        return []


class Penalty(ComponentBase):
    """A D regulariser: ``penalty(D, real[N,C,H,W], fake[N,C,H,W], ctx=None) -> scalar``.

    The value is unweighted; the strategy adds ``weight * value`` to the D objective. Gradient
    norms are taken per sample over all non-batch dims, in float32. ``interval`` > 1 makes the
    penalty lazy (applied every ``interval`` D steps); ``applies_at(step)`` says when.
    """

    interval: int = 1

    def __call__(self, D: nn.Module, real: torch.Tensor, fake: torch.Tensor, ctx: "StepContext | None" = None):
        raise NotImplementedError

    def applies_at(self, step: int) -> bool:
        return step % max(1, self.interval) == 0


@attrs.frozen
class WeightedPenalty:
    """A penalty instance with its recipe name and weight."""

    name: str
    penalty: Penalty
    weight: float


class UpdateStrategy(ComponentBase):
    """One training iteration: ``step(ctx) -> dict[str, float | Tensor]``.

    The strategy owns the order of zero_grad / forward / backward / optimizer.step for D and G.
    ``ctx.reals`` holds ``d_steps`` real batches; the strategy must use a fresh real batch and
    zeroed gradients for every D step.
    """

    #: Number of real batches (D steps) one ``step`` consumes; strategies set it from options.
    @property
    def d_steps(self) -> int:
        return int(getattr(self.options, "d_steps", 1))

    def step(self, ctx: "StepContext") -> Mapping[str, Any]:
        raise NotImplementedError


class GrowthScheduler(ComponentBase):
    """``phase_at(cur_nimg) -> Phase``: a pure function of the number of real images shown,
    so resuming needs nothing but ``cur_nimg``."""

    def phase_at(self, cur_nimg: int) -> Phase:
        raise NotImplementedError

    def resolutions(self) -> list[int]:
        """Every resolution the schedule visits, in order."""
        return [self.context.resolution]


class Initializer(ComponentBase):
    """``apply(module)`` initialises every conv / linear layer of ``module`` in place."""

    def apply(self, module: nn.Module) -> None:
        raise NotImplementedError


class Architecture(ComponentBase):
    """``build(resolution, channels) -> (G, D)`` for the final resolution.

    G maps ``z[N, G.latent_dim]`` to images ``[N, channels, r, r]`` in about [-1, 1]; D maps
    images to logits ``[N]``. A growable pair also has ``set_phase(resolution, alpha)`` and builds
    every block up front, so parameters keep their identity (and optimizer state) across growth.
    """

    def build(self, resolution: int, channels: int) -> tuple[nn.Module, nn.Module]:
        raise NotImplementedError

    def batch_problem(self, batch: int) -> str | None:
        """Why D cannot take a per-process batch of ``batch`` images (checked for every phase
        before training, e.g. a minibatch-stddev group that does not divide it), or None."""
        return None


class DatasetFactory(ComponentBase):
    """``build(resolution) -> Dataset`` of float images in [-1, 1], shape [C, H, W]."""

    def build(self, resolution: int) -> torch.utils.data.Dataset:
        raise NotImplementedError


class Metric(ComponentBase):
    """``compute(generate, reals, device) -> dict[str, float]``.

    ``generate(n) -> Tensor[n,C,H,W]`` draws images from G_ema (in [-1, 1]); ``reals`` is a
    tensor of real images at the same resolution. Keys are slash paths like ``Metrics/swd``.
    """

    def compute(self, generate: Callable[[int], torch.Tensor], reals: torch.Tensor, device: torch.device) -> dict[str, float]:
        raise NotImplementedError


def set_phase(module: nn.Module, resolution: int, alpha: float) -> None:
    """Tell a growable network (or its DDP / compile wrapper) the current phase."""
    target = getattr(module, "module", module)
    target = getattr(target, "_orig_mod", target)
    if hasattr(target, "set_phase"):
        target.set_phase(resolution, alpha)


@attrs.define
class StepContext:
    """Everything an update strategy needs for one iteration.

    reals:   ``d_steps`` real batches ``[N,C,r,r]``, already at the phase's resolution and fade.
    latent:  ``latent(n) -> z[n, latent_dim]`` on the right device.
    autocast: a context-manager factory (bf16/fp16 autocast on CUDA, a no-op on the CPU).
    scaler:  a ``torch.amp.GradScaler`` for fp16, else None.
    step:    index of this iteration since the start of training (resume-safe).
    d_step:  index of the next D step since the start (advanced by ``next_d_step``).
    G, D:    the networks to train through: under several processes with ``run.grad_sync =
             "ddp"`` these are the DistributedDataParallel wrappers (compiled when asked).
    all_reduce_grads: ``run.grad_sync = "all-reduce"`` under several processes: ``opt_step``
             averages the optimizer's gradients across processes first.
    """

    G: nn.Module
    D: nn.Module
    opt_G: torch.optim.Optimizer
    opt_D: torch.optim.Optimizer
    loss: Loss
    penalties: list[WeightedPenalty]
    reals: list[torch.Tensor]
    latent: Callable[[int], torch.Tensor]
    phase: Phase
    autocast: Callable[[], ContextManager] = contextlib.nullcontext
    scaler: Any = None
    step: int = 0
    d_step: int = 0
    skip_nonfinite: bool = False
    skipped: bool = False
    rank: int = 0
    world_size: int = 1
    D_penalty: nn.Module | None = None
    all_reduce_grads: bool = False
    _scaler_stepped: set = attrs.field(factory=set, init=False, repr=False)

    def batch_rand(self, n: int, *shape: int, device: torch.device | None = None) -> torch.Tensor:
        """``torch.rand(n, *shape)`` for this process's ``n`` samples: drawn at the global batch
        size and sliced ``[rank::world_size]``, so a run matches across process counts."""
        x = torch.rand(n * self.world_size, *shape, device=device)
        return x[self.rank::self.world_size] if self.world_size > 1 else x

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """``loss.backward()``, through the GradScaler when one is in use."""
        if self.scaler is not None:
            loss = self.scaler.scale(loss)
        loss.backward(**kwargs)

    def opt_step(self, opt: torch.optim.Optimizer) -> None:
        """``opt.step()``, through the GradScaler when one is in use (updating the scaler first
        when this optimizer already stepped since the last update, e.g. the second of
        ``d_steps`` critic steps).

        With ``skip_nonfinite`` (recipe ``run.on_nonfinite = "skip"``) a step whose gradients
        hold NaN/inf is not taken and ``skipped`` is set (one device sync per call).
        """
        if self.all_reduce_grads and self.world_size > 1:
            from gan_kit.distributed import all_reduce_grads

            all_reduce_grads((p for g in opt.param_groups for p in g["params"]), self.world_size)
        if self.scaler is not None:
            if id(opt) in self._scaler_stepped:
                # The same optimizer steps again this iteration (d_steps > 1): GradScaler allows
                # one step per optimizer between updates, so its previous step closes a scaler
                # round (the engine updates once more after the strategy).
                self.scaler.update()
                self._scaler_stepped.clear()
            self.scaler.step(opt)  # the scaler already skips steps with inf/NaN gradients
            self._scaler_stepped.add(id(opt))
            return
        if self.skip_nonfinite:
            grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
            if grads and not bool(torch.stack([torch.isfinite(g).all() for g in grads]).all()):
                self.skipped = True
                return
        opt.step()


def g_objective(ctx: "StepContext", fake_logits: torch.Tensor) -> torch.Tensor:
    """G's loss ``loss.g_loss(fake_logits[N], real_logits)``; ``real_logits`` is D's output on
    ``ctx.reals[-1]`` (no gradient) when the loss sets ``needs_real_logits``, else None."""
    real_logits = None
    if getattr(ctx.loss, "needs_real_logits", False):
        with torch.no_grad(), ctx.autocast():
            real_logits = ctx.D(ctx.reals[-1]).float()
    return ctx.loss.g_loss(fake_logits.float(), real_logits)


def d_objective(
    ctx: StepContext,
    real: torch.Tensor,
    fake: torch.Tensor,
    *,
    d_step: int | None = None,
    fake_logits: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The D objective ``d_loss(D(real), D(fake)) + sum(weight * penalty)`` and its stats.

    ``fake`` should carry no graph to G (made under no_grad or detached) unless the caller
    wants G gradients. Penalties whose ``applies_at(d_step)`` is False are skipped.
    ``fake_logits``: D's logits ``[N]`` for ``fake`` when the caller already has them (a strategy
    that shares one D forward between the D and G objectives); D is then not run on ``fake``.
    """
    with ctx.autocast():
        real_logits = ctx.D(real)
        if fake_logits is None:
            fake_logits = ctx.D(fake)
    loss = ctx.loss.d_loss(real_logits.float(), fake_logits.float())
    stats: dict[str, torch.Tensor] = {
        "Loss/D": loss.detach(),
        "Logits/real": real_logits.detach().float().mean(),
        "Logits/fake": fake_logits.detach().float().mean(),
    }
    total = loss
    step = ctx.d_step if d_step is None else d_step
    for wp in ctx.penalties:
        if not wp.penalty.applies_at(step):
            continue
        # Penalties take input gradients with create_graph; they run on the eager D when D is
        # compiled (torch.compile's AOTAutograd has no double backward).
        value = wp.penalty(ctx.D_penalty if ctx.D_penalty is not None else ctx.D, real, fake, ctx=ctx)
        total = total + wp.weight * value
        stats[f"Loss/D/{wp.name}"] = value.detach()
    return total, stats
