"""Path-length regularisation of G (Karras et al. 2020, arXiv:1912.04958, sec. 3.2), the
``path-length`` G penalty."""

from __future__ import annotations

import math

import attrs
import torch

from gan_kit import GankitError, Penalty, batch_randn, option

__all__ = ["PathLength"]

# Inside the square root of the lengths, as the gradient penalty's per-sample norm has: at a zero
# length (an image that does not depend on W) sqrt has an infinite derivative and the penalty's
# gradient would be 0 * inf = NaN; with it the gradient is finite (0 there) and a length of 1e-3
# moves by 5e-10.
_EPS = 1e-12


def _positive(v):
    return None if v >= 1 else f"must be >= 1, got {v}"


def _unit(v):
    return None if 0 <= v <= 1 else f"must be in [0, 1], got {v}"


class PathLength(Penalty):
    """Path-length regularisation of G (StyleGAN2 sec. 3.2, eq. 4): E[(||J_w^T y||_2 - a)^2], a = running mean of the lengths."""

    network = "G"

    @attrs.frozen
    class Options:
        interval: int = option(4, help="Lazy regularisation interval k: applied every k-th G step (StyleGAN2 "
                                       "sec. 3.1); the engine scales it by k.", validator=_positive)
        batch_shrink: int = option(2, help="The penalty's batch is the per-process batch divided by this "
                                           "(official code: 2).", validator=_positive)
        decay: float = option(0.01, help="Rate of the exponential average a of the path lengths "
                                         "(a <- a + decay * (mean length - a)).", validator=_unit)

    def __init__(self, options=None, context=None):
        super().__init__(options, context)
        self.pl_mean = torch.zeros((), dtype=torch.float32)

    @property
    def interval(self) -> int:
        return self.options.interval

    def __call__(self, inputs, ctx) -> torch.Tensor:
        """Unweighted scalar ``mean_n (|J_w^T y|_n - a)^2`` on ``batch_size // batch_shrink``
        fresh latents (and, in a class-conditional run, the first as many of ``inputs.labels``).
        ``J_w^T y`` is the gradient of ``sum(img * y)`` w.r.t. ws, with ``y`` N(0, 1) / sqrt(H *
        W); its length is ``sqrt(mean over the num_ws layers of the squared norm + 1e-12)``
        (stylegan2-ada-pytorch's ``pl_lengths``, guarded at zero length like the gradient
        penalty's norm). ``a`` is updated first, ``a <- lerp(a, mean length, decay)``, and the
        penalty uses the updated ``a`` (gradient flows through it, as in the official code); the
        new ``a`` is kept only if G's optimizer step is applied (``ctx.stage``): a
        mixed-precision step that is skipped (an overflow) leaves ``a`` unchanged.
        Under several processes the mean length is that of the global batch
        (``ctx.mean_over_processes``), so every process keeps the same ``a`` - the one a single
        process keeps - and a resume under any number of processes continues it exactly (the
        official code keeps one ``a`` per process). Not multiplied by the interval. Needs
        ``inputs.G.mapping`` / ``.synthesis``; raises GankitError otherwise."""
        G = inputs.G
        if not (hasattr(G, "mapping") and hasattr(G, "synthesis")):
            raise GankitError(
                "penalty path-length: G has no mapping network (G.mapping / G.synthesis): use an architecture with "
                "one (stylegan2); under several processes set run.grad_sync = \"all-reduce\"")
        n = max(1, int(inputs.batch_size) // self.options.batch_shrink)
        z = ctx.latent(n)
        # ctx.latent(n) gives this process sample i of the global batch where labels[:n] has it
        # (both strided [rank::world_size]), so latents and labels pair as in one process.
        labels = inputs.labels[:n] if getattr(inputs, "labels", None) is not None else None
        extra = () if labels is None else (labels,)
        with ctx.autocast():
            ws = G.mapping(z, *extra)
            if getattr(G, "training", False) and hasattr(G, "mix_styles") and getattr(G, "style_mixing_prob", 0) > 0:
                ws = G.mix_styles(ws, *extra)
            img = G.synthesis(ws)
        img = img.float()
        # y per sample, drawn for the global batch (N processes train as one does).
        y = batch_randn(n, *img.shape[1:], device=img.device) / math.sqrt(img.shape[2] * img.shape[3])
        grad = ctx.gradients((img * y).sum(), ws).float()
        lengths = (grad.square().sum(dim=2).mean(dim=1) + _EPS).sqrt()  # [n]
        mean_length = ctx.mean_over_processes(lengths.mean())
        pl_mean = self.pl_mean.to(lengths.device).lerp(mean_length, self.options.decay)
        # a changes with G's step only: a skipped mixed-precision step (an overflow, which
        # makes the lengths inf/NaN) leaves it as it was.
        ctx.stage(self.network, self, "pl_mean", pl_mean)
        return (lengths - pl_mean).square().mean()

    def state_dict(self) -> dict:
        """``{"pl_mean": float32 scalar tensor on the CPU}``."""
        return {"pl_mean": self.pl_mean.detach().cpu().clone()}

    def load_state_dict(self, d: dict) -> None:
        """Restore ``pl_mean``; raises GankitError when it is missing."""
        if "pl_mean" not in d:
            raise GankitError(f"path-length state: missing 'pl_mean' (got keys {sorted(d)}); the checkpoint "
                              f"was not written with this penalty")
        self.pl_mean = torch.as_tensor(d["pl_mean"], dtype=torch.float32).clone()
