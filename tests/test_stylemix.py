"""``gankit style-mix``: stylegan2-ada-pytorch's style-mixing grid - the column seeds' images
along the top, the row seeds' down the left, in each cell the synthesis of the row seed's ws
with the layers --styles taken from the column seed (style_mixing.py's rule; --from-rows the
other way round), --styles defaulting to the coarse layers - for the built-in stylegan2 and a
plugin G implementing ``gan_kit.StyleGenerator``; and the one-line refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from gan_kit.cli import cli
from gan_kit.runs.session import train
from gan_kit.testing import make_run
from gan_kit.tools.grids import to_uint8
from gan_kit.tools.seeds import seed_latents
from gan_kit.tools.stylemix import default_styles, mixed_styles
from gan_kit.tools.trained import open_generator

ROWS, COLS = [85, 100, 75], [55, 821, 1789, 3]


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def cells(path, side: int) -> np.ndarray:
    """The grid PNG of a 1-channel G as uint8 cells ``[rows + 1, cols + 1, side, side]``."""
    with Image.open(path) as im:
        a = np.array(im)
    h, w = a.shape[0] // side, a.shape[1] // side
    return a.reshape(h, side, w, side).transpose(0, 2, 1, 3)


def by_hand(trained, rows, cols, styles, labels=None, psi=1.0, from_rows=False) -> np.ndarray:
    """The mixed cells ``[R, C, r, r]`` uint8 by style_mixing.py's rule, ``w = w_dict[row_seed].clone();
    w[col_styles] = w_dict[col_seed][col_styles]`` (``from_rows``: row and column swapped), each
    seed mapped alone, as generate and style-mix map it."""
    row_ws = trained.styles(seed_latents(rows, trained.latent_dim), None if labels is None else labels[:len(rows)], psi,
                            batch_size=1)
    col_ws = trained.styles(seed_latents(cols, trained.latent_dim), None if labels is None else labels[:len(cols)], psi,
                            batch_size=1)
    mixed = []
    for r in range(len(rows)):
        for c in range(len(cols)):
            w = (col_ws[c] if from_rows else row_ws[r]).clone()
            w[styles] = (row_ws[r] if from_rows else col_ws[c])[styles]
            mixed.append(w)
    images = trained.synthesize(torch.stack(mixed))
    return to_uint8(images)[:, 0].numpy().reshape(len(rows), len(cols), *images.shape[-2:])


@pytest.fixture(scope="module")
def conditional_sg2(tmp_path_factory):
    """A class-conditional StyleGAN2 (10 digit classes, 8 px, num_ws 4) trained 2 steps."""
    run = make_run(tmp_path_factory.mktemp("cond-sg2"), overrides=[
        "architecture={name='stylegan2', latent_dim=8, w_dim=8, mapping_layers=2, channel_base=32, channel_max=8, "
        "d_mapping_layers=2, conditional=true}", "growth={name='static', batch_size=8}", "penalty=[]"])
    train(run, max_steps=2)
    return run.save_checkpoint("latest")


def test_cells_are_the_synthesis_of_the_mixed_ws_and_the_edges_are_generates_images(tmp_path, trained_sg2):
    run_dir, checkpoint, _ = trained_sg2
    out = tmp_path / "grid.png"
    result = invoke("style-mix", run_dir, "--rows", "85,100,75", "--cols", "55,821,1789,3", "--styles", "0-2",
                    "--out", out, "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert result.stdout == (f"wrote a 3 x 4 style-mixing grid (layers 0-2 of 6 from the column seeds) of 16px images "
                             f"to {out}\n")
    with Image.open(out) as im:
        assert (im.mode, im.size) == ("L", (16 * 5, 16 * 4))  # no padding, no upscaling
    grid = cells(out, 16)
    trained = open_generator(checkpoint)
    mixed = by_hand(trained, ROWS, COLS, [0, 1, 2])
    assert np.array_equal(grid[1:, 1:], mixed)
    assert (grid[0, 0] == 0).all()  # the blank corner
    for name, seeds in (("cols", COLS), ("rows", ROWS)):  # the edges: generate's images of those seeds
        folder = tmp_path / name
        assert invoke("generate", checkpoint, "--seeds", ",".join(map(str, seeds)), "--outdir", folder).exit_code == 0
        edge = grid[0, 1:] if name == "cols" else grid[1:, 0]
        for k, seed in enumerate(seeds):
            with Image.open(folder / f"seed{seed:04d}.png") as im:
                assert np.array_equal(edge[k], np.array(im)), (name, seed)
    # the column seed's coarse layers changed each row seed's image
    assert all(not np.array_equal(grid[1 + r, 1 + c], grid[1 + r, 0]) for r in range(3) for c in range(4))
    # all the layers from the column seed: the column seed's own image in every cell
    assert invoke("style-mix", checkpoint, "--rows", "85,100,75", "--cols", "55,821,1789,3", "--styles", "0-5",
                  "--out", tmp_path / "all.png").exit_code == 0
    every = cells(tmp_path / "all.png", 16)
    assert all(np.array_equal(every[1 + r, 1 + c], every[0, 1 + c]) for r in range(3) for c in range(4))


def test_a_cell_is_the_row_seeds_w_with_the_column_seeds_styles_as_style_mixing_py(tmp_path, trained_sg2):
    """style_mixing.py's rule computed from the seeds' ws directly: cell (r, c) is row seed r's ws
    with layers --styles from column seed c; --from-rows is the transposed rule, and the two differ."""
    _, checkpoint, _ = trained_sg2
    trained = open_generator(checkpoint)
    rows, cols = [85, 100], [55, 821, 1789]
    for flag, from_rows in (([], False), (["--from-rows"], True)):
        out = tmp_path / f"{from_rows}.png"
        result = invoke("style-mix", checkpoint, "--rows", "85,100", "--cols", "55,821,1789", "--styles", "0,2",
                        *flag, "--out", out)
        assert result.exit_code == 0, result.output
        assert f"from the {'row' if from_rows else 'column'} seeds" in result.output
        row_ws = trained.styles(seed_latents(rows, trained.latent_dim), None, 1.0, batch_size=1)
        col_ws = trained.styles(seed_latents(cols, trained.latent_dim), None, 1.0, batch_size=1)
        for r in range(2):
            for c in range(3):
                w = (col_ws[c] if from_rows else row_ws[r]).clone()
                w[[0, 2]] = (row_ws[r] if from_rows else col_ws[c])[[0, 2]]
                expected = to_uint8(trained.synthesize(w[None]))[0, 0].numpy()
                assert np.array_equal(cells(out, 16)[1 + r, 1 + c], expected), (from_rows, r, c)
    assert not np.array_equal(cells(tmp_path / "True.png", 16)[1:, 1:], cells(tmp_path / "False.png", 16)[1:, 1:])


def test_styles_default_to_the_coarse_layers_scaled_from_style_mixing_pys_0_6_at_num_ws_18(tmp_path, trained_sg2):
    assert default_styles(18) == list(range(7))  # style_mixing.py's default on a 1024 px G
    assert [len(default_styles(n)) for n in (1, 3, 4, 6, 10, 14, 16)] == [1, 1, 2, 2, 4, 5, 6]
    _, checkpoint, _ = trained_sg2
    out = tmp_path / "default.png"
    result = invoke("style-mix", checkpoint, "--rows", "1,2", "--cols", "3", "--out", out)
    assert result.exit_code == 0, result.output
    assert "(layers 0-1 of 6 from the column seeds)" in result.output
    assert np.array_equal(cells(out, 16)[1:, 1:], by_hand(open_generator(checkpoint), [1, 2], [3], [0, 1]))


def test_mixed_styles_replaces_the_chosen_layers_only():
    row_ws, col_ws = torch.zeros(2, 5, 3), torch.ones(3, 5, 3)
    row_ws[1] = 2
    col_ws[2] = 3
    mixed = mixed_styles(row_ws, col_ws, [3, 1, 1]).view(2, 3, 5, 3)  # the row's W, layers 1 and 3 the column's
    assert (mixed[0, :, [0, 2, 4]] == 0).all() and (mixed[1, :, [0, 2, 4]] == 2).all()
    assert (mixed[:, :2, [1, 3]] == 1).all() and (mixed[:, 2, [1, 3]] == 3).all()
    swapped = mixed_styles(row_ws, col_ws, [3, 1, 1], from_rows=True).view(2, 3, 5, 3)  # the column's W
    assert (swapped[:, :2, [0, 2, 4]] == 1).all() and (swapped[:, 2, [0, 2, 4]] == 3).all()
    assert (swapped[0, :, [1, 3]] == 0).all() and (swapped[1, :, [1, 3]] == 2).all()
    assert (row_ws[0] == 0).all() and (col_ws[:2] == 1).all()  # its inputs are left alone


def test_truncation_and_noise_reach_every_cell(tmp_path, trained_sg2):
    _, checkpoint, _ = trained_sg2
    out = tmp_path / "t.png"
    assert invoke("style-mix", checkpoint, "--rows", "1,2", "--cols", "3", "--styles", "3-5", "--truncation", "0",
                  "--out", out).exit_code == 0
    grid = cells(out, 16)  # psi 0: every seed's W is w_avg, so every image is the same
    assert all(np.array_equal(grid[i, j], grid[0, 1]) for i, j in [(1, 0), (2, 0), (1, 1), (2, 1)])
    result = invoke("style-mix", checkpoint, "--rows", "1", "--cols", "3", "--styles", "0", "--noise-mode", "none",
                    "--out", tmp_path / "n.png")
    assert result.exit_code == 0, result.output


def test_a_plugin_g_implementing_the_style_protocol_mixes(tmp_path, trained_style_mlp):
    """docs/examples/style_plugin.py's style-mlp (3 layers, W of 8): the grid is its synthesis of
    the mixed ws, like stylegan2's."""
    out = tmp_path / "grid.png"
    result = invoke("style-mix", trained_style_mlp, "--rows", "4,5", "--cols", "6,7,8", "--styles", "1", "--out", out)
    assert result.exit_code == 0, result.output
    assert "layers 1 of 3 from the column seeds) of 8px images" in result.output
    grid = cells(out, 8)
    assert grid.shape == (3, 4, 8, 8)
    assert np.array_equal(grid[1:, 1:], by_hand(open_generator(trained_style_mlp), [4, 5], [6, 7, 8], [1]))


