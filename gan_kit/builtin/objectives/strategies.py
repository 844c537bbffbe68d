"""Update strategies: the order and isolation of the D and G steps of one iteration.

Five strategies: the three update orders PyTorch GAN code uses (D first on detached or no_grad
fakes, D first sharing one forward with ``retain_graph``, G first), one loss with the
stop-gradient trick (Su Jianlin 2019, "GANs with a single loss"), and simultaneous gradient
steps. Every one is correct on current PyTorch (>= 1.5, where optimizer steps bump the version
counters of the parameters they update) and keeps these invariants (tested for every strategy):

* an ``opt_D.step`` never changes G's parameters and an ``opt_G.step`` never changes D's;
* the gradients an optimizer steps with come only from its own network's objective: every
  strategy clears (``set_to_none``) or overwrites the gradients of a network before the backward
  that feeds its step, and a backward meant for one network accumulates nothing into the other
  (``no_grad`` / ``detach`` for the fakes of a D step; D frozen or ``backward(inputs=...)`` for a
  G step).

Every strategy acts through the verbs of ``gan_kit.StepContext`` (``zero_grad``, ``backward``,
``opt_step``, ``frozen``, ``d_objective``, ``g_objective``, ``accumulate``); the verbs own the
precision, the gradient sync across processes, gradient accumulation over rounds of
``growth.batch_gpu`` images and the non-finite policy. Each network step is ``zero_grad``, then
``accumulate`` of a body holding its forwards and backwards (which reads the round's
``ctx.reals[j]``), then ``opt_step``.

Class-conditional runs: D step j's fakes are made for ``ctx.labels[j]``, the classes of its
real batch (``ctx.generate`` / ``ctx.discriminate`` pass them; None in unconditional runs).

``d_steps`` (critic steps per G step) applies to all: each D step takes the next real batch
``ctx.reals[j]`` and zeroed gradients. Strategies that pair the G step with one D step
(``shared-fake``, ``single-loss``, ``simultaneous``) pair it with the *last* one and run the
``d_steps - 1`` before it as plain critic steps on freshly generated fakes, so no graph is ever
reused after the weights it was built with have changed.

Counts in the docstrings are per iteration with ``d_steps = 1``, penalties aside (a gradient
penalty adds one D forward on its inputs and a double backward per D objective). Measured costs
are in docs/strategies.md (``gankit bench``). Stats: the last D step's ``d_objective`` stats
(``Loss/D``, ``Loss/D/<penalty>``, ``Logits/real``, ``Logits/fake``) plus ``Loss/G``.
"""

from __future__ import annotations

import attrs
import torch

from gan_kit import UpdateStrategy, hookimpl, option

__all__ = [
    "CommonOptions",
    "SingleLossOptions",
    "DThenG",
    "SharedFake",
    "GThenD",
    "SingleLoss",
    "Simultaneous",
    "g_step",
    "g_step_keeping_fakes",
    "critic_step",
    "single_loss_objective",
    "paired_step",
    "joint_step",
]


@attrs.frozen
class CommonOptions:
    d_steps: int = option(1, help="Critic (D) steps per G step, each on a fresh real batch with zeroed grads.",
                          min=1, max=64, hint="WGAN uses 5; 1 or 2 is usual with a gradient penalty")


@attrs.frozen
class SingleLossOptions(CommonOptions):
    lam: float = option(
        1.0, help="lambda, weight of the stop-gradient G term. With one plain-SGD learning rate for both nets it "
                  "is the G:D learning-rate ratio (Su 2019); gankit sets TTUR with optim.g_lr / optim.d_lr, so "
                  "1 = exactly the simultaneous step, and under SGD the effective G:D ratio is lam * g_lr / d_lr. "
                  "Adam divides out any constant gradient scale, so lam != 1 is rejected with Adam.",
        min=0, min_exclusive=True, max=1000)


class _Strategy(UpdateStrategy):
    Options = CommonOptions

    @property
    def d_steps(self) -> int:
        return self.options.d_steps


