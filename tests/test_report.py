"""A finished tiny run as pictures and numbers: `gankit report`, TensorBoard events, `gankit eval`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from gan_kit.cli import cli
from gan_kit.runs.run import build_run
from gan_kit.runs.session import train
from gan_kit.recipe import load_recipe
from gan_kit.tools.report import _spans_from_rows, load_metrics, phase_spans

_RUNS: dict[str, Path] = {}


@pytest.fixture
def finished_run(tiny_recipe_text, write_recipe) -> Path:
    """A tiny run (4 -> 8 px) with SWD every tick, trained once per test session."""
    if "run" not in _RUNS:
        text = tiny_recipe_text + '\n[[metric]]\nname = "swd"\nnum_images = 48\nevery_kimg = 0.1\n'
        recipe, plugins = load_recipe(write_recipe(text, "tiny-swd.toml"))
        run = build_run(recipe, plugins)
        train(run)
        _RUNS["run"] = run.out_dir
        _RUNS["growth"] = run.growth
    return _RUNS["run"]


def test_report_writes_html_and_pngs_of_a_finished_run(finished_run):
    result = CliRunner().invoke(cli, ["report", str(finished_run)])
    assert result.exit_code == 0, result.output
    html = (finished_run / "report.html").read_text()
    names = ["losses", "penalties", "metrics", "phases"]
    for name in names:
        png = finished_run / "report" / f"{name}.png"
        assert f'src="report/{name}.png"' in html or name == "phases"
        with Image.open(png) as im:
            assert im.format == "PNG" and im.width >= 600 and im.height >= 200
            assert len(np.unique(np.asarray(im.convert("L")))) > 10  # something is drawn
    with Image.open(finished_run / "report" / "phases.png") as im:
        assert im.width > 2 * im.height  # the phase grids side by side
    rows, bad = load_metrics(finished_run)
    assert bad == 0 and rows[-1]["Progress/final"] is True
    for i, res in sorted({(r["Progress/phase"], r["Progress/resolution"]) for r in rows}):
        assert f'src="samples/phase-{i}-{res}px.png"' in html
    assert 'src="samples/final.png"' in html
    assert f"{rows[-1]['Metrics/swd']:.4g}" in html  # the last SWD in the summary table


def test_phase_boundaries_come_from_the_growth_schedule(finished_run):
    rows, _ = load_metrics(finished_run)
    spans = phase_spans(finished_run, rows)
    growth = _RUNS["growth"]
    last = growth.phase_at(10**9)
    assert [s.resolution for s in spans] == growth.resolutions() == [4, 8]
    assert spans[1].start_kimg == last.start_nimg / 1000
    assert spans[1].fade_end_kimg == (last.start_nimg + last.fade_nimg) / 1000
    assert spans[-1].end_kimg == rows[-1]["Progress/kimg"]
    rough = _spans_from_rows(rows)  # the fallback without recipe.toml agrees on the phases seen
    assert [s.resolution for s in rough] == sorted({r["Progress/resolution"] for r in rows})


def test_report_on_a_folder_without_metrics_is_one_line(tmp_path):
    result = CliRunner().invoke(cli, ["report", str(tmp_path)])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "no metrics.jsonl" in result.output and "Traceback" not in result.output


def test_tensorboard_events_hold_every_tick_scalar(finished_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = list((finished_run / "events").glob("events.out.tfevents.*"))
    assert len(events) == 1
    acc = EventAccumulator(str(finished_run / "events"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"Loss/D", "Loss/G", "Loss/D/gradient-penalty", "Metrics/swd", "Progress/kimg"} <= tags
    rows, _ = load_metrics(finished_run)
    swd = acc.Scalars("Metrics/swd")
    assert [round(e.value, 3) for e in swd] == [round(r["Metrics/swd"], 3) for r in rows if "Metrics/swd" in r]
    assert swd[-1].step == round(rows[-1]["Progress/kimg"] * 1000)
    # the sample grid of every tick, as an image
    images = acc.Images("Samples/G_ema")
    assert [e.step for e in images] == [round(r["Progress/kimg"] * 1000) for r in rows]
    assert images[-1].width > 0 and images[-1].height > 0


def test_no_tensorboard_package_means_no_events(tiny_recipe_text, write_recipe, monkeypatch, tmp_path):
    import gan_kit.builtin.reporting.tensorboard as tb

    monkeypatch.setattr(tb, "_writer_class", lambda: None)
    recipe, plugins = load_recipe(write_recipe(tiny_recipe_text.replace("total_kimg = 0.2", "total_kimg = 0.05")))
    run = build_run(recipe, plugins)
    train(run)
    assert (run.out_dir / "metrics.jsonl").is_file() and not (run.out_dir / "events").exists()


def test_eval_reproduces_the_final_swd_and_prints_the_baselines(finished_run):
    rows, _ = load_metrics(finished_run)
    ckpt = finished_run / "checkpoints" / "latest.pt"
    result = CliRunner().invoke(cli, ["eval", str(ckpt), "--json"])
    assert result.exit_code == 0, result.output
    trained = json.loads(result.output)["results"]["swd"]["trained"]
    assert trained["Metrics/swd"] == pytest.approx(rows[-1]["Metrics/swd"], rel=1e-5)

    result = CliRunner().invoke(cli, ["eval", str(ckpt), "--baselines", "--n", "40"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "40 images per set" in lines[1]
    values = {}
    for line in lines[2:]:
        label, value = re.match(r"\s+(.*?)\s{2,}([\d.]+)", line).groups()
        values[label.split(" (")[0].split(" G_ema")[0]] = float(value)
    assert set(values) == {"real vs real", "untrained", "trained"}
    assert values["real vs real"] < values["untrained"]


def test_eval_fid_without_weights_is_one_line_not_a_traceback(finished_run, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "empty"))
    monkeypatch.setattr(torch.hub, "_hub_dir", None)
    ckpt = finished_run / "checkpoints" / "latest.pt"
    result = CliRunner().invoke(cli, ["eval", str(ckpt), "--metric", "fid"])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and result.output.startswith("error: fid needs ")
    assert "Traceback" not in result.output and str(tmp_path / "empty") in result.output


def _tb_steps(run_dir: Path, tag: str, kind: str = "scalars") -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "events"), size_guidance={"scalars": 0, "images": 0})
    acc.Reload()
    events = acc.Scalars(tag) if kind == "scalars" else acc.Images(tag)
    return [e.step for e in events]


def test_tensorboard_keeps_every_tick_once_across_an_extension_and_a_crash_resume(tmp_path, tiny_recipe_text,
                                                                                  write_recipe):
    """A finished run extended with --resume --set run.total_kimg keeps its old final tick (scalars
    and grid); a resume from an older checkpoint drops what was written after it and writes it
    again: TensorBoard then holds each tick of metrics.jsonl exactly once."""
    import shutil

    recipe = write_recipe(tiny_recipe_text.replace("total_kimg = 0.2", "total_kimg = 0.1"))
    run_dir = tmp_path / "run"
    runner = CliRunner()
    assert runner.invoke(cli, ["run", str(recipe)]).exit_code == 0
    shutil.copy(run_dir / "checkpoints" / "latest.pt", tmp_path / "end-of-first.pt")
    before = _tb_steps(run_dir, "Loss/D")
    result = runner.invoke(cli, ["run", "--resume", str(run_dir), "--set", "run.total_kimg=0.2"])
    assert result.exit_code == 0, result.output
    rows, _ = load_metrics(run_dir)
    want = [round(r["Progress/kimg"] * 1000) for r in rows]
    assert before[-1] in want  # the old final tick ...
    assert _tb_steps(run_dir, "Loss/D") == want  # ... is still there, every tick once
    assert _tb_steps(run_dir, "Samples/G_ema", "images") == want
    # As if the extension had crashed after its last events but before any checkpoint: it continues
    # from the first run's end again, and the events written after that point are replaced, not doubled.
    shutil.copy(tmp_path / "end-of-first.pt", run_dir / "checkpoints" / "latest.pt")
    result = runner.invoke(cli, ["run", "--resume", str(run_dir), "--set", "run.total_kimg=0.2"])
    assert result.exit_code == 0, result.output
    rows, _ = load_metrics(run_dir)
    want = [round(r["Progress/kimg"] * 1000) for r in rows]
    assert len(want) == len(set(want)) and _tb_steps(run_dir, "Loss/D") == want


def test_a_single_phase_run_shows_its_samples_over_time(tmp_path):
    """A static (one-phase) run has one phase grid, so only the tick grids show how its images
    developed: the page shows them with their kimg, at most TICK_GRIDS of them, evenly spaced,
    the first and the last tick among them."""
    from gan_kit.testing import make_run
    from gan_kit.tools.report import TICK_GRIDS, tick_grids

    run = make_run(tmp_path, overrides=["growth={name='static', batch_size=8}", "run.tick_kimg=0.016",
                                        "run.total_kimg=0.064", "metric=[]"])
    train(run)
    assert sorted(p.name for p in (run.out_dir / "samples").glob("tick-*.png")) == [
        f"tick-{t:04d}.png" for t in range(4)]
    assert CliRunner().invoke(cli, ["report", str(run.out_dir)]).exit_code == 0
    html = (run.out_dir / "report.html").read_text()
    assert "<h2>Samples over time</h2>" in html
    for t in range(4):
        assert f'src="samples/tick-{t:04d}.png" alt="tick {t}: {0.016 * (t + 1):g} kimg"' in html
    # a long run: TICK_GRIDS of its grids, evenly spaced, the first and the last included
    for t in range(4, 40):
        Image.new("L", (4, 4)).save(run.out_dir / "samples" / f"tick-{t:04d}.png")
    shown = [int(p.stem[5:]) for _, p in tick_grids(run.out_dir, load_metrics(run.out_dir)[0])]
    assert len(shown) == TICK_GRIDS and shown[0] == 0 and shown[-1] == 39 and shown == sorted(set(shown))
    assert max(np.diff(shown)) - min(np.diff(shown)) <= 1
