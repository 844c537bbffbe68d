"""Regularisers on D's logits rather than its input gradients: LeCam (anchored logits), balanced
consistency regularisation (bCR) and latent consistency regularisation (zCR, with its G term).

LeCam and bCR use the logits of the D objective's own forwards (``DInputs.real_logits`` /
``fake_logits``, with their graph to D's weights), so LeCam costs no forward at all and bCR one
D forward per augmented batch; neither can run lazily (a lazy regularisation step has no D
objective and so no logits). zCR draws its own latents and may. Per-sample draws go through
``gan_kit.batch_rand`` / ``batch_randn`` / ``batch_randint`` (the global batch's draws).
"""

from __future__ import annotations

import attrs
import torch
import torch.nn.functional as F

from gan_kit import GankitError, Penalty, batch_rand, batch_randint, batch_randn, hookimpl, option

__all__ = ["LeCam", "BalancedConsistency", "flip_and_translate", "LatentConsistencyD", "LatentConsistencyG"]


def _needs_logits(name: str, inputs) -> None:
    if inputs.real_logits is None or inputs.fake_logits is None:
        raise GankitError(f"penalty {name!r} needs the D objective's logits on reals and fakes, which a lazy "
                          f"regularisation step or a caller without them does not have; list it without an interval")


class LeCam(Penalty):
    """LeCam regularisation (Tseng et al., "Regularizing Generative Adversarial Networks under
    Limited Data", CVPR 2021, eq. 3): ``E[(D(x) - alpha_F)^2] + E[(D(G(z)) - alpha_R)^2]``.

    ``alpha_R`` / ``alpha_F`` are exponential moving averages of D's mean logit on reals and on
    fakes, updated (``decay``) from each D objective's logits before the penalty is taken; the
    first update sets them to that step's means (the EMA starts from data, not from 0). Under
    several processes the means are of the global batch (``ctx.mean_over_processes``), so every
    process holds the same anchors. ``one_sided = true`` takes ``relu`` of both differences, as
    the authors' code and StudioGAN do. The anchors are detached; the gradient reaches D through
    the D objective's logits. State (``alpha_real``, ``alpha_fake``, ``updates``) is kept in
    checkpoints. Paper weight: 0.3 (CIFAR, limited data); StudioGAN uses 0.3-0.5.
    """

    @attrs.frozen
    class Options:
        decay: float = option(0.99, help="EMA decay of the logit anchors per D objective (the authors' code: 0.99).",
                              min=0, max=1, max_exclusive=True)
        one_sided: bool = option(False, help="relu(D(x) - alpha_F)^2 + relu(alpha_R - D(G(z)))^2, as the authors' "
                                             "code; false = the paper's eq. 3.")

    def __init__(self, options=None, context=None):
        super().__init__(options, context)
        self.alpha_real = torch.zeros(())
        self.alpha_fake = torch.zeros(())
        self.updates = 0

    def __call__(self, inputs, ctx):
        _needs_logits("lecam", inputs)
        real, fake = inputs.real_logits.float(), inputs.fake_logits.float()
        means = ctx.mean_over_processes(torch.stack([real.detach().mean(), fake.detach().mean()]))
        d = 0.0 if self.updates == 0 else self.options.decay
        self.alpha_real = torch.lerp(means[0], self.alpha_real.to(means.device), d)
        self.alpha_fake = torch.lerp(means[1], self.alpha_fake.to(means.device), d)
        self.updates += 1
        a = real - self.alpha_fake
        b = self.alpha_real - fake
        if self.options.one_sided:
            a, b = F.relu(a), F.relu(b)
        return a.square().mean() + b.square().mean()

    def state_dict(self) -> dict:
        return {"alpha_real": self.alpha_real.detach().cpu().clone(),
                "alpha_fake": self.alpha_fake.detach().cpu().clone(), "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        missing = [k for k in ("alpha_real", "alpha_fake", "updates") if k not in state]
        if missing:
            raise GankitError(f"penalty 'lecam': the checkpoint's state lacks {', '.join(missing)} (it was not written "
                              f"by lecam)")
        self.alpha_real = torch.as_tensor(state["alpha_real"], dtype=torch.float32).clone()
        self.alpha_fake = torch.as_tensor(state["alpha_fake"], dtype=torch.float32).clone()
        self.updates = int(state["updates"])


def flip_and_translate(images: torch.Tensor, flip: bool, translation_ratio: float) -> torch.Tensor:
    """bCR's transform T: per sample, a horizontal flip with probability 1/2 (``flip``) and an
    integer shift of each axis uniform in ``[-m, m]``, ``m = round(translation_ratio * side)``,
    the border reflected. ``[N,C,H,W] -> [N,C,H,W]``, differentiable w.r.t. the images; draws
    through ``gan_kit.batch_rand`` / ``batch_randint`` (the global batch's draws)."""
    n, _, h, w = images.shape
    x = images
    if flip:
        mask = (batch_rand(n, 1, 1, 1, device=x.device) < 0.5).to(x.dtype)
        x = torch.lerp(x, x.flip(3), mask)
    my, mx = int(h * translation_ratio + 0.5), int(w * translation_ratio + 0.5)
    my, mx = min(my, h - 1), min(mx, w - 1)  # reflect padding needs pad < side
    if my or mx:
        dy = batch_randint(-my, my + 1, n, device=x.device)
        dx = batch_randint(-mx, mx + 1, n, device=x.device)
        padded = F.pad(x, (mx, mx, my, my), mode="reflect")
        rows = (torch.arange(h, device=x.device)[None] + (my - dy)[:, None])  # [N, H]
        cols = (torch.arange(w, device=x.device)[None] + (mx - dx)[:, None])  # [N, W]
        c = x.shape[1]
        padded = padded.gather(2, rows[:, None, :, None].expand(n, c, h, padded.shape[3]))
        x = padded.gather(3, cols[:, None, None, :].expand(n, c, h, w))
    return x


class BalancedConsistency(Penalty):
    """Balanced consistency regularisation, bCR (Zhao et al., "Improved Consistency
    Regularization for GANs", AAAI 2021, sec. 3.1, Algorithm 1):
    ``real_weight * E[(D(x) - D(T(x)))^2] + fake_weight * E[(D(G(z)) - D(T(G(z))))^2]``.

    ``T`` is ``flip_and_translate`` (the paper's flip and few-pixel shift), drawn afresh per call
    and per sample. ``D(x)`` and ``D(G(z))`` are the D objective's logits (their graph reaches D,
    as in the paper, where both terms train D); ``D(T(.))`` run one more D forward each. The
    recipe's ``weight`` multiplies the whole (1 with the paper's lambdas here). Images ``[N,C,H,W]``,
    logits ``[N]``; raises ``GankitError`` in a lazy step (no logits).
    """

    @attrs.frozen
    class Options:
        real_weight: float = option(10.0, help="lambda_real of the real term (the paper: 10).", min=0)
        fake_weight: float = option(10.0, help="lambda_fake of the fake term (the paper: 10).", min=0)
        flip: bool = option(True, help="T flips horizontally with probability 1/2 (the paper: yes; digits are not "
                                       "mirror-symmetric, so consider false for them).")
        translation_ratio: float = option(0.125, help="T's largest shift as a fraction of the side (CIFAR: 4 of 32 px).",
                                          min=0, max=0.5)

    def __call__(self, inputs, ctx):
        _needs_logits("bcr", inputs)
        o = self.options
        total = torch.zeros((), device=inputs.real.device)
        for weight, images, logits in ((o.real_weight, inputs.real, inputs.real_logits),
                                       (o.fake_weight, inputs.fake, inputs.fake_logits)):
            if weight == 0:
                continue
            with ctx.autocast():
                moved = inputs.D(flip_and_translate(images.float(), o.flip, o.translation_ratio))
            total = total + weight * (logits.float() - moved.float()).square().mean()
        return total


@attrs.frozen
class LatentOptions:
    sigma: float = option(0.03, help="Std of the latent perturbation T(z) = z + N(0, sigma^2) (the paper: 0.03).",
                          min=0, min_exclusive=True, max=10)


class LatentConsistencyD(Penalty):
    """zCR's D term (Zhao et al. 2021, sec. 3.2, Algorithm 2): ``E[(D(G(z)) - D(G(T(z))))^2]``,
    ``T(z) = z + N(0, sigma^2)``: D should not tell apart the images of nearby latents.

    Draws its own ``z[N, latent]`` (``ctx.latent``) and both fakes under ``no_grad`` (nothing
    reaches G), for the real batch's classes in a conditional run; two D forwards. Works in a
    lazy step too. The paper's weight lambda_dis: 5. Pair with ``zcr-g``.
    """

    Options = LatentOptions

    def __call__(self, inputs, ctx):
        n = inputs.real.shape[0]
        z = ctx.latent(n)
        with torch.no_grad(), ctx.autocast():
            a = ctx.generate(z, inputs.labels)
            b = ctx.generate(z + self.options.sigma * batch_randn(*z.shape, device=z.device), inputs.labels)
        with ctx.autocast():  # two forwards: minibatch statistics (mbstd) stay within each batch
            la, lb = inputs.D(a.float()).float(), inputs.D(b.float()).float()
        return (la - lb).square().mean()


class LatentConsistencyG(Penalty):
    """zCR's G term (Zhao et al. 2021, sec. 3.2): ``-E[||G(z) - G(T(z))||^2]`` over C, H, W - G is
    rewarded for making nearby latents differ (against mode collapse), the negative sign as in
    the paper's L_G. ``network = "G"``; two G forwards with their graph. The paper's weight
    lambda_gen: 0.5. Images ``[N,C,H,W]``; returns a float32 scalar <= 0."""

    network = "G"
    Options = LatentOptions

    def __call__(self, inputs, ctx):
        z = ctx.latent(inputs.batch_size)
        with ctx.autocast():
            a = inputs.G(z)
            b = inputs.G(z + self.options.sigma * batch_randn(*z.shape, device=z.device))
        return -(a.float() - b.float()).flatten(1).square().sum(1).mean()


@hookimpl
def register_penalties(register):
    register("lecam", LeCam)
    register("bcr", BalancedConsistency)
    register("zcr", LatentConsistencyD)
    register("zcr-g", LatentConsistencyG)