def test_a_class_conditional_g_mixes_one_class(tmp_path, conditional_sg2):
    result = invoke("style-mix", conditional_sg2, "--rows", "1,2", "--cols", "3,4", "--styles", "0-1", "--out",
                    tmp_path / "g.png")
    assert result.exit_code == 2
    assert result.output == f"error: {conditional_sg2} is class-conditional (10 classes): give --class K, an index 0 to 9\n"
    assert invoke("style-mix", conditional_sg2, "--rows", "1,2", "--cols", "3,4", "--styles", "0-1", "--class", "7",
                  "--out", tmp_path / "g.png").exit_code == 0
    trained = open_generator(conditional_sg2)
    sevens = torch.full((2,), 7, dtype=torch.int64)
    assert np.array_equal(cells(tmp_path / "g.png", 8)[1:, 1:], by_hand(trained, [1, 2], [3, 4], [0, 1], sevens))
    assert not np.array_equal(by_hand(trained, [1, 2], [3, 4], [0, 1], sevens),
                              by_hand(trained, [1, 2], [3, 4], [0, 1], torch.full((2,), 2, dtype=torch.int64)))


def test_what_cannot_be_mixed_is_refused_in_one_line(tmp_path, trained_sg2, trained_pggan):
    _, checkpoint, _ = trained_sg2
    base = ["--rows", "1,2", "--cols", "3", "--out", tmp_path / "g.png"]
    result = invoke("style-mix", trained_pggan, *base, "--styles", "0")
    assert result.exit_code == 2
    assert result.output == ("error: architecture 'pggan' has no per-layer styles (no mapping network); style mixing "
                             "needs one, e.g. stylegan2\n")
    result = invoke("style-mix", checkpoint, *base, "--styles", "0-6")
    assert result.output == ("error: --styles: layer 6 is out of range: this G has num_ws = 6 layers, 0 to 5 "
                             "(e.g. --styles 0-1, the coarse layers and the default)\n")
    result = invoke("style-mix", checkpoint, "--rows", "2-1", "--cols", "3", "--styles", "0", "--out", tmp_path / "g.png")
    assert result.output == "error: --rows: '2-1' has the reversed range 2-1; write it from low to high, 1-2\n"
    result = invoke("style-mix", checkpoint, "--rows", "1", "--cols", "x", "--styles", "0", "--out", tmp_path / "g.png")
    assert result.exit_code == 2 and result.output.startswith("error: --cols: 'x' has 'x', which is neither a number")
    result = invoke("style-mix", checkpoint, *base[:4], "--styles", "0", "--out", tmp_path / "g.jpg")
    assert result.output == f"error: --out: '{tmp_path / 'g.jpg'}' is not a .png (the grid is written lossless, pixel for pixel)\n"
    result = invoke("style-mix", checkpoint, *base, "--styles", "0", "--class", "1")
    assert result.exit_code == 2 and "is not class-conditional" in result.output
    assert not (tmp_path / "g.png").exists()
