"""A run moved to another machine: ``gankit run --resume DIR --set data.path=NEW`` continues when
the images at NEW are the ones it trained on (content digest saved in the checkpoint) and is
refused in one line when they are not."""

from __future__ import annotations

import shutil

import numpy as np
from click.testing import CliRunner
from PIL import Image

from gan_kit.runs import checkpoint as ckpt
from gan_kit.cli import cli


def _folder(path, invert=False):
    rng = np.random.default_rng(0)
    path.mkdir(parents=True)
    for i in range(16):
        a = np.clip(60 + 10 * i + rng.normal(0, 20, (8, 8)), 0, 255).astype(np.uint8)
        Image.fromarray(255 - a if invert else a, "L").save(path / f"{i:03d}.png")
    return path


def test_resume_reads_the_same_data_from_a_new_path_and_refuses_other_data(tiny_recipe, tmp_path):
    old = _folder(tmp_path / "old-machine" / "faces")
    run_dir = tmp_path / "run"
    runner = CliRunner()
    result = runner.invoke(cli, ["run", str(tiny_recipe), "--out", str(run_dir), "--set", "run.total_kimg=0.05",
                                 "--set", f"data={{name='image-folder', path='{old.as_posix()}', channels=1, resolution=8}}"])
    assert result.exit_code == 0, result.output
    assert ckpt.load(run_dir / "checkpoints" / "latest.pt")["data_digest"]
    moved = tmp_path / "new-machine" / "faces"
    shutil.copytree(old, moved)
    shutil.rmtree(old)  # the old path is gone, as on another machine
    other = _folder(tmp_path / "other", invert=True)  # same names, count and size; other pixels

    result = runner.invoke(cli, ["run", "--resume", str(run_dir), "--set", "run.total_kimg=0.1",
                                 "--set", f"data.path={other.as_posix()}"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "data.path changed to" in lines[0] and "not the ones this run trained on" in lines[0]

    result = runner.invoke(cli, ["run", "--resume", str(run_dir), "--set", "run.total_kimg=0.1",
                                 "--set", f"data.path={moved.as_posix()}"])
    assert result.exit_code == 0, result.output
    assert ckpt.load(run_dir / "checkpoints" / "latest.pt")["cur_nimg"] >= 100
    assert f'path = "{moved.as_posix()}"' in (run_dir / "recipe.toml").read_text()
