"""The 2023-26 backbones of the feature metrics, each from a local weights file (never
downloaded):

- ``clip-vit-b-32``: CLIP ViT-B/32 (Radford et al. 2021) as clean-fid's ``clip_vit_b_32`` computes
  it (``cleanfid/clip_features.py``, the "CLIP-FID" of Kynkaanniemi et al. 2023): the image
  resized with ``pil_uint8_crop`` (shorter side to 224 with PIL bicubic on uint8, centre crop),
  ``x / 255``, normalised by CLIP's mean and std, and the model's ``encode_image`` (the projected
  CLS embedding, 512-d, not L2-normalised). Built with open_clip (``ViT-B-32-quickgelu``: OpenAI's
  weights use QuickGELU) from OpenAI's ``ViT-B-32.pt`` (a TorchScript archive or a state dict in
  OpenAI's layout, which is open_clip's too: open_clip's ``open_clip_pytorch_model.bin`` for
  ``ViT-B-32-quickgelu/openai`` loads as well). Computed in float32 (clean-fid's ``clip.load``
  keeps fp16 weights on CUDA, so its GPU features differ by fp16 rounding).
- ``dinov2-vit-l-14``: DINOv2 ViT-L/14 (Oquab et al. 2023) as dgm-eval (Stein et al. 2023,
  ``dgm_eval/models/dinov2.py``) and EDM2 (Karras et al. 2024, ``DINOv2Detector``) compute
  FD_DINOv2: the image resized to 224x224 with PIL bicubic on uint8 (``pil_uint8``; dgm-eval's
  default, EDM2's exact ``resize_mode='pil'``, not its faster default ``'torch'``), ``x / 255``,
  ImageNet mean (0.485, 0.456, 0.406) and std (0.229, 0.224, 0.225), and the hub model's output:
  the CLS token after the final LayerNorm (``x_norm_clstoken``), 1024-d. Built with timm (``vit_large_patch14_dinov2``,
  img_size 224, its ``checkpoint_filter_fn`` for the official layout) from Meta's
  ``dinov2_vitl14_pretrain.pth``; the position embedding (trained at 518 px, 37x37 patches) is
  resampled to 16x16 once, exactly as the hub model does on every 224-px call (bicubic,
  ``scale_factor = (16 + 0.1) / 37``, no antialiasing), not with timm's own resampling.
"""

from __future__ import annotations

import contextlib
import logging
import math
import zipfile
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from gan_kit import Backbone

#: OpenAI's CLIP ViT-B/32 file (``clip._MODELS['ViT-B/32']``, open_clip's ``openai`` tag).
CLIP_URL = ("https://openaipublic.azureedge.net/clip/models/"
            "40d365715913c9da98579312b702a82c18be219cc2a73407c4526f58eba950af/ViT-B-32.pt")
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)

