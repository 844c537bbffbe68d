"""The commands that read a trained generator (sample, generate, style-mix, export) refuse bad
values in one line with exit code 2 before drawing anything: a truncation that is not a finite
number, a seed outside what ``gankit generate`` names, an output path the system refuses, a
style-mix grid too large to view, and an ONNX export without its packages (nothing written)."""

from __future__ import annotations

import sys

import pytest
from click.testing import CliRunner

from gan_kit.cli import cli
from gan_kit.tools.stylemix import MAX_CELLS


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output, result.output
    return result.output


@pytest.mark.parametrize("psi", ["nan", "inf", "-inf"])
@pytest.mark.parametrize("command", [
    ["generate", "{ckpt}", "--seeds", "1", "--outdir", "{tmp}/out"],
    ["sample", "{ckpt}", "-n", "1", "--out", "{tmp}/out.png"],
    ["style-mix", "{ckpt}", "--rows", "1", "--cols", "2", "--styles", "0", "--out", "{tmp}/mix.png"],
    ["export", "{ckpt}", "--out", "{tmp}/export", "--format", "safetensors"],
], ids=["generate", "sample", "style-mix", "export"])
def test_a_truncation_that_is_not_a_finite_number_is_refused(tmp_path, trained_sg2, command, psi):
    _, checkpoint, _ = trained_sg2
    args = [a.format(ckpt=checkpoint, tmp=tmp_path) for a in command]
    output = one_line_error(invoke(*args, "--truncation", psi))
    assert output.startswith("error: --truncation: ") and "not a finite number" in output
    assert not any(tmp_path.iterdir()), "nothing is written for a refused truncation"


@pytest.mark.parametrize("seed", ["-5", "18446744073709551616"])
def test_sample_takes_the_seeds_generate_names(tmp_path, trained_sg2, seed):
    """``sample --seed S`` draws generate's seed S first, so it takes the same range, 0 to 2**64 - 1."""
    _, checkpoint, _ = trained_sg2
    result = invoke("sample", checkpoint, "-n", "1", "--seed", seed, "--out", tmp_path / "s.png")
    assert result.exit_code == 2 and "--seed" in result.output and "Traceback" not in result.output, result.output
    assert not (tmp_path / "s.png").exists()


def test_the_largest_seed_samples(tmp_path, trained_sg2):
    _, checkpoint, _ = trained_sg2
    result = invoke("sample", checkpoint, "-n", "1", "--seed", 2 ** 64 - 1, "--out", tmp_path / "s.png")
    assert result.exit_code == 0, result.output
    assert "wrote 1 image at" in result.output and (tmp_path / "s.png").is_file()


def test_an_output_path_the_system_refuses_is_one_line_naming_it(tmp_path, trained_sg2):
    _, checkpoint, _ = trained_sg2
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    output = one_line_error(invoke("generate", checkpoint, "--seeds", "1", "--outdir", blocker / "sub"))
    # checked before the generator is read: the option, the folder, the system's reason and a fix
    assert output.startswith("error: --outdir: ") and str(blocker / "sub") in output
    assert "Not a directory" in output and "name a folder you can write to" in output


def test_a_style_mix_grid_above_the_cell_limit_is_refused(tmp_path, trained_sg2):
    _, checkpoint, _ = trained_sg2
    output = one_line_error(invoke("style-mix", checkpoint, "--rows", f"0-{MAX_CELLS // 2}", "--cols", "0-1",
                                   "--styles", "0", "--out", tmp_path / "mix.png"))
    assert output.startswith("error: --rows / --cols: ") and f"more than {MAX_CELLS}" in output
    assert not (tmp_path / "mix.png").exists()


def test_an_onnx_export_without_its_packages_writes_nothing(tmp_path, trained_sg2, monkeypatch):
    """A ``None`` entry in ``sys.modules`` makes ``import onnxscript`` raise ImportError, as on a
    machine without the ``export`` extra."""
    _, checkpoint, _ = trained_sg2
    monkeypatch.setitem(sys.modules, "onnxscript", None)
    output = one_line_error(invoke("export", checkpoint, "--out", tmp_path / "export"))
    assert "pip install 'gankit[export]'" in output and "--format safetensors,torchscript" in output
    assert not (tmp_path / "export").exists(), "no half-written export folder"


def test_a_bad_styles_list_suggests_layers_every_g_has(tmp_path, trained_sg2):
    """The fix a --styles error suggests (0-1) is in range for any G with styles (num_ws >= 2)."""
    _, checkpoint, _ = trained_sg2
    output = one_line_error(invoke("style-mix", checkpoint, "--rows", "1", "--cols", "2", "--styles", "x",
                                   "--out", tmp_path / "mix.png"))
    assert output.startswith("error: --styles: ") and "e.g. --styles 0-1" in output


def test_a_projection_target_that_is_a_folder_says_so(tmp_path, trained_sg2):
    _, checkpoint, _ = trained_sg2
    output = one_line_error(invoke("project", checkpoint, "--target", tmp_path, "--outdir", tmp_path / "out",
                                   "--steps", "1", "--device", "cpu"))
    assert output.startswith(f"error: --target: {str(tmp_path)!r} is a folder, not a file")