def critic_step(ctx, j: int, fakes: list[torch.Tensor] | None = None) -> dict:
    """One plain D step on the real batch ``ctx.reals[j]`` (classes ``ctx.labels[j]`` in a
    class-conditional run): D's gradients cleared, then per round of ``ctx.accumulate`` fakes made
    under no_grad (or ``fakes[round]``, detached: one ``[n,C,r,r]`` tensor per round, as
    ``g_step_keeping_fakes`` returns them), the D objective, backward into D; then D's optimizer step.

    no_grad rather than detach: G builds no graph at all for the D step.
    """
    ctx.zero_grad("D")

    def body():
        real, labels = ctx.reals[j], ctx.labels[j]
        if fakes is None:
            with torch.no_grad(), ctx.autocast():
                fake = ctx.generate(ctx.latent(real.shape[0]), labels)
        else:
            fake = fakes[ctx.round.index]
        total, stats = ctx.d_objective(real, fake.detach(), labels=labels)
        ctx.backward(total, "D")
        return stats

    stats = ctx.accumulate(body)
    ctx.opt_step("D")
    return stats


def leading_critic_steps(ctx) -> None:
    """For strategies that pair the G step with one D step: run the first ``d_steps - 1`` plain
    critic steps (fresh fakes, ``ctx.reals[:-1]``)."""
    for j in range(len(ctx.reals) - 1):
        critic_step(ctx, j)


def paired_step(ctx, *, share_fake_logits: bool) -> dict:
    """The G step and the last D step of an iteration at the same parameter point (after
    ``leading_critic_steps``): one G forward, G's gradient through D (nothing into D's
    weights), D's gradient (nothing into G), both on cleared gradients, then both optimizer
    steps. ``share_fake_logits``: the D objective reuses the logits of the G loss's D forward
    (``shared-fake``; the graph is retained for the second backward) instead of a fresh D
    forward on ``sg(fake)`` (``simultaneous``)."""

    def body():
        real, labels = ctx.reals[-1], ctx.labels[-1]
        with ctx.autocast():
            fake = ctx.generate(ctx.latent(real.shape[0]), labels)
            fake_logits = ctx.discriminate(fake, labels)
        g_loss, g_stats = ctx.g_objective(fake_logits, fake, labels=labels)
        # G first, while D's weights are those the graph saved.
        ctx.backward(g_loss, "G", retain_graph=share_fake_logits)
        if share_fake_logits:
            total, stats = ctx.d_objective(real, fake, fake_logits=fake_logits, labels=labels)
        else:
            total, stats = ctx.d_objective(real, fake.detach(), labels=labels)
        ctx.backward(total, "D")
        return {**stats, **g_stats}

    return joint_step(ctx, body)


def joint_step(ctx, body) -> dict:
    """The frame of every strategy that steps G and D at one parameter point: the leading
    critic steps, both networks' gradients cleared, ``body()`` (which fills both from
    ``ctx.reals[-1]``; run once per round of ``ctx.accumulate``; returns its stats), then D's
    and G's optimizer steps. Returns the stats of ``body``."""
    leading_critic_steps(ctx)
    ctx.zero_grad("G")
    ctx.zero_grad("D")
    stats = ctx.accumulate(body)
    ctx.opt_step("D")
    ctx.opt_step("G")
    return stats


def g_step_keeping_fakes(ctx, j: int) -> tuple[dict, list[torch.Tensor]]:
    """``g_step`` for the classes of ``ctx.labels[j]``, also returning its fakes (detached), one
    tensor per round of ``ctx.accumulate``."""
    ctx.zero_grad("G")
    fakes: list[torch.Tensor] = []

    def body():
        n, labels = ctx.reals[j].shape[0], ctx.labels[j]
        with ctx.frozen("D"):
            with ctx.autocast():
                fake = ctx.generate(ctx.latent(n), labels)
                fake_logits = ctx.discriminate(fake, labels)
            loss, stats = ctx.g_objective(fake_logits, fake, labels=labels)
            ctx.backward(loss, "G")
        fakes.append(fake.detach())
        return stats

    stats = ctx.accumulate(body)
    ctx.opt_step("G")
    return stats, fakes


