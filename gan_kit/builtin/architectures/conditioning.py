"""Class conditioning layers shared by the built-in architectures (``architecture.conditional``).

G side: ``ClassEmbedding`` - a learned vector per class joined to z (the class-conditional PGGAN
concatenates a one-hot label to the latent, Karras et al. 2018, sec. 6.1 / the official code's
``labels_in``; a learned embedding of a one-hot vector is the same map with its weights trained).
D side: ``projection`` - the projection discriminator of Miyato & Koyama 2018 ("cGANs with
Projection Discriminator", eq. 3): ``f(x, y) = psi(phi(x)) + embed(y) . phi(x)``.
G side, inside the network: ``ConditionalBatchNorm2d`` - batch norm without its own affine map,
whose per-channel gain and bias are linear maps of a conditioning vector (de Vries et al. 2017,
"Modulating early visual processing by language", sec. 3.1; SNGAN, Miyato & Koyama 2018, sec. 4;
BigGAN, Brock et al. 2019, sec. 3 and appendix B: the vector a shared class embedding joined to a
chunk of z); defined in the public API (``gan_kit.ConditionalBatchNorm2d``), re-exported here.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from gan_kit import ConditionalBatchNorm2d  # public: plugins use it too

__all__ = ["ClassEmbedding", "ConditionalBatchNorm2d", "check_labels", "projection", "projection_embedding"]


class ClassEmbedding(nn.Embedding):
    """``labels[N] (int64) -> [N, dim]``: one learned vector per class, initialised N(0, std^2)."""

    def __init__(self, num_classes: int, dim: int, std: float = 1.0):
        super().__init__(num_classes, dim)
        nn.init.normal_(self.weight, std=std)


def projection_embedding(num_classes: int, features: int) -> ClassEmbedding:
    """D's class vectors for ``projection``, initialised with std 1/sqrt(features) so the
    projection term starts at the scale of a unit-gain linear output (not sqrt(features) times it)."""
    return ClassEmbedding(num_classes, features, std=1.0 / math.sqrt(features))


def projection(embed: ClassEmbedding, labels: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
    """``sum_k embed(labels)[n, k] * phi[n, k]`` -> ``[N]``: the class term of a projection D
    (``phi[N, K]``: D's last features; Miyato & Koyama 2018, eq. 3)."""
    return (embed(labels).to(phi.dtype) * phi).sum(dim=1)


def check_labels(net: nn.Module, num_classes: int, labels: torch.Tensor | None, batch: int) -> None:
    """A conditional network needs ``labels[batch]``; an unconditional one takes none. Raises
    ``ValueError`` naming the fix (a strategy that calls ``ctx.G(z)`` instead of
    ``ctx.generate(z, labels)`` in a conditional run lands here)."""
    what = type(net).__name__
    if num_classes and labels is None:
        raise ValueError(f"{what} is class-conditional (architecture.conditional = true) and needs labels[N]: "
                         f"a strategy calls ctx.generate(z, labels) / ctx.discriminate(x, labels) and passes labels= "
                         f"to ctx.d_objective / ctx.g_objective (labels = ctx.labels[j]); a penalty runs inputs.D / "
                         f"inputs.G, which have the labels bound")
    if not num_classes and labels is not None:
        raise ValueError(f"{what} is not class-conditional; it takes no labels (set architecture.conditional = true)")
    if labels is not None and tuple(labels.shape) != (batch,):
        raise ValueError(f"{what}: labels have shape {tuple(labels.shape)}, expected ({batch},)")
