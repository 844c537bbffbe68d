"""clip-vit-b-32 and dinov2-vit-l-14 from local files: files in the official layouts (random
weights, the real architectures' keys and shapes) load; wrong, cut and missing files are refused
in one line naming the expected file and its source; the preprocessing equals clean-fid's CLIP
transform and dgm-eval's DINOv2 transform; the layer is the one documented. With the real files
in $GANKIT_WEIGHTS_DIR, the features equal the reference implementations'."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest
import torch

from gan_kit.base.errors import GankitError
from gan_kit.builtin.metrics import feature_extractors as fx
from gan_kit.builtin.metrics.inception import FID, InceptionScore
from gan_kit.builtin.metrics.vit_backbones import CLIP_URL, DINOV2_URL, ClipViTB32, DinoV2ViTL14, hub_pos_embed

# dgm-eval's constants (dgm_eval/models/dinov2.py), written out: the code under test has its own.
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

import open_clip  # noqa: E402  (the test extra installs them: a missing one is a failure, not a skip)
import timm  # noqa: E402


def _random_state(meta_state: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    """Random tensors of the given keys and shapes (norm weights near 1, so activations stay in
    range): a file in a network's layout without its trained values."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for k, v in meta_state.items():
        x = torch.randn(v.shape, generator=g) * 0.02
        if v.dim() == 1 and k.endswith("weight") and ("norm" in k or "ln_" in k):
            x += 1.0
        out[k] = x
    return out


@pytest.fixture(scope="module")
def clip_file(tmp_path_factory) -> Path:
    """OpenAI's CLIP ViT-B/32 layout (text tower included), random values."""
    model = open_clip.create_model("ViT-B-32-quickgelu", pretrained=None, device="meta")
    path = tmp_path_factory.mktemp("clip") / ClipViTB32.weights_file
    torch.save(_random_state(model.state_dict(), 1), path)
    return path


@pytest.fixture(scope="module")
def dino_state(tmp_path_factory) -> tuple[Path, dict[str, torch.Tensor]]:
    """Meta's dinov2_vitl14 hub layout (518-px position embedding, mask_token), random values:
    the file and its tensors (kept, so no test reads the 1.2 GB file back)."""
    with torch.device("meta"):
        vit = timm.create_model("vit_large_patch14_dinov2", pretrained=False, img_size=518, num_classes=0)
    state = _random_state({**vit.state_dict(), "mask_token": torch.empty(1, 1024, device="meta")}, 2)
    path = tmp_path_factory.mktemp("dino") / DinoV2ViTL14.weights_file
    torch.save(state, path)
    return path, state


@pytest.fixture(scope="module")
def dino_file(dino_state) -> Path:
    return dino_state[0]


def _images(h: int, w: int, n: int = 2, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 3, h, w), generator=g, dtype=torch.uint8)


def _cleanfid_clip(monkeypatch):
    """cleanfid.clip_features without OpenAI's ``clip`` package (imported at its top, used only
    by ``clip.load``, which the test replaces with the model itself)."""
    monkeypatch.setitem(sys.modules, "clip", types.ModuleType("clip"))
    monkeypatch.delitem(sys.modules, "cleanfid.clip_features", raising=False)
    import cleanfid.clip_features as cf

    return cf


# ------------------------------------------------------------------------------------- CLIP --