def g_step(ctx, j: int = -1) -> dict:
    """A G step with its own G and D forward, its batch the size of ``ctx.reals[j]`` and, in a
    class-conditional run, its fakes of the classes ``ctx.labels[j]``. D is frozen, so the
    backward computes D's input gradients only and leaves no gradient on D's weights (no extra
    zero_grad of D needed)."""
    return g_step_keeping_fakes(ctx, j)[0]


class DThenG(_Strategy):
    """D step on fakes made under no_grad, then a G step with a fresh forward through the updated D (the reference).

    Per iteration: G forwards 2 (one under no_grad), D forwards 3 (real, fake; fake for G),
    backwards 2 (D objective through D; G loss through frozen D into G).
    Source: Goodfellow et al. 2014, Algorithm 1 (no_grad instead of detach: no G graph for the D
    step) (k = d_steps critic steps, then one G step).
    """

    def step(self, ctx):
        stats: dict = {}
        for j in range(len(ctx.reals)):
            stats = critic_step(ctx, j)
        stats.update(g_step(ctx, -1))
        return stats


class SharedFake(_Strategy):
    """One G forward and one D forward on the fakes serve both steps; G's gradient is taken through the pre-update D.

    Per iteration: G forwards 1, D forwards 2 (real, fake - the fake logits feed both losses),
    backwards 2 (G loss through D into G, weight gradients for G only; D objective, weight
    gradients for D only). The G step sees the D *before* this iteration's (last) D step.
    Source: the common one-forward pattern with ``backward(retain_graph=True)``. Its literal order
    - D backward, ``opt_D.step()``, then the G backward through the old graph - raises
    "one of the variables needed for gradient computation has been modified by an inplace
    operation" on PyTorch >= 1.5 (the step bumps the version of D's weights saved in the graph);
    before 1.5 it silently mixed saved old activations with new weights, a gradient of neither D.
    Here G's gradient is computed first (retaining the graph), then D's (``ctx.backward(total,
    "D")``, so nothing flows into G through the shared fake), then both steps: mathematically the
    simultaneous update, at the cost of retaining the graph. With ``d_steps`` > 1 the first
    ``d_steps - 1`` D steps are plain critic steps on fresh fakes and the shared forward serves
    the last one, so the G step sees D after ``d_steps - 1`` steps.
    """

    def step(self, ctx):
        return paired_step(ctx, share_fake_logits=True)


class GThenD(_Strategy):
    """G step first (D frozen), then the D step on the same fakes detached; no graph is retained.

    Per iteration: G forwards 1, D forwards 3 (fake for G; real, fake for D), backwards 2
    (G loss through frozen D into G; D objective through D). The G step sees the D of the
    previous iteration; the first D step sees fakes of the pre-update G.
    Source: the G-first order of PyTorch GAN code (whose G backward often also fills D's weight gradients, which it then
    had to zero; freezing D skips computing them). With ``d_steps`` > 1 the later D steps draw
    fresh fakes from the updated G under no_grad.
    """

    def step(self, ctx):
        g_stats, fakes = g_step_keeping_fakes(ctx, 0)  # its fakes serve the first D step: reals[0]'s classes
        stats: dict = {}
        for j in range(len(ctx.reals)):
            stats = critic_step(ctx, j, fakes=fakes if j == 0 else None)
        stats.update(g_stats)
        return stats


