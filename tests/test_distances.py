"""The ``distance`` kind: the built-in ``pixel-multiscale`` (its formula) and ``lpips-vgg16``
(with a randomly initialised VGG16 state dict in a file, since the real weights are not there
offline): one value per image, zero for identical images, growing with a perturbation,
differentiable; LPIPS's preprocessing (grey to RGB, the resize to 256 px) and its one-line
errors for every wrong weights file."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner

from gan_kit.base.errors import GankitError
from gan_kit.cli import cli
from gan_kit.plugin_api.components import BuildContext
from gan_kit.plugin_api.manager import build_plugins



@pytest.fixture(scope="module")
def registry():
    return build_plugins(load_entry_points=False).registry


def make(registry, name, **options):
    comp = registry.get("distance", name)
    return comp.factory(comp.Options(**options), BuildContext(resolution=16, channels=1))


@pytest.fixture(scope="module")
def vgg_file(tmp_path_factory):
    """A VGG16 state dict with torchvision's keys (``features.<i>.*``; the classifier left out,
    which the distance does not read) and random weights, He-initialised so features stay alive."""
    from gan_kit.builtin.distances.lpips import VGG16Features

    torch.manual_seed(0)
    net = VGG16Features()
    for m in net.modules():
        if isinstance(m, torch.nn.Conv2d):
            torch.nn.init.kaiming_normal_(m.weight)
            torch.nn.init.normal_(m.bias, std=0.01)
    path = tmp_path_factory.mktemp("vgg") / "vgg16-random.pth"
    torch.save({f"features.{k}": v for k, v in net.layers.state_dict().items()}, path)
    return path


def images(n=2, c=1, side=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    # smooth images, like a generator's, in [-1, 1]
    small = torch.rand(n, c, side // 4, side // 4, generator=g) * 2 - 1
    return F.interpolate(small, size=side, mode="bilinear", align_corners=False)


@pytest.mark.parametrize("name", ["pixel-multiscale", "lpips-vgg16"])
def test_a_distance_is_one_value_per_image_zero_when_equal_growing_with_the_difference(registry, vgg_file, name):
    options = {"weights": str(vgg_file), "resize": 32} if name == "lpips-vgg16" else {}
    distance = make(registry, name, **options)
    a = images(3)
    noise = torch.randn(a.shape, generator=torch.Generator().manual_seed(1))
    same = distance.distance(a, a.clone())
    assert same.shape == (3,) and same.dtype == torch.float32
    assert same.abs().max() < 1e-6
    small, large = distance.distance(a + 0.05 * noise, a), distance.distance(a + 0.5 * noise, a)
    assert (small > 0).all() and (large > 2 * small).all()
    x = (a + 0.3 * noise).requires_grad_(True)
    distance.distance(x, a).sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    # a step against the gradient brings the images closer: what the projector relies on
    with torch.no_grad():
        before = distance.distance(x, a)
        after = distance.distance(x - 0.01 * x.grad / x.grad.flatten(1).norm(dim=1).view(-1, 1, 1, 1), a)
    assert (after < before).all()


def test_pixel_multiscale_is_the_pixel_error_plus_the_mean_error_of_its_pyramid(registry):
    a, b = images(2, c=3, seed=2), images(2, c=3, seed=3)
    mse = lambda x, y: (x - y).square().mean(dim=(1, 2, 3))  # noqa: E731
    pool = lambda x: F.avg_pool2d(x, 2)  # noqa: E731
    # 16 px: levels at 8 and 4 px
    expected = mse(a, b) + 0.5 * (mse(pool(a), pool(b)) + mse(pool(pool(a)), pool(pool(b))))
    assert torch.allclose(make(registry, "pixel-multiscale").distance(a, b), expected, rtol=1e-5)
    weighted = make(registry, "pixel-multiscale", pixel_weight=2.0, pyramid_weight=3.0, min_size=8).distance(a, b)
    assert torch.allclose(weighted, 2 * mse(a, b) + 3 * mse(pool(a), pool(b)), rtol=1e-5)  # one level: 8 px
    plain = make(registry, "pixel-multiscale", pyramid_weight=0.0).distance(a, b)
    assert torch.allclose(plain, mse(a, b), rtol=1e-6)
    with pytest.raises(ValueError, match=r"distance pixel-multiscale: expected two image batches \[N, C, H, W\] "
                                         r"of one shape, got \(2, 3, 16, 16\) and \(2, 3, 8, 8\)"):
        make(registry, "pixel-multiscale").distance(a, b[..., :8, :8])


def test_lpips_repeats_grey_to_rgb_and_resizes_to_256_px_as_the_projector(registry, vgg_file):
    lpips = make(registry, "lpips-vgg16", weights=str(vgg_file))
    grey = images(1, c=1, side=16)
    up = lpips.prepare(grey)
    assert up.shape == (1, 3, 256, 256)  # smaller: bilinear up to 256
    assert torch.allclose(up[:, 0] * 0.229 + 0.485, up[:, 1] * 0.224 + 0.456, atol=1e-6)  # grey in every channel
    big = images(1, c=3, side=512)
    assert torch.allclose(lpips.prepare(big), lpips.prepare(F.avg_pool2d(big, 2)), atol=1e-6)  # larger: area
    exact = images(1, c=3, side=256)
    assert torch.allclose(lpips.prepare(exact)[:, 2:] * 0.225 + 0.406, (exact[:, 2:] + 1) / 2, atol=1e-6)  # ImageNet std
    kept = make(registry, "lpips-vgg16", weights=str(vgg_file), resize=0).prepare(grey)
    assert kept.shape == (1, 3, 16, 16)
    rgb = grey.expand(-1, 3, -1, -1)
    small = make(registry, "lpips-vgg16", weights=str(vgg_file), resize=32)
    b = images(1, c=1, side=16, seed=5)
    assert torch.allclose(small.distance(grey, b), small.distance(rgb, b.expand(-1, 3, -1, -1)))


def test_lpips_reads_the_linear_layers_from_weights_or_lin_weights(registry, vgg_file, tmp_path):
    a, b = images(2), images(2, seed=4)
    channels = (64, 128, 256, 512, 512)
    ones = {f"lin{i}.model.1.weight": torch.ones(1, c, 1, 1) for i, c in enumerate(channels)}
    twice = {k: 2 * v for k, v in ones.items()}
    torch.save(ones, tmp_path / "ones.pth")
    torch.save(twice, tmp_path / "vgg.pth")
    merged = {**torch.load(vgg_file, weights_only=True), **twice}
    torch.save(merged, tmp_path / "merged.pth")
    uniform = make(registry, "lpips-vgg16", weights=str(vgg_file), resize=32).distance(a, b)
    assert torch.allclose(make(registry, "lpips-vgg16", weights=str(vgg_file), resize=32,
                               lin_weights=str(tmp_path / "ones.pth")).distance(a, b), uniform)
    doubled = make(registry, "lpips-vgg16", weights=str(vgg_file), resize=32, lin_weights=str(tmp_path / "vgg.pth"))
    assert torch.allclose(doubled.distance(a, b), 2 * uniform, rtol=1e-5)
    inside = make(registry, "lpips-vgg16", weights=str(tmp_path / "merged.pth"), resize=32)
    assert torch.allclose(inside.distance(a, b), 2 * uniform, rtol=1e-5)


def test_lpips_weights_problems_are_one_line_naming_the_option_the_path_and_the_file_that_works(registry, vgg_file,
                                                                                                tmp_path):
    tv = ("torchvision's VGG16 ImageNet state dict vgg16-397923af.pth "
          "(https://download.pytorch.org/models/vgg16-397923af.pth; gankit never downloads it)")
    lin = ("the LPIPS project's lpips/weights/v0.1/vgg.pth (richzhang/PerceptualSimilarity on GitHub, or inside the "
           "lpips pip package; gankit never downloads it)")
    (tmp_path / "junk.pth").write_bytes(b"not a torch file")
    torch.save({"conv.weight": torch.zeros(3)}, tmp_path / "other.pth")
    state = torch.load(vgg_file, weights_only=True)
    torch.save({**state, "features.28.weight": torch.zeros(512, 512, 1, 1)}, tmp_path / "shape.pth")
    torch.save([torch.zeros(1)], tmp_path / "list.pth")
    torch.save({"lin0.model.1.weight": torch.ones(1, 64, 1, 1)}, tmp_path / "lin.pth")
    cases = [
        ({}, f"distance lpips-vgg16: weights: not set (--set-distance weights=PATH, with PATH {tv})"),
        ({"weights": str(tmp_path / "none.pth")},
         f"distance lpips-vgg16: weights: no file {str(tmp_path / 'none.pth')!r} (give {tv})"),
        ({"weights": str(tmp_path / "other.pth")},
         f"distance lpips-vgg16: weights: {str(tmp_path / 'other.pth')!r} has no VGG16 convolution '0.weight' "
         f"(give {tv})"),
        ({"weights": str(tmp_path / "shape.pth")},
         f"distance lpips-vgg16: weights: {str(tmp_path / 'shape.pth')!r}: 'features.28.weight' is [512, 512, 1, 1], "
         f"VGG16's is [512, 512, 3, 3] (give {tv})"),
        ({"weights": str(tmp_path / "list.pth")},
         f"distance lpips-vgg16: weights: {str(tmp_path / 'list.pth')!r} holds a list, not a state dict of tensors; "
         f"give {tv}"),
        ({"weights": str(vgg_file), "lin_weights": str(tmp_path / "lin.pth")},
         f"distance lpips-vgg16: lin_weights: {str(tmp_path / 'lin.pth')!r}: 'lin1.model.1.weight' is missing, "
         f"LPIPS's is [1, 128, 1, 1] (give {lin})"),
    ]
    for options, line in cases:
        with pytest.raises(GankitError) as e:
            make(registry, "lpips-vgg16", **options)
        assert str(e.value) == line
    with pytest.raises(GankitError) as e:
        make(registry, "lpips-vgg16", weights=str(tmp_path / "junk.pth"))
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(f"distance lpips-vgg16: weights: {str(tmp_path / 'junk.pth')!r} is not a state dict "
                              f"torch.load reads with weights_only=True (")
    assert message.endswith(f"); give {tv}")


def test_list_plugins_shows_the_distance_kind(monkeypatch):
    monkeypatch.setenv("GANKIT_DISABLE_PLUGIN_AUTOLOAD", "1")
    result = CliRunner().invoke(cli, ["list-plugins", "--kind", "distance", "--json", "-v"])
    assert result.exit_code == 0, result.output
    items = {i["name"]: i for i in json.loads(result.stdout)}
    assert set(items) == {"pixel-multiscale", "lpips-vgg16"}
    assert items["lpips-vgg16"]["plugin"] == "gan_kit.builtin.distances.lpips"
    assert {o["name"] for o in items["lpips-vgg16"]["options"]} == {"weights", "lin_weights", "resize"}
