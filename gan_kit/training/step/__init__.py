"""The per-iteration context an update strategy works with, and the verbs that own the mechanics.

A strategy decides the ORDER of one iteration (which forwards, which backwards, which optimizer
steps); the verbs here own the HOW: the GradScaler under fp16, DistributedDataParallel's
``no_sync`` and gradient averaging under several processes, the non-finite policy, autocast, and
the augmentation of every image D sees. No strategy or penalty names DDP, a scaler or
``torch.compile`` (stylegan2-ada-pytorch's split between ``training_loop.py``, which owns
``zero_grad`` / ``requires_grad`` / ``opt.step``, and ``loss.py``'s ``accumulate_gradients`` is
the model).

Verbs, each taking a network as ``"G"`` / ``"D"`` or as ``ctx.G`` / ``ctx.D``:

=================================  ==============================================================
``ctx.zero_grad(net)``             clear the network's weight gradients (``set_to_none``)
``ctx.backward(loss, *nets)``      accumulate d loss / d weights into those networks' ``.grad``
                                   only (``backward(inputs=...)``: nothing reaches the other one)
``ctx.opt_step(net)``              its optimizer step: GradScaler, the ``all-reduce`` sync mode,
                                   the non-finite policy (returns False when the step was not taken)
``with ctx.frozen(net):``          the network computes no weight gradients inside (input gradients
                                   still flow); a DDP network also skips its gradient sync there
``ctx.gradients(out, inputs)``     ``torch.autograd.grad(out, inputs, create_graph=True)`` in
                                   float32, scaled and unscaled around a GradScaler
``ctx.input_gradients(D, x)``      ``d sum(D(x)) / dx`` for penalties (float32, double-backward graph)
``ctx.d_objective(real, fake)``    the D loss plus the D penalties, and its stats
``ctx.g_objective(fake_logits)``   the G loss plus the G penalties, and its stats
``ctx.generate(z, labels)``        ``G(z)``, or ``G(z, labels)`` in a class-conditional run
``ctx.discriminate(x, labels)``    ``D(x)``, or ``D(x, labels)`` likewise
``ctx.latent(n)``                  latents for this process; ``ctx.batch_rand(n, ...)`` likewise
``ctx.accumulate(body)``           ``body()`` once per round of ``growth.batch_gpu`` images (gradient
                                   accumulation): the forwards and backwards of one network step
``ctx.mean_over_processes(t)``     ``t`` averaged over all processes (identity with one); differentiable
``ctx.autocast()``                 the precision context for forwards (optional: ``ctx.G`` and
                                   ``ctx.D`` already run at the run's precision)
``ctx.stage(net, owner, name, v)`` set ``owner.name = v`` only if ``net``'s next optimizer step
                                   is applied (``ctx.on_step(net, fn)``: call ``fn(applied)`` then)
=================================  ==============================================================

State a component keeps across iterations (path length's running mean, ADA's sign statistics, a
penalty's EMA) changes only with an optimizer step that is applied: a component *stages* the
update (``ctx.stage`` / ``ctx.on_step``) and ``ctx.opt_step`` of that network commits it when
its step changed the weights. ``applied`` is a 0-dim bool tensor on the device (or Python
``True``): under fp16 it is whether the GradScaler found the gradients finite, computed on the
device, so a step the scaler skips for an overflow leaves no trace in any state and no host sync
is added; ``ctx.stage`` commits with ``torch.where(applied, v, old)``. Updates staged for a step
that is never applied (the non-finite policy stopped the iteration, or the strategy never steps
that network) are dropped with the iteration's context.

Precision (docs/hooks.md, "Precision"): under bf16 / fp16 ``ctx.G`` / ``ctx.D`` and the
penalties' networks run their forwards under autocast and return float32, and every image handed
to a penalty is float32, so plugin code in plain float32 PyTorch trains unchanged; the verbs
backpropagate and step outside autocast (PyTorch's AMP gradient-penalty recipe).

Gradient accumulation (``growth.batch_gpu``, stylegan2-ada-pytorch's ``--batch-gpu``): a strategy
puts the forwards and backwards that feed one optimizer step into ``ctx.accumulate(body)``, between
``ctx.zero_grad`` and ``ctx.opt_step``; the verb runs ``body`` once per round and owns the rest -
``ctx.reals`` / ``ctx.labels`` are the round's rows, latents and every ``batch_rand`` draw are the
round's rows of the draws the whole batch would get, ``ctx.backward`` scales by 1/rounds, and DDP
skips its gradient sync (``no_sync``) in all rounds but the last. So the step equals the
unaccumulated one to rounding, whatever the strategy or penalty (see ``accumulate``).

The objectives (``ctx.d_objective``, ``ctx.g_objective``) are ``gan_kit.training.step.objectives``,
gradient accumulation ``gan_kit.training.step.rounds`` and staged state
``gan_kit.training.step.staging``: ``StepContext`` holds the iteration's state and keeps the verbs.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager, Iterator, Mapping

import attrs
import torch
from torch import nn

from gan_kit.plugin_api.components import Loss, WeightedPenalty
from gan_kit.base.phase import Phase
from gan_kit.base.randomness import batch_rand
from gan_kit.training.step.finite import match_grad_layout, scale_of
from gan_kit.training.step import objectives, rounds
from gan_kit.training.step.rounds import Round

__all__ = ["StepContext", "Round"]
from gan_kit.training.step.staging import Staging, finite_on_device


@attrs.define(eq=False)
class StepContext:
    """Everything an update strategy needs for one iteration, and the verbs it acts through.

    G, D:       the networks to run forwards through (``fake = ctx.G(z)``, ``logits = ctx.D(x)``).
                They may be DistributedDataParallel wrappers, compiled, and D applies the run's
                augmentation to every image it sees - a strategy need not care.
    loss:       the recipe's ``Loss``.
    penalties:  ``WeightedPenalty`` list of the D penalties ``d_objective`` adds (every step);
                ``g_penalties`` those ``g_objective`` adds. Lazy penalties (``interval`` > 1) are
                not here: the engine runs them as their own regularisation steps.
    reals:      ``d_steps`` real batches ``[N,C,r,r]`` (this process's share), already at the
                phase's resolution and fade-in alpha. Use ``reals[j]`` for the j-th D step.
    labels:     their class labels ``labels[j]`` (``int64 [N]``) in a class-conditional run
                (``architecture.conditional``), else None each. A conditional strategy makes the
                fakes of D step j for ``labels[j]`` (``ctx.generate(z, ctx.labels[j])``: the fakes
                follow the data's class frequencies) and passes them to ``d_objective`` /
                ``g_objective``; an unconditional one may ignore them.
    phase:      the growth ``Phase``; ``step`` iterations done before this one; ``d_step`` D steps
                done before this iteration's first.
    round:      inside ``accumulate``, the ``Round`` running now (else None).
    rank, world_size: this process and the number of processes (1 without torchrun).

    The remaining constructor arguments are the engine's mechanics (optimizers, GradScaler,
    non-finite policy, gradient sync); strategies use the verbs instead of reading them.
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
    rank: int = 0
    world_size: int = 1
    D_penalty: nn.Module | None = None
    G_penalty: nn.Module | None = None
    all_reduce_grads: bool = False
    g_penalties: list[WeightedPenalty] = attrs.field(factory=list)
    labels: list = attrs.field(factory=list)
    augment: Any = None
    joint_d_forward: bool = False
    check_nonfinite: bool = True
    #: The engine's device-side non-finite policy (``gan_kit.training.step.finite.FiniteGuard``); None:
    #: the check runs on the host before each step (one sync each), as for a bare StepContext.
    guard: Any = None
    #: The first non-finite gradient found by the host check (``"G"`` / ``"D"``); None if none
    #: (the device check reports through ``guard`` instead).
    nonfinite: str | None = None
    #: Networks whose optimizer stepped this iteration (``"G"``, ``"D"``).
    stepped: set = attrs.field(factory=set, init=False, repr=False)
    #: Inside ``accumulate``: the round running now; None outside.
    round: Round | None = attrs.field(default=None, init=False)
    #: Whether ``accumulate`` ran this iteration (the engine warns when a strategy that never
    #: calls it meets a ``growth.batch_gpu`` that asks for rounds).
    accumulated: bool = attrs.field(default=False, init=False, repr=False)
    _scaler_stepped: set = attrs.field(factory=set, init=False, repr=False)
    _staging: Staging = attrs.field(factory=Staging, init=False, repr=False)

    # ---------------------------------------------------------------- networks and optimizers --

    def _name(self, net: Any) -> str:
        if isinstance(net, str):
            if net not in ("G", "D"):
                raise ValueError(f"network must be 'G' or 'D', got {net!r}")
            return net
        if net is self.G:
            return "G"
        if net is self.D or net is self.D_penalty:
            return "D"
        raise ValueError("network must be 'G', 'D', ctx.G or ctx.D")

    def _net(self, name: str) -> nn.Module:
        return self.G if name == "G" else self.D

    def _opt(self, name: str) -> torch.optim.Optimizer:
        return self.opt_G if name == "G" else self.opt_D

    def _params(self, name: str) -> list[torch.nn.Parameter]:
        return [p for group in self._opt(name).param_groups for p in group["params"] if p.requires_grad]

    def __attrs_post_init__(self) -> None:
        if not self.labels:
            self.labels = [None] * len(self.reals)

    # --------------------------------------------------------------------------------- verbs --

    def generate(self, z: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """``G(z)`` for ``z[N, latent_dim]``, or ``G(z, labels)`` with ``labels[N]`` (int64) in a
        class-conditional run; run it under ``ctx.autocast()``."""
        return self.G(z) if labels is None else self.G(z, labels)

    def discriminate(self, x: torch.Tensor, labels: torch.Tensor | None = None, **kwargs: Any) -> torch.Tensor:
        """``D(x)`` -> logits ``[N]``, or ``D(x, labels)`` in a class-conditional run."""
        return self.D(x, **kwargs) if labels is None else self.D(x, labels, **kwargs)

    def zero_grad(self, net: Any) -> None:
        """Clear ``net``'s weight gradients (set to None, so a missing backward cannot reuse old ones)."""
        rounds.not_in_round(self, "zero_grad")
        self._opt(self._name(net)).zero_grad(set_to_none=True)

    def backward(self, loss: torch.Tensor, *nets: Any, retain_graph: bool = False) -> None:
        """Accumulate ``d loss / d weights`` into the weight gradients of ``nets`` (one or both
        of G and D), and nowhere else.

        ``loss``: a scalar. The other network's gradients are untouched even when the graph runs
        through it (``Tensor.backward(inputs=...)``: a backward, so DistributedDataParallel
        averages what it accumulates). ``retain_graph`` keeps the graph for a second backward.
        Inside ``accumulate`` the loss of a round counts 1/rounds, so the rounds add up to the
        gradient of the whole batch's mean loss.
        """
        if not nets:
            raise TypeError("ctx.backward(loss, net): name the network(s) whose gradients to fill ('G', 'D')")
        if self.round is not None and self.round.count > 1:
            loss = loss / self.round.count  # rounds of equal size: their sum is the batch mean
        if self.scaler is not None:
            loss = self.scaler.scale(loss)
        params = [p for net in nets for p in self._params(self._name(net))]
        if params:
            with _outside_autocast(loss):  # AMP: backward passes do not run under autocast
                loss.backward(inputs=params, retain_graph=retain_graph)

    def opt_step(self, net: Any) -> bool:
        """``net``'s optimizer step; returns False when the step was not taken.

        Under several processes with ``run.grad_sync = "all-reduce"`` the gradients are averaged
        first. Under fp16 the GradScaler steps (it skips a step whose gradients overflowed and
        lowers its scale). Otherwise, with ``run.on_nonfinite`` ``"stop"`` or ``"skip"``, gradients
        holding NaN/inf are found before the update and the step is not taken, nor any later step
        of the iteration, nor its G_ema update. In the engine that check stays on the device
        (``gan_kit.training.step.finite``: no host sync; the engine applies the policy at the tick, and
        this returns True for a step it issued); a bare StepContext checks on the host (one sync)
        and returns False with ``ctx.nonfinite`` naming the network.
        What components staged for this network (``stage``, ``on_step``) is committed when the step
        is applied.
        """
        rounds.not_in_round(self, "opt_step")
        name = self._name(net)
        opt = self._opt(name)
        self.stepped.add(name)
        if self.nonfinite is not None:
            self._staging.settle(name, False)
            return False  # an earlier step of this iteration failed: leave every weight as it is
        if self.all_reduce_grads and self.world_size > 1:
            from gan_kit.training.distributed import all_reduce_grads

            all_reduce_grads((p for g in opt.param_groups for p in g["params"]), self.world_size)
        if self.scaler is not None:
            if id(opt) in self._scaler_stepped:
                # The same optimizer steps again this iteration (d_steps > 1): GradScaler allows
                # one step per optimizer between updates, so its previous step closes a scaler
                # round (the engine updates once more after the strategy).
                self.scaler.update()
                self._scaler_stepped.clear()
            match_grad_layout(opt)  # a fused optimizer reads gradients in their parameters' layout
            self.scaler.unscale_(opt)  # what scaler.step does first; here so the verdict can be read
            # The scaler skips the step exactly when an unscaled gradient is inf/NaN; the same
            # test on the device gates the staged state (no host sync).
            applied = finite_on_device(opt) if self._staging.has(name) else True
            self.scaler.step(opt)
            self._scaler_stepped.add(id(opt))
            self._staging.settle(name, applied)
            _drop_autocast_cache()
            return True
        if self.guard is not None:
            self._staging.settle(name, self.guard.step(opt, name))  # staged state follows the device's verdict
            _drop_autocast_cache()
            return True
        if self.check_nonfinite and not _all_finite(opt):
            self.nonfinite = name
            self._staging.settle(name, False)
            return False
        opt.step()
        self._staging.settle(name, True)
        _drop_autocast_cache()
        return True

    @contextlib.contextmanager
    def frozen(self, net: Any) -> Iterator[None]:
        """Inside the block ``net``'s parameters do not require grad, so a backward through it
        computes input gradients only (no weight gradients, and no memory kept for them); a
        DistributedDataParallel network also skips its gradient sync (``no_sync``), since it
        takes no gradient there."""
        from gan_kit.training.networks import find_ddp

        name = self._name(net)
        module = self._net(name)
        params = list(module.parameters())
        flags = [p.requires_grad for p in params]
        ddp = find_ddp(module)
        for p in params:
            p.requires_grad_(False)
        try:
            with ddp.no_sync() if ddp is not None else contextlib.nullcontext():
                yield
        finally:
            for p, f in zip(params, flags):
                p.requires_grad_(f)

    def gradients(self, output: torch.Tensor, inputs: torch.Tensor | list[torch.Tensor], *,
                  create_graph: bool = True) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """``torch.autograd.grad(output, inputs, create_graph=True)`` in float32, one tensor per
        input (a tuple when ``inputs`` is a list).

        ``output``: a scalar. Under a GradScaler it is scaled before and the gradients unscaled
        after, so fp16 gradients do not underflow (PyTorch AMP docs, "Gradient penalty"). With
        ``create_graph`` the result can be part of a loss (a double backward).
        """
        single = isinstance(inputs, torch.Tensor)
        xs = [inputs] if single else list(inputs)
        out = output.float()
        if self.scaler is not None:
            out = self.scaler.scale(out)
        with _outside_autocast(out):  # as PyTorch's AMP gradient-penalty recipe
            grads = torch.autograd.grad(out, xs, create_graph=create_graph)
        grads = tuple(g.float() for g in grads)
        if self.scaler is not None:
            # The scale as a device tensor (get_scale() would read it on the host: a sync);
            # a power of two, so dividing is exact as multiplying by its inverse was.
            scale = scale_of(self.scaler, grads[0].device)
            grads = tuple(g / scale for g in grads)
        return grads[0] if single else grads

    def input_gradients(self, D: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """``d sum(D(x)) / dx``, float32, shape of ``x``, with a graph for the double backward
        a gradient penalty needs. ``x`` is detached and cast to float32 first; D runs under the
        run's autocast. The logits join the result times zero (stylegan2-ada-pytorch's
        ``real_logits * 0`` in its R1 phase): D's last bias, which the gradient does not depend
        on, is then part of the graph, as a distributed wrapper needs every parameter to be in
        a lazy penalty's own step. The values are unchanged; in a lazy step the optimizer then
        steps that bias with a zero gradient, as the official R1 phase's (Adam with beta1 > 0
        moves it by its momentum; with StyleGAN2's beta1 = 0 it stays)."""
        x = x.detach().float().requires_grad_(True)
        with self.autocast():
            logits = D(x)
        grad = self.gradients(logits.float().sum(), x)
        return grad + logits.float().sum() * 0

    def batch_rand(self, n: int, *shape: int, device: torch.device | None = None) -> torch.Tensor:
        """``torch.rand(n, *shape)`` for this process's ``n`` samples: drawn at the global batch
        size and sliced ``[rank::world_size]``, so a run matches across process counts."""
        rank, world_size = rounds.shard(self)
        return batch_rand(n, *shape, device=device, rank=rank, world_size=world_size)

    # ----------------------------------------------------------- objectives (objectives.py) --

    def d_objective(self, real: torch.Tensor, fake: torch.Tensor, *, fake_logits: torch.Tensor | None = None,
                    labels: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The D objective ``d_loss(D(real), D(fake)) + sum(weight * penalty)`` and its stats
        (``gan_kit.training.step.objectives.d_objective``: ``real``, ``fake`` ``[N,C,r,r]``;
        ``fake_logits`` D's logits ``[N]`` on ``fake`` when the caller has them; ``labels[N]``)."""
        return objectives.d_objective(self, real, fake, fake_logits=fake_logits, labels=labels)

    def g_objective(self, fake_logits: torch.Tensor, fake: torch.Tensor | None = None, *,
                    labels: torch.Tensor | None = None,
                    real_logits: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """G's objective ``g_loss(fake_logits[N], real_logits) + sum(weight * G penalty)`` and its
        stats (``gan_kit.training.step.objectives.g_objective``)."""
        return objectives.g_objective(self, fake_logits, fake, labels=labels, real_logits=real_logits)

    def real_logits_for_g(self) -> torch.Tensor:
        """D's logits ``[N]`` (float32, no gradient) on ``reals[-1]``: what ``g_objective`` hands a
        loss that ``needs_real_logits``."""
        return objectives.real_logits_for_g(self)

    # -------------------------------------------------------- gradient accumulation (rounds.py) --

    def shard(self) -> tuple[int, int]:
        """``(rank, world_size)`` of the rows being trained now (``gan_kit.training.step.rounds.shard``)."""
        return rounds.shard(self)

    @property
    def rounds(self) -> int:
        """How many rounds ``accumulate`` runs this iteration (the per-process batch over the
        phase's ``batch_gpu``; 1 when it is None or not smaller than the batch)."""
        return rounds.round_count(self)

    def accumulate(self, body: Callable[[], Mapping[str, Any]]) -> dict[str, Any]:
        """Run ``body()`` once per round of ``growth.batch_gpu`` images and return its stats
        averaged over the rounds (``gan_kit.training.step.rounds.accumulate``: each round's rows,
        random draws, 1/rounds loss scale and DDP sync). Raises ``GankitError`` when nested."""
        return rounds.accumulate(self, body)

    # ----------------------------------------------------------- staged state (staging.py) --

    def on_step(self, net: Any, update: Callable[[Any], None]) -> None:
        """Call ``update(applied)`` at ``net``'s next optimizer step (``opt_step``), and only if
        that step is applied: ``applied`` is ``True`` or a 0-dim bool tensor on the device (fp16:
        False where the GradScaler skips the step) - build new state with
        ``torch.where(applied, new, old)`` rather than reading it on the host. Never called for a
        step that is not taken."""
        self._staging.on_step(self._name(net), update)

    def stage(self, net: Any, owner: Any, name: str, value: torch.Tensor) -> None:
        """Set ``owner.<name>`` (a tensor) to ``value`` when ``net``'s next optimizer step is
        applied; where the GradScaler skips it, the old value stays (``torch.where`` on the device,
        no host sync). For state a penalty or augmentation keeps across iterations."""
        self._staging.stage(self._name(net), owner, name, value)

    def mean_over_processes(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` (a tensor of any shape) averaged over all processes, the same on each; ``t``
        itself with one process. For a statistic of the global batch that a penalty keeps (a
        running mean), so every process holds the value one process would. Differentiable: the
        gradient through the mean is averaged back over the processes. Every process must call
        it at the same point (a collective)."""
        from gan_kit.training.distributed import mean_over_processes

        return mean_over_processes(t, self.world_size)


def _outside_autocast(t: torch.Tensor) -> ContextManager:
    """Autocast off for ``t``'s device while a verb backpropagates, even when a plugin called the
    verb inside its own ``ctx.autocast()`` block."""
    kind = t.device.type
    try:
        on = torch.is_autocast_enabled(kind)
    except (TypeError, RuntimeError):  # a device type autocast does not know
        return contextlib.nullcontext()
    return torch.autocast(kind, enabled=False) if on else contextlib.nullcontext()


def _drop_autocast_cache() -> None:
    """Forget autocast's low-precision copies of the weights after an optimizer step. Inside an
    autocast block autocast casts each weight once and reuses the copy until the outermost block
    ends, so a plugin whose ``with ctx.autocast():`` spans a step would otherwise run the next
    forward on the weights from before it."""
    torch.clear_autocast_cache()


def _all_finite(opt: torch.optim.Optimizer) -> bool:
    grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
    if not grads:
        return True
    # One fused reduction and one sync: the norm of a tensor holding NaN/inf is NaN/inf.
    norms = torch._foreach_norm(grads)
    return bool(torch.isfinite(torch.stack(norms)).all())
