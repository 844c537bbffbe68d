"""PGGAN architecture: fade-in identities, minibatch stddev grouping, equalized lr."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from gan_kit.builtin.architectures.initializers import EqualizedLR
from gan_kit.builtin.architectures.pggan import PGGAN, MinibatchStddev
from gan_kit.plugin_api.components import BuildContext


def nets(res=16, channels=3, group=4):
    arch = PGGAN(PGGAN.Options(latent_dim=16, fmap_base=128, fmap_max=16, mbstd_group_size=group),
                 BuildContext(resolution=res, channels=channels))
    G, D = arch.build(res, channels)
    init = EqualizedLR()
    init.apply(G)
    init.apply(D)
    return G, D


@pytest.mark.parametrize("res", [8, 16])
def test_generator_at_alpha_zero_is_previous_resolution_upsampled(res):
    G, _ = nets(16)
    z = torch.randn(8, 16)
    G.set_phase(res // 2, 1.0)
    low = G(z)
    G.set_phase(res, 0.0)
    grown = G(z)
    assert grown.shape[-1] == res
    torch.testing.assert_close(grown, F.interpolate(low, scale_factor=2, mode="nearest"), rtol=0, atol=0)
    # ...and alpha actually matters once the fade moves on
    G.set_phase(res, 0.5)
    assert (G(z) - grown).abs().max() > 1e-4


@pytest.mark.parametrize("res", [8, 16])
def test_discriminator_at_alpha_zero_sees_the_downsampled_image(res):
    _, D = nets(16)
    x = torch.randn(8, 3, res, res)
    D.set_phase(res, 0.0)
    grown = D(x)
    D.set_phase(res // 2, 1.0)
    low = D(F.avg_pool2d(x, 2))
    torch.testing.assert_close(grown, low, rtol=1e-5, atol=1e-6)
    D.set_phase(res, 1.0)
    assert (D(x) - grown).abs().max() > 1e-5


def test_minibatch_stddev_groups_are_strided_like_the_official_code():
    n, g = 8, 4  # M = 2 groups: {0, 2, 4, 6} and {1, 3, 5, 7}
    x = torch.zeros(n, 1, 1, 1)
    x[0::2] = torch.tensor([0.0, 2.0, 4.0, 6.0]).reshape(4, 1, 1, 1)  # group 0: spread out
    x[1::2] = torch.tensor([1.0, 1.0, 1.0, 1.0]).reshape(4, 1, 1, 1)  # group 1: identical values
    out = MinibatchStddev(g)(x)[:, 1].flatten()
    std0 = math.sqrt(torch.tensor([0.0, 2.0, 4.0, 6.0]).var(unbiased=False).item() + 1e-8)
    expected = torch.tensor([std0 if i % 2 == 0 else 1e-4 for i in range(n)])
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
    # The transposed (contiguous) grouping {0,1,2,3}, {4,5,6,7} gives a different answer.
    contiguous = x.reshape(2, 4).std(dim=1, unbiased=False)
    assert not torch.allclose(contiguous.repeat_interleave(4), expected, atol=1e-3)


def test_minibatch_stddev_rejects_indivisible_batch():
    with pytest.raises(ValueError, match="batch 6 is not divisible by group size 4"):
        MinibatchStddev(4)(torch.randn(6, 2, 4, 4))


def test_all_blocks_exist_up_front_and_only_active_ones_get_gradients():
    G, D = nets(16)
    before = {id(p) for p in G.parameters()} | {id(p) for p in D.parameters()}
    G.set_phase(8, 1.0)
    D.set_phase(8, 1.0)
    D(G(torch.randn(4, 16))).sum().backward()
    assert {id(p) for p in G.parameters()} | {id(p) for p in D.parameters()} == before
    g16 = [p for n, p in G.named_parameters() if "16" in n]
    d16 = [p for n, p in D.named_parameters() if "16" in n]
    assert g16 and d16
    assert all(p.grad is None for p in g16 + d16)
    assert all(p.grad is not None for n, p in G.named_parameters() if "blocks.8" in n)
