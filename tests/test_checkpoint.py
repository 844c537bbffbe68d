"""Checkpoints: exact resume, atomic writes under SIGKILL, clear errors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from gan_kit.runs import checkpoint as ckpt
from gan_kit.runs.run import Run, build_run
from gan_kit.runs.session import train
from gan_kit.base.errors import CheckpointError
from gan_kit.recipe import load_recipe


def run_for(path, out, kimg, resume=False, overrides=()):
    recipe, plugins = load_recipe(path, [f"run.out_dir='{out}'", f"run.total_kimg={kimg}", *overrides])
    run = build_run(recipe, plugins)
    train(run, resume=resume)
    return run


def assert_same_state(a: Run, b: Run):
    for name in ("G", "D", "G_ema"):
        sa, sb = getattr(a, name).state_dict(), getattr(b, name).state_dict()
        assert sa.keys() == sb.keys()
        for k in sa:
            assert torch.equal(sa[k], sb[k]), f"{name}.{k}"
    for name in ("opt_G", "opt_D"):
        sa, sb = getattr(a, name).state_dict(), getattr(b, name).state_dict()
        assert sa["param_groups"] == sb["param_groups"]
        for p in sa["state"]:
            for k in sa["state"][p]:
                assert torch.equal(sa["state"][p][k], sb["state"][p][k]), f"{name}[{p}].{k}"
    assert a.cur_nimg == b.cur_nimg and a.step == b.step


@pytest.mark.parametrize("stop_kimg", [0.016, 0.056],  # a stable phase, and in the middle of the 8px fade
                         ids=["stable", "mid-fade"])
def test_resume_is_bit_identical(tiny_recipe, tmp_path, stop_kimg):
    straight = run_for(tiny_recipe, tmp_path / "straight", 0.12)
    first = run_for(tiny_recipe, tmp_path / "split", stop_kimg)
    saved = ckpt.load(tmp_path / "split" / "checkpoints" / "latest.pt")
    assert saved["cur_nimg"] == int(stop_kimg * 1000)
    if stop_kimg == 0.056:
        assert saved["phase"]["resolution"] == 8 and 0 < saved["phase"]["alpha"] < 1
    resumed = run_for(tiny_recipe, tmp_path / "split", 0.12, resume=True)
    assert first.step < resumed.step
    assert_same_state(straight, resumed)
    # alpha is restored on resume: the first resumed step continues the fade where it stopped
    assert resumed.phase == straight.phase


KILLER = textwrap.dedent("""
    import os, sys, time, torch
    from gan_kit.runs import checkpoint
    from gan_kit.runs.run import build_run
    from gan_kit.runs.session import train
    from gan_kit.recipe import load_recipe

    real_save = torch.save
    calls = {"n": 0}

    def slow_save(obj, f, *a, **k):
        if "latest" not in os.readlink(f"/proc/self/fd/{f.fileno()}"):
            return real_save(obj, f, *a, **k)
        calls["n"] += 1
        if calls["n"] == 1:
            return real_save(obj, f, *a, **k)
        f.write(b"PK\\x03\\x04 half a checkpoint")
        f.flush()
        open(sys.argv[2], "w").close()   # tell the test we are mid-write
        time.sleep(120)

    checkpoint.torch.save = slow_save
    recipe, plugins = load_recipe(sys.argv[1], ["run.snapshot_ticks=1"])
    train(build_run(recipe, plugins))
