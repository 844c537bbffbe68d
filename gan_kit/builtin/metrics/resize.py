"""Resize and quantisation modes of the feature metrics: how ``uint8 [N,3,H,W]`` images (gankit's
quantisation, ``feature_extractors.to_uint8``) reach a backbone's input size.

Parmar et al. 2022 ("On Aliased Resizing and Surprising Subtleties in GAN Evaluation", clean-fid)
showed that the resize filter and where the images are quantised move FID by several points; the
first three modes carry clean-fid's names and equal its functions bit for bit
(``cleanfid.resize.build_resizer``, then its ``ResizeDataset`` / ``get_model_features`` steps to
a float tensor):

- ``clean``: each channel resized as a float32 image (PIL mode ``F``) with PIL's bicubic filter
  (antialiased when shrinking), clipped to [0, 255]; not quantised again.
- ``legacy_pytorch``: ``torch.nn.functional.interpolate(bilinear, align_corners=False)`` on the
  float images, clipped to [0, 255] (pytorch-fid's resize; no antialiasing).
- ``legacy_tensorflow``: nothing here: the uint8 images at their own size go to the network,
  which resizes them itself (clean-fid hands them to NVIDIA's TorchScript Inception, which
  emulates TF1's ``resize_bilinear``; torch-fidelity's Inception and VGG16 do the same emulation
  in their ``forward``). Only for backbones that resize inside.

Two more, for the 2023-26 backbones:

- ``pil_uint8``: PIL bicubic on the uint8 RGB image straight to ``size x size``, quantised to
  uint8 by PIL (dgm-eval's default DINOv2 transform ``Resize((224, 224), BICUBIC)`` on a PIL
  image, and EDM2's ``resize_mode='pil'``).
- ``pil_uint8_crop``: PIL bicubic on the uint8 RGB image, shorter side to ``size`` (the longer
  to ``int(size * long / short)``, torchvision's ``Resize(size)`` rule), then the centre
  ``size x size`` crop (offsets ``int(round((side - size) / 2))``): clean-fid's CLIP transform
  ``img_preprocess_clip``. For square images it equals ``pil_uint8``.

Every mode but ``legacy_tensorflow`` returns ``float32 [N,3,size,size]`` in [0, 255]; the
backbone then applies its own normalisation. Values differ between modes: compare figures
computed with the same mode.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

#: Every mode, in the order the docs list them.
MODES = ("clean", "legacy_tensorflow", "legacy_pytorch", "pil_uint8", "pil_uint8_crop")

#: One line per mode: what it does (part of the feature cache key, so two modes never share
#: cached features).
DESCRIPTIONS = {
    "clean": "clean: PIL bicubic per channel on float32 (mode F), clipped to [0, 255]",
    "legacy_tensorflow": "legacy_tensorflow: uint8 at its own size, resized inside the network",
    "legacy_pytorch": "legacy_pytorch: torch bilinear (align_corners=False) on float, clipped to [0, 255]",
    "pil_uint8": "pil_uint8: PIL bicubic on uint8 RGB to size x size, uint8",
    "pil_uint8_crop": "pil_uint8_crop: PIL bicubic on uint8 RGB, shorter side to size, centre crop, uint8",
}


def _clean(img: np.ndarray, size: int) -> np.ndarray:
    """``uint8 [3,H,W]`` -> ``float32 [3,size,size]``: each channel a float32 PIL image."""
    out = np.empty((3, size, size), dtype=np.float32)
    for c in range(3):
        # float32 first: PIL's mode-F bicubic keeps the fraction an 8-bit resize would round away
        channel = Image.fromarray(img[c].astype(np.float32))
        out[c] = np.asarray(channel.resize((size, size), resample=Image.BICUBIC)).clip(0, 255)
    return out


def _pil_uint8(img: np.ndarray, size: int, crop: bool) -> np.ndarray:
    """``uint8 [3,H,W]`` -> ``uint8 [3,size,size]`` through an 8-bit RGB PIL image."""
    pil = Image.fromarray(np.ascontiguousarray(img.transpose(1, 2, 0)), "RGB")
    w, h = pil.size
    if not crop:
        pil = pil.resize((size, size), resample=Image.BICUBIC)
    else:
        short, long = (w, h) if w <= h else (h, w)
        new_long = int(size * long / short)
        new_w, new_h = (size, new_long) if w <= h else (new_long, size)
        if (new_w, new_h) != (w, h):  # torchvision's Resize leaves an image of the right size alone
            pil = pil.resize((new_w, new_h), resample=Image.BICUBIC)
        top, left = int(round((new_h - size) / 2.0)), int(round((new_w - size) / 2.0))
        pil = pil.crop((left, top, left + size, top + size))
    return np.asarray(pil).transpose(2, 0, 1)


def resize(images: torch.Tensor, mode: str, size: int) -> torch.Tensor:
    """``images``: ``uint8 [N,3,H,W]`` (any device) -> the backbone's input: ``float32
    [N,3,size,size]`` in [0, 255] on the images' device, or for ``legacy_tensorflow`` the
    ``images`` themselves. Raises ``ValueError`` for an unknown mode or a non-uint8 input."""
    if mode not in MODES:
        raise ValueError(f"unknown resize mode {mode!r}; modes: {', '.join(MODES)}")
    if images.dtype != torch.uint8 or images.dim() != 4 or images.shape[1] != 3:
        raise ValueError(f"resize takes uint8 [N,3,H,W] images, got {images.dtype} {tuple(images.shape)}")
    if mode == "legacy_tensorflow":
        return images
    if mode == "legacy_pytorch":
        x = F.interpolate(images.float(), size=(size, size), mode="bilinear", align_corners=False)
        return x.clamp_(0, 255)
    arrays = images.cpu().numpy()
    if mode == "clean":
        out = np.stack([_clean(a, size) for a in arrays])
    else:
        out = np.stack([_pil_uint8(a, size, crop=mode == "pil_uint8_crop") for a in arrays]).astype(np.float32)
    return torch.from_numpy(out).to(images.device)