def test_clip_features_equal_cleanfid_clip_on_the_same_network(clip_file, monkeypatch):
    """clip-vit-b-32 = clean-fid's clip_vit_b_32 pipeline (img_preprocess_clip, ResizeDataset's
    ToTensor * 255, CLIP_fx's / 255 and normalisation, encode_image) on the same weights, for a
    non-square image smaller than 224 and a larger one: 512-d."""
    import torchvision.transforms as T

    cf = _cleanfid_clip(monkeypatch)
    ex = fx.get_extractor("clip-vit-b-32", str(clip_file), "cpu", "fid")
    model = open_clip.create_model("ViT-B-32-quickgelu", pretrained=None, device="meta")
    model.load_state_dict(torch.load(clip_file, weights_only=True), assign=True)
    ref = object.__new__(cf.CLIP_fx)
    ref.model = model.eval()
    for u8 in (_images(37, 53, n=1), _images(260, 240, n=1, seed=1)):
        ours = ex.extract(u8)["pool"]
        batch = torch.stack([T.ToTensor()(cf.img_preprocess_clip(a.permute(1, 2, 0).numpy())) * 255 for a in u8])
        theirs = ref(batch)
        assert ours.shape == (1, 512)
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def test_clip_metric_runs_from_the_file_with_its_default_resize(clip_file):
    """fid on clip-vit-b-32 (CLIP-FID) computes from the local file, with pil_uint8_crop."""
    fid = FID(FID.Options(feature_extractor="clip-vit-b-32", weights=str(clip_file), num_images=3, cache=False))
    assert fid.extractor("cpu").resize == "pil_uint8_crop"
    fake, real = _images(32, 32, n=3, seed=3), _images(32, 32, n=3, seed=4)
    value = fid.compute(lambda k: fake[:k].float() / 127.5 - 1, real.float() / 127.5 - 1, "cpu")["Metrics/fid"]
    assert value > 0


# ----------------------------------------------------------------------------------- DINOv2 --


@pytest.fixture(scope="module")
def dino(dino_file):
    return fx.get_extractor("dinov2-vit-l-14", str(dino_file), "cpu", "fid")


