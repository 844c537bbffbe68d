"""run.max_minutes: a wall-clock budget ends a run as its end (final tick, checkpoint, grid),
a phase it cuts short writes no phase checkpoint or grid, and a resume needs a larger budget."""

from __future__ import annotations

import json

import pytest


def test_max_minutes_ends_a_run_as_its_end_and_a_resume_needs_more(tmp_path, capsys):
    from gan_kit.runs import checkpoint as ckpt
    from gan_kit.runs.run import build_run
    from gan_kit.runs.session import train
    from gan_kit.base.errors import GankitError
    from gan_kit.recipe import load_recipe
    from gan_kit.testing import write_tiny_recipe

    path = write_tiny_recipe(tmp_path)
    recipe, plugins = load_recipe(path, ["run.total_kimg=50", "run.max_minutes=0.00001"])  # 0.6 ms
    run = build_run(recipe, plugins)
    stats = train(run)
    assert stats["Progress/final"] is True and run.step == 1  # the first step spends the budget
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["Progress/final"] and rows[-1]["Timing/train_s"] == run.train_seconds >= 0.0006
    assert (tmp_path / "run" / "samples" / "final.png").is_file()
    # the 4px phase was cut short: no phase checkpoint or grid claims it finished
    assert not list((tmp_path / "run" / "checkpoints").glob("phase-*"))
    assert not list((tmp_path / "run" / "samples").glob("phase-*"))
    # the done line says why the run ended below the total_kimg its first line announced
    err = capsys.readouterr().err
    assert "done: 0.0 kimg in " in err and "stopped by run.max_minutes = 1e-05 before run.total_kimg = 50" in err
    state = ckpt.load(tmp_path / "run" / "checkpoints" / "latest.pt")
    assert state["train_seconds"] == run.train_seconds and state["cur_nimg"] == 8
    again = build_run(recipe, plugins)
    with pytest.raises(GankitError, match=r"--resume: the run has trained .* minutes >= run.max_minutes = 1e-05"):
        train(again, resume=True)
    more, plugins = load_recipe(path, ["run.total_kimg=50", f"run.max_minutes={run.train_seconds / 60 + 1e-5}"])
    longer = build_run(more, plugins)
    train(longer, resume=True)
    assert longer.step == 2 and longer.train_seconds > run.train_seconds  # one more step, time summed
    assert "stopped by run.max_minutes" in capsys.readouterr().err
