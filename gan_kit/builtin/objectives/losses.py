"""Adversarial losses, all computed from D's raw logits with numerically stable forms.

Sign convention: D's logits are high for real images. Every function returns a scalar to be
*minimised* by the network named.
"""

from __future__ import annotations

import attrs
import torch.nn.functional as F

from gan_kit import Loss, hookimpl, option


class Hinge(Loss):
    """Hinge loss (Lim & Ye 2017; Miyato et al. 2018): D: relu(1 - D(x)) + relu(1 + D(G(z))); G: -D(G(z))."""

    def d_loss(self, real_logits, fake_logits):
        return F.relu(1.0 - real_logits).mean() + F.relu(1.0 + fake_logits).mean()

    def g_loss(self, fake_logits, real_logits=None):
        return -fake_logits.mean()


class BCE(Loss):
    """Non-saturating logistic loss (Goodfellow et al. 2014, sec. 3): D: softplus(-D(x)) + softplus(D(G(z))); G: softplus(-D(G(z)))."""

    def d_loss(self, real_logits, fake_logits):
        return F.softplus(-real_logits).mean() + F.softplus(fake_logits).mean()

    def g_loss(self, fake_logits, real_logits=None):
        return F.softplus(-fake_logits).mean()


class BCEMinimax(BCE):
    """Saturating minimax logistic loss (Goodfellow et al. 2014, eq. 1): G minimises -softplus(D(G(z))) = log(1 - sigmoid(D(G(z))))."""

    def g_loss(self, fake_logits, real_logits=None):
        return -F.softplus(fake_logits).mean()


class WGAN(Loss):
    """Wasserstein critic loss (Arjovsky et al. 2017): D: D(G(z)) - D(x); G: -D(G(z)). Pair it with a penalty."""

    def d_loss(self, real_logits, fake_logits):
        return fake_logits.mean() - real_logits.mean()

    def g_loss(self, fake_logits, real_logits=None):
        return -fake_logits.mean()


class WGANGP(WGAN):
    """WGAN-GP preset of the PGGAN paper (sec. A.1): wgan + gradient-penalty (weight 10) + drift (0.001)."""

    @attrs.frozen
    class Options:
        gp_weight: float = option(10.0, help="Weight lambda of the gradient penalty (PGGAN: 10).", min=0)
        drift_weight: float = option(0.001, help="Weight epsilon_drift of the drift term (PGGAN: 0.001).", min=0)

    @classmethod
    def problems(cls, options, recipe):
        # The preset already adds both penalties; listing one again would apply it twice and
        # report both under the same stat name.
        for i, spec in enumerate(getattr(recipe, "penalties", None) or ()):
            if spec.name in ("gradient-penalty", "drift"):
                yield f"penalty[{i}].name", (f"{spec.name!r} is already part of loss 'wgan-gp' (remove the [[penalty]] "
                                             f"table and set loss.gp_weight / loss.drift_weight, or on the command "
                                             f"line add --set 'penalty=[]'; or use loss 'wgan' with explicit "
                                             f"penalties)")

    def implied_penalties(self):
        return [("gradient-penalty", self.options.gp_weight, {}), ("drift", self.options.drift_weight, {})]


class RpGAN(Loss):
    """Relativistic pairing GAN loss (Jolicoeur-Martineau 2019; the R3GAN baseline, Huang et al. 2024, eq. 2):
    D: softplus(-(D(x_r) - D(x_f))), G: softplus(-(D(x_f) - D(x_r))), per real/fake pair.

    ``real_logits[N]`` and ``fake_logits[N]`` are paired index by index (pair i is the i-th real
    and the i-th fake of the step), so both must have the same length N; a mismatch raises
    ``ValueError``. G's side needs D's logits on reals (``needs_real_logits``): every update
    strategy hands ``g_loss`` the logits of the iteration's last real batch, computed without
    gradient, so G's gradient flows through the fakes only - as in the official code, where the
    real logits carry no G dependence. Pair with zero-centred R1 and R2 (``r1`` + ``r2``): the
    paper's convergence argument (sec. 2.2-2.3) needs both.
    """

    needs_real_logits = True

    @staticmethod
    def _pairs(first, second, side):
        if first.shape != second.shape:
            raise ValueError(f"rpgan pairs reals with fakes index by index, so its {side} needs equal batches; got "
                             f"real/fake logits of shapes {tuple(first.shape)} and {tuple(second.shape)}")
        return first - second

    def d_loss(self, real_logits, fake_logits):
        return F.softplus(-self._pairs(real_logits, fake_logits, "d_loss")).mean()

    def g_loss(self, fake_logits, real_logits=None):
        if real_logits is None:
            raise ValueError("rpgan's G loss needs D's logits on real images (real_logits); the update strategy "
                             "passed None - call ctx.g_objective, which passes them, or pass real_logits yourself")
        return F.softplus(-self._pairs(fake_logits, real_logits, "g_loss")).mean()


@hookimpl
def register_losses(register):
    register("hinge", Hinge)
    register("bce", BCE)
    register("bce-minimax", BCEMinimax)
    register("wgan", WGAN)
    register("wgan-gp", WGANGP)
    register("rpgan", RpGAN)
