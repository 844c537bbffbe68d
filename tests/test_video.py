"""MP4 videos (gan_kit.tools.video) and latent walks: `gankit sample --interpolate --out walk.mp4`
read back with imageio (frame count, size, the first frame against the grid of the first
latents), `--loop`'s closed walk checked on its latent sequence, and the one-line errors."""

from __future__ import annotations

import sys

import imageio.v2 as imageio
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from gan_kit.cli import cli
from gan_kit.runs.checkpoint import load_generator
from gan_kit.tools.grids import grid_frame
from gan_kit.tools.sampling import interpolate_latents, slerp, walk_latents
from gan_kit.tools.seeds import latent_rows
from gan_kit.tools.video import codec_frame, save_mp4

@pytest.fixture(autouse=True)
def _builtins_only(monkeypatch):
    monkeypatch.setenv("GANKIT_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("GANKIT_DEBUG", raising=False)


@pytest.fixture
def sg2_checkpoint(trained_sg2):
    """conftest's tiny stylegan2 (16 px digits, 3 training steps)."""
    return trained_sg2[1]


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def read_mp4(path) -> list[np.ndarray]:
    with imageio.get_reader(path) as reader:
        return [np.asarray(f) for f in reader]


def mean_abs_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.float64) - b.astype(np.float64)).mean())


# ------------------------------------------------------------------------------- latent walks --


def test_a_closed_walk_returns_to_its_first_latent_with_no_frame_twice():
    points = torch.randn(3, 4, 8)  # 3 walks through 4 latents each
    walk = walk_latents(points, 5, loop=True)
    assert walk.shape == (3, 4 * 4, 8)  # 4 segments of 4 new latents: the seam adds none
    # the open walk through the points and back to the first one, whose last latent (the first
    # point again) is exactly the latent that follows the closed walk's last
    there_and_back = walk_latents(torch.cat([points, points[:, :1]], dim=1), 5)
    assert torch.allclose(walk, there_and_back[:, :-1], atol=1e-6)
    assert torch.equal(there_and_back[:, -1], points[:, 0])
    assert torch.equal(walk[:, 0], points[:, 0]) and torch.equal(walk[:, 4], points[:, 1])
    steps = (torch.roll(walk, -1, dims=1) - walk).norm(dim=-1)  # the last step wraps to the first latent
    assert steps.min() > 0  # no latent repeated, at the seam either
    # the last segment is the slerp from the last point back to the first
    t = torch.linspace(0, 1, 5)[:-1].view(1, 4, 1)
    assert torch.allclose(walk[:, -4:], slerp(points[:, 3:], points[:, :1], t), atol=1e-6)


def test_an_open_walk_through_two_points_is_the_interpolation_between_them():
    pairs = torch.randn(2, 2, 8)
    walk = walk_latents(pairs, 6)
    assert walk.shape == (2, 6, 8)
    assert torch.equal(walk, interpolate_latents(pairs, 6))
    assert torch.equal(walk[:, 0], pairs[:, 0]) and torch.equal(walk[:, -1], pairs[:, 1])
    with pytest.raises(ValueError, match="at least 2 points and 2 steps"):
        walk_latents(pairs[:, :1], 6)


# ----------------------------------------------------------------------------------- writing --


def test_frames_are_upscaled_to_even_sides_of_at_least_64_px():
    grey = codec_frame(torch.zeros(8, 8, 1, dtype=torch.uint8))
    assert grey.shape == (64, 64, 3)
    assert codec_frame(torch.zeros(34, 35, 3, dtype=torch.uint8)).shape == (68, 70, 3)  # x2, already even
    odd = codec_frame(torch.full((65, 67, 3), 200, dtype=torch.uint8))
    assert odd.shape == (66, 68, 3) and odd[-1].max() == 0 and odd[:, -1].max() == 0  # black padding
    assert odd[:65, :67].min() == 200


def test_an_mp4_of_a_grid_of_walks_reads_back_frame_by_frame(tmp_path):
    torch.manual_seed(1)
    # smooth images (H.264 keeps them well), 3 walks of 6 frames: a grid of 2 a row, 2 rows
    base = torch.nn.functional.interpolate(torch.rand(3, 6, 1, 2, 2).flatten(0, 1) * 2 - 1, size=8, mode="bilinear")
    frames = base.reshape(3, 6, 1, 8, 8)
    path = tmp_path / "walks.mp4"
    assert save_mp4(frames, path, fps=12) == 6
    video = read_mp4(path)
    assert len(video) == 6
    cell = 32 + 1  # cells upscaled to 32 px, 1 px of padding
    assert video[0].shape == (2 * cell + 1 + 1, 2 * cell + 1 + 1, 3)  # 67 padded to even: 68
    for t in (0, 5):
        expected = codec_frame(grid_frame(frames[:, t])).numpy()
        assert mean_abs_error(video[t], expected) < 3.0  # of 255: codec error only
    assert mean_abs_error(video[0], video[5]) > 3 * mean_abs_error(video[0], codec_frame(grid_frame(frames[:, 0])).numpy())


