"""A run's optimizers (``Optimizers``): G's and D's, over their trainable parameters only, and the
settings each gets - the base lr of ``[optim]`` (or ``g_lr`` / ``d_lr``, TTUR), the phase's
``lr_scale``, and the lazy-regularisation correction (StyleGAN2 sec. 3.1)."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from gan_kit.base.errors import GankitError
from gan_kit.base.phase import Phase
from gan_kit.plugin_api.components import WeightedPenalty
from gan_kit.recipe import Recipe

__all__ = ["Optimizers"]


class Optimizers:
    """``opt_G`` and ``opt_D`` with their settings: ``g_lr`` / ``d_lr`` are the base learning
    rates in force (``[optim]``'s, scheduled values included), before the phase scale and the lazy
    ratio. Raises ``GankitError`` when every parameter of a network is frozen, or when one
    network's lazy penalties have different intervals."""

    def __init__(self, recipe: Recipe, G: nn.Module, D: nn.Module, lazy_penalties: Sequence[WeightedPenalty],
                 device: torch.device):
        self.recipe = recipe
        o = recipe.optim
        self.ratios = {net: _lazy_ratio(recipe, lazy_penalties, net) for net in ("G", "D")}
        self.g_lr, self.d_lr = _base_lrs(o)
        self.opt_G = self._optimizer(G, self.g_lr, self.ratios["G"], device)
        self.opt_D = self._optimizer(D, self.d_lr, self.ratios["D"], device)

    def lazy_ratio(self, network: str) -> float:
        """k / (k + 1) for a network ("G" or "D") regularised lazily every k iterations, else 1:
        its optimizer takes k + 1 steps per k iterations, so lr and betas are corrected
        (stylegan2-ada-pytorch's ``mb_ratio``)."""
        return self.ratios[network]

    def _optimizer(self, net: nn.Module, lr: float, ratio: float, device: torch.device) -> torch.optim.Optimizer:
        o = self.recipe.optim
        params = [p for p in net.parameters() if p.requires_grad]  # a frozen parameter is never stepped
        if not params:
            raise GankitError(f"{self.recipe.path}: architecture {self.recipe.architecture.name!r}: every parameter "
                              f"of {type(net).__name__} is frozen (requires_grad False): nothing to train")
        # Fused optimizers on the CPU as on CUDA: they take the non-finite policy's and the
        # GradScaler's skip flag on the device (found_inf), so a step costs no host sync
        # (gan_kit.training.step.finite), and the CPU runs the code path a GPU run does.
        kwargs = {"fused": True} if device.type in ("cuda", "cpu") else {}
        if o.name == "sgd":
            return torch.optim.SGD(params, lr=lr * ratio, **kwargs)
        betas = (o.betas[0] ** ratio, o.betas[1] ** ratio)
        return torch.optim.Adam(params, lr=lr * ratio, betas=betas, eps=o.eps, **kwargs)

    def apply(self, options, phase: Phase | None) -> None:
        """Set each optimizer's lr (base x ``phase.lr_scale`` x lazy ratio), betas and eps from
        ``options`` (an ``[optim]`` table, scheduled values in force): after every phase change,
        after a resume (a loaded optimizer state brings the old hyper-parameters with it), and
        before every iteration when ``[optim]`` is scheduled."""
        self.g_lr, self.d_lr = _base_lrs(options)
        scale = phase.lr_scale if phase is not None else 1.0
        for opt, base, net in ((self.opt_G, self.g_lr, "G"), (self.opt_D, self.d_lr, "D")):
            ratio = self.ratios[net]
            for group in opt.param_groups:
                group["lr"] = base * scale * ratio
                if "betas" in group:
                    group["betas"] = (options.betas[0] ** ratio, options.betas[1] ** ratio)
                    group["eps"] = options.eps


def _base_lrs(options) -> tuple[float, float]:
    """G's and D's base learning rates of an ``[optim]`` table: ``g_lr`` / ``d_lr``, else ``lr``."""
    return (options.g_lr if options.g_lr is not None else options.lr,
            options.d_lr if options.d_lr is not None else options.lr)


def _lazy_ratio(recipe: Recipe, lazy_penalties: Sequence[WeightedPenalty], network: str) -> float:
    intervals = {p.penalty.interval for p in lazy_penalties if p.penalty.network == network}
    if not intervals:
        return 1.0
    if len(intervals) > 1:
        raise GankitError(f"{recipe.path}: penalty: the lazy {network} penalties have different intervals "
                          f"{sorted(intervals)}; give them one interval")
    k = intervals.pop()
    return k / (k + 1)
