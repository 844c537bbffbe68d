"""One way to open a trained G (``gan_kit.tools.trained``): a checkpoint file, a run directory and
an export folder give the same G_ema; the one-line errors for folders that hold none; each seed's
z (``gan_kit.tools.seeds``), which ``gankit sample --seed S`` draws its first image from; the
``StyleGenerator`` protocol of the built-in stylegan2 G; ``gankit eval`` / ``export`` of a run
directory."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from gan_kit import StyleGenerator
from gan_kit.base.errors import CheckpointError, GankitError
from gan_kit.cli import cli
from gan_kit.tools.export import export_model
from gan_kit.tools.grids import to_uint8
from gan_kit.tools.seeds import latent_rows, seed_latents
from gan_kit.tools.trained import checkpoint_file, generator_device, open_generator


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def grid_cell(path, row: int, col: int, side: int, cell: int) -> np.ndarray:
    """Cell (row, col) of a ``save_grid`` PNG (1 px padding) at the image's own ``side``
    (``cell`` px a side in the grid, nearest-upscaled), of a 1-channel G: ``[H, W]`` uint8 (the
    grid repeats the channel as RGB)."""
    with Image.open(path) as im:
        a = np.array(im.convert("RGB"))[..., 0]
    step = cell // side
    top, left = 1 + row * (cell + 1), 1 + col * (cell + 1)
    return a[top:top + cell:step, left:left + cell:step]


def pixels(images: torch.Tensor) -> np.ndarray:
    """``images[N, C, H, W]`` in [-1, 1] as uint8 ``[N, H, W, C]``."""
    return to_uint8(images).permute(0, 2, 3, 1).numpy()


def test_a_checkpoint_a_run_directory_and_an_export_folder_open_the_same_g_ema(trained_sg2):
    run_dir, checkpoint, export = trained_sg2
    by_file, by_dir, by_export = (open_generator(p) for p in (checkpoint, run_dir, export))
    assert by_dir.file == checkpoint and by_dir.source == run_dir and not by_dir.exported
    assert by_export.file == export and by_export.exported
    reference = by_file.G.state_dict()
    for trained in (by_dir, by_export):
        assert trained.G.state_dict().keys() == reference.keys()
        assert all(torch.equal(v, reference[k]) for k, v in trained.G.state_dict().items())
        assert (trained.resolution, trained.alpha, trained.channels, trained.latent_dim) == (16, 1.0, 1, 8)
        assert (trained.num_classes, trained.class_names, trained.architecture) == (0, (), "stylegan2")
        assert trained.kimg == pytest.approx(by_file.kimg) and trained.kimg > 0
        assert not trained.G.training and not any(p.requires_grad for p in trained.G.parameters())
        assert trained.device == torch.device("cpu")
    z = seed_latents([3, 1], 8)
    assert torch.equal(by_dir.draw(z), by_export.draw(z))
    images = by_file.draw(z)
    assert images.shape == (2, 1, 16, 16) and images.dtype == torch.float32 and images.abs().max() < 3


def test_folders_without_a_generator_are_refused_in_one_line(tmp_path, trained_sg2):
    stopped = tmp_path / "stopped"
    stopped.mkdir()
    (stopped / "recipe.toml").write_text("# a run that stopped before its first checkpoint\n")
    with pytest.raises(CheckpointError, match="a run directory with no checkpoint yet") as e:
        open_generator(stopped)
    assert str(stopped / "checkpoints" / "latest.pt") in str(e.value) and "\n" not in str(e.value)
    result = invoke("sample", stopped, "--out", tmp_path / "g.png")
    assert result.exit_code == 2 and result.output.count("\n") == 1
    assert result.output.startswith(f"error: {stopped}: a run directory with no checkpoint yet")
    other = tmp_path / "other"
    other.mkdir()
    result = invoke("sample", other, "--out", tmp_path / "g.png")
    assert result.exit_code == 2 and result.output.count("\n") == 1
    assert "no run directory (no checkpoints/latest.pt)" in result.output and "gankit export did not write" in result.output
    assert result.output.endswith("; name a checkpoint file, a run directory or an export folder\n")
    result = invoke("export", other, "--out", tmp_path / "e")
    assert result.exit_code == 2 and result.output.endswith("; name a checkpoint file or a run directory\n")
    # eval and export read the whole checkpoint: an export folder holds G_ema alone
    _, checkpoint, export = trained_sg2
    with pytest.raises(CheckpointError, match="an export folder holds G_ema alone; gankit export needs the checkpoint"):
        checkpoint_file(export, "gankit export")
    result = invoke("eval", export)
    assert result.exit_code == 2 and f"({checkpoint.parent.parent.name}/checkpoints/latest.pt)" in result.output
    assert result.output.count("\n") == 1


def test_eval_and_export_take_a_run_directory(tmp_path, trained_pggan):
    run_dir = trained_pggan.parent.parent
    config = export_model(run_dir, tmp_path / "export", formats=["safetensors"])
    assert config["source_checkpoint"] == f"{run_dir.name}/checkpoints/latest.pt"  # no folder of this machine
    result = invoke("export", run_dir, "--out", tmp_path / "e2", "--format", "safetensors")
    assert result.exit_code == 0, result.output
    result = invoke("eval", run_dir, "--json", "--n", "16")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["checkpoint"] == str(trained_pggan) and out["results"]["swd"]["trained"]["Metrics/swd"] > 0


def test_each_seed_names_one_latent_whatever_the_other_seeds(trained_sg2):
    for dim in (8, 20, 64):
        z = seed_latents([5, 0, 5], dim)
        assert z.shape == (3, dim) and z.dtype == torch.float32 and z.device.type == "cpu"
        assert torch.equal(z[0], torch.randn(1, dim, generator=torch.Generator().manual_seed(5))[0])
        assert torch.equal(z[0], z[2]) and torch.equal(z[1], seed_latents([0], dim)[0])
        # sample's draw: row 0 is the seed's latent for every size, not only multiples of 16
        assert torch.equal(latent_rows(5, 4, dim)[0], z[0])
    # ... and for multiples of 16 its rows are the one-call draw sample made before
    assert torch.equal(latent_rows(7, 9, 64), torch.randn(9, 64, generator=torch.Generator().manual_seed(7)))
    assert not torch.equal(latent_rows(7, 9, 8)[0], torch.randn(9, 8, generator=torch.Generator().manual_seed(7))[0])


def test_sample_draws_its_first_image_from_the_seed_latent(tmp_path, trained_sg2):
    """`gankit sample --seed S`'s first cell is G(seed_latents([S])); latent_dim 8 is no multiple
    of 16, where one torch.randn(n, 8) would have drawn another first row."""
    run_dir, checkpoint, _ = trained_sg2
    trained = open_generator(checkpoint)
    expected = pixels(trained.draw(seed_latents([11], 8)))[0, :, :, 0]
    one, four = tmp_path / "one.png", tmp_path / "four.png"
    assert invoke("sample", run_dir, "-n", "1", "--seed", "11", "--out", one).exit_code == 0  # a run directory too
    assert np.array_equal(grid_cell(one, 0, 0, 16, 32), expected)
    assert invoke("sample", checkpoint, "-n", "4", "--seed", "11", "--out", four).exit_code == 0
    # the same z in a batch of 4: equal up to float rounding of the batched convolution
    assert np.abs(grid_cell(four, 0, 0, 16, 32).astype(int) - expected).max() <= 1
    assert np.abs(grid_cell(four, 0, 1, 16, 32).astype(int) - expected).max() > 1  # the next image is another z


def test_the_stylegan2_g_implements_the_style_protocol(trained_sg2, trained_pggan):
    trained = open_generator(trained_sg2[1])
    G = trained.G
    assert isinstance(G, StyleGenerator) and trained.has_styles
    assert (G.num_ws, G.w_dim, tuple(G.w_avg.shape)) == (6, 8, (8,)) and G.w_avg.abs().sum() > 0
    z = seed_latents([0, 1, 2], 8)
    ws = trained.styles(z, truncation_psi=0.5)
    assert ws.shape == (3, 6, 8) and ws.is_contiguous()
    assert torch.equal(trained.synthesize(ws), trained.draw(z, truncation_psi=0.5))  # G(z) = synthesis(mapping(z))
    assert torch.allclose(trained.styles(z, truncation_psi=0.0)[:, 0], G.w_avg.expand(3, -1))
    const, none = trained.draw(z), trained.draw(z, noise_mode="none")
    assert (const - none).abs().max() > 1e-4  # the trained noise strengths are no longer zero
    torch.manual_seed(1)
    a = trained.draw(z, noise_mode="random")
    torch.manual_seed(1)
    assert torch.equal(a, trained.draw(z, noise_mode="random")) and not torch.equal(a, const)
    pggan = open_generator(trained_pggan)
    assert not isinstance(pggan.G, StyleGenerator) and not pggan.has_styles


def test_draw_refuses_what_the_generator_cannot_do_in_one_line(trained_sg2, trained_pggan):
    pggan = open_generator(trained_pggan)
    z = seed_latents([0], 8)
    with pytest.raises(GankitError, match=r"^--truncation: architecture 'pggan' has no mapping network to truncate"):
        pggan.draw(z, truncation_psi=0.7)
    with pytest.raises(GankitError, match=r"^--noise-mode: architecture 'pggan' has no noise inputs .* leave "
                                          r"--noise-mode at const$"):
        pggan.draw(z, noise_mode="random")
    with pytest.raises(GankitError) as e:
        pggan.style_generator("style mixing")
    assert str(e.value) == ("architecture 'pggan' has no per-layer styles (no mapping network); style mixing needs "
                            "one, e.g. stylegan2")
    assert pggan.draw(z).shape == (1, 1, 4, 4)  # the phase it was saved in
    sg2 = open_generator(trained_sg2[1])
    with pytest.raises(GankitError, match="'loud' is not a noise mode"):
        sg2.draw(z, noise_mode="loud")
    with pytest.raises(GankitError, match="is not class-conditional"):
        sg2.draw(z, torch.tensor([1]))
    with pytest.raises(GankitError, match=r"this G takes \[N, num_ws, w_dim\] = \[N, 6, 8\]"):
        sg2.synthesize(torch.zeros(1, 5, 8))


def test_devices_by_name():
    assert generator_device("cpu") == torch.device("cpu")
    assert generator_device("auto") == torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(GankitError, match=r"^--device: 'gpu' is not a device \(use auto, cpu, cuda or cuda:N\)$"):
        generator_device("gpu")
    if not torch.cuda.is_available():
        with pytest.raises(GankitError, match="CUDA is not available on this machine"):
            generator_device("cuda:1")
    else:
        with pytest.raises(GankitError, match="CUDA device"):
            generator_device(f"cuda:{torch.cuda.device_count()}")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_generator_opened_on_cuda_draws_what_the_cpu_draws(trained_sg2):
    """The checkpoint (saved on the CPU) maps onto the GPU; z is drawn on the CPU, so the seeds'
    images agree across devices up to float rounding."""
    cpu, cuda = open_generator(trained_sg2[0]), open_generator(trained_sg2[2], device="cuda")
    assert next(cuda.G.parameters()).device.type == "cuda"
    z = seed_latents(list(range(5)), 8)
    assert torch.allclose(cpu.draw(z), cuda.draw(z), atol=1e-4)
    assert torch.allclose(cpu.synthesize(cpu.styles(z)), cuda.synthesize(cuda.styles(z)), atol=1e-4)


def test_a_plugin_g_with_styles_draws_through_mapping_and_synthesis(trained_style_mlp):
    """A plugin architecture whose G implements StyleGenerator (docs/examples/style_plugin.py)
    but not ``supports_truncation``: draw runs synthesis(mapping(z, psi), noise_mode), so
    truncation and the noise modes work for it too."""
    trained = open_generator(trained_style_mlp)
    assert trained.has_styles and not trained.arch.supports_truncation and trained.architecture == "style-mlp"
    z = seed_latents([0, 1, 2, 3], 8)
    trained.check(0.5, "none")  # accepted
    assert torch.equal(trained.draw(z, truncation_psi=0.5), trained.synthesize(trained.styles(z, truncation_psi=0.5)))
    full, truncated = trained.draw(z), trained.draw(z, truncation_psi=0.0)
    assert (full - truncated).abs().max() > 1e-3 and torch.allclose(truncated[0], truncated[3])  # psi 0: the w_avg image
    assert (trained.draw(z, noise_mode="none") - full).abs().max() > 0  # the noise strengths moved in training
