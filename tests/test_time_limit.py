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


def test_a_time_limit_just_after_a_tick_folds_the_tail_into_the_final_tick(tmp_path, monkeypatch):
    """The training clock made one second per step, ticks of 4 steps and a 9 s limit: without
    care the tick at step 8 is reported and the limit at step 9 adds a final tick of one step
    (its averages spike the plots, its metric repeats the tick's). The tick due 1 s before the
    limit, under half a tick's time, runs on to the limit instead: the final tick has 5 steps."""
    from types import SimpleNamespace

    from gan_kit.runs.engine import ticks
    from gan_kit.runs.session import train
    from gan_kit.testing import make_run

    run = make_run(tmp_path, overrides=["growth={name='static', batch_size=8}", "run.tick_kimg=0.032",
                                        "run.total_kimg=50", "run.max_minutes=0.15", "metric=[]"])
    monkeypatch.setattr(ticks, "time", SimpleNamespace(perf_counter=lambda: float(run.step)))
    stats = train(run)
    assert run.step == 9 and stats["Progress/final"] is True
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["Progress/kimg"], r["Progress/final"]) for r in rows] == [(0.032, False), (0.072, True)]
    assert rows[-1]["Timing/sec_per_tick"] == 5.0  # steps 5 to 9


def test_the_header_and_progress_bar_show_the_time_limit_when_it_ends_the_run_first(tmp_path, capsys):
    """A run whose run.max_minutes comes before its total_kimg: the header names the limit (and,
    resumed, the minutes left of it) and the progress bar counts down to the limit, its bar the
    share of the limit spent; without a limit, or when total_kimg comes first, the time to
    total_kimg."""
    from types import SimpleNamespace

    from gan_kit.builtin.reporting import run_end
    from gan_kit.runs.session import train
    from gan_kit.testing import make_run

    def at(kimg, total, seconds, limit):
        return SimpleNamespace(cur_nimg=kimg * 1000, total_nimg=total * 1000, train_seconds=seconds,
                               recipe=SimpleNamespace(run=SimpleNamespace(max_minutes=limit)))

    # 10 of 250 kimg at 100 img/s: 40 minutes to total_kimg, but 9 - 2 = 7 minutes to the limit
    assert run_end(at(10, 250, 120.0, 9), 100.0) == (120 / 540, "0:07:00 left of the 9-minute limit")
    assert run_end(at(10, 250, 120.0, None), 100.0) == (0.04, "0:40:00 left")
    assert run_end(at(240, 250, 120.0, 60), 100.0) == (0.96, "0:01:40 left")  # total_kimg first
    assert run_end(at(0, 250, 0.0, None), 0.0) == (0.0, "-:--:-- left")  # speed not known yet
    assert run_end(at(0, 250, 0.0, 9), 0.0) == (0.0, "0:09:00 left of the 9-minute limit")

    run = make_run(tmp_path, overrides=["run.total_kimg=250", "run.max_minutes=9", "metric=[]"])
    train(run, max_steps=1)
    assert ", 250 kimg; or 9 minutes of training (run.max_minutes), whichever comes first\n" in capsys.readouterr().err
    again = make_run(tmp_path / "again", overrides=["run.total_kimg=250", "run.max_minutes=9", "metric=[]"])
    again.train_seconds = 120.0  # as a resumed run that trained 2 minutes before
    train(again, max_steps=1)
    assert "250 kimg; or 9 minutes of training (run.max_minutes, 7 left), whichever comes first\n" in capsys.readouterr().err
