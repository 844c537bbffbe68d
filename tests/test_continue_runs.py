"""Continuing and starting from checkpoints as people do: relative paths resolved once
against the recipe that named them and saved absolute, so the printed ``gankit run --resume DIR``
works from any directory; ``--resume`` taking a checkpoint file; ``--init-from`` starting a new
run (fine-tuning) from another run's weights; the run-directory lock."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from gan_kit.runs import checkpoint as ckpt
from gan_kit.cli import cli
from gan_kit.base.errors import RecipeError
from gan_kit.recipe import load_recipe
from gan_kit.runs.lock import LOCK_NAME, lock_run_dir
from gan_kit.testing import TINY_RECIPE

PLUGIN = textwrap.dedent('''
    from gan_kit import hookimpl

    @hookimpl
    def run_started(run):
        (run.out_dir / "local-plugin-ran").write_text("yes")
''')


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def write_images(folder: Path, n: int = 16, channels: int = 1) -> Path:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        shape = (8, 8) if channels == 1 else (8, 8, 3)
        Image.fromarray(rng.integers(0, 255, shape, dtype=np.uint8)).save(folder / f"{i}.png")
    return folder


def folder_recipe(folder: Path) -> Path:
    """The tiny recipe on an image folder named relatively (``imgs``) and a local plugin file,
    both relative to the recipe's folder."""
    write_images(folder / "imgs")
    (folder / "local_plugin.py").write_text(PLUGIN, encoding="utf-8")
    text = TINY_RECIPE.format(out_dir="unused").replace('name = "digits"', 'name = "image-folder"\npath = "imgs"')
    path = folder / "folder.toml"
    path.write_text('plugins = ["local_plugin.py"]\n' + text, encoding="utf-8")
    return path