def test_an_mp4_of_one_image_a_frame_has_the_fps_asked_for(tmp_path):
    path = tmp_path / "one.mp4"
    save_mp4(torch.zeros(4, 3, 16, 16), path, fps=5)
    with imageio.get_reader(path) as reader:
        meta = reader.get_meta_data()
    assert meta["fps"] == 5 and meta["size"] == (64, 64) and meta["codec"] == "h264"
    assert meta["pix_fmt"].startswith("yuv420p")


# ---------------------------------------------------------------------------- gankit sample --


def test_sample_writes_an_mp4_whose_first_frame_is_the_grid_of_the_first_latents(sg2_checkpoint, tmp_path):
    out = tmp_path / "walk.mp4"
    result = invoke("sample", sg2_checkpoint, "-n", "2", "--seed", "3", "--interpolate", "5", "--out", out)
    assert result.exit_code == 0, result.output
    assert "wrote 2 interpolations of 5 images" in result.stdout
    video = read_mp4(out)
    assert len(video) == 5
    G, _, _, arch = load_generator(sg2_checkpoint)
    z = walk_latents(latent_rows(3, 2 * 2, arch.latent_dim).view(2, 2, arch.latent_dim), 5)  # as sample draws
    with torch.no_grad():
        first = G(z[:, 0], noise_mode="const")
        last = G(z[:, -1], noise_mode="const")
    assert mean_abs_error(video[0], codec_frame(grid_frame(first)).numpy()) < 4.0
    assert mean_abs_error(video[-1], codec_frame(grid_frame(last)).numpy()) < 4.0


def test_sample_loop_closes_the_walk_for_mp4_and_gif(sg2_checkpoint, tmp_path):
    result = invoke("sample", sg2_checkpoint, "-n", "2", "--interpolate", "4", "--points", "3", "--loop",
                    "--fps", "10", "--out", tmp_path / "loop.mp4")
    assert result.exit_code == 0, result.output
    assert "wrote 2 closed interpolations of 9 images" in result.stdout
    assert len(read_mp4(tmp_path / "loop.mp4")) == 3 * 3  # 3 segments of 3 new frames each
    assert invoke("sample", sg2_checkpoint, "-n", "2", "--interpolate", "4", "--loop",
                  "--out", tmp_path / "loop.gif").exit_code == 0
    with Image.open(tmp_path / "loop.gif") as im:
        assert im.n_frames == 2 * 3  # played once a loop, not forth and back
        assert im.info["duration"] == 120
    assert invoke("sample", sg2_checkpoint, "-n", "2", "--interpolate", "4", "--fps", "20",
                  "--out", tmp_path / "open.gif").exit_code == 0
    with Image.open(tmp_path / "open.gif") as im:
        assert im.n_frames == 4 + 2 and im.info["duration"] == 50  # forth and back, 1000 / 20 ms


def test_sample_video_errors_are_one_line(sg2_checkpoint, tmp_path, monkeypatch):
    cases = [
        (["--out", tmp_path / "a.mp4"], "error: --out: a .mp4 needs --interpolate STEPS (a grid is written as .png "
                                        "or .jpg)\n"),
        (["--loop"], "error: --loop: shapes a latent walk; add --interpolate STEPS\n"),
        (["--points", "3"], "error: --points: shapes a latent walk; add --interpolate STEPS\n"),
        (["--fps", "5"], "error: --fps: 'grid.png' is a still image; --fps sets the speed of a .gif or .mp4\n"),
    ]
    monkeypatch.chdir(tmp_path)
    for args, line in cases:
        result = invoke("sample", sg2_checkpoint, *args)
        assert (result.exit_code, result.stderr) == (2, line), args
    monkeypatch.setitem(sys.modules, "imageio_ffmpeg", None)  # as if not installed: import fails
    result = invoke("sample", sg2_checkpoint, "--interpolate", "3", "--out", "walk.mp4")
    assert result.exit_code == 2
    assert result.stderr == ("error: --out walk.mp4: writing MP4 needs the imageio-ffmpeg package, not installed here "
                             "(pip install 'gankit[video]')\n")
    assert not (tmp_path / "walk.mp4").exists()
