"""channels_last memory format gives the same images, logits and gradients as the default
format, G's nearest-neighbour upsampling and D's fade-in included."""

from __future__ import annotations

import copy

import pytest
import torch

from gan_kit.builtin.architectures.initializers import EqualizedLR
from gan_kit.builtin.architectures.pggan import PGGAN
from gan_kit.plugin_api.components import BuildContext


@pytest.mark.parametrize("res,alpha", [(8, 0.3), (16, 1.0)])
def test_channels_last_parity(res, alpha):
    torch.manual_seed(0)
    arch = PGGAN(PGGAN.Options(latent_dim=16, fmap_base=128, fmap_max=16), BuildContext(resolution=16, channels=3))
    G, D = arch.build(16, 3)
    EqualizedLR().apply(G)
    EqualizedLR().apply(D)
    G2, D2 = copy.deepcopy(G).to(memory_format=torch.channels_last), copy.deepcopy(D).to(memory_format=torch.channels_last)
    for net in (G, D, G2, D2):
        net.set_phase(res, alpha)
    z = torch.randn(8, 16)
    real = torch.randn(8, 3, res, res)
    img, img2 = G(z), G2(z)
    assert img2.is_contiguous(memory_format=torch.channels_last)  # the format survives upsampling
    torch.testing.assert_close(img2, img, rtol=1e-5, atol=1e-5)
    out = D(img).sum() + D(real).square().sum()
    out2 = D2(img2).sum() + D2(real.contiguous(memory_format=torch.channels_last)).square().sum()
    torch.testing.assert_close(out2, out, rtol=1e-5, atol=1e-5)
    out.backward()
    out2.backward()
    for (n, p), p2 in zip(list(G.named_parameters()) + list(D.named_parameters()),
                          list(G2.parameters()) + list(D2.parameters())):
        if p.grad is None:
            assert p2.grad is None, n
        else:
            torch.testing.assert_close(p2.grad, p.grad, rtol=1e-4, atol=1e-5, msg=n)
