"""StyleGAN2's FIR resampling: ``upfirdn2d`` and the resampling convolutions equal the
definition of upfirdn2d (stylegan2-ada-pytorch) written out here, in float64, to 1e-12."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import gan_kit.builtin.architectures.stylegan2 as sg2
from gan_kit.builtin.architectures.stylegan2 import fir
from gan_kit.testing import make_run, train_steps

TOL = dict(rtol=0, atol=1e-12)  # float64 throughout: only summation order differs


def reference_upfirdn2d(x, f, up=1, down=1, pad=(0, 0, 0, 0), gain=1.0):
    """upfirdn2d by its definition, one step at a time, with explicit index arithmetic:
    1. insert up - 1 zeros after every pixel; 2. pad with zeros by pad = (x0, x1, y0, y1), a
    negative amount cropping; 3. convolve with f (out[i, j] = sum_ab P[i + a, j + b] f[kh-1-a,
    kw-1-b]), keeping outputs whose footprint lies inside; 4. keep every down-th pixel."""
    n, c, h, w = x.shape
    x0, x1, y0, y1 = pad
    U = torch.zeros(n, c, h * up, w * up, dtype=x.dtype)
    for i in range(h):
        for j in range(w):
            U[:, :, i * up, j * up] = x[:, :, i, j]
    H, W = h * up + y0 + y1, w * up + x0 + x1
    P = torch.zeros(n, c, H, W, dtype=x.dtype)
    for i in range(H):
        for j in range(W):
            si, sj = i - y0, j - x0
            if 0 <= si < h * up and 0 <= sj < w * up:
                P[:, :, i, j] = U[:, :, si, sj]
    kh, kw = f.shape
    out = torch.zeros(n, c, H - kh + 1, W - kw + 1, dtype=x.dtype)
    for i in range(out.shape[2]):
        for j in range(out.shape[3]):
            for a in range(kh):
                for b in range(kw):
                    out[:, :, i, j] += P[:, :, i + a, j + b] * f[kh - 1 - a, kw - 1 - b] * gain
    return out[:, :, ::down, ::down]


def data(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("up,down,pad", [(1, 1, (0, 0, 0, 0)), (2, 1, (2, 1, 2, 1)), (1, 2, (1, 1, 1, 1)),
                                         (2, 1, (3, -1, 0, 2)), (3, 2, (1, 2, -2, 0))])
def test_upfirdn2d_equals_the_definition(up, down, pad):
    x = data(2, 3, 5, 6)
    f = data(3, 4, seed=1)  # not symmetric: the flip of a convolution matters
    torch.testing.assert_close(fir.upfirdn2d(x, f, up=up, down=down, padding=pad, gain=1.5),
                               reference_upfirdn2d(x, f, up, down, pad, gain=1.5), **TOL)


def test_the_filter_is_the_normalised_binomial_and_keeps_constants():
    f = fir.setup_filter()
    torch.testing.assert_close(f, torch.outer(torch.tensor([1., 3, 3, 1]), torch.tensor([1., 3, 3, 1])) / 64)
    ones = torch.ones(1, 1, 8, 8, dtype=torch.float64)
    f = f.double()
    up, down = fir.upsample2d(ones, f), fir.downsample2d(ones, f)
    assert up.shape == (1, 1, 16, 16) and down.shape == (1, 1, 4, 4)
    # a constant stays constant away from the zero padding of the border
    torch.testing.assert_close(up[..., 2:-2, 2:-2], torch.ones(1, 1, 12, 12, dtype=torch.float64), **TOL)
    torch.testing.assert_close(down[..., 1:-1, 1:-1], torch.ones(1, 1, 2, 2, dtype=torch.float64), **TOL)
    x = data(2, 3, 4, 4)
    torch.testing.assert_close(fir.upsample2d(x, f), reference_upfirdn2d(x, f, up=2, pad=(2, 1, 2, 1), gain=4), **TOL)
    torch.testing.assert_close(fir.downsample2d(x, f), reference_upfirdn2d(x, f, down=2, pad=(1, 1, 1, 1)), **TOL)


@pytest.mark.parametrize("groups", [1, 2])
def test_upsampling_convolution_equals_upfirdn_then_convolution(groups):
    # stylegan2-ada-pytorch's conv2d_resample(up=2) for a 3x3 kernel with padding 1 is
    # upfirdn2d(x, f, up=2, padding=1 + [2, 1], gain=4) then a convolution without padding;
    # gankit computes it as a transposed convolution and the filter.
    f = fir.setup_filter().double()
    x, w = data(2, 4, 5, 5), data(6, 4 // groups, 3, 3, seed=2)
    want = F.conv2d(reference_upfirdn2d(x, f, up=2, pad=(3, 2, 3, 2), gain=4), w, groups=groups)
    got = fir.conv2d_resample(x, w, f, up=2, groups=groups)
    assert got.shape == (2, 6, 10, 10)
    torch.testing.assert_close(got, want, **TOL)


@pytest.mark.parametrize("k", [3, 1])
def test_downsampling_convolution_equals_upfirdn_then_strided_convolution(k):
    f = fir.setup_filter().double()
    x, w = data(2, 4, 8, 8), data(5, 4, k, k, seed=3)
    pad = (2, 2, 2, 2) if k == 3 else (1, 1, 1, 1)
    if k == 3:  # filter (padded for the 3x3 kernel as well), then a stride-2 convolution
        want = F.conv2d(reference_upfirdn2d(x, f, pad=pad), w, stride=2)
    else:  # a 1x1 kernel: downsample, then convolve
        want = F.conv2d(reference_upfirdn2d(x, f, down=2, pad=pad), w)
    got = fir.conv2d_resample(x, w, f, down=2)
    assert got.shape == (2, 5, 4, 4)
    torch.testing.assert_close(got, want, **TOL)


@pytest.mark.parametrize("impl", [sg2.modulated_conv2d, sg2.modulated_conv2d_scaled, sg2.modulated_conv2d_naive])
def test_modulated_convolution_with_fir_upsampling_equals_its_definition(impl):
    f = fir.setup_filter().double()
    x, weight = data(3, 4, 4, 4), data(5, 4, 3, 3, seed=4)
    styles = torch.rand(3, 4, generator=torch.Generator().manual_seed(5), dtype=torch.float64) + 0.5
    want = []
    for n in range(3):  # eq. 1 and 3 per sample, then the reference upsampling convolution
        wm = weight * styles[n].reshape(1, 4, 1, 1)
        wm = wm / torch.sqrt(wm.square().sum(dim=(1, 2, 3), keepdim=True) + 1e-8)
        want.append(F.conv2d(reference_upfirdn2d(x[n:n + 1], f, up=2, pad=(3, 2, 3, 2), gain=4), wm))
    got = impl(x, weight, styles, demodulate=True, padding=1, up=2, resample_filter=f)
    torch.testing.assert_close(got, torch.cat(want), **TOL)


def test_networks_use_the_fir_filter_by_default_and_bilinear_keeps_the_same_parameters():
    def build(**kw):
        torch.manual_seed(0)
        arch = sg2.StyleGAN2(sg2.StyleGAN2.Options(latent_dim=8, w_dim=8, mapping_layers=2, channel_base=64,
                                                   channel_max=8, **kw))
        return arch.build(16, 1)

    assert sg2.StyleGAN2.Options().resample == "fir"  # the paper's code
    (G, D), (Gb, Db) = build(), build(resample="bilinear")
    # the filter is a constant, not state: checkpoints have the same keys either way
    assert G.state_dict().keys() == Gb.state_dict().keys() and D.state_dict().keys() == Db.state_dict().keys()
    z, x = torch.randn(4, 8), torch.randn(4, 1, 16, 16)
    with torch.no_grad():
        G.eval(), Gb.eval()
        img, img_b = G(z, noise_mode="const"), Gb(z, noise_mode="const")
        assert img.shape == img_b.shape == (4, 1, 16, 16) and (img - img_b).abs().max() > 1e-3
        assert (D(x) - Db(x)).abs().max() > 1e-4
        # G's skip outputs are upsampled with the filter: with every toRGB but the 4x4 one
        # silenced, the image is the 4x4 toRGB output upsampled twice
        for res in ("8", "16"):
            G.to_rgb[res].weight.zero_(), G.to_rgb[res].bias.zero_()
        ws = G.mapping(z)
        x4 = G.convs["4"][0](G.const.unsqueeze(0).expand(4, -1, -1, -1), ws[:, 0], "const")
        rgb4 = G.to_rgb["4"](x4, ws[:, 1])
        f = fir.setup_filter()
        torch.testing.assert_close(G.synthesis(ws, "const"), fir.upsample2d(fir.upsample2d(rgb4, f), f))


def test_stylegan2_trains_with_either_resampling(tmp_path):
    sg2_tiny = ["architecture={name='stylegan2', latent_dim=8, w_dim=8, mapping_layers=2, channel_base=32, "
                "channel_max=8}", "growth={name='static', batch_size=8}", "loss.name='bce'",
                "penalty=[{name='r1', weight=1.0, interval=2}, {name='path-length', weight=2.0, interval=2}]"]
    for mode in ("fir", "bilinear"):
        run = make_run(tmp_path / mode, overrides=[*sg2_tiny, f"architecture.resample='{mode}'"])
        stats = train_steps(run, 2)
        assert math.isfinite(stats["Loss/G"]) and stats["Loss/G/path-length"] > 0, mode