def single_loss_objective(ctx, real: torch.Tensor, fake: torch.Tensor, *, lam: float = 1.0,
                          labels: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Seed 003's single objective for ``real[N,C,r,r]`` and ``fake = G(z)`` (with G's graph).

    ``total = d_objective(D(real), D(sg(fake))) + lam * (g_loss(D(fake)) - g_loss(D(sg(fake))))``
    where ``sg`` is ``detach``. The bracket is identically 0 in value; its gradient is 0 for D
    (the two D paths carry equal and opposite gradients, up to rounding) and
    ``lam * grad_G g_loss(D(G(z)))`` for G; ``sg`` keeps the D objective out of G. Returns
    ``(total, g_term, stats)``; ``stats["Loss/G"]`` is ``g_loss(D(fake))``. ``labels``: the
    classes of ``real`` and ``fake`` in a class-conditional run.
    """
    fake_sg = fake.detach()
    with ctx.autocast():
        logits_sg = ctx.discriminate(fake_sg, labels)
        logits = ctx.discriminate(fake, labels)
    d_total, stats = ctx.d_objective(real, fake_sg, fake_logits=logits_sg, labels=labels)
    # One set of real logits for both G terms (a relativistic loss): the halves of the bracket
    # must not differ by their real logits.
    real_logits = ctx.real_logits_for_g() if ctx.loss.needs_real_logits else None
    g_sg, _ = ctx.g_objective(logits_sg, labels=labels, real_logits=real_logits)
    g_full, g_stats = ctx.g_objective(logits, fake, labels=labels, real_logits=real_logits)
    g_term = g_full - g_sg
    stats.update(g_stats)
    return d_total + lam * g_term, g_term, stats


class SingleLoss(_Strategy):
    """One objective with the stop-gradient trick, one backward, then both optimizer steps (Su 2019).

    Per iteration: G forwards 1, D forwards 3 (real, sg(fake), fake), backwards 1 (through D
    three times - computing D weight gradients on the fake path that then cancel - and G once).
    Objective: see ``single_loss_objective``. With plain SGD it equals ``simultaneous`` (tested
    to 1e-6). Seed 003's lambda is the G:D learning-rate ratio because it uses one optimizer and
    one learning rate for both nets; gankit has one optimizer per net and sets TTUR with
    ``optim.g_lr`` / ``optim.d_lr``, so ``lam = 1`` is the default and, under SGD, the effective
    ratio is ``lam * g_lr / d_lr``. Under Adam a constant gradient scale cancels in m / sqrt(v),
    so ``lam`` would do nothing and a recipe with ``lam != 1`` and Adam is rejected at load.
    With ``d_steps`` > 1 the first ``d_steps - 1`` D steps are plain critic steps on fresh fakes.
    """

    Options = SingleLossOptions

    @classmethod
    def problems(cls, options, recipe):
        if recipe is not None and options.lam != 1.0 and recipe.optim.name == "adam":
            yield "lam", (f"lam = {options.lam:g} has no effect with Adam (it rescales G's gradient, which Adam "
                          f"normalises away); set the G:D learning-rate ratio (TTUR) with optim.g_lr and optim.d_lr, "
                          f"or use optim.name = \"sgd\"")

    def step(self, ctx):
        def body():
            real, labels = ctx.reals[-1], ctx.labels[-1]
            with ctx.autocast():
                fake = ctx.generate(ctx.latent(real.shape[0]), labels)
            total, _, stats = single_loss_objective(ctx, real, fake, lam=self.options.lam, labels=labels)
            # One backward fills both networks: the objective's terms were built for exactly that.
            ctx.backward(total, "G", "D")
            return stats

        return joint_step(ctx, body)


class Simultaneous(_Strategy):
    """Both gradients at the same parameter point, each from its own backward, then both optimizer steps.

    Per iteration: G forwards 1, D forwards 3 (fake for G; real, sg(fake) for D), backwards 2
    (the G loss into G's weights only, through D; the D objective into D's weights). Both
    gradients are taken before either step, on gradients cleared first, so no earlier gradient
    survives. Simultaneous gradient descent on the two-player game (e.g. Mescheder et al. 2017,
    "The Numerics of GANs", sec. 2); the reference for ``single-loss``. With ``d_steps`` > 1 the
    first ``d_steps - 1`` D steps are plain critic steps on fresh fakes.
    """

    def step(self, ctx):
        return paired_step(ctx, share_fake_logits=False)


@hookimpl
def register_update_strategies(register):
    register("d-then-g", DThenG)
    register("shared-fake", SharedFake)
    register("g-then-d", GThenD)
    register("single-loss", SingleLoss)
    register("simultaneous", Simultaneous)
