"""Orthogonal regularisation of G's weights (Brock et al. 2019, "Large Scale GAN Training for High
Fidelity Natural Image Synthesis" (BigGAN), sec. 3.1): ``beta * ||W W^T * (1 - I)||_F^2`` per
weight, which pushes the filters of a layer towards orthogonality without constraining their
norms, so that G tolerates the truncation trick (``gankit sample --truncation-normal``).

How the reference code applies it. BigGAN-PyTorch's ``utils.ortho`` and StudioGAN's
``orthogonalize_model`` do not add a term to G's loss: after G's backward they add
``strength * 2 * (W W^T * (1 - I)) W`` to every weight's ``.grad`` (``W`` the weight viewed as
``[out, in * k * k]``), skipping parameters with fewer than 2 dimensions and a blacklist - G's
shared class embedding (``G.shared``); then the optimizer steps. That gradient is the gradient
of ``strength / 2 * ||W W^T * (1 - I)||_F^2`` (the paper's beta is the code's strength / 2; the
code is what trained the published models). This penalty returns
``0.5 * sum_W ||W W^T * (1 - I)||_F^2``, so with ``weight`` = the code's strength (BigGAN: 1e-4)
the weights' gradients, and so every optimizer's update, equal the code's: adding a gradient
after backward or adding its term to the loss before backward is the same sum. (StudioGAN keeps
the function but its current trainer no longer calls it; its first trainer did, as above.)
"""

from __future__ import annotations

import attrs
import torch
from torch import nn

from gan_kit import Penalty, hookimpl, option

__all__ = ["Orthogonal", "orthogonal_value", "orthogonal_weights"]


def orthogonal_weights(G: nn.Module, skip_embeddings: bool = True) -> list[torch.Tensor]:
    """The parameters of ``G`` the regulariser acts on: every one with at least 2 dimensions that
    requires grad, but (``skip_embeddings``) the weights of ``nn.Embedding`` layers - BigGAN's and
    StudioGAN's blacklist, G's shared class embedding. Biases and BN gains (1-D) are skipped, as
    the reference code skips them. Parameters shared by several modules appear once."""
    skipped = set()
    if skip_embeddings:
        skipped = {id(p) for m in G.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
    return [p for p in G.parameters() if p.dim() >= 2 and p.requires_grad and id(p) not in skipped]


def orthogonal_value(weights: list[torch.Tensor]) -> torch.Tensor:
    """``0.5 * sum_W ||W W^T * (1 - I)||_F^2`` in float32, each ``W`` viewed as ``[out, -1]``:
    a scalar whose gradient with respect to ``W`` is ``2 (W W^T * (1 - I)) W``, the gradient
    BigGAN's ``ortho`` adds. 0 for an empty list."""
    total = torch.zeros(())
    for p in weights:
        w = p.float().reshape(p.shape[0], -1)
        gram = w @ w.t()
        off = gram - torch.diag_embed(torch.diagonal(gram))  # W W^T * (1 - I)
        total = total.to(off.device) + 0.5 * off.square().sum()
    return total


class Orthogonal(Penalty):
    """BigGAN's orthogonal regularisation of G (Brock et al. 2019, sec. 3.1), on G's side:
    ``0.5 * sum_W ||W W^T * (1 - I)||_F^2`` over G's weights of 2 or more dimensions (``W``
    viewed as ``[out, in * k * k]``; biases, gains and, by default, embeddings skipped). With
    ``weight`` = BigGAN's / StudioGAN's strength (1e-4 in BigGAN) every weight's gradient equals
    the one their code adds after G's backward (the module docstring says why the 0.5). Costs no
    forward; a float32 scalar. Weights under spectral norm or the equalized learning rate are
    regularised as stored (the raw parameter), as BigGAN regularises its SN layers' raw weights.
    """

    network = "G"

    @attrs.frozen
    class Options:
        skip_embeddings: bool = option(True, help="Skip the weights of nn.Embedding layers (BigGAN's and StudioGAN's "
                                                  "blacklist: G's shared class embedding).")

    def __call__(self, inputs, ctx):
        return orthogonal_value(orthogonal_weights(inputs.G, self.options.skip_embeddings))


@hookimpl
def register_penalties(register):
    register("orthogonal", Orthogonal)
