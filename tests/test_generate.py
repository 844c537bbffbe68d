"""``gankit generate``: one lossless PNG per seed at G's resolution, the same image that ``gankit
sample --seed S -n 1`` and the exported model.ts / model.onnx draw for seed S, from a checkpoint,
a run directory and an export folder alike; seed lists and their one-line errors; ``--w`` W
files (the projector's npz) round trip through ``G.synthesis``; classes, noise modes, devices."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from gan_kit.cli import cli
from gan_kit.runs.session import train
from gan_kit.testing import make_run
from gan_kit.tools.grids import save_image, to_uint8
from gan_kit.tools.seeds import parse_numbers, seed_latents
from gan_kit.tools.trained import open_generator


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def png(path) -> np.ndarray:
    with Image.open(path) as im:
        return np.array(im)


def gray(images: torch.Tensor) -> np.ndarray:
    """``images[N, 1, H, W]`` in [-1, 1] as the uint8 ``[N, H, W]`` a mode-L PNG holds."""
    return to_uint8(images)[:, 0].numpy()


@pytest.fixture(scope="module")
def conditional_pggan(tmp_path_factory):
    """A class-conditional PGGAN (10 digit classes) trained 2 steps."""
    run = make_run(tmp_path_factory.mktemp("cond"), overrides=["architecture.conditional=true"])
    train(run, max_steps=2)
    return run.save_checkpoint("latest")


def test_one_png_per_seed_named_by_seed_at_g_resolution(tmp_path, trained_sg2):
    _, checkpoint, _ = trained_sg2
    out = tmp_path / "out"
    result = invoke("generate", checkpoint, "--seeds", "0-2,12345,1", "--outdir", out, "--device", "cpu")
    assert result.exit_code == 0, result.output
    assert result.stdout == f"wrote 4 images (seed0000.png ... seed12345.png) at 16px to {out}\n"
    assert sorted(p.name for p in out.iterdir()) == ["seed0000.png", "seed0001.png", "seed0002.png", "seed12345.png"]
    with Image.open(out / "seed0001.png") as im:
        assert (im.mode, im.size, im.format) == ("L", (16, 16), "PNG")  # G's resolution, no upscaling
    trained = open_generator(checkpoint)
    expected = gray(trained.draw(seed_latents([0, 1, 2, 12345], 8), batch_size=1))
    for i, name in enumerate(["seed0000.png", "seed0001.png", "seed0002.png", "seed12345.png"]):
        assert np.array_equal(png(out / name), expected[i])  # lossless: the pixels of G's image
    assert not np.array_equal(expected[0], expected[1])


def test_a_seeds_png_does_not_depend_on_the_other_seeds_of_the_list(tmp_path, trained_sg2):
    """Each seed is drawn alone, so `--seeds 5` and `--seeds 0-69` write the same seed0005.png
    byte for byte on every machine (a batched convolution may round its last float bits by batch
    size, which can move a pixel by one level)."""
    _, checkpoint, _ = trained_sg2
    assert invoke("generate", checkpoint, "--seeds", "5", "--outdir", tmp_path / "alone").exit_code == 0
    assert invoke("generate", checkpoint, "--seeds", "0-69", "--outdir", tmp_path / "many").exit_code == 0
    assert len(list((tmp_path / "many").iterdir())) == 70
    assert (tmp_path / "alone" / "seed0005.png").read_bytes() == (tmp_path / "many" / "seed0005.png").read_bytes()


def test_the_same_seed_is_the_image_sample_draws_for_it(tmp_path, trained_sg2):
    _, checkpoint, _ = trained_sg2
    assert invoke("generate", checkpoint, "--seeds", "7", "--outdir", tmp_path, "--device", "cpu").exit_code == 0
    result = invoke("sample", checkpoint, "--seed", "7", "-n", "1", "--out", tmp_path / "grid.png")
    assert result.exit_code == 0, result.output
    with Image.open(tmp_path / "grid.png") as im:
        grid = np.array(im.convert("RGB"))[..., 0]
    cell = grid[1:33:2, 1:33:2]  # the 16 px image upscaled 2x into a 32 px cell, 1 px padding
    assert np.array_equal(cell, png(tmp_path / "seed0007.png"))


def test_a_run_directory_a_checkpoint_and_an_export_folder_write_the_same_pngs(tmp_path, trained_sg2):
    run_dir, checkpoint, export = trained_sg2
    for name, source in (("dir", run_dir), ("pt", checkpoint), ("export", export)):
        result = invoke("generate", source, "--seeds", "3,5,8", "--outdir", tmp_path / name, "--truncation", "0.8")
        assert result.exit_code == 0, result.output
    for seed in ("seed0003.png", "seed0005.png", "seed0008.png"):
        a = png(tmp_path / "pt" / seed)
        assert np.array_equal(a, png(tmp_path / "dir" / seed)) and np.array_equal(a, png(tmp_path / "export" / seed))


@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:FutureWarning")
def test_the_exported_torchscript_draws_the_generated_image_from_the_seed_latent(tmp_path, trained_sg2):
    """model.ts (exported with psi 1 and constant noise) run on seed_latents(S) gives generate's
    PNG of the export folder up to the rounding to uint8."""
    _, _, export = trained_sg2
    assert invoke("generate", export, "--seeds", "0,4,99", "--outdir", tmp_path).exit_code == 0
    with torch.no_grad():
        ts = gray(torch.jit.load(str(export / "model.ts"))(seed_latents([0, 4, 99], 8)))
    for i, seed in enumerate([0, 4, 99]):
        assert np.abs(ts[i].astype(int) - png(tmp_path / f"seed{seed:04d}.png").astype(int)).max() <= 1


def test_the_exported_onnx_draws_the_generated_image_from_the_seed_latent(tmp_path, trained_sg2):
    """model.onnx run by onnxruntime on seed_latents(S) gives generate's PNG of the checkpoint up
    to the rounding to uint8."""
    import onnxruntime

    from gan_kit.tools.export import export_model

    _, checkpoint, _ = trained_sg2
    export_model(checkpoint, tmp_path / "export", formats=["onnx"])
    assert invoke("generate", checkpoint, "--seeds", "0,4,99", "--outdir", tmp_path).exit_code == 0
    session = onnxruntime.InferenceSession(str(tmp_path / "export" / "model.onnx"))
    onnx = gray(torch.from_numpy(session.run(None, {"z": seed_latents([0, 4, 99], 8).numpy()})[0]))
    for i, seed in enumerate([0, 4, 99]):
        assert np.abs(onnx[i].astype(int) - png(tmp_path / f"seed{seed:04d}.png").astype(int)).max() <= 1


@pytest.mark.parametrize("text, message", [
    ("", "'' names nothing; give numbers and ranges, e.g. --seeds 0-7,42"),
    ("7-0", "'7-0' has the reversed range 7-0; write it from low to high, 0-7"),
    ("1,-2", "'1,-2' has a negative number -2; give non-negative numbers and ranges, e.g. --seeds 0-7,42"),
    ("1,two", "'1,two' has 'two', which is neither a number nor a range such as 3-5; give non-negative numbers"),
    ("1,,2", "'1,,2' has an empty item; give non-negative numbers and ranges"),
    ("1-2-3", "'1-2-3' has '1-2-3', which is neither a number nor a range"),
    ("18446744073709551616", "'18446744073709551616' has 18446744073709551616, which is not below "
                             "18446744073709551616; give numbers from 0 to 18446744073709551615"),
    ("0-1000000", "'0-1000000' names more than 1000000 numbers; give fewer at once"),
])
def test_bad_seed_lists_are_one_line_naming_the_text_and_the_fix(tmp_path, text, message):
    result = invoke("generate", tmp_path / "never-opened.pt", "--seeds", text, "--outdir", tmp_path)
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert result.output.startswith(f"error: --seeds: {message}")  # before the checkpoint is read


def test_seed_lists_keep_order_and_repeats():
    assert parse_numbers("0-3, 42,2") == [0, 1, 2, 3, 42, 2]
    assert parse_numbers("5-5") == [5]
    assert parse_numbers("3", "--styles", limit=4) == [3]


def test_w_vectors_round_trip_through_synthesis(tmp_path, trained_sg2):
    """An npz of ws from G.mapping (the projector's layout, and one [num_ws, w_dim] W) draws
    G.synthesis of those ws; seeds and --w are one or the other."""
    _, checkpoint, _ = trained_sg2
    trained = open_generator(checkpoint)
    ws = trained.styles(seed_latents([3, 4, 5], 8), truncation_psi=0.7)
    ws[1, 3:] = ws[2, 3:]  # a W+ of its own, which no single z maps to
    np.savez(tmp_path / "projected_w.npz", w=ws.numpy())
    result = invoke("generate", checkpoint, "--w", tmp_path / "projected_w.npz", "--outdir", tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert result.stdout == (f"wrote 3 images (proj00.png ... proj02.png) from the W of {tmp_path / 'projected_w.npz'} "
                             f"at 16px to {tmp_path / 'out'}\n")
    expected = gray(trained.synthesize(ws, batch_size=1))  # one W at a time, as generate.py --projected-w
    for i in range(3):
        assert np.array_equal(png(tmp_path / "out" / f"proj{i:02d}.png"), expected[i])
    np.savez(tmp_path / "one.npz", w=ws[0].numpy().astype(np.float64))  # [num_ws, w_dim], any float type
    assert invoke("generate", checkpoint, "--w", tmp_path / "one.npz", "--outdir", tmp_path / "one").exit_code == 0
    assert [p.name for p in (tmp_path / "one").iterdir()] == ["proj00.png"]
    assert np.abs(png(tmp_path / "one" / "proj00.png").astype(int) - expected[0]).max() <= 1


def test_w_files_that_do_not_fit_are_one_line(tmp_path, trained_sg2, trained_pggan):
    _, checkpoint, _ = trained_sg2
    np.savez(tmp_path / "bad-shape.npz", w=np.zeros((2, 5, 8), np.float32))
    np.savez(tmp_path / "no-w.npz", ws=np.zeros((2, 6, 8), np.float32))
    np.savez(tmp_path / "ints.npz", w=np.zeros((2, 6, 8), np.int64))
    np.savez(tmp_path / "nan.npz", w=np.full((1, 6, 8), np.nan, np.float32))
    np.savez(tmp_path / "good.npz", w=np.zeros((1, 6, 8), np.float32))
    (tmp_path / "text.npz").write_text("not a zip")
    cases = {
        "bad-shape.npz": "w has shape [2, 5, 8]; this G takes [N, 6, 8] or [6, 8] (num_ws = 6, w_dim = 8)",
        "no-w.npz": "no array 'w' (it has ws)",
        "ints.npz": "w is int64, not floats",
        "nan.npz": "w holds NaN or infinite values",
        "text.npz": "not an .npz file (give the projected_w.npz gankit project writes",
        "missing.npz": "file not found",
    }
    for name, message in cases.items():
        result = invoke("generate", checkpoint, "--w", tmp_path / name, "--outdir", tmp_path / "o")
        assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
        assert result.output.startswith(f"error: --w: {tmp_path / name}: {message}"), result.output
        assert "pickle" not in result.output  # a W file never needs an unsafe load
    result = invoke("generate", trained_pggan, "--w", tmp_path / "good.npz", "--outdir", tmp_path / "o")
    assert result.output == ("error: architecture 'pggan' has no per-layer styles (no mapping network); drawing from "
                             "W (--w) needs one, e.g. stylegan2\n")
    both = invoke("generate", checkpoint, "--w", tmp_path / "good.npz", "--seeds", "1", "--outdir", tmp_path / "o")
    assert both.exit_code == 2 and both.output.startswith("error: --seeds / --w: give one of them")
    psi = invoke("generate", checkpoint, "--w", tmp_path / "good.npz", "--truncation", "0.5", "--outdir", tmp_path)
    assert psi.exit_code == 2 and "leave --truncation out" in psi.output
    neither = invoke("generate", checkpoint, "--outdir", tmp_path / "o")
    assert neither.exit_code == 2 and neither.output.startswith("error: --seeds: give the seeds to draw")
    assert not (tmp_path / "o").exists()


def test_classes_of_a_conditional_g(tmp_path, conditional_pggan, trained_sg2):
    result = invoke("generate", conditional_pggan, "--seeds", "1,2", "--outdir", tmp_path)
    assert result.exit_code == 2
    assert result.output == (f"error: {conditional_pggan} is class-conditional (10 classes): give --class K, an index "
                             f"0 to 9\n")
    result = invoke("generate", conditional_pggan, "--seeds", "1,2", "--class", "3", "--outdir", tmp_path)
    assert result.exit_code == 0 and "of class 3 at 4px" in result.output
    trained = open_generator(conditional_pggan)
    expected = gray(trained.draw(seed_latents([1, 2], 8), torch.tensor([3, 3]), batch_size=1))
    other = gray(trained.draw(seed_latents([1, 2], 8), torch.tensor([4, 4]), batch_size=1))
    assert np.array_equal(png(tmp_path / "seed0001.png"), expected[0]) and not np.array_equal(expected, other)
    assert invoke("generate", conditional_pggan, "--seeds", "1", "--class", "10", "--outdir", tmp_path).output == (
        f"error: --class: 10 is not a class of {conditional_pggan} (0 to 9)\n")
    result = invoke("generate", trained_sg2[1], "--seeds", "1", "--class", "3", "--outdir", tmp_path)
    assert result.exit_code == 2 and "is not class-conditional" in result.output


def test_noise_modes_pass_to_synthesis_and_gs_without_noise_refuse_them(tmp_path, trained_sg2, trained_pggan):
    _, checkpoint, _ = trained_sg2
    trained = open_generator(checkpoint)
    z = seed_latents([6], 8)
    assert (trained.draw(z, noise_mode="none") - trained.draw(z)).abs().max() > 1e-4
    result = invoke("generate", checkpoint, "--seeds", "6", "--noise-mode", "none", "--outdir", tmp_path)
    assert result.exit_code == 0, result.output
    assert np.array_equal(png(tmp_path / "seed0006.png"), gray(trained.draw(z, noise_mode="none"))[0])
    result = invoke("generate", trained_pggan, "--seeds", "6", "--noise-mode", "random", "--outdir", tmp_path)
    assert result.output == ("error: --noise-mode: architecture 'pggan' has no noise inputs (its G takes z alone); "
                             "leave --noise-mode at const\n")
    result = invoke("generate", checkpoint, "--seeds", "6", "--noise-mode", "loud", "--outdir", tmp_path)
    assert result.output == "error: --noise-mode: 'loud' is not a noise mode (use const, random, none)\n"
    result = invoke("generate", trained_pggan, "--seeds", "6", "--truncation", "0.5", "--outdir", tmp_path)
    assert result.exit_code == 2 and "has no mapping network to truncate" in result.output


def test_devices(tmp_path, trained_sg2):
    _, checkpoint, _ = trained_sg2
    result = invoke("generate", checkpoint, "--seeds", "1", "--device", "gpu", "--outdir", tmp_path)
    assert result.output == "error: --device: 'gpu' is not a device (use auto, cpu, cuda or cuda:N)\n"
    result = invoke("generate", checkpoint, "--seeds", "1", "--device", "cuda", "--outdir", tmp_path / "cuda")
    if torch.cuda.is_available():
        assert result.exit_code == 0, result.output
        cpu = gray(open_generator(checkpoint).draw(seed_latents([1], 8)))[0].astype(int)
        assert np.abs(png(tmp_path / "cuda" / "seed0001.png").astype(int) - cpu).max() <= 1  # z drawn on the CPU
    else:
        assert result.exit_code == 2 and "CUDA is not available on this machine (use --device cpu)" in result.output


def test_three_channels_are_rgb_pngs(tmp_path):
    """A G trained on an RGB image folder writes mode-RGB PNGs of its pixels."""
    folder = tmp_path / "rgb"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(8):
        Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    run = make_run(tmp_path, overrides=[f"data={{name='image-folder', resolution=8, path='{folder.as_posix()}'}}"])
    train(run, max_steps=2)
    checkpoint = run.save_checkpoint("latest")
    assert invoke("generate", checkpoint, "--seeds", "2", "--outdir", tmp_path / "out").exit_code == 0
    with Image.open(tmp_path / "out" / "seed0002.png") as im:
        assert (im.mode, im.size) == ("RGB", (4, 4))  # the 4 px phase it was saved in
    expected = to_uint8(open_generator(checkpoint).draw(seed_latents([2], 8)))[0].permute(1, 2, 0).numpy()
    assert np.array_equal(png(tmp_path / "out" / "seed0002.png"), expected)


def test_save_image_writes_pixels_as_they_are(tmp_path):
    image = torch.linspace(-1.2, 1.2, 2 * 3 * 5).view(2, 3, 5)
    save_image(image, tmp_path / "a.png")
    with Image.open(tmp_path / "a.png") as im:
        assert (im.mode, im.size) == ("LA", (5, 3))
        assert np.array_equal(np.array(im), to_uint8(image).permute(1, 2, 0).numpy())
    assert to_uint8(torch.tensor([-1.0, 0.0, 1.0, 5.0])).tolist() == [0, 128, 255, 255]
    with pytest.raises(ValueError, match="1 to 4 channels"):
        save_image(torch.zeros(5, 2, 2), tmp_path / "b.png")
