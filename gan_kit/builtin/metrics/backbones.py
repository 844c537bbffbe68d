"""The built-in backbones (kind ``backbone``) of the feature metrics: torch-fidelity's InceptionV3
and VGG16, the test stub, and (``vit_backbones``) CLIP ViT-B/32 and DINOv2 ViT-L/14.

Each is a ``gan_kit.Backbone``: its weights file, input side, default resize mode
(``gan_kit.builtin.metrics.resize``), normalisation and feature size, and ``build(path, resize)``.
The torch-fidelity networks resize inside (TF1-style bilinear, what clean-fid's
``legacy_tensorflow`` leaves to the network, and gankit's default since the first FID); given
images already resized by another mode (float32 in [0, 255] at their input side) they skip that
resize and run the same layers.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from gan_kit import Backbone, hookimpl
from gan_kit.builtin.metrics.vit_backbones import ClipViTB32, DinoV2ViTL14

#: torch-fidelity's InceptionV3 weights (the TF FID network converted).
INCEPTION_URL = ("https://github.com/toshas/torch-fidelity/releases/download/v0.2.0/"
                 "weights-inception-2015-12-05-6726825d.pth")
#: torchvision's ImageNet VGG16 weights (``VGG16_Weights.IMAGENET1K_V1``), which torch-fidelity's
#: vgg16 extractor loads.
VGG16_URL = "https://download.pytorch.org/models/vgg16-397923af.pth"

#: InceptionV3's layers after the input, in torch-fidelity's order (its ``forward``).
_INCEPTION_LAYERS = ("Conv2d_1a_3x3", "Conv2d_2a_3x3", "Conv2d_2b_3x3", "MaxPool_1", "Conv2d_3b_1x1",
                     "Conv2d_4a_3x3", "MaxPool_2", "Mixed_5b", "Mixed_5c", "Mixed_5d", "Mixed_6a", "Mixed_6b",
                     "Mixed_6c", "Mixed_6d", "Mixed_6e", "Mixed_7a", "Mixed_7b", "Mixed_7c", "AvgPool")


def fidelity_version() -> str:
    """``torch-fidelity-<version>`` (the code behind its networks' features)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return "torch-fidelity-" + version("torch-fidelity")
    except PackageNotFoundError:
        return "torch-fidelity-unknown"


class _FidelityInception(nn.Module):
    """torch-fidelity's InceptionV3 -> ``(pool [N, 2048], logits [N, 1008])`` (the unbiased
    logits torch-fidelity's IS reads). uint8 input of any size: torch-fidelity's own forward
    (TF1-style bilinear resize to 299, ``(x - 128) / 128``). float32 299x299 input in [0, 255]:
    the same layers without the resize; normalised ``(x - 128) / 128`` as clean-fid's ``clean``
    mode does for the TF network, or ``x / 255 * 2 - 1`` for ``legacy_pytorch`` (pytorch-fid's
    ``normalize_input``, clean-fid's ``legacy_pytorch`` network)."""

    def __init__(self, net: nn.Module, pytorch_range: bool):
        super().__init__()
        self.net, self.pytorch_range = net, pytorch_range

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if x.dtype == torch.uint8:
            return self.net(x)
        x = x.to(self.net.feature_extractor_internal_dtype)
        x = x / 255 * 2 - 1 if self.pytorch_range else (x - 128) / 128
        for name in _INCEPTION_LAYERS:
            x = getattr(self.net, name)(x)
        pool = torch.flatten(x, 1)
        return pool.float(), pool.mm(self.net.fc.weight.T).float()


class _FidelityVGG16(nn.Module):
    """torch-fidelity's VGG16 -> ``pool [N, 4096]`` (fc2 after ReLU). uint8 input: its own
    forward (TF1-style bilinear resize to 224); float32 224x224 in [0, 255]: the same
    normalisation (ImageNet mean and std times 255) and layers without the resize."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.uint8:
            return self.net(x)[0]
        import torchvision.transforms.functional as TF

        x = TF.normalize(x.to(self.net.feature_extractor_internal_dtype), (255 * 0.485, 255 * 0.456, 255 * 0.406),
                         (255 * 0.229, 255 * 0.224, 255 * 0.225))
        return F.relu(self.net.model(x)).float()


class InceptionV3Compat(Backbone):
    """torch-fidelity's InceptionV3 (the TF FID network of Heusel et al. 2017, converted): 2048-d
    pool3 features and 1008 logits."""

    weights_file = INCEPTION_URL.rsplit("/", 1)[1]
    weights_source = INCEPTION_URL
    input_size = 299
    resize = "legacy_tensorflow"
    resizes_inside = True
    normalisation = "(x - 128) / 128 (legacy_pytorch: x / 255 * 2 - 1)"
    feature_dim = 2048
    logits_dim = 1008

    def build(self, path: Path | None, resize: str = "legacy_tensorflow") -> nn.Module:
        from torch_fidelity.feature_extractor_inceptionv3 import FeatureExtractorInceptionV3

        net = FeatureExtractorInceptionV3("inception-v3-compat", ["2048", "logits_unbiased"],
                                          feature_extractor_weights_path=str(path))
        return _FidelityInception(net, pytorch_range=resize == "legacy_pytorch").eval()

    def version(self) -> str:
        return fidelity_version()


class VGG16(Backbone):
    """torch-fidelity's VGG16 (torchvision's ImageNet weights): the 4096-d fc2 features after ReLU
    that Kynkaanniemi et al. 2019 use for precision and recall."""

    weights_file = VGG16_URL.rsplit("/", 1)[1]
    weights_source = VGG16_URL
    input_size = 224
    resize = "legacy_tensorflow"
    resizes_inside = True
    normalisation = "ImageNet mean/std times 255"
    feature_dim = 4096

    def build(self, path: Path | None, resize: str = "legacy_tensorflow") -> nn.Module:
        from torch_fidelity.feature_extractor_vgg16 import FeatureExtractorVGG16

        net = FeatureExtractorVGG16("vgg16", ["fc2_relu"], feature_extractor_weights_path=str(path))
        return _FidelityVGG16(net).eval()

    def version(self) -> str:
        return fidelity_version()


class StubNet(nn.Module):
    """A stand-in for InceptionV3 with fixed random weights (seed 0): ``uint8 [N,3,H,W]`` (or
    float32 in [0, 255]) -> ``(pool [N, 64], logits [N, 10])``. Images are scaled to [-1, 1] and
    resized to 32x32 (bilinear), then three 3x3 convolutions (stride 2, 2, 1) with ReLU, a global
    mean (``pool``) and a linear map (``logits``). It tells image sets apart enough for tests; its
    values mean nothing outside them."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.convs = nn.ModuleList([nn.Conv2d(3, 16, 3, 2, 1), nn.Conv2d(16, 32, 3, 2, 1), nn.Conv2d(32, 64, 3, 1, 1)])
        self.fc = nn.Linear(64, 10)
        with torch.no_grad():
            for layer in [*self.convs, self.fc]:
                fan_in = layer.weight[0].numel()
                layer.weight.copy_(torch.randn(layer.weight.shape, generator=g) * (2.0 / fan_in) ** 0.5)
                layer.bias.copy_(torch.randn(layer.bias.shape, generator=g) * 0.1)
        self.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = F.interpolate(x.float() / 127.5 - 1.0, size=(32, 32), mode="bilinear", align_corners=False)
        for conv in self.convs:
            x = F.relu(conv(x))
        pool = x.mean(dim=(2, 3))
        return pool, self.fc(pool)


class Stub(Backbone):
    """A small convolutional network with fixed random weights (seed 0), no file: for tests and
    offline smoke runs; its values are NOT comparable with published ones."""

    input_size = 32
    resize = "legacy_tensorflow"
    resizes_inside = True
    normalisation = "x / 127.5 - 1, then its own bilinear resize to 32x32"
    feature_dim = 64
    logits_dim = 10

    def build(self, path: Path | None, resize: str = "legacy_tensorflow") -> nn.Module:
        return StubNet().eval()


#: The built-in backbones by name (what ``register_backbones`` registers).
BUILTIN = {
    "inception-v3-compat": InceptionV3Compat,
    "vgg16": VGG16,
    "stub": Stub,
    "clip-vit-b-32": ClipViTB32,
    "dinov2-vit-l-14": DinoV2ViTL14,
}


@hookimpl
def register_backbones(register):
    for name, cls in BUILTIN.items():
        register(name, cls)
