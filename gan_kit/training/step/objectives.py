"""The D and G objectives of one iteration, as functions of the ``gan_kit.training.step.StepContext``:
the loss on D's logits plus the weighted penalties, with their stats, as ``ctx.d_objective`` and
``ctx.g_objective`` give them to a strategy. Forwards run under the run's autocast; losses and
penalties are computed in float32."""

from __future__ import annotations

from typing import Any

import torch

from gan_kit.plugin_api.components import DInputs, GInputs, bind_labels
from gan_kit.base.errors import GankitError

__all__ = ["d_objective", "g_objective", "real_logits_for_g"]


def d_objective(ctx: Any, real: torch.Tensor, fake: torch.Tensor, *, fake_logits: torch.Tensor | None = None,
                labels: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The D objective ``d_loss(D(real), D(fake)) + sum(weight * penalty)`` and its stats.

    ``real``, ``fake``: ``[N,C,r,r]``. ``fake`` should carry no graph to G (made under
    ``no_grad`` or detached) unless the caller wants G gradients. ``fake_logits``: D's
    logits ``[N]`` for ``fake`` when the caller already has them (one D forward shared
    between the D and G objectives); D is then not run on ``fake``. ``labels[N]``: the
    classes of ``real`` and ``fake`` (class-conditional runs). ``real`` first passes through
    the augmentation's ``reals_for_d(real, fake)`` (APA's pseudo-reals). Penalties receive the
    logits computed here (a drift term needs no forward of its own). Stats: ``Loss/D`` (the
    loss without penalties), ``Loss/D/<penalty>`` (unweighted), ``Logits/real``,
    ``Logits/fake`` - detached tensors.
    """
    reals_for_d = getattr(ctx.augment, "reals_for_d", None)  # a duck-typed augment may lack it
    if reals_for_d is not None:
        # The augmentation decides what D takes as real (APA's pseudo-reals); the identity else.
        real = reals_for_d(real, fake.detach())
    with ctx.autocast():
        if fake_logits is None and ctx.joint_d_forward and real.shape == fake.shape:
            # One D forward on both batches: the same numbers as two (Architecture.joint_d_forward).
            both = None if labels is None else torch.cat([labels, labels])
            real_logits, fake_logits = ctx.discriminate(torch.cat([real, fake.to(real.dtype)]), both,
                                                         splits=2).chunk(2)
        else:
            real_logits = ctx.discriminate(real, labels)
            if fake_logits is None:
                fake_logits = ctx.discriminate(fake, labels)
    real_logits, fake_logits = real_logits.float(), fake_logits.float()
    if ctx.augment is not None:
        # ADA's overfitting heuristic, counted only if this D step is applied: a skipped
        # step's logits reach feedback as NaN, which it does not count.
        logits = real_logits.detach()
        ctx.on_step("D", lambda applied: ctx.augment.feedback(
            logits if applied is True else torch.where(applied, logits, torch.full_like(logits, float("nan")))))
    loss = ctx.loss.d_loss(real_logits, fake_logits)
    stats: dict[str, torch.Tensor] = {
        "Loss/D": loss.detach(),
        "Logits/real": real_logits.detach().mean(),
        "Logits/fake": fake_logits.detach().mean(),
    }
    total = loss
    if ctx.penalties:
        # Penalties take input gradients with create_graph; they run on the eager D when D is
        # compiled (torch.compile's AOTAutograd has no double backward).
        D = ctx.D_penalty if ctx.D_penalty is not None else ctx.D
        inputs = DInputs(D=bind_labels(D, labels), real=real.detach().float(), fake=fake.detach().float(),
                         real_logits=real_logits, fake_logits=fake_logits, labels=labels)
        for wp in ctx.penalties:
            value = _scalar(wp.penalty(inputs, ctx), "penalty", wp.name)
            total = total + wp.weight * value
            stats[f"Loss/D/{wp.name}"] = value.detach()
    return total, stats


def g_objective(ctx: Any, fake_logits: torch.Tensor, fake: torch.Tensor | None = None, *,
                labels: torch.Tensor | None = None,
                real_logits: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """G's objective ``g_loss(fake_logits[N], real_logits) + sum(weight * G penalty)`` and
    its stats (``Loss/G``, ``Loss/G/<penalty>``).

    ``real_logits`` is D's output on ``reals[-1]`` (without gradient) when the loss sets
    ``needs_real_logits`` (relativistic losses), else None. ``fake``: the images behind
    ``fake_logits``, handed to G penalties; ``labels``: their classes (conditional runs).
    ``real_logits``: pass the ``[N]`` logits yourself (``real_logits_for_g``) when one
    iteration calls ``g_objective`` more than once and every call must see the same ones
    (``single-loss``'s two G terms, whose stop-gradient bracket must not differ by its real
    logits: under a random augmentation two fresh forwards on the reals differ).
    """
    if real_logits is None and ctx.loss.needs_real_logits:
        real_logits = real_logits_for_g(ctx)
    loss = ctx.loss.g_loss(fake_logits.float(), real_logits)
    stats: dict[str, torch.Tensor] = {"Loss/G": loss.detach()}
    total = loss
    if ctx.g_penalties:
        G = ctx.G_penalty if ctx.G_penalty is not None else ctx.G
        inputs = GInputs(G=bind_labels(G, labels), batch_size=int(fake_logits.shape[0]),
                         fake=fake.float() if fake is not None else None,
                         fake_logits=fake_logits, labels=labels)
        for wp in ctx.g_penalties:
            value = _scalar(wp.penalty(inputs, ctx), "penalty", wp.name)
            total = total + wp.weight * value
            stats[f"Loss/G/{wp.name}"] = value.detach()
    return total, stats


def real_logits_for_g(ctx: Any) -> torch.Tensor:
    """D's logits ``[N]`` (float32, no gradient) on ``reals[-1]``: what ``g_objective`` hands a
    loss that ``needs_real_logits``."""
    with torch.no_grad(), ctx.autocast():
        return ctx.discriminate(ctx.reals[-1], ctx.labels[-1]).float()


def _scalar(value: Any, kind: str, name: str) -> torch.Tensor:
    """``value`` if it is a scalar tensor, else a one-line ``GankitError`` naming the component."""
    if isinstance(value, torch.Tensor) and value.dim() == 0:
        return value
    what = f"a tensor of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__
    raise GankitError(f"{kind} {name!r} returned {what}; it must return a scalar tensor (e.g. end with .mean())")