def test_dinov2_position_embedding_is_resampled_as_the_hub_model_does(dino_state):
    """The 37x37 embedding becomes 16x16 as DINOv2's ``interpolate_pos_encoding`` computes it
    for a 224-px image: bicubic, scale factor (16 + 0.1) / 37, no antialiasing."""
    pos = dino_state[1]["pos_embed"]
    ours = hub_pos_embed(pos, 16)
    m = 37
    patch = pos[:, 1:].reshape(1, m, m, 1024).permute(0, 3, 1, 2)
    sx = (224 // 14 + 0.1) / m
    ref = torch.nn.functional.interpolate(patch, scale_factor=(sx, sx), mode="bicubic", antialias=False)
    ref = torch.cat([pos[:, :1], ref.permute(0, 2, 3, 1).reshape(1, -1, 1024)], dim=1)
    assert ours.shape == (1, 257, 1024) and torch.equal(ours, ref)


def test_dinov2_features_are_the_normalised_cls_token_of_dgm_eval_input(dino, dino_state):
    """dinov2-vit-l-14 = the final LayerNorm's CLS token (1024-d) of the hub model's token
    sequence (class token + patches + resampled position embedding), on dgm-eval's input
    (torchvision Resize((224, 224), BICUBIC) of the PIL image, ToTensor, ImageNet mean/std)."""
    import torchvision.transforms as T
    from PIL import Image

    assert dino.resize == "pil_uint8"
    u8 = _images(37, 53, n=1)
    ours = dino.extract(u8)["pool"]
    tf = T.Compose([T.Resize((224, 224), T.InterpolationMode.BICUBIC), T.ToTensor(),
                    T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    x = torch.stack([tf(Image.fromarray(a.permute(1, 2, 0).numpy(), "RGB")) for a in u8])
    vit = dino.net.vit
    state = dino_state[1]
    with torch.no_grad():
        tokens = vit.patch_embed(x)
        tokens = torch.cat([state["cls_token"].expand(1, -1, -1), tokens], dim=1) + hub_pos_embed(state["pos_embed"], 16)
        for block in vit.blocks:
            tokens = block(tokens)
        ref = torch.nn.functional.layer_norm(tokens, (1024,), state["norm.weight"], state["norm.bias"], eps=1e-6)[:, 0]
    assert ours.shape == (1, 1024)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------ refused files --


@pytest.mark.parametrize("name,cls,url", [("clip-vit-b-32", ClipViTB32, CLIP_URL),
                                          ("dinov2-vit-l-14", DinoV2ViTL14, DINOV2_URL)])
def test_a_missing_file_is_one_line_naming_it_and_its_source(name, cls, url, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch-home"))
    monkeypatch.setattr(torch.hub, "_hub_dir", None)
    monkeypatch.delenv("GANKIT_WEIGHTS_DIR", raising=False)
    with pytest.raises(GankitError) as e:
        FID(FID.Options(feature_extractor=name))
    msg = str(e.value)
    assert "\n" not in msg and cls.weights_file in msg and url in msg and "never downloads" in msg


def _refusal(name: str, path: Path) -> str:
    with pytest.raises(GankitError) as e:
        fx.get_extractor(name, str(path), "cpu", "fid")
    return str(e.value)


def test_another_networks_file_is_refused_in_one_line(clip_file, tmp_path):
    """dinov2-vit-l-14 refuses CLIP's file, clip-vit-b-32 a DINOv2 ViT-S/14 file (a smaller
    network of the other layout), each naming the file it expects and where to get it."""
    with torch.device("meta"):
        small = timm.create_model("vit_small_patch14_dinov2", pretrained=False, num_classes=0)
    dino_s = tmp_path / "dinov2_vits14_pretrain.pth"
    torch.save(_random_state({**small.state_dict(), "mask_token": torch.empty(1, 384, device="meta")}, 3), dino_s)
    for name, wrong, cls in [("dinov2-vit-l-14", clip_file, DinoV2ViTL14), ("clip-vit-b-32", dino_s, ClipViTB32),
                             ("dinov2-vit-l-14", dino_s, DinoV2ViTL14)]:
        msg = _refusal(name, wrong)
        assert "\n" not in msg and f"cannot load the {name} weights {wrong}" in msg
        assert f"expects {cls.weights_file} from {cls.weights_source}" in msg
        # torch's "Error(s) in loading state_dict for CLIP:" says nothing; a few key names do
        assert "Error(s)" not in msg and f"not a {cls.__name__[:4].replace('Dino', 'DINOv2').replace('Clip', 'CLIP')}" \
            in msg, msg
    msg = _refusal("clip-vit-b-32", dino_s)
    assert "not a CLIP ViT-B/32 state dict: it lacks" in msg and "(ln_final.bias, " in msg and "more)" in msg, msg


def test_a_cut_or_foreign_file_is_refused_in_one_line(clip_file, tmp_path):
    cut = tmp_path / "cut" / "ViT-B-32.pt"
    cut.parent.mkdir()
    with open(clip_file, "rb") as f:
        cut.write_bytes(f.read(1 << 20))
    msg = _refusal("clip-vit-b-32", cut)
    assert "\n" not in msg and f"expects ViT-B-32.pt from {CLIP_URL}" in msg
    other = tmp_path / "other.pt"
    torch.save({"fc.weight": torch.zeros(2, 2)}, other)
    msg = _refusal("dinov2-vit-l-14", other)
    assert "\n" not in msg and "not a DINOv2 state dict" in msg and DINOV2_URL in msg


def test_is_refuses_a_backbone_without_logits_and_legacy_tensorflow_on_a_vit():
    assert InceptionScore.problems(InceptionScore.Options(feature_extractor="dinov2-vit-l-14"), None)[0][0] == \
        "feature_extractor"
    [(key, msg)] = FID.problems(FID.Options(feature_extractor="clip-vit-b-32", resize="legacy_tensorflow"), None)
    assert key == "resize" and "clip-vit-b-32" in msg and "pil_uint8_crop" in msg


# ----------------------------------------------------------------------- real weights --


def _real_file(name: str) -> Path:
    folder = os.environ.get("GANKIT_WEIGHTS_DIR", "")
    return Path(folder) / name if folder else Path("$GANKIT_WEIGHTS_DIR") / name


_CLIP_REAL, _DINO_REAL = _real_file(ClipViTB32.weights_file), _real_file(DinoV2ViTL14.weights_file)


@pytest.mark.skipif(not _CLIP_REAL.is_file(), reason=f"the real CLIP weights {_CLIP_REAL} are missing "
                                                     f"(from {CLIP_URL}; gankit never downloads them)")
def test_real_clip_features_equal_cleanfid_with_openai_clip(monkeypatch):
    """With OpenAI's file: clean-fid's CLIP_fx on the CPU (OpenAI's clip package, float32) gives
    our features."""
    clip = pytest.importorskip("clip", reason="OpenAI's clip package (clean-fid's CLIP reference) is not installed")
    import cleanfid.clip_features as cf
    import torchvision.transforms as T

    u8 = _images(64, 64, n=2)
    ours = fx.get_extractor("clip-vit-b-32", str(_CLIP_REAL), "cpu", "fid").extract(u8)["pool"]
    ref = object.__new__(cf.CLIP_fx)
    ref.model = clip.load(str(_CLIP_REAL), device="cpu")[0].eval()
    batch = torch.stack([T.ToTensor()(cf.img_preprocess_clip(a.permute(1, 2, 0).numpy())) * 255 for a in u8])
    torch.testing.assert_close(ours, ref(batch).float(), rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not _DINO_REAL.is_file(), reason=f"the real DINOv2 weights {_DINO_REAL} are missing "
                                                     f"(from {DINOV2_URL}; gankit never downloads them)")
def test_real_dinov2_features_equal_the_hub_model():
    """With Meta's file: the torch hub DINOv2 code (from the local hub cache) on dgm-eval's input
    gives our features."""
    hub = Path(torch.hub.get_dir()) / "facebookresearch_dinov2_main"
    if not hub.is_dir():
        pytest.skip(f"the DINOv2 hub code is not at {hub} (the reference implementation)")
    import torchvision.transforms as T
    from PIL import Image

    model = torch.hub.load(str(hub), "dinov2_vitl14", source="local", pretrained=False)
    model.load_state_dict(torch.load(_DINO_REAL, weights_only=True))
    u8 = _images(64, 64, n=2)
    ours = fx.get_extractor("dinov2-vit-l-14", str(_DINO_REAL), "cpu", "fid").extract(u8)["pool"]
    tf = T.Compose([T.Resize((224, 224), T.InterpolationMode.BICUBIC), T.ToTensor(),
                    T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    x = torch.stack([tf(Image.fromarray(a.permute(1, 2, 0).numpy(), "RGB")) for a in u8])
    with torch.no_grad():
        torch.testing.assert_close(ours, model.eval()(x), rtol=1e-4, atol=1e-4)


def test_a_torchscript_archive_and_a_wrapped_state_dict_are_read(tmp_path):
    """OpenAI's CLIP files are TorchScript archives: their tensors are read as a state dict; a
    ``{"state_dict": ...}`` file with ``module.`` prefixes is unwrapped; a file of another kind
    is refused."""
    from gan_kit.builtin.metrics.vit_backbones import read_state_dict

    net = torch.nn.Linear(3, 2)
    torch.jit.save(torch.jit.script(net), tmp_path / "scripted.pt")
    got = read_state_dict(tmp_path / "scripted.pt")
    assert set(got) == {"weight", "bias"} and torch.equal(got["weight"], net.weight.detach())
    torch.save({"state_dict": {f"module.{k}": v for k, v in net.state_dict().items()}}, tmp_path / "wrapped.pt")
    assert set(read_state_dict(tmp_path / "wrapped.pt")) == {"weight", "bias"}
    torch.save([1, 2], tmp_path / "list.pt")
    with pytest.raises(ValueError, match="not a state dict"):
        read_state_dict(tmp_path / "list.pt")
