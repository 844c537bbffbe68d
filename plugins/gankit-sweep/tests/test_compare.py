"""gankit compare: grouping runs by configuration, mean and 95% CI over seeds, Welch's t-test
against the best configuration, --json and compare.html - on run directories written by hand,
so every expected number is known."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner
from scipy import stats

from sweep_cli import cli
from gankit_sweep.compare import compare_runs, welch_p

RECIPE = """\
[run]
seed = {seed}
out_dir = "{out}"
threads = {threads}
[loss]
name = "{loss}"
[[metric]]
name = "swd"
"""


def fake_run(folder: Path, loss: str, seed: int, values: list[float], *, final: bool = True, state: str | None = None,
             extra: dict | None = None) -> Path:
    """A run directory as gankit run leaves it: recipe.toml, one metrics row per value (the last
    one final), and a sweep.json when ``state`` is given."""
    d = folder / f"{loss}-{seed}"
    d.mkdir(parents=True)
    # run.threads differs between runs on purpose: it does not change what a run learns
    (d / "recipe.toml").write_text(RECIPE.format(seed=seed, out=d.as_posix(), threads=seed + 1, loss=loss))
    rows = []
    for i, v in enumerate(values):
        rows.append({"Progress/tick": i, "Progress/kimg": 0.5 * (i + 1), "Progress/final": final and i == len(values) - 1,
                     "Metrics/swd": v, "Loss/D": 1.0, "Loss/G": 0.5, "Timing/train_s": 2.0 * (i + 1),
                     **(extra or {})})
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if state:
        (d / "sweep.json").write_text(json.dumps({"state": state, "seed": seed, "metric": "Metrics/swd",
                                                  "higher_is_better": False, "params": {"loss.name": loss}}))
    return d


@pytest.fixture
def study(tmp_path):
    folder = tmp_path / "study"
    for s, v in enumerate([30.0, 34.0, 32.0]):
        fake_run(folder, "hinge", s, [90.0, v])
    for s, v in enumerate([60.0, 64.0, 59.0]):
        fake_run(folder, "bce", s, [80.0, v], extra={"Augment/p": 0.1 * (s + 1)})
    for s, v in enumerate([31.0, 35.0]):
        fake_run(folder, "wgan", s, [70.0, v])
    fake_run(folder, "wgan", 2, [75.0], final=False)  # still running: not counted
    return folder


def test_groups_rank_and_statistics_match_the_textbook(study):
    c = compare_runs([study])
    assert c.metric == "Metrics/swd" and c.higher_is_better is False
    assert [g.runs[0].recipe["loss.name"] for g in c.groups] == ["hinge", "wgan", "bce"]  # by mean, lower first
    hinge, wgan, bce = c.groups
    assert (hinge.n, hinge.mean) == (3, 32.0)
    assert hinge.sd == pytest.approx(2.0)
    assert hinge.ci95 == pytest.approx(stats.t.interval(0.95, 2, loc=32.0, scale=2.0 / math.sqrt(3)))
    assert wgan.n == 2 and wgan.states() == {"finished": 2, "unfinished": 1}
    assert hinge.best == pytest.approx(32.0) and hinge.kimg == 1.0 and hinge.train_s == 4.0 and hinge.img_per_s == 250.0
    # Welch's t by hand: t = (m1 - m2) / sqrt(v1/n1 + v2/n2), Welch-Satterthwaite degrees of freedom
    # the seeds' values: hinge [31, 35], the other [30, 34, 32]
    va, vb = 8.0 / 2, 2.0 ** 2 / 3
    t = (33.0 - 32.0) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / 1 + vb ** 2 / 2)
    assert wgan.p_vs_best == pytest.approx(2 * stats.t.sf(abs(t), df), rel=1e-9)
    assert wgan.differs is False  # 1 apart with sd 2-3 over 2-3 seeds: seed noise
    assert bce.differs is True and bce.p_vs_best < 0.001
    assert bce.extras == {"Augment/p": pytest.approx(0.2)}  # ADA's p shown by default (mean of final values)
    assert welch_p([1.0], [2.0, 3.0]) is None
    assert welch_p([2.0, 2.0], [3.0, 3.0]) == 0.0 and welch_p([2.0, 2.0], [2.0, 2.0]) == 1.0


def test_json_and_html(study, tmp_path):
    result = CliRunner().invoke(cli, ["compare", str(study), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output[:result.output.rindex("}") + 1])
    first = data["configurations"][0]
    assert first["label"] == "loss.name=hinge" and first["final_values"] == [30.0, 34.0, 32.0]
    assert first["p_vs_best"] is None and data["configurations"][2]["differs_from_best"] is True
    html = (study / "compare.html").read_text()
    assert "loss.name=hinge" in html and html.count("data:image/png;base64,") >= 2  # plots embedded
    assert "<h2>Final values</h2>" in html  # every configuration's seeds with its mean and 95% CI
    table = CliRunner().invoke(cli, ["compare", str(study / "hinge-0"), str(study / "bce-0"), "--no-html"])
    assert table.exit_code == 0 and "loss.name=bce" in table.output and "Welch" in table.output


def test_a_sweeps_states_are_shown_and_only_finished_runs_count(tmp_path):
    folder = tmp_path / "s"
    fake_run(folder, "hinge", 0, [40.0, 30.0], state="complete")
    fake_run(folder, "hinge", 1, [50.0], final=False, state="pruned")
    c = compare_runs([folder])
    (g,) = c.groups
    assert g.label == "loss.name=hinge" and g.n == 1 and g.finals == [30.0]
    assert g.states() == {"complete": 1, "pruned": 1} and g.ci95 is None


def test_not_a_run_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(cli, ["compare", str(tmp_path / "empty")])
    assert result.exit_code == 2
    assert result.output.strip() == f"error: {tmp_path / 'empty'}: holds no run (no metrics.jsonl, recipe.toml or " \
                                    f"sweep.json here or in its sub-folders)"


def test_an_option_added_since_a_run_was_written_reads_as_its_default(tmp_path):
    # An older gankit wrote no data.metric_reals; a newer one writes its default: one configuration.
    # A run that set it otherwise is another configuration.
    old = fake_run(tmp_path, "hinge", 0, [30.0])
    new = fake_run(tmp_path, "hinge", 1, [34.0])
    other = fake_run(tmp_path, "hinge", 2, [50.0])
    for d, value in ((new, "train"), (other, "full")):
        (d / "recipe.toml").write_text((d / "recipe.toml").read_text() + f'[data]\nmetric_reals = "{value}"\n')
    assert "metric_reals" not in (old / "recipe.toml").read_text()
    c = compare_runs([tmp_path])
    assert sorted(g.n for g in c.groups) == [1, 2]
    assert c.groups[0].mean == pytest.approx(32.0) and c.groups[1].mean == pytest.approx(50.0)


def test_a_trial_that_has_not_written_its_recipe_yet_joins_its_configuration(tmp_path):
    for s, v in enumerate([30.0, 34.0]):
        fake_run(tmp_path, "hinge", s, [v], state="complete")
        fake_run(tmp_path, "bce", s, [50.0 + v], state="complete")
    starting = fake_run(tmp_path, "hinge", 2, [90.0], final=False, state="running")
    (starting / "recipe.toml").unlink()
    c = compare_runs([tmp_path])
    assert sorted((g.label, len(g.runs), g.n) for g in c.groups) == [("loss.name=bce", 2, 2), ("loss.name=hinge", 3, 2)]


def test_a_metric_no_run_has_is_an_error_naming_those_they_have(study):
    result = CliRunner().invoke(cli, ["compare", str(study), "--metric", "fid", "--no-html"])
    assert result.exit_code == 2
    assert result.output.strip() == "error: --metric fid: no run has Metrics/fid; the runs have Metrics/swd (give " \
                                    "--metric one of them)"
    # a metric of the recipes that no row has yet (runs still training) is no typo
    started = fake_run(study.parent / "started", "hinge", 0, [])  # recipe.toml, no metrics row yet
    assert compare_runs([started], metric="swd").groups[0].mean is None


def test_a_show_key_no_run_has_is_a_warning(study):
    result = CliRunner().invoke(cli, ["compare", str(study), "--show", "Augment/q", "--no-html"])
    assert result.exit_code == 0
    assert result.stderr.strip() == "warning: --show Augment/q: no run has Augment/q in its metrics.jsonl; its " \
                                    "column is empty (did you mean Augment/p?)"
    assert "Augment/q" in result.stdout  # the column is there, empty


def test_a_path_that_does_not_exist_says_so(tmp_path):
    result = CliRunner().invoke(cli, ["compare", str(tmp_path / "nothere")])
    assert result.exit_code == 2
    assert result.output.startswith(f"error: {tmp_path / 'nothere'}: does not exist; give run directories")


def test_runs_differing_only_in_reporting_logging_and_checkpoint_intervals_are_one_configuration(tmp_path):
    """run.tick_kimg, the snapshot / sample / keep intervals and a metric's every_kimg say when
    things are written or measured, not what a run learns: one configuration. The loss is not."""
    intervals = ["tick_kimg = 0.5\nsnapshot_ticks = 1\nkeep_snapshots = 3\nsample_ticks = 2\n",
                 "tick_kimg = 2.0\nsnapshot_ticks = 10\nkeep_every_ticks = 5\nsample_G = true\n"]
    for seed, (text, every) in enumerate(zip(intervals, (1.0, 4.0))):
        d = fake_run(tmp_path, "hinge", seed, [30.0 + seed])
        recipe = (d / "recipe.toml").read_text().replace("[loss]", text + "[loss]")
        (d / "recipe.toml").write_text(recipe + f"every_kimg = {every}\n")
    fake_run(tmp_path, "bce", 0, [50.0])
    c = compare_runs([tmp_path])
    assert sorted((g.label, g.n) for g in c.groups) == [("loss.name=bce", 1), ("loss.name=hinge", 2)]
    assert c.groups[0].mean == pytest.approx(30.5)


def test_whole_recipes_compared_are_labelled_by_their_runs_folder(tmp_path):
    """Runs of two recipes that differ in many keys (a seeds-only study per recipe, compared
    together) are labelled by the folder they sit in, not by every differing key; a few
    differing keys still label as key=value."""
    keys = "".join(f"opt_{i} = {i}\n" for i in range(6))
    for folder, loss in (("study-a", "hinge"), ("study-b", "bce")):
        for seed in range(2):
            d = fake_run(tmp_path / folder, loss, seed, [40.0 + seed + (loss == "bce") * 10])
            recipe = (d / "recipe.toml").read_text()
            if folder == "study-b":  # five more keys differ: a different recipe
                recipe = recipe.replace("[loss]", "[data]\n" + keys + "[loss]")
            (d / "recipe.toml").write_text(recipe)
    c = compare_runs([tmp_path / "study-a", tmp_path / "study-b"])
    assert [(g.label, g.n) for g in c.groups] == [("study-a", 2), ("study-b", 2)]


def sweep_study(folder: Path, params: dict[str, dict]) -> Path:
    """Two seeds of each named configuration of one sweep (its sweep.json ``params``)."""
    for name, p in params.items():
        for s, v in enumerate([30.0 + len(name), 33.0 + len(name)]):
            d = fake_run(folder, name, s, [90.0, v], state="complete")
            (d / "sweep.json").write_text(json.dumps({"state": "complete", "seed": s, "metric": "Metrics/swd",
                                                      "higher_is_better": False, "params": p}))
    return folder


def test_the_ranking_is_readable_at_120_columns_and_names_only_the_differing_parameters(tmp_path):
    """A newcomer's 120-column terminal showed "augm..." for both rows: the labels keep only the
    sweep parameters that differ (the shared ones in the caption), each k=v whole on its line; a
    terminal too narrow even for that lists the configurations under the table, one a line."""
    from io import StringIO

    from rich.console import Console

    from gankit_sweep.compare import print_table

    shared = {"optim.lr": 0.002, "loss.name": "hinge"}
    study = sweep_study(tmp_path / "study", {"bce": {"augment.name": "ada", **shared},
                                             "wgan": {"augment.name": "diffaugment", **shared}})
    c = compare_runs([study])
    assert [g.label for g in c.groups] == ["augment.name=ada", "augment.name=diffaugment"]
    assert c.common == "optim.lr=0.002, loss.name=hinge"
    for width in (120, 60):
        out = StringIO()
        print_table(c, Console(file=out, width=width))
        text = out.getvalue()
        assert max(len(line) for line in text.splitlines()[:-1]) <= width  # the note is soft-wrapped
        assert "optim.lr=0.002, loss.name=hinge" in text
        if width == 120:  # in the table, whole
            assert "│ augment.name=ada         │" in text and "│ augment.name=diffaugment │" in text, text
        else:  # under it, by rank
            assert "\n1: augment.name=ada\n2: augment.name=diffaugment\n" in text, text


def test_the_mean_over_seeds_is_drawn_only_where_every_seed_has_a_value(tmp_path):
    """Seeds that ended at different kimg (a time limit): the mean of the seeds present would jump
    where the shorter one ends; the curve stops there, each x the mean of both seeds."""
    from gankit_sweep.page import curve

    folder = tmp_path / "study"
    fake_run(folder, "hinge", 0, [10.0, 20.0, 30.0, 40.0])  # kimg 0.5 .. 2.0
    fake_run(folder, "hinge", 1, [30.0, 40.0])  # kimg 0.5, 1.0: stopped early
    (g,) = compare_runs([folder]).groups
    xs, mean, low, high = curve(g, "Metrics/swd")
    assert xs == [0.5, 1.0] and mean == [20.0, 30.0] and low == [10.0, 20.0] and high == [30.0, 40.0]


def test_a_two_seed_interval_of_a_distance_is_clipped_to_its_values_and_the_page_says_so(tmp_path):
    """t(0.975, 1) = 12.7: two SWD values 10 and 300 give a Student interval reaching -1688; SWD
    (Metric.value_range (0, inf)) cannot be negative, so the interval is clipped at 0, and the
    table's note, the JSON and compare.html say so. A metric gankit cannot load is not clipped."""
    from gankit_sweep.compare import metric_range, to_json
    from gankit_sweep.page import write_page

    folder = tmp_path / "study"
    fake_run(folder, "hinge", 0, [90.0, 10.0])
    fake_run(folder, "hinge", 1, [90.0, 300.0])
    c = compare_runs([folder])
    (g,) = c.groups
    low, high = stats.t.interval(0.95, 1, loc=155.0, scale=g.sd / math.sqrt(2))
    assert low < -1000
    assert g.ci95 == (0.0, pytest.approx(high))
    assert metric_range("Metrics/swd") == (0.0, math.inf) and metric_range("Metrics/fid") == (0.0, math.inf)
    assert metric_range("Metrics/not-a-metric") == (-math.inf, math.inf)
    assert to_json(c)["ci"].endswith("clipped to the values Metrics/swd can take, [0, inf]")
    write_page(c, tmp_path / "compare.html")
    assert "over seeds, clipped to the values Metrics/swd can take, [0, inf]." in (tmp_path / "compare.html").read_text()
    result = CliRunner().invoke(cli, ["compare", str(folder), "--no-html"])
    assert "clipped to the values Metrics/swd can take, [0, inf]" in result.output