#: Meta's DINOv2 ViT-L/14 file (what ``torch.hub.load('facebookresearch/dinov2', 'dinov2_vitl14')``
#: fetches).
DINOV2_URL = "https://dl.fbaipublicfiles.com/dinov2/dinov2_vitl14/dinov2_vitl14_pretrain.pth"
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _normalise(x: torch.Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> torch.Tensor:
    """``float32 [N,3,H,W]`` in [0, 255] -> ``(x / 255 - mean) / std`` per channel, in the
    reference code's float32 steps (ToTensor's division, then torchvision's normalize)."""
    m = torch.tensor(mean, dtype=x.dtype, device=x.device)[:, None, None]
    s = torch.tensor(std, dtype=x.dtype, device=x.device)[:, None, None]
    return (x.float() / 255 - m) / s


def _package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"{name}-{version(name)}"
    except PackageNotFoundError:
        return f"{name}-unknown"


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """A weights file's tensors: a TorchScript archive's parameters and buffers (OpenAI's CLIP
    files), else a ``torch.save``d state dict (``weights_only``: no code is run), unwrapped from
    ``{"state_dict": ...}`` / ``{"model": ...}`` and a ``module.`` prefix. Raises ``ValueError``
    for a file holding something else."""
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            scripted = any(n.split("/", 2)[1:2] == ["code"] for n in z.namelist())
        if scripted:
            return dict(torch.jit.load(str(path), map_location="cpu").state_dict())
    state = torch.load(path, map_location="cpu", weights_only=True)
    for key in ("state_dict", "model"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    if not isinstance(state, dict) or not state or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"holds {type(state).__name__}, not a state dict of tensors")
    if all(k.startswith("module.") for k in state):
        state = {k[len("module."):]: v for k, v in state.items()}
    return state


@contextlib.contextmanager
def _quiet_root_logger():
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def load_strictly(net: nn.Module, state: dict[str, torch.Tensor], what: str) -> None:
    """``net.load_state_dict(state, strict=True, assign=True)``, raising ``ValueError`` that names a
    few of the missing and unexpected keys (torch's own message is many lines, the first saying
    only "Error(s) in loading state_dict") when the names differ."""
    own = set(net.state_dict())
    missing, unexpected = sorted(own - set(state)), sorted(set(state) - own)
    if missing or unexpected:
        def few(keys: list[str]) -> str:
            return ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")

        parts = ([f"lacks {len(missing)} of its keys ({few(missing)})"] if missing else []) + \
            ([f"holds {len(unexpected)} it does not know ({few(unexpected)})"] if unexpected else [])
        raise ValueError(f"not a {what} state dict: it " + "; it ".join(parts))
    shapes = net.state_dict()
    wrong = [f"{k} {list(state[k].shape)} for {list(shapes[k].shape)}" for k in sorted(state)
             if tuple(state[k].shape) != tuple(shapes[k].shape)]
    if wrong:
        raise ValueError(f"not a {what} state dict: {len(wrong)} tensors have other shapes ({', '.join(wrong[:2])}"
                         + (f" and {len(wrong) - 2} more)" if len(wrong) > 2 else ")"))
    net.load_state_dict(state, strict=True, assign=True)


def _materialised(net: nn.Module) -> nn.Module:
    """``net`` built on the meta device and filled by ``load_state_dict(assign=True)``; raises
    ``ValueError`` if a tensor the file did not hold was left without data."""
    empty = [n for n, t in [*net.named_parameters(), *net.named_buffers()] if t.is_meta]
    if empty:
        raise ValueError(f"the file lacks {', '.join(empty[:3])}")
    return net


class _ClipImage(nn.Module):
    """CLIP's image tower: ``float32 [N,3,224,224]`` in [0, 255] -> ``encode_image`` ``[N, 512]``."""

    def __init__(self, visual: nn.Module):
        super().__init__()
        self.visual = visual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.visual(_normalise(x, CLIP_MEAN, CLIP_STD))


class ClipViTB32(Backbone):
    """CLIP ViT-B/32 (OpenAI's weights, via open_clip): the 512-d image embedding clean-fid's
    clip_vit_b_32 (CLIP-FID) reads."""

    weights_file = "ViT-B-32.pt"
    weights_source = CLIP_URL
    input_size = 224
    resize = "pil_uint8_crop"
    normalisation = f"x / 255, CLIP mean {CLIP_MEAN} / std {CLIP_STD}; encode_image (projected CLS)"
    feature_dim = 512
    requires = {"open_clip": "open_clip_torch"}

    def build(self, path: Path | None, resize: str = "pil_uint8_crop") -> nn.Module:
        import open_clip

        with _quiet_root_logger():  # open_clip warns "initialized randomly": the file's weights come next
            model = open_clip.create_model("ViT-B-32-quickgelu", pretrained=None, device="meta")  # no download
        state = read_state_dict(Path(path))
        for key in ("input_resolution", "context_length", "vocab_size"):  # a TorchScript file's extras
            state.pop(key, None)
        load_strictly(model, state, "CLIP ViT-B/32")
        return _materialised(_ClipImage(model.visual)).eval().requires_grad_(False)

    def version(self) -> str:
        return _package_version("open_clip_torch")


def hub_pos_embed(pos_embed: torch.Tensor, grid: int) -> torch.Tensor:
    """DINOv2's position embedding ``[1, 1 + M*M, D]`` (one class token) for a ``grid x grid``
    patch grid, as the hub model's ``interpolate_pos_encoding`` computes it: bicubic, no
    antialiasing, ``scale_factor = (grid + 0.1) / M``, in float32."""
    cls, patch = pos_embed[:, :1], pos_embed[:, 1:].float()
    m, dim = int(math.sqrt(patch.shape[1])), patch.shape[2]
    if m * m != patch.shape[1]:
        raise ValueError(f"position embedding of {patch.shape[1]} patches is not a square grid")
    if m == grid:
        return pos_embed
    s = (grid + 0.1) / m
    patch = F.interpolate(patch.reshape(1, m, m, dim).permute(0, 3, 1, 2), scale_factor=(s, s), mode="bicubic",
                          antialias=False)
    patch = patch.permute(0, 2, 3, 1).reshape(1, -1, dim).to(pos_embed.dtype)
    return torch.cat([cls, patch], dim=1)


class _DinoCls(nn.Module):
    """``float32 [N,3,224,224]`` in [0, 255] -> the normalised CLS token ``[N, 1024]``."""

    def __init__(self, vit: nn.Module):
        super().__init__()
        self.vit = vit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.vit.forward_features(_normalise(x, IMAGENET_MEAN, IMAGENET_STD))  # after the final LayerNorm
        return tokens[:, 0]


class DinoV2ViTL14(Backbone):
    """DINOv2 ViT-L/14 (Meta's weights, via timm): the 1024-d normalised CLS token of FD_DINOv2
    (dgm-eval, EDM2)."""

    weights_file = "dinov2_vitl14_pretrain.pth"
    weights_source = DINOV2_URL
    input_size = 224
    resize = "pil_uint8"
    normalisation = f"x / 255, ImageNet mean {IMAGENET_MEAN} / std {IMAGENET_STD}; CLS token after the last norm"
    feature_dim = 1024
    requires = {"timm": "timm"}

    def build(self, path: Path | None, resize: str = "pil_uint8") -> nn.Module:
        import timm
        from timm.models.vision_transformer import checkpoint_filter_fn

        with torch.device("meta"):  # no random init of 300M weights the file replaces
            vit = timm.create_model("vit_large_patch14_dinov2", pretrained=False, img_size=self.input_size,
                                    num_classes=0)
        state = read_state_dict(Path(path))
        if "mask_token" not in state or "pos_embed" not in state:
            raise ValueError("not a DINOv2 state dict (no mask_token / pos_embed)")
        pos = state.pop("pos_embed")
        state = checkpoint_filter_fn(state, vit)  # the hub layout -> timm's (drops mask_token)
        state["pos_embed"] = hub_pos_embed(pos, self.input_size // 14)
        load_strictly(vit, state, "DINOv2 ViT-L/14")
        return _materialised(_DinoCls(vit)).eval().requires_grad_(False)

    def version(self) -> str:
        return _package_version("timm")
