"""Update strategies: the order and isolation of the D and G steps of one iteration.

See docs/strategies.md for the forward/backward count of each and what the seed articles said.
"""

from __future__ import annotations

import contextlib

import attrs
import torch

from gan_kit import UpdateStrategy, d_objective, hookimpl, option


def _d_steps_ok(v):
    return None if v >= 1 else f"must be >= 1, got {v}"


@attrs.frozen
class CommonOptions:
    d_steps: int = option(1, help="Critic (D) steps per G step, each on a fresh real batch with zeroed grads.",
                          validator=_d_steps_ok)


@contextlib.contextmanager
def frozen(net: torch.nn.Module):
    """Parameters of ``net`` stop requiring grad inside the block: a backward through it then
    computes no weight gradients for it (input gradients still flow)."""
    flags = [p.requires_grad for p in net.parameters()]
    net.requires_grad_(False)
    try:
        yield
    finally:
        for p, f in zip(net.parameters(), flags):
            p.requires_grad_(f)


def g_step(ctx, n: int) -> dict:
    """A G step with its own forward through D (whose weights get no gradient)."""
    ctx.opt_G.zero_grad(set_to_none=True)
    with frozen(ctx.D):
        with ctx.autocast():
            fake_logits = ctx.D(ctx.G(ctx.latent(n)))
        loss = ctx.loss.g_loss(fake_logits.float())
        ctx.backward(loss)
    ctx.opt_step(ctx.opt_G)
    return {"Loss/G": loss.detach()}


class DThenG(UpdateStrategy):
    """D step on fakes made under no_grad, then a G step with a fresh forward (the reference strategy; seed 000 strategy 2, seed 002)."""

    Options = CommonOptions

    def step(self, ctx):
        stats = {}
        n = ctx.reals[0].shape[0]
        for j, real in enumerate(ctx.reals):
            # no_grad rather than detach: G builds no graph at all for the D step (seed 002).
            with torch.no_grad(), ctx.autocast():
                fake = ctx.G(ctx.latent(n))
            ctx.opt_D.zero_grad(set_to_none=True)
            total, stats = d_objective(ctx, real, fake, d_step=ctx.d_step + j)
            ctx.backward(total)
            ctx.opt_step(ctx.opt_D)
        stats.update(g_step(ctx, n))
        return stats


@hookimpl
def register_update_strategies(register):
    register("d-then-g", DThenG)