def test_relative_paths_resolve_against_the_recipe_that_names_them(tmp_path, monkeypatch):
    base_dir, top_dir = tmp_path / "base", tmp_path / "exp"
    write_images(base_dir / "imgs")
    (base_dir / "base.toml").write_text(TINY_RECIPE.format(out_dir="x").replace(
        'name = "digits"', 'name = "image-folder"\npath = "imgs"'), encoding="utf-8")
    top_dir.mkdir()
    (top_dir / "top.toml").write_text('extends = "../base/base.toml"\n[run]\ntotal_kimg = 0.1\n', encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    recipe, _ = load_recipe(Path("exp/top.toml"))
    assert recipe.data.options.path == str(base_dir / "imgs")  # the base's folder, not the top's, not the cwd
    write_images(tmp_path / "other")
    recipe, _ = load_recipe(Path("exp/top.toml"), ["data.path=other"])
    assert recipe.data.options.path == str(tmp_path / "other")  # typed on the command line: the cwd
    with pytest.raises(RecipeError, match="folder '~/no-such-gankit-folder' .resolved to /"):
        load_recipe(Path("exp/top.toml"), ["data.path=~/no-such-gankit-folder"])  # ~ kept as written


def test_the_printed_resume_works_from_any_directory(tmp_path, monkeypatch):
    """A run of a recipe naming ``imgs`` and ``local_plugin.py`` relatively, resumed with the
    printed command from another directory and from inside the run folder."""
    recipe = folder_recipe(tmp_path / "exp")
    monkeypatch.chdir(tmp_path / "exp")
    r = invoke("run", "folder.toml", "--out", "r", "--set", "run.total_kimg=0.016", "--set", "run.threads=1")
    assert r.exit_code == 0, r.output
    saved = tomllib.loads((tmp_path / "exp" / "r" / "recipe.toml").read_text())
    assert saved["data"]["path"] == str(tmp_path / "exp" / "imgs") and Path(saved["plugins"][0]).is_absolute()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    r = invoke("run", "--resume", "../exp/r", "--set", "run.total_kimg=0.032")
    assert r.exit_code == 0, r.output
    monkeypatch.chdir(tmp_path / "exp" / "r")
    (Path("local-plugin-ran")).unlink()
    r = invoke("run", "--resume", ".", "--set", "run.total_kimg=0.048")
    assert r.exit_code == 0, r.output
    assert Path("local-plugin-ran").is_file()  # the recipe's plugin came along
    assert ckpt.load("checkpoints/latest.pt")["cur_nimg"] == 48
    assert recipe.is_file()


def test_resume_takes_a_checkpoint_file_and_continues_exactly(tmp_path):
    """``--resume RUN/checkpoints/phase-0-4px.pt`` retrains from the phase's end to the same
    weights as the straight run; the last phase gets its phase checkpoint too."""
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(TINY_RECIPE.format(out_dir=(tmp_path / "run").as_posix()), encoding="utf-8")
    args = ["--set", "run.total_kimg=0.064", "--set", "run.threads=1"]
    assert invoke("run", recipe, *args).exit_code == 0
    folder = tmp_path / "run" / "checkpoints"
    assert sorted(p.name for p in folder.glob("phase-*.pt")) == ["phase-0-4px.pt", "phase-1-8px.pt"]
    straight = ckpt.load(folder / "latest.pt")
    assert ckpt.load(folder / "phase-1-8px.pt")["cur_nimg"] == straight["cur_nimg"] == 64
    assert ckpt.load(folder / "phase-0-4px.pt")["cur_nimg"] == 40
    r = invoke("run", "--resume", folder / "phase-0-4px.pt", "--set", "run.threads=1")
    assert r.exit_code == 0, r.output
    again = ckpt.load(folder / "latest.pt")
    assert again["step"] == straight["step"]
    for key, value in straight["G_ema"].items():
        assert torch.equal(value, again["G_ema"][key]), key
    r = invoke("run", "--resume", tmp_path / "loose.pt")
    assert r.exit_code == 2 and "--out" in r.output  # a file outside a run folder: which folder to continue in


SG2 = textwrap.dedent("""
    [run]
    seed = 0
    device = "cpu"
    total_kimg = 0.032
    tick_kimg = 0.032
    snapshot_ticks = 0
    sample_grid = 4
    progress = false
    threads = 1
    [data]
    name = "digits"
    resolution = 8
    [architecture]
    name = "stylegan2"
    latent_dim = 16
    w_dim = 16
    mapping_layers = 1
    channel_base = 64
    channel_max = 8
    mbstd_group_size = 4
    [init]
    name = "equalized-lr"
    [loss]
    name = "bce"
    [[penalty]]
    name = "r1"
    weight = 1.0
    [growth]
    name = "static"
    batch_size = 8
""")


#: The same run with a tiny StyleGAN3-T (4 synthesis layers; magnitude EMAs, w_avg in G's buffers).
SG3 = SG2.replace('name = "stylegan2"', 'name = "stylegan3"\nnum_layers = 4')


@pytest.mark.parametrize("arch", ["stylegan2", "stylegan3"])
def test_init_from_fine_tunes_a_stylegan_run_on_another_data_set(tmp_path, arch):
    """stylegan2 / stylegan3 trained on digits, then ``--init-from`` its checkpoint onto an image
    folder: the new run starts from its G, D and G_ema (buffers too), with fresh optimizers and
    counters."""
    from gan_kit.runs.resume import init_from
    from gan_kit.runs.run import build_run

    (tmp_path / "sg2.toml").write_text(SG2 if arch == "stylegan2" else SG3, encoding="utf-8")
    assert invoke("run", tmp_path / "sg2.toml", "--out", tmp_path / "digits").exit_code == 0
    source = ckpt.load(tmp_path / "digits" / "checkpoints" / "latest.pt")
    write_images(tmp_path / "faces")
    folder = ["data.name=image-folder", f"data.path='{tmp_path / 'faces'}'", "data.channels=1"]
    recipe, plugins = load_recipe(tmp_path / "sg2.toml", folder + [f"run.out_dir='{tmp_path / 'tuned'}'"])
    run = build_run(recipe, plugins)
    init_from(run, tmp_path / "digits")  # a run folder means its latest.pt
    for name in ("G", "D", "G_ema"):
        for key, value in getattr(run, name).state_dict().items():
            assert torch.equal(value, source[name][key]), (name, key)
    assert run.cur_nimg == 0 and not run.opt_G.state and not run.opt_D.state

    sets = [a for s in folder for a in ("--set", s)]
    r = invoke("run", tmp_path / "sg2.toml", "--out", tmp_path / "tuned", "--init-from",
               tmp_path / "digits" / "checkpoints" / "latest.pt", *sets)
    assert r.exit_code == 0, r.output
    tuned = ckpt.load(tmp_path / "tuned" / "checkpoints" / "latest.pt")
    assert tuned["cur_nimg"] == 32 and tuned["step"] == 4  # its own counters, from 0
    assert "from the weights of" in (tmp_path / "tuned" / "recipe.toml").read_text()
    moved = [k for k, v in tuned["G"].items() if v.is_floating_point() and not torch.equal(v, source["G"][k])]
    assert moved  # and it trained on

    # networks that do not fit are refused in one line
    r = invoke("run", tmp_path / "sg2.toml", "--out", tmp_path / "bad", "--init-from", tmp_path / "digits",
               "--set", "architecture.w_dim=8", "--dry-run")
    assert r.exit_code == 2 and "--init-from" in r.output and "does not fit" in r.output
    assert len(r.output.strip().splitlines()) == 1, r.output
    tiny = tmp_path / "tiny.toml"
    tiny.write_text(TINY_RECIPE.format(out_dir=(tmp_path / "pg").as_posix()), encoding="utf-8")
    r = invoke("run", tiny, "--init-from", tmp_path / "digits", "--dry-run")
    assert r.exit_code == 2 and f'"{arch}", this recipe builds "pggan"' in r.output, r.output


def test_a_run_directory_is_locked_while_a_run_writes_it(tmp_path, tiny_recipe):
    out = tmp_path / "run"
    lock, problem = lock_run_dir(out)
    assert problem is None
    try:
        again, problem = lock_run_dir(out)
        assert again is None and f"pid {os.getpid()}" in problem and "\n" not in problem
        (out / "metrics.jsonl").write_text("{}\n")
        for extra in (["--overwrite"], []):
            r = invoke("run", tiny_recipe, "--out", out, *extra)
            assert r.exit_code == 2 and "another gankit run is writing" in r.output, r.output
        assert (out / "metrics.jsonl").is_file()  # --overwrite deleted nothing
    finally:
        lock.release()
    assert not (out / LOCK_NAME).exists()

    # A run killed while holding the lock (SIGKILL: no cleanup) leaves the file; the kernel
    # dropped the lock, so the next run takes it over and names the dead holder.
    code = f"from gan_kit.runs.lock import lock_run_dir; import os; lock_run_dir({str(out)!r}); os._exit(0)"
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ})
    assert (out / LOCK_NAME).read_text().startswith("pid ")
    r = invoke("run", tiny_recipe, "--out", out, "--overwrite", "--set", "run.total_kimg=0.008")
    assert r.exit_code == 0, r.output
    assert "ended without releasing it" in r.output and not (out / LOCK_NAME).exists()


def test_the_continue_command_is_the_one_that_works_where_the_run_was_started(tmp_path, monkeypatch):
    """The line an interrupted run prints names a command that continues it: `gankit run
    --resume DIR` alone, with `--nproc N` under `gankit run --nproc N`, and the torchrun command
    (or --resume-if-exists) under a torchrun of the user's own."""
    from gan_kit.runs.rundir import resume_command

    for name in ("GANKIT_NPROC", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    run_dir = tmp_path / "r"
    assert resume_command(run_dir) == f"gankit run --resume {run_dir}"
    monkeypatch.setenv("LOCAL_RANK", "0")
    under_torchrun = resume_command(run_dir)
    assert under_torchrun.startswith("torchrun ") and f"-m gan_kit run --resume {run_dir}" in under_torchrun
    assert "--resume-if-exists" in under_torchrun
    monkeypatch.setenv("GANKIT_NPROC", "4")
    assert resume_command(run_dir) == f"gankit run --resume {run_dir} --nproc 4"
