"""``gankit sample``, ``gankit eval`` and ``gankit export`` draw from G alone: a run whose D has a
frozen sub-network loaded from a file (``gan_kit.load_frozen``: a pretrained feature network)
works without that file, and ``gankit sample`` of the exported folder needs no weights file at
all. G's own frozen part is still read from its file (it draws the images)."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner

from gan_kit.cli import cli
from gan_kit.runs.checkpoint import load_generator
from gan_kit.runs.session import train
from test_ownership import PLUGIN, arch_overrides, make


@pytest.fixture(autouse=True)
def _builtins_only(monkeypatch):
    monkeypatch.setenv("GANKIT_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("GANKIT_DEBUG", raising=False)


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture
def trained(tiny_recipe, tmp_path):
    """A checkpoint of the "frozen-parts" architecture (G.out frozen from g_out.pt, D.features
    from d_features.pt), trained a few steps, with D's file deleted afterwards."""
    plugin = tmp_path / "arch_plugin.py"
    plugin.write_text(PLUGIN)
    gen = torch.Generator().manual_seed(7)
    g = {"weight": torch.randn(1, 1, 1, 1, generator=gen), "bias": torch.randn(1, generator=gen)}
    torch.save(g, tmp_path / "g_out.pt")
    torch.save({"weight": torch.randn(4, 1, 3, 3, generator=gen), "bias": torch.randn(4, generator=gen)},
               tmp_path / "d_features.pt")
    run = make(tiny_recipe, arch_overrides(plugin, tmp_path), tmp_path / "run", kimg=0.016)
    train(run)
    (tmp_path / "d_features.pt").unlink()
    return tmp_path / "run" / "checkpoints" / "latest.pt", g, run


def test_sample_eval_and_export_need_no_file_of_ds_frozen_part(trained, tmp_path):
    checkpoint, g, run = trained
    grid = invoke("sample", checkpoint, "-n", "4", "--out", tmp_path / "grid.png")
    assert grid.exit_code == 0, grid.output
    assert (tmp_path / "grid.png").is_file()

    G, *_ = load_generator(checkpoint)  # G's frozen part from its file, the rest from the checkpoint
    assert torch.equal(G.out.weight, g["weight"]) and torch.equal(G.fc.weight, run.G_ema.fc.weight)

    scores = invoke("eval", checkpoint, "--metric", "swd", "--n", "16", "--json")
    assert scores.exit_code == 0, scores.output
    assert json.loads(scores.stdout)["results"]["swd"]["trained"]["Metrics/swd"] >= 0

    export = invoke("export", checkpoint, "--out", tmp_path / "export", "--format", "safetensors")
    assert export.exit_code == 0, export.output
    (tmp_path / "g_out.pt").unlink()  # the exported weights hold G's frozen part too
    again = invoke("sample", tmp_path / "export", "-n", "4", "--out", tmp_path / "again.png")
    assert again.exit_code == 0, again.output


def test_gs_own_frozen_file_is_still_needed_and_named(trained, tmp_path):
    checkpoint, _, _ = trained
    (tmp_path / "g_out.pt").unlink()
    result = invoke("sample", checkpoint, "--out", tmp_path / "grid.png")
    assert result.exit_code == 2
    assert result.stderr == (f"error: {tmp_path / 'g_out.pt'}: frozen weights file not found (give the path of a "
                             f"local file saved with torch.save(module.state_dict(), path) or a .safetensors file)\n")
