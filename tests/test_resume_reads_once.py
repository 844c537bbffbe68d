"""`gankit run --resume` reads the checkpoint once: the file (weights included) is resolved,
checked against the recipe and restored from one ``torch.load``, with ``--dry-run`` too; and a
run restored from that one read continues exactly as one restored from the file."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from gan_kit.cli import cli
from gan_kit.testing import write_tiny_recipe


@pytest.fixture
def trained(tmp_path):
    """A tiny run trained to 0.032 kimg (4 steps), its run directory."""
    recipe = write_tiny_recipe(tmp_path)
    result = CliRunner().invoke(cli, ["run", str(recipe), "--set", "run.total_kimg=0.032"])
    assert result.exit_code == 0, result.output
    return tmp_path / "run"


def count_checkpoint_loads(monkeypatch) -> list[Path]:
    loads: list[Path] = []
    real = torch.load

    def counting(f, *args, **kwargs):
        if "checkpoints" in Path(str(f)).parts:
            loads.append(Path(str(f)))
        return real(f, *args, **kwargs)

    monkeypatch.setattr(torch, "load", counting)
    return loads


@pytest.mark.parametrize("extra", [[], ["--dry-run"]], ids=["resume", "dry-run"])
def test_resume_reads_the_checkpoint_once(trained, monkeypatch, extra):
    loads = count_checkpoint_loads(monkeypatch)
    result = CliRunner().invoke(cli, ["run", "--resume", str(trained), "--set", "run.total_kimg=0.048", *extra])
    assert result.exit_code == 0, result.output
    assert loads == [trained / "checkpoints" / "latest.pt"]


def test_a_named_checkpoint_file_is_read_once_and_the_run_continues_from_it(trained, monkeypatch):
    loads = count_checkpoint_loads(monkeypatch)
    phase = sorted((trained / "checkpoints").glob("phase-*.pt"))[0]
    result = CliRunner().invoke(cli, ["run", "--resume", str(phase), "--set", "run.total_kimg=0.048"])
    assert result.exit_code == 0, result.output
    assert loads == [phase]


def test_a_run_restored_from_the_resume_point_equals_one_restored_from_the_file(trained):
    from gan_kit.runs.launch import prepare_run
    from gan_kit.runs.resume import resume_run
    from gan_kit.runs.run import build_run

    recipe, plugins, point = prepare_run(None, None, ("run.total_kimg=0.048",), str(trained))
    assert point.checkpoint == trained / "checkpoints" / "latest.pt"
    assert point.changes == ("run.total_kimg: 0.032 -> 0.048",)
    from_point, from_file = build_run(recipe, plugins), build_run(recipe, plugins)
    assert resume_run(from_point, point) == list(point.changes) == resume_run(from_file, point.checkpoint)
    assert from_point.cur_nimg == from_file.cur_nimg == 32 and from_point.step == from_file.step
    for a, b in zip(from_point.G.state_dict().values(), from_file.G.state_dict().values()):
        assert torch.equal(a, b)
    for a, b in zip(from_point.opt_D.state_dict()["state"].values(), from_file.opt_D.state_dict()["state"].values()):
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert from_point.resumed_from == from_file.resumed_from == point.checkpoint
