"""Initializers: weight statistics against the formula of each."""

from __future__ import annotations

import math

import pytest
import torch

from gan_kit import set_init_gain
from torch import nn
from torch.nn.utils import parametrize

from gan_kit.builtin.architectures.initializers import EqualizedLR, Kaiming, Normal, Orthogonal, Xavier, fan_in


def test_equalized_lr_output_has_unit_std_for_unit_input():
    torch.manual_seed(0)
    layer = nn.Linear(512, 512)
    EqualizedLR(EqualizedLR.Options(gain=1.0)).apply(layer)
    y = layer(torch.randn(4096, 512))
    assert y.std().item() == pytest.approx(1.0, abs=0.03)
    conv = nn.Conv2d(64, 64, 3, padding=1)
    EqualizedLR(EqualizedLR.Options(gain=1.0)).apply(conv)
    y = conv(torch.randn(64, 64, 16, 16))[:, :, 1:-1, 1:-1]
    assert y.std().item() == pytest.approx(1.0, abs=0.03)


def test_equalized_lr_stores_unit_normal_weights_and_scales_every_forward():
    torch.manual_seed(0)
    conv = nn.Conv2d(32, 48, 3)
    EqualizedLR().apply(conv)
    raw = conv.parametrizations.weight.original
    assert raw.std().item() == pytest.approx(1.0, abs=0.05)
    assert torch.all(conv.bias == 0)
    c = math.sqrt(2) / math.sqrt(32 * 9)
    torch.testing.assert_close(conv.weight, raw * c)
    with torch.no_grad():
        raw.mul_(2.0)  # an optimizer step on the raw weight is seen scaled on the next forward
    torch.testing.assert_close(conv.weight, raw * c)
    # layers can ask for their own gain (PGGAN's toRGB uses 1)
    rgb = nn.Conv2d(16, 3, 1)
    set_init_gain(rgb, 1.0)
    EqualizedLR().apply(rgb)
    assert rgb.parametrizations.weight[0].scale == pytest.approx(1 / math.sqrt(16))


def _layers():
    torch.manual_seed(1)
    return nn.Sequential(nn.Conv2d(64, 128, 3), nn.Linear(256, 512), nn.ConvTranspose2d(128, 64, 4, 2, 1))


def test_normal():
    m = _layers()
    Normal(Normal.Options(std=0.02)).apply(m)
    for layer in m:
        assert layer.weight.mean().item() == pytest.approx(0.0, abs=2e-3)
        assert layer.weight.std().item() == pytest.approx(0.02, rel=0.03)
        assert torch.all(layer.bias == 0)


def test_xavier():
    m = _layers()
    Xavier().apply(m)
    for layer in m:
        fi, fo = nn.init._calculate_fan_in_and_fan_out(layer.weight)
        assert layer.weight.std().item() == pytest.approx(math.sqrt(2.0 / (fi + fo)), rel=0.03)


@pytest.mark.parametrize("nonlinearity,slope,gain", [("relu", 0.0, math.sqrt(2)),
                                                     ("leaky_relu", 0.2, math.sqrt(2 / 1.04)),
                                                     ("linear", 0.0, 1.0)])
def test_kaiming(nonlinearity, slope, gain):
    m = _layers()
    Kaiming(Kaiming.Options(nonlinearity=nonlinearity, negative_slope=slope)).apply(m)
    for layer in m:
        fi, _ = nn.init._calculate_fan_in_and_fan_out(layer.weight)
        assert layer.weight.std().item() == pytest.approx(gain / math.sqrt(fi), rel=0.03)


def test_orthogonal():
    m = _layers()
    Orthogonal(Orthogonal.Options(gain=2.0)).apply(m)
    for layer in m:
        w = layer.weight.reshape(layer.weight.shape[0], -1)
        small = min(w.shape)
        gram = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
        torch.testing.assert_close(gram, 4.0 * torch.eye(small), atol=1e-4, rtol=1e-4)


def test_fan_in_conventions():
    assert fan_in(nn.Linear(7, 3)) == 7
    assert fan_in(nn.Conv2d(5, 2, 3)) == 45
    # a stride-2 transposed conv feeds each output pixel from in_channels * (k / stride)^2 inputs
    assert fan_in(nn.ConvTranspose2d(8, 4, 4, 2, 1)) == 8 * 16 // 4


def test_equalized_lr_is_not_applied_twice():
    conv = nn.Conv2d(4, 4, 3)
    EqualizedLR().apply(conv)
    EqualizedLR().apply(conv)
    assert len(conv.parametrizations.weight) == 1
    assert parametrize.is_parametrized(conv, "weight")