""")


def test_sigkill_during_checkpoint_write_keeps_previous_and_resume_works(tiny_recipe, tmp_path):
    script = tmp_path / "killer.py"
    script.write_text(KILLER)
    marker = tmp_path / "mid-write"
    proc = subprocess.Popen([sys.executable, str(script), str(tiny_recipe), str(marker)])
    try:
        deadline = time.time() + 120
        while not marker.exists():
            assert proc.poll() is None, "the training process ended before the second checkpoint"
            assert time.time() < deadline
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    latest = tmp_path / "run" / "checkpoints" / "latest.pt"
    state = ckpt.load(latest)  # the previous checkpoint is intact
    assert state["cur_nimg"] == 40  # the first latest.pt: written when 4px ended at 40 images
    # and `gankit run --resume` continues from it to the end
    done = subprocess.run([sys.executable, "-m", "gan_kit", "run", str(tiny_recipe), "--resume"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert ckpt.load(latest)["cur_nimg"] == 200


def test_bad_checkpoints_give_one_line_errors(tmp_path):
    good = {"G": {"w": torch.ones(3)}}
    path = ckpt.save_atomic(good, tmp_path / "ok.pt")
    assert ckpt.load(path)["G"]["w"].sum() == 3
    data = path.read_bytes()
    (tmp_path / "trunc.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"trunc\.pt: not a readable checkpoint \(truncated or foreign"):
        ckpt.load(tmp_path / "trunc.pt")
    # a file that is not a pickle: torch's safe unpickler fails on its bytes with a KeyError
    # (b"hello": 'h' reads a memo entry) or an IndexError (b"some ...": 's' pops an empty stack)
    for name, text in (("text.pt", b"hello"), ("words.pt", b"some text file\n")):
        (tmp_path / name).write_bytes(text)
        with pytest.raises(CheckpointError, match=name.replace(".", r"\.") + r": not a readable checkpoint \(truncated or foreign file: its bytes are not a torch.save file\)$"):
            ckpt.load(tmp_path / name)
    torch.save({"state_dict": {}}, tmp_path / "foreign.pt")
    with pytest.raises(CheckpointError, match="foreign.pt: not a gankit checkpoint"):
        ckpt.load(tmp_path / "foreign.pt")
    torch.save({"magic": ckpt.MAGIC, "format_version": ckpt.FORMAT_VERSION + 1}, tmp_path / "new.pt")
    with pytest.raises(CheckpointError, match="is newer than this gankit reads"):
        ckpt.load(tmp_path / "new.pt")
    with pytest.raises(CheckpointError, match="checkpoint not found"):
        ckpt.load(tmp_path / "missing.pt")
    for name in ("trunc.pt", "text.pt", "foreign.pt", "new.pt"):
        r = subprocess.run([sys.executable, "-m", "gan_kit", "sample", str(tmp_path / name)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_checkpoint_holds_everything_for_an_exact_resume(tiny_recipe, tmp_path):
    run = run_for(tiny_recipe, tmp_path / "r", 0.024)
    state = ckpt.load(tmp_path / "r" / "checkpoints" / "latest.pt")
    for key in ("format_version", "recipe", "G", "D", "G_ema", "opt_G", "opt_D", "scaler", "cur_nimg", "phase",
                "components", "rng"):
        assert key in state
    assert set(state["rng"]) >= {"torch", "numpy", "python"}
    assert state["cur_nimg"] == run.cur_nimg == 24  # the data stream position is cur_nimg
    assert 'name = "hinge"' in state["recipe"]


def test_run_directory_safety_and_resume_checks(tiny_recipe, tmp_path, capsys):
    from gan_kit.base.errors import GankitError

    out = tmp_path / "safe"
    run_for(tiny_recipe, out, 0.016)
    with pytest.raises(GankitError, match=r"already holds a run \(metrics.jsonl, recipe.toml, samples, "
                                          r"checkpoints\); continue it with `gankit run --resume "):
        run_for(tiny_recipe, out, 0.016)
    with pytest.raises(GankitError, match=r"--resume: the run is already at 0.016 kimg >= run.total_kimg = 0.016"):
        run_for(tiny_recipe, out, 0.016, resume=True)
    with pytest.raises(CheckpointError, match=r"was trained with architecture.latent_dim = 8, the recipe now says 16"):
        run_for(tiny_recipe, out, 0.032, resume=True, overrides=["architecture.latent_dim=16"])
    with pytest.raises(CheckpointError, match=r'was trained with loss.name = "hinge", the recipe now says "bce"; '
                                              r"this cannot change in a resumed run"):
        run_for(tiny_recipe, out, 0.032, resume=True, overrides=["loss.name=bce"])
    run = run_for(tiny_recipe, out, 0.032, resume=True, overrides=["optim.lr=0.0005"])
    assert run.cur_nimg == 32
    assert "note: resuming with a changed recipe: optim.lr: 0.001 -> 0.0005" in capsys.readouterr().err
    run_for(tiny_recipe, out, 0.048, resume=True, overrides=["run.sample_G=true", "run.on_nonfinite=skip"])
    err = capsys.readouterr().err  # TOML spelling, not Python's (False -> True, 'stop' -> 'skip')
    assert "run.sample_G: false -> true" in err and 'run.on_nonfinite: "stop" -> "skip"' in err, err
    recipe, plugins = load_recipe(tiny_recipe, [f"run.out_dir='{out}'", "run.total_kimg=0.016"])
    fresh = build_run(recipe, plugins)
    train(fresh, overwrite=True)
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 1 and ckpt.load(
        out / "checkpoints" / "latest.pt")["cur_nimg"] == 16


def test_a_phase_checkpoint_is_shown_at_the_phase_it_finished(tiny_recipe, tmp_path):
    # phase-0-4px.pt is written as the 8px fade starts; it recorded that new phase, so `gankit
    # sample` / `eval` drew the 4px weights at 8px with an untrained block faded in. It records the
    # finished phase now, and a resume from it still continues from its cur_nimg.
    from gan_kit.runs.checkpoint import load_generator
    from gan_kit.runs.resume import resume_run

    run_for(tiny_recipe, tmp_path / "r", 0.2)
    path = tmp_path / "r" / "checkpoints" / "phase-0-4px.pt"
    G, phase, _, _ = load_generator(path)
    assert (phase.index, phase.resolution, phase.alpha) == (0, 4, 1.0)
    state = ckpt.load(path)
    assert state["cur_nimg"] == 40  # the 4px phase's 40 images: the next phase starts here
    from gan_kit.recipe import load_recipe

    recipe, plugins = load_recipe(tiny_recipe)
    again = build_run(recipe, plugins, out_dir=tmp_path / "r")
    resume_run(again, path)
    assert again.cur_nimg == 40 and again.growth.phase_at(again.cur_nimg).resolution == 8


def test_write_atomic_replaces_a_file_whole_or_leaves_the_old_one(tmp_path):
    """A companion file written with write_atomic appears whole; a writer that fails halfway
    leaves the previous file as it was and no temporary file behind."""
    path = tmp_path / "checkpoints" / "latest.json"
    assert ckpt.write_atomic(path, lambda f: f.write(b'{"kimg": 1.0}')) == path
    assert path.read_bytes() == b'{"kimg": 1.0}'

    def half(f):
        f.write(b'{"kimg": 2')
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        ckpt.write_atomic(path, half)
    assert path.read_bytes() == b'{"kimg": 1.0}'
    assert sorted(p.name for p in path.parent.iterdir()) == ["latest.json"]
