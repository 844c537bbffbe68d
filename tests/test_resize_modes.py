"""The resize modes equal clean-fid's own functions bit for bit (clean, legacy_pytorch,
legacy_tensorflow), and dgm-eval's / clean-fid's CLIP uint8 PIL transforms."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
import torch

from gan_kit.builtin.metrics.feature_extractors import to_uint8
from gan_kit.builtin.metrics.resize import MODES, resize

import cleanfid.resize as cleanfid_resize  # noqa: E402  (clean-fid is in the test extra: missing is a failure)

SIZES = [(16, 16), (32, 32), (37, 53), (299, 299), (320, 311)]


def _images(h: int, w: int, grey: bool, n: int = 2) -> torch.Tensor:
    """Random images in [-1, 1] through gankit's quantisation (grey ones repeated to RGB)."""
    g = torch.Generator().manual_seed(h * 1000 + w + grey)
    x = torch.rand(n, 1 if grey else 3, h, w, generator=g) * 2 - 1
    return to_uint8(x)


def _cleanfid_batch(u8: torch.Tensor, mode: str) -> torch.Tensor:
    """clean-fid's path from a uint8 image to the float tensor its network gets: its resizer on
    the HWC array, then ResizeDataset's tensor step (ToTensor of float32 keeps the values)."""
    fn = cleanfid_resize.build_resizer(mode)
    out = []
    for img in u8.numpy():
        r = fn(img.transpose(1, 2, 0))
        assert r.dtype == np.float32 or mode == "legacy_tensorflow"
        out.append(torch.from_numpy(np.ascontiguousarray(np.asarray(r).transpose(2, 0, 1))))
    return torch.stack(out)


@pytest.mark.parametrize("grey", [False, True])
@pytest.mark.parametrize("hw", SIZES)
@pytest.mark.parametrize("mode", ["clean", "legacy_pytorch", "legacy_tensorflow"])
def test_mode_equals_cleanfid_bit_for_bit(mode, hw, grey):
    """Each clean-fid mode gives exactly clean-fid's tensor (dtype, shape and every bit) on the
    same uint8 images, square or not, smaller or larger than 299, RGB or grey."""
    u8 = _images(*hw, grey)
    ours = resize(u8, mode, 299)
    ref = _cleanfid_batch(u8, mode)
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    assert torch.equal(ours, ref)


def _stub_clip_module(monkeypatch):
    """cleanfid.clip_features imports OpenAI's ``clip`` package at the top; its transform needs
    only PIL and torchvision, so a stand-in module lets the test read it."""
    monkeypatch.setitem(sys.modules, "clip", types.ModuleType("clip"))
    monkeypatch.delitem(sys.modules, "cleanfid.clip_features", raising=False)
    import cleanfid.clip_features as cf

    return cf


@pytest.mark.parametrize("hw", [(16, 16), (37, 53), (53, 37), (224, 224), (300, 260), (227, 224), (224, 229)])
def test_pil_uint8_crop_equals_cleanfid_clip_transform(hw, monkeypatch):
    """``pil_uint8_crop`` at 224 equals clean-fid's ``img_preprocess_clip`` (shorter side to 224
    with PIL bicubic on uint8, centre crop) on the same images; 227 and 229 leave 3 and 5 rows
    to crop, where torchvision's ``round`` (half to even) puts the odd row on either side."""
    cf = _stub_clip_module(monkeypatch)
    u8 = _images(*hw, grey=False)
    ours = resize(u8, "pil_uint8_crop", 224)
    ref = torch.stack([torch.from_numpy(cf.img_preprocess_clip(a.transpose(1, 2, 0)).transpose(2, 0, 1).copy())
                       for a in u8.numpy()])
    assert ours.shape == ref.shape and torch.equal(ours, ref.float())


@pytest.mark.parametrize("hw", [(16, 16), (37, 53), (300, 260)])
def test_pil_uint8_equals_dgm_eval_transform(hw):
    """``pil_uint8`` equals dgm-eval's default DINOv2 resize: torchvision ``Resize((224, 224),
    BICUBIC)`` on the PIL RGB image, then ``ToTensor`` (here times 255)."""
    import torchvision.transforms as T
    from PIL import Image

    u8 = _images(*hw, grey=True)
    ours = resize(u8, "pil_uint8", 224)
    tf = T.Compose([T.Resize((224, 224), T.InterpolationMode.BICUBIC), T.ToTensor()])
    ref = torch.stack([tf(Image.fromarray(a.transpose(1, 2, 0).copy(), "RGB")) for a in u8.numpy()])
    assert torch.equal(ours / 255, ref)


def test_modes_give_different_values():
    """The modes are not interchangeable: on one image set every pair of resampling modes differs."""
    u8 = _images(37, 53, grey=False)
    outs = {m: resize(u8, m, 64) for m in MODES if m != "legacy_tensorflow"}
    names = list(outs)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not torch.equal(outs[a], outs[b]), (a, b)


def test_refuses_an_unknown_mode_and_float_input():
    with pytest.raises(ValueError, match="unknown resize mode 'bicubic'"):
        resize(_images(8, 8, False), "bicubic", 16)
    with pytest.raises(ValueError, match="uint8"):
        resize(torch.zeros(1, 3, 8, 8), "clean", 16)
