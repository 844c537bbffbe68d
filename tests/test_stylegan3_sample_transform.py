"""``gankit sample --translate X,Y --rotate DEG``: a StyleGAN3 G's grid and walk frames (GIF,
MP4, strip: all drawn through the same G) are `gankit generate`'s transformed images; other
architectures and bad values are refused in one line."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

import gan_kit.tools.sampling as sampling
from gan_kit.cli import cli
from official_pickles import official_case, write_official_pickle

MOVE = ["--translate", "0.3,-0.2", "--rotate", "25"]


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def _png(path) -> np.ndarray:
    a = np.asarray(Image.open(path)).astype(int)
    return a[..., None] if a.ndim == 2 else a


def _cell(grid: np.ndarray, resolution: int) -> np.ndarray:
    """The first cell of a grid (1-pixel padding, cells upscaled by nearest to >= 32 px), at
    the image's own resolution."""
    step = max(1, 32 // resolution)
    return grid[1:1 + resolution * step:step, 1:1 + resolution * step:step]


@pytest.fixture(scope="module")
def sg3(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sg3")
    path = folder / "network-snapshot-sg3-t.pkl"
    write_official_pickle(official_case("sg3-t"), path)
    out = {}
    for name, flags in (("moved", MOVE), ("plain", [])):
        r = invoke("generate", path, "--seeds", "0", "--outdir", folder / name, *flags)
        assert r.exit_code == 0, r.output
        out[name] = _png(folder / name / "seed0000.png")
    return path, out


def test_sample_grid_draws_generates_transformed_image(sg3, tmp_path):
    """`gankit sample --seeds 0 --translate 0.3,-0.2 --rotate 25`'s cell is generate's image
    with the same flags (at most one level apart: two uint8 roundings), not the untransformed one."""
    path, ref = sg3
    r = invoke("sample", path, "--seeds", "0", "--out", tmp_path / "grid.png", *MOVE)
    assert r.exit_code == 0, r.output
    cell = _cell(_png(tmp_path / "grid.png"), ref["moved"].shape[0])
    assert np.abs(cell - ref["moved"]).max() <= 1
    assert np.abs(cell - ref["plain"]).max() > 10


def test_sample_walk_frames_are_transformed(sg3, tmp_path, monkeypatch):
    """A walk (--interpolate, .gif) from seed 0 with the flags starts on generate's transformed
    image of seed 0 (the frames taken before the GIF's palette)."""
    path, ref = sg3
    frames = []

    def capture(source, out, delay, bounce=True):
        frames.extend(f.numpy().astype(int) for f in source)
        return len(frames)

    monkeypatch.setattr(sampling, "write_gif", capture)
    r = invoke("sample", path, "--seeds", "0,1", "--interpolate", "3", "--out", tmp_path / "walk.gif", *MOVE)
    assert r.exit_code == 0, r.output
    assert len(frames) == 3
    first = _cell(frames[0], ref["moved"].shape[0])
    assert np.abs(first - ref["moved"]).max() <= 1
    assert np.abs(first - ref["plain"]).max() > 10


def test_sample_refuses_the_flags_for_other_architectures_and_bad_values(tmp_path):
    """stylegan2 has no input transform: refused naming it; a bad value names the flag; one
    line, exit 2, before anything is written."""
    sg2 = tmp_path / "sg2.pkl"
    write_official_pickle(official_case("sg3-skip-resnet"), sg2)
    sg3 = tmp_path / "sg3.pkl"
    write_official_pickle(official_case("sg3-t"), sg3)
    for path, flags, words in ((sg2, ["--translate", "0.1,0"], ["stylegan2", "--translate"]),
                               (sg2, ["--rotate", "10", "--interpolate", "2", "--out", tmp_path / "w.gif"],
                                ["stylegan2", "--rotate"]),
                               (sg3, ["--translate", "0.1"], ["--translate", "'0.1'"]),
                               (sg3, ["--rotate", "ten"], ["--rotate", "'ten'"])):
        args = ["sample", path, *flags] + ([] if "--out" in flags else ["--out", tmp_path / "g.png"])
        r = invoke(*args)
        lines = [line for line in r.output.splitlines() if line.strip()]
        assert r.exit_code == 2 and len(lines) == 1, (flags, r.output)
        assert all(w in lines[0] for w in words), (flags, lines)
    assert not (tmp_path / "g.png").exists() and not (tmp_path / "w.gif").exists()
