"""``lpips-vgg16``: LPIPS on VGG16 features (Zhang et al. 2018, "The Unreasonable Effectiveness of
Deep Features as a Perceptual Metric", eq. 1), the distance stylegan2-ada-pytorch's projector
minimises.

The weights come only from files the user names; nothing is downloaded:

- ``weights`` (required): torchvision's VGG16 ImageNet state dict, ``vgg16-397923af.pth``
  (``torchvision.models.VGG16_Weights.IMAGENET1K_V1``, at https://download.pytorch.org/models/;
  torchvision keeps it in ``$TORCH_HOME/hub/checkpoints/`` once it has fetched it). Read with
  ``torch.load(weights_only=True)``; only its 13 convolutions (``features.<i>.weight`` /
  ``.bias``) are used, the classifier may be there or not. A state dict of ``vgg16().features``
  alone (keys ``<i>.weight``) works too. The file may also hold the LPIPS linear layers
  (``lin0.model.1.weight`` ... ``lin4.model.1.weight``, merged in from the file below).
- ``lin_weights`` (optional): the LPIPS project's calibrated linear layers for VGG,
  ``lpips/weights/v0.1/vgg.pth`` (in the richzhang/PerceptualSimilarity repository, and inside
  the ``lpips`` pip package). Without them (and none in ``weights``), every channel weighs 1:
  the uncalibrated distance on the same features (the LPIPS project's ``lpips=False``).

stylegan2-ada-pytorch's ``vgg16.pt`` is a TorchScript program, not a state dict, and is not read.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import torch
import torch.nn.functional as F
from torch import nn

from gan_kit import Distance, GankitError, hookimpl, option
from gan_kit.builtin.distances import check_pair
from gan_kit.base.errors import clip

__all__ = ["LpipsVGG16", "VGG16Features", "VGG16_FILE", "LPIPS_LIN_FILE"]

VGG16_FILE = ("torchvision's VGG16 ImageNet state dict vgg16-397923af.pth "
              "(https://download.pytorch.org/models/vgg16-397923af.pth; gankit never downloads it)")
LPIPS_LIN_FILE = ("the LPIPS project's lpips/weights/v0.1/vgg.pth (richzhang/PerceptualSimilarity on GitHub, "
                  "or inside the lpips pip package; gankit never downloads it)")

#: VGG16's convolution widths, "M" a 2x2 max pool (Simonyan & Zisserman 2015, configuration D).
_CONFIG = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512]
#: Indices in torchvision's ``vgg16().features`` of the ReLUs LPIPS reads: relu1_2, relu2_2,
#: relu3_3, relu4_3, relu5_3 (LPIPS sec. 3, "Network architectures").
_TAPS = (3, 8, 15, 22, 29)
_CHANNELS = (64, 128, 256, 512, 512)
#: ImageNet's channel mean and std, which torchvision's VGG16 expects of [0, 1] RGB input (the
#: LPIPS project's ScalingLayer applies the same map to [-1, 1] images).
_MEAN = (0.485, 0.456, 0.406)
_STD = (0.229, 0.224, 0.225)


class VGG16Features(nn.Module):
    """VGG16's convolutional part up to relu5_3, laid out as torchvision's ``vgg16().features``
    (same indices, so its state dict keys load): ``x[N, 3, H, W]`` (ImageNet-normalised) -> the
    five LPIPS feature maps ``[N, 64, H, W]``, ``[N, 128, H/2, W/2]``, ..., ``[N, 512, H/16, W/16]``."""

    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c = 3
        for v in _CONFIG:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(c, int(v), 3, padding=1), nn.ReLU(inplace=False)]
                c = int(v)
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        out = []
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i in _TAPS:
                out.append(x)
        return out


def _read(path: Path, option_name: str, source: str) -> dict:
    """``torch.load(path, weights_only=True)`` as a dict of tensors, or one-line GankitError."""
    where = f"distance lpips-vgg16: {option_name}"
    if not path.is_file():
        raise GankitError(f"{where}: no file {str(path)!r} (give {source})")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # pickle / zip / TorchScript errors alike: the file is not a state dict
        reason = clip(str(e)) or type(e).__name__
        raise GankitError(f"{where}: {str(path)!r} is not a state dict torch.load reads with weights_only=True "
                          f"({reason}); give {source}") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise GankitError(f"{where}: {str(path)!r} holds a {type(state).__name__}, not a state dict of tensors; "
                          f"give {source}")
    return state


def load_vgg16(path: Path) -> tuple[VGG16Features, dict]:
    """VGG16's features with the weights of the state dict at ``path`` (keys ``features.<i>.*``
    or ``<i>.*``), frozen, in eval mode; and the rest of the file (LPIPS ``lin*`` keys, if any).
    Raises ``GankitError`` naming the option, the path and the file that works."""
    state = _read(path, "weights", VGG16_FILE)
    net = VGG16Features()
    wanted = net.layers.state_dict()
    prefix = "features." if any(k.startswith("features.") for k in state) else ""
    convs = {}
    for key, like in wanted.items():
        value = state.get(prefix + key)
        if value is None:
            raise GankitError(f"distance lpips-vgg16: weights: {str(path)!r} has no VGG16 convolution "
                              f"{prefix + key!r} (give {VGG16_FILE})")
        if value.shape != like.shape:
            raise GankitError(f"distance lpips-vgg16: weights: {str(path)!r}: {prefix + key!r} is "
                              f"{list(value.shape)}, VGG16's is {list(like.shape)} (give {VGG16_FILE})")
        convs[key] = value.float()
    net.layers.load_state_dict(convs)
    net.eval().requires_grad_(False)
    return net, {k: v for k, v in state.items() if k.startswith("lin")}


def lin_layers(state: dict, path: Path, option_name: str) -> list[torch.Tensor]:
    """The five LPIPS channel weights ``[1, C_l, 1, 1]`` from ``lin<l>.model.1.weight`` (the LPIPS
    project's names) of ``state``, read from ``path``. Raises ``GankitError`` for a missing key or
    a wrong shape."""
    out = []
    for i, c in enumerate(_CHANNELS):
        key = f"lin{i}.model.1.weight"
        w = state.get(key)
        if w is None or tuple(w.shape) != (1, c, 1, 1):
            got = "missing" if w is None else f"{list(w.shape)}"
            raise GankitError(f"distance lpips-vgg16: {option_name}: {str(path)!r}: {key!r} is {got}, LPIPS's is "
                              f"[1, {c}, 1, 1] (give {LPIPS_LIN_FILE})")
        out.append(w.float())
    return out


class LpipsVGG16(Distance):
    """LPIPS on VGG16 features (Zhang et al. 2018), stylegan2-ada-pytorch's projector distance: VGG16 and LPIPS weights from files you give, nothing downloaded.

    ``d(a, b) = sum_l mean_hw( sum_c w_lc (f_l(a) - f_l(b))_chw^2 )`` with ``f_l`` the unit-
    normalised (over channels) activations of relu1_2, relu2_2, relu3_3, relu4_3 and relu5_3
    (eq. 1), ``w_l`` the LPIPS linear layers (all 1 without ``lin_weights``). Images in [-1, 1]
    are mapped to ImageNet-normalised RGB as the LPIPS project's scaling layer does; grey images
    (C = 1) are repeated to 3 channels. Images whose side is not ``resize`` are resized to
    ``resize`` x ``resize`` first: larger ones by area averaging, as the projector does for images
    over 256 px; smaller ones bilinearly (gankit's choice: at 16 px VGG16's last stage would see
    one pixel; the projector's generators are never that small). The unit normalisation divides by
    ``sqrt(sum_c f^2 + 1e-10)`` (eps inside the root, so the gradient is finite where a
    location's features are all zero). Weights: see the module docstring (``weights`` =
    torchvision's ``vgg16-397923af.pth``; ``lin_weights`` = the LPIPS project's v0.1 ``vgg.pth``).
    Raises ``GankitError`` when built with a missing or wrong file.
    """

    @attrs.frozen
    class Options:
        weights: str | None = option(None, help="VGG16 weights: torchvision's ImageNet state dict vgg16-397923af.pth "
                                                "(download.pytorch.org/models; may also hold the LPIPS lin*.model.1."
                                                "weight keys). Required; gankit never downloads it.")
        lin_weights: str | None = option(None, help="LPIPS linear layers: the LPIPS project's lpips/weights/v0.1/"
                                                    "vgg.pth. None = those in weights, else every channel weighs 1.")
        resize: int = option(256, help="Side images are resized to before VGG16 when theirs differs (larger: area, "
                                       "as stylegan2-ada-pytorch's projector; smaller: bilinear); 0 = never.", min=0)

    def __init__(self, options=None, context=None):
        super().__init__(options, context)
        o = self.options
        if not o.weights:
            raise GankitError(f"distance lpips-vgg16: weights: not set (--set-distance weights=PATH, with PATH "
                              f"{VGG16_FILE})")
        weights = Path(o.weights).expanduser()
        self.net, rest = load_vgg16(weights)
        if o.lin_weights:
            lin_path = Path(o.lin_weights).expanduser()
            self.lin = lin_layers(_read(lin_path, "lin_weights", LPIPS_LIN_FILE), lin_path, "lin_weights")
        elif rest:
            self.lin = lin_layers(rest, weights, "weights")
        else:
            self.lin = [torch.ones(1, c, 1, 1) for c in _CHANNELS]
        self.mean = torch.tensor(_MEAN).view(1, 3, 1, 1)
        self.std = torch.tensor(_STD).view(1, 3, 1, 1)

    def _to(self, device: torch.device) -> None:
        if self.mean.device != device:
            self.net.to(device)
            self.lin = [w.to(device) for w in self.lin]
            self.mean, self.std = self.mean.to(device), self.std.to(device)

    def prepare(self, x: torch.Tensor) -> torch.Tensor:
        """``x[N, C, H, W]`` in [-1, 1] -> ImageNet-normalised ``[N, 3, s, s]`` (grey repeated,
        resized to ``resize`` = s when the side differs; see the class docstring)."""
        x = x.float()
        if x.shape[1] == 1:
            x = x.expand(-1, 3, -1, -1)
        s = self.options.resize
        if s and tuple(x.shape[-2:]) != (s, s):
            if min(x.shape[-2:]) > s:
                x = F.interpolate(x, size=(s, s), mode="area")
            else:
                x = F.interpolate(x, size=(s, s), mode="bilinear", align_corners=False)
        return ((x + 1) / 2 - self.mean) / self.std

    def _features(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The unit-normalised (over channels) VGG16 features of ``x[N, C, H, W]``, one per layer."""
        if x.shape[1] not in (1, 3):
            raise ValueError(f"distance lpips-vgg16: takes grey or RGB images (C = 1 or 3), got C = {x.shape[1]}")
        self._to(x.device)
        return [f * torch.rsqrt(f.square().sum(dim=1, keepdim=True) + 1e-10) for f in self.net(self.prepare(x))]

    def _between(self, fa: list[torch.Tensor], fb: list[torch.Tensor]) -> torch.Tensor:
        total = fa[0].new_zeros(fa[0].shape[0], dtype=torch.float32)
        for f_a, f_b, w in zip(fa, fb, self.lin):
            total = total + ((f_a - f_b).square() * w).sum(dim=1).mean(dim=(1, 2))
        return total

    def distance(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        check_pair("lpips-vgg16", a, b)
        n = a.shape[0]
        feats = self._features(torch.cat([a, b]))  # one VGG16 pass for both
        return self._between([f[:n] for f in feats], [f[n:] for f in feats])

    def prepare_target(self, b: torch.Tensor) -> LpipsTarget:
        """The target's features, computed once (a projection's target is fixed: its VGG16 pass
        is not repeated every step)."""
        with torch.no_grad():
            return LpipsTarget(tuple(b.shape), self._features(b))

    def distance_to(self, a: torch.Tensor, target) -> torch.Tensor:
        if not isinstance(target, LpipsTarget):
            return self.distance(a, target)
        if tuple(a.shape) != target.shape:
            raise ValueError(f"distance lpips-vgg16: expected two image batches [N, C, H, W] of one shape, "
                             f"got {tuple(a.shape)} and {target.shape}")
        return self._between(self._features(a), target.features)


@attrs.frozen
class LpipsTarget:
    """``LpipsVGG16.prepare_target``'s result: the target's shape and its unit-normalised
    features per VGG16 layer."""

    shape: tuple[int, ...]
    features: list[torch.Tensor]


@hookimpl
def register_distances(register):
    register("lpips-vgg16", LpipsVGG16)
