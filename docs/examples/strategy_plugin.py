"""Example gankit plugin: an update strategy (kind ``update``, recipe ``[update]``).

``g-then-critics``: each iteration takes the G step FIRST, against the D of the previous
iteration, then ``d_steps`` critic steps, each on a fresh real batch and fresh fakes from the
updated G. The strategy only decides this order; it acts through the verbs of the
``StepContext`` (``zero_grad``, ``backward``, ``opt_step``, ``frozen``, ``d_objective``,
``g_objective``, ``accumulate``), which own the fp16 GradScaler, the gradient averaging of
several processes, gradient accumulation (``growth.batch_gpu``) and the non-finite policy - so
the same code runs under every precision, ``--nproc``, ``batch_gpu`` and ``torch.compile``.

Use it::

    plugins = ["strategy_plugin.py"]
    [update]
    name = "g-then-critics"
    d_steps = 2
"""

from __future__ import annotations

from typing import Any

import attrs
import torch

from gan_kit import StepContext, UpdateStrategy, hookimpl, option


class GThenCritics(UpdateStrategy):
    """One G step (D frozen), then ``d_steps`` D steps on fakes made under ``no_grad``.

    Per iteration: G forwards 1 + d_steps, D forwards 1 + 2 * d_steps, backwards 1 + d_steps.
    Critic steps per G step as in WGAN (Arjovsky et al. 2017, Algorithm 1, n_critic), but G first.
    Returns the last D step's stats (``Loss/D``, ``Loss/D/<penalty>``, ``Logits/*``) and ``Loss/G``.
    """

    @attrs.frozen
    class Options:
        d_steps: int = option(2, help="Critic (D) steps after each G step, each on a fresh real batch.",
                              validator=lambda v: None if v >= 1 else f"must be >= 1, got {v} (e.g. d_steps = 2)")

    @property
    def d_steps(self) -> int:
        # The engine hands the step this many real batches: ctx.reals[0 .. d_steps-1].
        return self.options.d_steps

    def step(self, ctx: StepContext) -> dict[str, Any]:
        # G step. D is frozen: the backward through it computes input gradients only, so
        # nothing lands in D's weight gradients (and a multi-process D skips its sync).
        # ctx.accumulate runs the body once per round of growth.batch_gpu images (once by
        # default); inside it ctx.reals[j] / ctx.labels[j] are the round's rows, and the verbs
        # add the rounds' gradients up. ctx.labels[j]: the classes of ctx.reals[j] in a
        # class-conditional run (else None, and ctx.generate / ctx.discriminate are plain
        # G(z) / D(x)).
        def g_round() -> dict[str, Any]:
            n, labels = ctx.reals[0].shape[0], ctx.labels[0]
            with ctx.frozen("D"):
                with ctx.autocast():
                    fake = ctx.generate(ctx.latent(n), labels)
                    fake_logits = ctx.discriminate(fake, labels)
                g_loss, g_stats = ctx.g_objective(fake_logits, fake, labels=labels)
                ctx.backward(g_loss, "G")
            return g_stats

        ctx.zero_grad("G")
        g_stats = ctx.accumulate(g_round)
        ctx.opt_step("G")

        # Critic steps: fakes under no_grad (G builds no graph), gradients cleared every time.
        d_stats: dict[str, Any] = {}
        for j in range(len(ctx.reals)):
            def d_round(j: int = j) -> dict[str, Any]:
                real, labels = ctx.reals[j], ctx.labels[j]
                with torch.no_grad(), ctx.autocast():
                    fake = ctx.generate(ctx.latent(real.shape[0]), labels)
                d_total, stats = ctx.d_objective(real, fake, labels=labels)  # the loss plus the D penalties
                ctx.backward(d_total, "D")
                return stats

            ctx.zero_grad("D")
            d_stats = ctx.accumulate(d_round)
            ctx.opt_step("D")
        return {**d_stats, **g_stats}


@hookimpl
def register_update_strategies(register):
    register("g-then-critics", GThenCritics)
