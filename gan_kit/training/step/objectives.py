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
    logits computed here (a drift term needs no forward of its own) and, for those that declare
    ``input_gradients_of`` ("real", "fake"), ``d sum(D(x)) / dx`` at this objective's own images
    from this forward (``DInputs.real_grad`` / ``fake_grad``: one ``ctx.gradients`` call, the
    forward then on the penalties' eager D). Stats: ``Loss/D`` (the
    loss without penalties), ``Loss/D/<penalty>`` (unweighted), ``Logits/real``,
    ``Logits/fake`` - detached tensors.
    """
    reals_for_d = getattr(ctx.augment, "reals_for_d", None)  # a duck-typed augment may lack it
    if reals_for_d is not None:
        # The augmentation decides what D takes as real (APA's pseudo-reals); the identity else.
        real = reals_for_d(real, fake.detach())
    # Penalties that read the input gradient at this objective's own images (R1 at the reals, R2
    # at the fakes) get it from this forward (one autograd.grad for all of them), as the R3GAN and
    # stylegan2-ada-pytorch code take R1 from the loss's forward: no D forward of their own.
    wanted = {side for wp in ctx.penalties for side in getattr(wp.penalty, "input_gradients_of", ())}
    leaves: dict[str, torch.Tensor] = {}
    if "real" in wanted and not real.requires_grad:
        real = leaves.setdefault("real", real.detach().requires_grad_(True))
    if "fake" in wanted and fake_logits is None and not fake.requires_grad:
        fake = leaves.setdefault("fake", fake.detach().requires_grad_(True))
    # The double backward needs the eager D (a compiled graph has none): the penalties' D.
    D_obj = ctx.D_penalty if leaves and ctx.D_penalty is not None else ctx.D
    with ctx.autocast():
        # One D forward on both batches (the same numbers as two, Architecture.joint_d_forward),
        # unless exactly one of them takes an input gradient: its graph then stays half the size.
        joint = ctx.joint_d_forward and len(leaves) != 1
        if fake_logits is None and joint and real.shape == fake.shape:
            both = None if labels is None else torch.cat([labels, labels])
            real_logits, fake_logits = _forward(D_obj, torch.cat([real, fake.to(real.dtype)]), both,
                                                splits=2).chunk(2)
        else:
            real_logits = _forward(D_obj, real, labels)
            if fake_logits is None:
                fake_logits = _forward(D_obj, fake, labels)
    grads: dict[str, torch.Tensor] = {}
    if leaves:
        logits = {"real": real_logits, "fake": fake_logits}
        out = sum(logits[side].float().sum() for side in leaves)
        grads = dict(zip(leaves, ctx.gradients(out, list(leaves.values()))))
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
                         real_logits=real_logits, fake_logits=fake_logits, labels=labels,
                         real_grad=grads.get("real"), fake_grad=grads.get("fake"))
        for wp in ctx.penalties:
            value = _scalar(wp.penalty(inputs, ctx), "penalty", wp.name)
            total = total + wp.weight * value
            stats[f"Loss/D/{wp.name}"] = value.detach()
    return total, stats


def _forward(D: Any, x: torch.Tensor, labels: torch.Tensor | None, **kwargs: Any) -> torch.Tensor:
    """``D(x)``, or ``D(x, labels)`` in a class-conditional run (``ctx.discriminate`` for any D)."""
    return D(x, **kwargs) if labels is None else D(x, labels, **kwargs)


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
