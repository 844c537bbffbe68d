"""``gankit project``: a tiny trained stylegan2 (16 px digits, a few steps) projects one of its
own images back, closer than the average W's image by far; the projector's schedules and noise
regularisation; projected_w.npz's layout; the target converted as the image-folder data set reads
an image (and the line that says so); the video; and the one-line errors."""

from __future__ import annotations

import re
import sys

import imageio.v2 as imageio
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from gan_kit.builtin.distances import PixelMultiscale
from gan_kit.cli import cli
from gan_kit.runs.checkpoint import load_generator
from gan_kit.tools.project import load_projected_w, save_projected_w, to_png
from gan_kit.tools.projection import (ProjectionSettings, learning_rate, noise_buffers, noise_regularisation, project,
                                      w_noise_scale)
from gan_kit.training.imageio import load_image

@pytest.fixture(autouse=True)
def _builtins_only(monkeypatch):
    monkeypatch.setenv("GANKIT_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("GANKIT_DEBUG", raising=False)


@pytest.fixture(scope="module")
def sg2(trained_sg2, tmp_path_factory):
    """The tiny stylegan2 of conftest (16 px digits, 3 training steps, num_ws 6, W of 8) and one
    of its images (seed 5, constant noise) saved as a 16x16 grey PNG: a target G can reach."""
    checkpoint = trained_sg2[1]
    G, _, _, arch = load_generator(checkpoint)
    with torch.no_grad():
        image = G(torch.randn(1, arch.latent_dim, generator=torch.Generator().manual_seed(5)), noise_mode="const")
    target = tmp_path_factory.mktemp("target") / "target.png"
    to_png(image, target)
    return checkpoint, target


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def png(path) -> torch.Tensor:
    """A PNG as ``[1, C, H, W]`` in [-1, 1]."""
    arr = np.asarray(Image.open(path), dtype=np.float32)
    arr = arr[..., None] if arr.ndim == 2 else arr
    return torch.from_numpy(arr).permute(2, 0, 1).unsqueeze(0) / 127.5 - 1


def average_w_image(G, latent_dim: int) -> torch.Tensor:
    """G's image of the mean of 10,000 mapped latents, with G's own constant noise."""
    with torch.no_grad():
        w = G.mapping(torch.randn(10_000, latent_dim, generator=torch.Generator().manual_seed(1))).mean(0, keepdim=True)
        return G.synthesis(w, noise_mode="const")


# ----------------------------------------------------------------------------------- the math --


def test_the_learning_rate_ramps_up_over_5_percent_and_down_over_the_last_25_percent():
    s = ProjectionSettings(steps=1000)
    assert learning_rate(0, s) == 0.0
    assert learning_rate(25, s) == pytest.approx(0.05)  # half way up the linear ramp
    assert learning_rate(50, s) == learning_rate(500, s) == learning_rate(750, s) == pytest.approx(0.1)
    assert learning_rate(875, s) == pytest.approx(0.05)  # half way down the half cosine
    assert 0 < learning_rate(999, s) < 1e-4


def test_the_w_noise_falls_quadratically_to_zero_at_75_percent():
    s = ProjectionSettings(steps=100)
    assert w_noise_scale(0, 2.0, s) == pytest.approx(0.1)  # 0.05 x w_std
    assert w_noise_scale(int(75 / 2), 2.0, s) == pytest.approx(0.1 * (1 - 37 / 75) ** 2)
    assert w_noise_scale(75, 2.0, s) == w_noise_scale(99, 2.0, s) == 0.0


def test_the_noise_regularisation_is_small_for_white_noise_and_large_for_structure():
    g = torch.Generator().manual_seed(0)
    white = [torch.randn(64, 64, generator=g), torch.randn(8, 8, generator=g)]
    smooth = torch.nn.functional.interpolate(torch.randn(1, 1, 8, 8, generator=g), size=64, mode="bilinear")[0, 0]
    smooth = (smooth - smooth.mean()) / smooth.std()
    assert noise_regularisation(white) < 0.05
    assert noise_regularisation([smooth]) > 1.0  # neighbours nearly equal: autocorrelation near 1 per level
    assert noise_regularisation([]) == 0


def test_projection_optimises_a_copy_of_g_and_its_noise_maps(sg2):
    checkpoint, _ = sg2
    G, _, _, arch = load_generator(checkpoint)
    before = {k: v.clone() for k, v in G.state_dict().items()}
    target = png(sg2[1])
    result = project(G, target, PixelMultiscale(), ProjectionSettings(steps=5, w_avg_samples=100))
    assert all(torch.equal(v, G.state_dict()[k]) for k, v in before.items())  # the caller's G is untouched
    names = {f"{path}.noise_const" for path, m in G.named_modules() if (m, "noise_const") in noise_buffers(G)}
    assert set(result.noise) == names and len(names) == 1 + 2 + 2  # a map per synthesis conv: 4, 8, 16 px
    for name, m in result.noise.items():  # renormalised after every step
        assert m.mean().abs() < 1e-4 and m.square().mean() == pytest.approx(1.0, abs=1e-4)
        assert not torch.equal(m, G.get_buffer(name))


# ------------------------------------------------------------------------------ gankit project --


def test_a_projected_image_is_far_closer_to_the_target_than_the_average_w(sg2, tmp_path):
    """200 steps of the default distance bring G's image to under a quarter of the average W's
    distance to the target (the brief asked < 0.5x; a reachable target gets far below)."""
    checkpoint, target = sg2
    out = tmp_path / "proj"
    result = invoke("project", checkpoint, "--target", target, "--outdir", out, "--steps", "200", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == (f"projecting {target} into W of {checkpoint} (stylegan2, 16px, 6 x 8) "
                                             f"on cpu: 200 steps, distance pixel-multiscale")
    assert "target.png: 16x16 L" not in result.stdout  # already as G sees it: no conversion line
    assert f"wrote {out / 'projected_w.npz'} (w [1, 6, 8]), target.png, proj.png, compare.png in {out}" in result.stdout
    G, _, _, arch = load_generator(checkpoint)
    distance = PixelMultiscale()
    goal = png(out / "target.png")
    assert torch.equal(goal, png(target))
    with Image.open(out / "compare.png") as im:
        assert im.size == (2 * 129 + 1, 128 + 2)  # target | projection, 128 px each, 1 px padding
    projected = distance.distance(png(out / "proj.png"), goal).item()
    average = distance.distance(average_w_image(G, arch.latent_dim).clamp(-1, 1), goal).item()
    assert projected < 0.25 * average, (projected, average)
    # projected_w.npz: key w, float32 [1, num_ws, w_dim], one w for every layer in W
    with np.load(out / "projected_w.npz") as f:
        assert f.files == ["w"] and f["w"].dtype == np.float32 and f["w"].shape == (1, 6, 8)
        w = torch.from_numpy(f["w"])
    assert torch.equal(w, w[:, :1].expand(-1, 6, -1))
    assert torch.equal(load_projected_w(out / "projected_w.npz"), w)
    with torch.no_grad():  # with G's own noise (the npz has no noise maps) the image is close, not equal
        again = G.synthesis(w, noise_mode="const")
    assert distance.distance(again.clamp(-1, 1), goal).item() < 0.5 * average


def test_w_plus_fits_one_w_per_layer(sg2, tmp_path):
    checkpoint, target = sg2
    result = invoke("project", checkpoint, "--target", target, "--outdir", tmp_path, "--steps", "20", "--space", "w+",
                    "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "into W+ of" in result.stdout
    w = load_projected_w(tmp_path / "projected_w.npz")
    assert w.shape == (1, 6, 8) and not torch.equal(w[:, 0], w[:, 1])


def test_an_export_folder_and_a_run_directory_project_as_their_checkpoint(sg2, trained_sg2, tmp_path):
    """The same G read three ways gives the same projection (CPU, one seed)."""
    checkpoint, target = sg2
    run_dir, _, export = trained_sg2
    ws = []
    for i, source in enumerate([checkpoint, run_dir, export]):
        result = invoke("project", source, "--target", target, "--outdir", tmp_path / str(i), "--steps", "5",
                        "--device", "cpu")
        assert result.exit_code == 0, result.output
        ws.append(load_projected_w(tmp_path / str(i) / "projected_w.npz"))
    assert torch.allclose(ws[0], ws[1]) and torch.allclose(ws[0], ws[2], atol=1e-5)


def test_a_plugin_generator_with_styles_projects_too(trained_style_mlp, tmp_path):
    """docs/examples/style_plugin.py's style-mlp implements gan_kit.StyleGenerator (and keeps
    its constant noise in a noise_const buffer): gankit project works on it unchanged."""
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (8, 8), dtype=np.uint8), "L").save(tmp_path / "t.png")
    result = invoke("project", trained_style_mlp, "--target", tmp_path / "t.png", "--outdir", tmp_path / "out",
                    "--steps", "30", "--space", "w+", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "(style-mlp, 8px, 3 x 8)" in result.stdout
    assert load_projected_w(tmp_path / "out" / "projected_w.npz").shape == (1, 3, 8)
    start, end = (float(v) for v in re.findall(r"distance to the target \(pixel-multiscale\): (\S+), from (\S+)",
                                                result.stdout)[0][::-1])
    assert end < start


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_projection_on_cuda_matches_the_cpu(sg2, tmp_path):
    """The latents and the noise are drawn on the CPU, so both devices fit the same W, up to
    float rounding accumulated over the steps."""
    checkpoint, target = sg2
    for device in ("cpu", "cuda"):
        result = invoke("project", checkpoint, "--target", target, "--outdir", tmp_path / device, "--steps", "20",
                        "--device", device)
        assert result.exit_code == 0, result.output
        assert f"on {device}" in result.stdout.splitlines()[0]
    cpu, cuda = (load_projected_w(tmp_path / d / "projected_w.npz") for d in ("cpu", "cuda"))
    assert torch.allclose(cpu, cuda, atol=1e-2)


def test_the_npz_round_trips_and_refuses_what_it_does_not_hold(tmp_path):
    w = torch.randn(1, 6, 4)
    save_projected_w(tmp_path / "w.npz", w)
    assert torch.equal(load_projected_w(tmp_path / "w.npz"), w)
    np.savez(tmp_path / "other.npz", z=np.zeros(3))
    from gan_kit.base.errors import GankitError

    with pytest.raises(GankitError, match=r"other.npz: no array 'w' \(keys: z\); gankit project writes it"):
        load_projected_w(tmp_path / "other.npz")


def test_a_target_of_another_size_and_mode_is_converted_as_the_data_pipeline_and_a_line_says_so(sg2, tmp_path):
    checkpoint, _ = sg2
    rgb = np.random.default_rng(0).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    Image.fromarray(rgb).save(tmp_path / "photo.png")
    result = invoke("project", checkpoint, "--target", tmp_path / "photo.png", "--outdir", tmp_path / "out",
                    "--steps", "2", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == ("photo.png: 64x48 RGB -> 16x16 L (centre crop, resized with Pillow's "
                                             "bicubic filter, antialiased, grey as ITU-R 601 luma), as "
                                             "image-folder reads a training image")
    with Image.open(tmp_path / "out" / "target.png") as im:
        assert (im.size, im.mode) == ((16, 16), "L")
        seen = torch.from_numpy(np.asarray(im).copy())
    assert torch.equal(seen, load_image(tmp_path / "photo.png", 16, 1)[0])  # the pipeline's own pixels


def test_the_conversion_line_names_only_what_changed(tmp_path):
    from gan_kit.tools.project import read_target

    Image.new("L", (16, 16), 40).save(tmp_path / "same.png")
    Image.new("L", (20, 16), 40).save(tmp_path / "wide.png")
    Image.new("RGBA", (16, 16), (255, 0, 0, 0)).save(tmp_path / "clear.png")
    Image.new("L", (8, 8), 40).save(tmp_path / "small.png")
    assert read_target(tmp_path / "same.png", 16, 1).note is None
    assert read_target(tmp_path / "wide.png", 16, 1).note == ("wide.png: 20x16 L -> 16x16 L (centre crop), as "
                                                              "image-folder reads a training image")
    clear = read_target(tmp_path / "clear.png", 16, 3)
    assert clear.note == ("clear.png: 16x16 RGBA -> 16x16 RGB (transparency over [255, 255, 255]), as image-folder "
                          "reads a training image")
    assert torch.equal(clear.image, torch.ones(1, 3, 16, 16))  # fully transparent: the white background
    small = read_target(tmp_path / "small.png", 16, 3)
    assert small.note == ("small.png: 8x8 L -> 16x16 RGB (resized with Pillow's bicubic filter, grey repeated to "
                          "RGB), as image-folder reads a training image")
    assert small.image.shape == (1, 3, 16, 16)


def test_the_video_shows_target_and_projection_side_by_side_every_kth_step(sg2, tmp_path):
    checkpoint, target = sg2
    result = invoke("project", checkpoint, "--target", target, "--outdir", tmp_path, "--steps", "9", "--video",
                    "--video-every", "4", "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert "compare.png, proj.mp4 in" in result.stdout and "(3 frames)" in result.stdout  # steps 4, 8 and the last, 9
    with imageio.get_reader(tmp_path / "proj.mp4") as reader:
        frames = [np.asarray(f) for f in reader]
    # two 32 px cells and their padding, 34 x 67, upscaled x2 to reach 64 px and padded to even sides
    assert len(frames) == 3 and frames[0].shape == (68, 134, 3)
    left = frames[-1][2:66:2, 2:66:2].astype(np.float64)  # the target's cell, grey in all three channels
    expected = np.asarray(Image.open(tmp_path / "target.png").resize((32, 32), Image.NEAREST), dtype=np.float64)
    assert np.abs(left[..., 0] - expected).mean() < 4.0


def test_project_errors_are_one_line(sg2, trained_pggan, tmp_path, monkeypatch):
    checkpoint, target = sg2
    (tmp_path / "file").write_text("x")
    common = ["--outdir", tmp_path / "out", "--steps", "1", "--device", "cpu"]
    cases = [
        ([trained_pggan, "--target", target],
         "error: architecture 'pggan' has no per-layer styles (no mapping network); projecting an image into W needs "
         "one, e.g. stylegan2\n"),
        ([checkpoint, "--target", tmp_path / "none.png"],
         f"error: --target: {str(tmp_path / 'none.png')!r} does not exist (give an image file: .png, .jpg, ...)\n"),
        ([checkpoint, "--target", tmp_path / "file"],
         f"error: --target: {str(tmp_path / 'file')!r} is not an image Pillow can read (cannot identify image file "
         f"{str(tmp_path / 'file')!r})\n"),
        ([checkpoint, "--target", target, "--distance", "lpips"],
         "error: --distance: unknown distance 'lpips' (did you mean 'lpips-vgg16'?); available: lpips-vgg16, "
         "pixel-multiscale\n"),
        ([checkpoint, "--target", target, "--set-distance", "pixel_weigth=2"],
         "error: --set-distance: pixel-multiscale.pixel_weigth: unknown option (did you mean 'pixel_weight'?)\n"),
        ([checkpoint, "--target", target, "--set-distance", "pixel_weight"],
         "error: --set-distance 'pixel_weight': write KEY=VALUE, KEY one of distance pixel-multiscale's options "
         "(pixel_weight, pyramid_weight, min_size), e.g. --set-distance pixel_weight=1.0\n"),
        ([checkpoint, "--target", target, "--set-distance", "min_size=0"],
         "error: --set-distance: pixel-multiscale.min_size: must be >= 1, got 0 (see gankit list-plugins --kind "
         "distance -v)\n"),
        ([checkpoint, "--target", target, "--distance", "lpips-vgg16"],
         "error: distance lpips-vgg16: weights: not set (--set-distance weights=PATH, with PATH torchvision's VGG16 "
         "ImageNet state dict vgg16-397923af.pth (https://download.pytorch.org/models/vgg16-397923af.pth; gankit "
         "never downloads it))\n"),
        ([checkpoint, "--target", target, "--class", "3"],
         f"error: --class: {checkpoint} is not class-conditional (its recipe has no architecture.conditional = "
         f"true); leave --class out\n"),
        ([checkpoint, "--target", target, "--video-every", "2"],
         "error: --video-every: shapes the video, which is written with --video only (add --video)\n"),
    ]
    for args, line in cases:
        result = invoke("project", *args, *common)
        assert (result.exit_code, result.stderr) == (2, line), args
    result = invoke("project", checkpoint, "--target", target, "--outdir", tmp_path / "file", "--steps", "1")
    assert (result.exit_code, result.stderr) == (2, f"error: --outdir: {str(tmp_path / 'file')!r} is a file; name a "
                                                    f"folder (it is made when missing)\n")
    monkeypatch.setitem(sys.modules, "imageio", None)  # as if not installed
    result = invoke("project", checkpoint, "--target", target, "--video", *common)
    assert (result.exit_code, result.stderr) == (2, "error: --video: writing MP4 needs the imageio package, not "
                                                    "installed here (pip install 'gankit[video]')\n")
    assert not (tmp_path / "out").exists()  # nothing was written before the refusal


def test_lpips_computes_the_targets_features_once_per_projection(sg2, tmp_path):
    """Over a projection with lpips-vgg16 (random VGG16 weights), the feature network sees the
    target once - not at every step - and G's image at every step; the distance against the
    target's stored features equals the distance computed on the pair."""
    from gan_kit.builtin.distances.lpips import LpipsVGG16, VGG16Features

    torch.manual_seed(0)
    vgg = VGG16Features()
    for m in vgg.modules():
        if isinstance(m, torch.nn.Conv2d):
            torch.nn.init.kaiming_normal_(m.weight)
    torch.save({f"features.{k}": v for k, v in vgg.layers.state_dict().items()}, tmp_path / "vgg.pth")
    lpips = LpipsVGG16(LpipsVGG16.Options(weights=str(tmp_path / "vgg.pth"), resize=32))
    G, _, _, _ = load_generator(sg2[0])
    target = png(sg2[1])
    prepared_target = lpips.prepare(target)
    seen = []
    forward = lpips.net.forward

    def counting(x):
        seen.append(sum(bool(torch.equal(row, prepared_target[0])) for row in x))
        return forward(x)

    lpips.net.forward = counting
    steps = 4
    result = project(G, target, lpips, ProjectionSettings(steps=steps, w_avg_samples=100))
    assert sum(seen) == 1 and seen[0] == 1  # the target: once, first
    assert len(seen) == 1 + 1 + steps + 1  # the target, the average W's image, each step's image, the result
    with torch.no_grad():
        both = lpips.distance(result.image, target)
        stored = lpips.distance_to(result.image, lpips.prepare_target(target))
    assert torch.allclose(stored, both, rtol=1e-5) and stored.item() == pytest.approx(result.distance, rel=1e-5)
