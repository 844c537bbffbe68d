"""gankit sweep: --param spaces (good and bad), the study and its run directories, pruning,
kill -9 and continuing, and two sweep processes sharing one study.

The tests that train start real ``gankit sweep`` processes, whose trials are ``gankit run``
children of the tiny recipe (a few steps each); the loop's own logic (Ctrl-C, failures) is also
tested in-process with stand-in children that need no torch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from click.testing import CliRunner

from sweep_cli import CONST_METRIC, cli
from gankit_sweep import trials as tr
from gankit_sweep.spaces import SpaceError, parse_space, parse_spaces
from gan_kit.testing import TINY_RECIPE



def tiny(tmp_path: Path, metric: str = "swd") -> Path:
    """The tiny recipe with an objective: SWD on 64 images, or the const plugin metric every tick."""
    body = TINY_RECIPE.format(out_dir=(tmp_path / "run").as_posix())
    if metric == "const":
        (tmp_path / "constmetric.py").write_text(CONST_METRIC)
        text = 'plugins = ["constmetric.py"]\n' + body + '\n[[metric]]\nname = "const"\nevery_kimg = 0.1\n'
    else:
        text = body + '\n[[metric]]\nname = "swd"\nnum_images = 64\n'
    path = tmp_path / "tiny.toml"
    path.write_text(text)
    return path


def storage(folder: Path):
    return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(folder / "study.journal")))


def states(folder: Path, name: str) -> list[tuple[str, str]]:
    study = optuna.load_study(study_name=name, storage=storage(folder))
    return [(t.user_attrs.get("gankit:name"), t.state.name) for t in study.trials]


# ------------------------------------------------------------------------------ spaces --


def test_spaces_parse_lists_bundles_and_ranges():
    sp = parse_space("update.name=[d-then-g,g-then-d,shared-fake]")
    assert (sp.kind, sp.choices) == ("choice", ["d-then-g", "g-then-d", "shared-fake"])
    assert sp.sets("g-then-d") == ['update.name="g-then-d"']
    tables = parse_space('penalty=[[], [{name = "r1", weight = 10.0}]]')
    assert tables.choices == ["[]", '[{ name = "r1", weight = 10.0 }]']  # Optuna stores scalars: TOML text
    assert tables.sets(tables.choices[1]) == ['penalty=[{ name = "r1", weight = 10.0 }]']
    mixed = parse_space("penalty.0.weight=[1, 2.5, none]")
    assert mixed.values == (1, 2.5, "none")
    bundle = parse_space('objective={hinge-gp = {loss.name = "hinge"}, wgan-gp = {loss.name = "wgan-gp", penalty = []}}')
    assert bundle.choices == ["hinge-gp", "wgan-gp"]
    assert bundle.sets("wgan-gp") == ['loss.name="wgan-gp"', "penalty=[]"]
    assert bundle.keys() == {"loss.name", "penalty"}
    # A space pasted over several lines of a quoted shell argument (as the docs print long ones):
    # the line breaks read as spaces, though TOML's inline tables take none.
    split = parse_space('objective={hinge-gp = {loss.name = "hinge"},\n  wgan-gp = {loss.name = "wgan-gp",\n penalty = []}}')
    assert split.choices == bundle.choices and split.sets("wgan-gp") == bundle.sets("wgan-gp")
    assert parse_space("update.name=[d-then-g,\n g-then-d]").choices == ["d-then-g", "g-then-d"]
    lr = parse_space("optim.lr=loguniform(1e-4,3e-3)")
    dist = lr.distribution()
    assert (lr.kind, dist.low, dist.high, dist.log) == ("float", 1e-4, 3e-3, True)
    assert lr.probes() == [1e-4, 3e-3]
    ints = parse_space("update.d_steps=int(1, 3)")
    assert ints.grid() == [1, 2, 3] and ints.sets(2) == ["update.d_steps=2"]
    with pytest.raises(SpaceError, match="not a float range"):
        lr.grid()


@pytest.mark.parametrize("items, expected", [
    (["loss.name=[]"], "--param 'loss.name=[]': an empty list"),
    (["lr={lr-x0.5 = {optim.lr = 0.001}}"], "bundle name lr-x0.5... has a dot, which TOML reads as a nested table"),
    (["optim.lr=uniform(3e-3, 1e-4)"], "--param 'optim.lr=uniform(3e-3, 1e-4)': reversed range: low 0.003 > high 0.0001"),
    (["optim.lr=loguniform(0, 1)"], "loguniform needs low > 0"),
    (["run.seed=[1, 2]"], "--param 'run.seed=[1, 2]': run.seed is set by the sweep: every configuration runs with each "
                          "seed of --seeds N"),
    (["loss.name=[hinge,bce]", "loss.name=[wgan]"], "loss.name is already swept by --param 'loss.name=[hinge,bce]'"),
    (["loss.name=hinge"], "'hinge' is not a space"),
    (["loss.name=[hinge,hinge]"], '"hinge" is listed twice'),
    (['loss.name=["hinge", bce'], "--param 'loss.name=[\"hinge\", bce': an unclosed list: '[\"hinge\", bce' has no "
                                  "closing ']' (write --param 'loss.name=[a, b]')"),
    (["optim.lr=uniform(1e-4, 3e-3"], "an unclosed range: 'uniform(1e-4, 3e-3' has no closing ')'"),
])
def test_bad_spaces_are_one_line_each(items, expected):
    with pytest.raises(SpaceError) as e:
        parse_spaces(items)
    assert len(str(e.value).splitlines()) == len(items) - (1 if len(items) == 2 else 0)
    assert expected in str(e.value)


@pytest.mark.parametrize("params, expected", [
    (["loss.nme=[hinge,bce]"], "error: --param 'loss.nme=[hinge,bce]': "),
    (["loss.name=[hinge,hing]"], "error: --param 'loss.name=[hinge,hing]': value \"hing\" cannot train: "),
    (["penalty.3.weight=[1, 2]"], "error: --param 'penalty.3.weight=[1, 2]': "),
    (["optim.lr=uniform(2e-3, 20)"], "error: --param 'optim.lr=uniform(2e-3, 20)': "),
    (["run.out_dir=[a, b]"], "error: --param 'run.out_dir=[a, b]': run.out_dir is set by the sweep"),
    (["data.max_images=[1, 1797]"], "error: --param 'data.max_images=[1, 1797]': value 1 cannot train: "),  # the data
    (["loss.name=[hinge, wgan-gp]", 'penalty=[[], [{name = "gradient-penalty"}]]'],
     "error: configuration loss.name=wgan-gp, penalty=[{ name = \"gradient-penalty\" }] cannot train: "),
])
def test_sweep_refuses_a_bad_space_in_one_line_before_training(tmp_path, monkeypatch, params, expected):
    recipe = tiny(tmp_path)
    monkeypatch.chdir(tmp_path)
    args = ["sweep", str(recipe), *(x for p in params for x in ("--param", p))]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(expected), lines
    assert not (tmp_path / "runs").exists()  # nothing trained, no study made


def test_budget_keys_belong_to_the_sweep(tmp_path, monkeypatch):
    recipe = tiny(tmp_path)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["sweep", str(recipe), "--param", "run.total_kimg=[1, 2]", "--budget-kimg", "1"])
    assert result.exit_code == 2
    assert "run.total_kimg is set by the sweep: --budget-kimg sets it; drop one of them" in result.output
    result = CliRunner().invoke(cli, ["sweep", str(recipe), "--param", "loss.name=[hinge, bce]", "--budget-kimg", "1",
                                      "--set", "run.total_kimg=2"])
    assert result.exit_code == 2
    assert result.output.strip() == ("error: --set 'run.total_kimg=2': run.total_kimg is set by the sweep: "
                                     "--budget-kimg sets it; drop one of them")


def test_a_param_typo_names_the_param_and_a_bad_storage_url_what_storage_takes(tmp_path, monkeypatch):
    from gan_kit import GankitError
    from gankit_sweep.study import open_storage

    recipe = tiny(tmp_path)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["sweep", "tiny.toml", "--param", "loss.nme=[hinge,bce]", "--dry-run"])
    assert result.exit_code == 2 and recipe.is_file()
    assert result.output.strip() == ("error: --param 'loss.nme=[hinge,bce]': tiny.toml (--param): loss.nme: unknown "
                                     "option (did you mean 'name'?)")
    with pytest.raises(GankitError) as e:
        open_storage("foo://bar", tmp_path)
    assert str(e.value) == ("--storage foo://bar: unknown storage URL scheme 'foo://'; --storage takes a journal file "
                            "path such as runs/study.journal, sqlite:///FILE.db, or another SQLAlchemy database URL "
                            "Optuna can use: postgresql://USER@HOST/DB (psycopg2-binary or psycopg), "
                            "mysql://USER@HOST/DB (pymysql or mysqlclient), with the password in "
                            "GANKIT_STORAGE_PASSWORD")


def test_dry_run_lists_the_grid_and_the_trial_command(tmp_path, monkeypatch):
    recipe = tiny(tmp_path)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["sweep", str(recipe), "--param", "update.name=[d-then-g,g-then-d]",
                                      "--param", "update.d_steps=int(1, 2)", "--seeds", "3", "--budget-minutes", "2",
                                      "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "4 configurations x 3 seeds = 12 trials (grid)" in result.output
    assert "c003: update.name=g-then-d, update.d_steps=2" in result.output
    assert "--set run.max_minutes=2.0" in result.output and "--set run.seed=0" in result.output
    assert not (tmp_path / "runs").exists()


def test_without_a_param_the_sweep_runs_the_recipe_as_given_with_each_seed(tmp_path, monkeypatch):
    """No --param: one configuration (the recipe and its --set items) times --seeds, the shape of
    comparing whole recipes at one budget; compare then names each study by its folder."""
    recipe = tiny(tmp_path)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["sweep", str(recipe), "--seeds", "3", "--budget-minutes", "2", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "1 configuration x 3 seeds = 3 trials (grid)" in result.output
    assert "c000: the recipe as given" in result.output
    first = result.output.split("first trial: ", 1)[1]
    assert "--set run.seed=0" in first and "--set run.max_minutes=2.0" in first
    assert not (tmp_path / "runs").exists()


def test_dry_run_warns_of_a_pruner_without_every_kimg_in_a_syntax_set_takes(tmp_path, monkeypatch):
    recipe = tiny(tmp_path)  # SWD without every_kimg: computed only at the end
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["sweep", str(recipe), "--param", "update.name=[d-then-g,g-then-d]", "--pruner",
                                      "median", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "warning: metric.0.every_kimg is not set" in result.stderr
    fix = result.stderr.split("(e.g. --set ", 1)[1].split(")")[0]
    assert fix == "metric.0.every_kimg=4"
    from gan_kit import load_recipe

    assert load_recipe(recipe, [fix])[0].metrics[0].slot.every_kimg == 4  # the suggestion loads
    assert "1 seed: no interval (compare needs --seeds 2 or more)" in result.output
    assert "study tiny-sweep: new, in journal file runs/tiny-sweep/study.journal" in result.output
    assert not (tmp_path / "runs").exists()


ROOT = Path(__file__).resolve().parents[3]  # the gankit checkout: its docs and recipes


def docs_examples() -> tuple[list[list[str]], list[str], list[str], list[str]]:
    """docs/sweeps.md's ``gankit sweep`` commands (as argument lists), its other ``--param``
    examples (the spaces table and the text), the table's ranges without a key, and its
    ``error: --param`` lines."""
    import re
    import shlex

    text = (ROOT / "docs" / "sweeps.md").read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.split("#", 1)[0] if line.lstrip().startswith(("gankit", "srun")) else ""
            if "gankit sweep" in line:
                args = shlex.split(line.split("gankit ", 1)[1])
                ends = [i for i, a in enumerate(args) if a in ("&", "|", ";", "&&") or ">" in a]  # redirections
                commands.append(args[:ends[0]] if ends else args)
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    params = re.findall(r"--param '([^']+)'", prose)
    section = text.split("## Spaces", 1)[1].split("\n## ", 1)[0]
    table = "\n".join(ln for ln in section.splitlines() if ln.startswith("| "))
    spans = re.findall(r"`([^`]+)`", table)
    params += [x for x in spans if re.match(r"[\w.\-]+=", x)]
    ranges = [x for x in spans if re.fullmatch(r"(log)?(uniform|int)\(.*\)", x)]
    errors = [ln for ln in text.splitlines() if ln.startswith("error: --param '")]
    return commands, params, ranges, errors


def test_every_example_of_the_sweeps_docs_checks_against_the_shipped_recipe(tmp_path, monkeypatch):
    commands, params, ranges, errors = docs_examples()
    assert len(commands) >= 4 and len(params) >= 8 and len(ranges) == 3 and len(errors) >= 5  # examples found
    for r in ranges:  # the table's ranges without a key
        assert parse_space(f"optim.lr={r}").kind in ("float", "int")
    monkeypatch.chdir(ROOT)  # the docs name recipes/pggan.toml; --out keeps any study of this checkout out
    for args in commands:
        if "--storage" in args:  # a database server: not here
            i = args.index("--storage")
            args = args[:i] + args[i + 2:]
        if "--out" in args:
            i = args.index("--out")
            args = args[:i] + args[i + 2:]
        result = CliRunner().invoke(cli, [*args, "--dry-run", "--out", str(tmp_path / "study")])
        assert result.exit_code == 0 and ": ok; " in result.output, (args, result.output)
    for param in params:
        result = CliRunner().invoke(cli, ["sweep", "recipes/pggan.toml", "--param", param, "--dry-run", "--out",
                                          str(tmp_path / "study")])
        assert result.exit_code == 0, (param, result.output)
    for line in errors:
        param = line[len("error: --param '"):].split("': ", 1)[0]
        result = CliRunner().invoke(cli, ["sweep", "recipes/pggan.toml", "--param", param, "--dry-run", "--out",
                                          str(tmp_path / "study")])
        assert result.exit_code == 2 and result.stderr.strip() == line, (line, result.stderr)
    from gan_kit import load_recipe

    assert load_recipe(ROOT / "recipes" / "pggan.toml", ["metric.0.every_kimg=4"])[0].metrics[0].slot.every_kimg == 4
    assert not (tmp_path / "study").exists()


# ------------------------------------------------------------------ the loop, in-process --

FAKE_CHILD = '''
import json, os, signal, sys, time
run_dir, value, ticks = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
os.makedirs(os.path.join(run_dir, "checkpoints"), exist_ok=True)
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
start = 0
if os.path.exists(os.path.join(run_dir, "checkpoints", "latest.pt")):
    start = int(float(open(os.path.join(run_dir, "checkpoints", "latest.pt")).read()))
if value < 0:
    print("error: a trial that cannot train"); sys.exit(2)
for tick in range(start, ticks):
    row = {"Progress/tick": tick, "Progress/kimg": 0.1 * (tick + 1), "Progress/final": tick == ticks - 1,
           "Metrics/const": value, "Timing/train_s": 0.05 * (tick + 1)}
    if tick == ticks - 1 and os.environ.get("FAKE_FINAL") == "nan":  # the metric is NaN at the end only
        row["Metrics/const"] = float("nan")
    elif tick == ticks - 1 and os.environ.get("FAKE_FINAL") == "missing":  # ... or failed there
        del row["Metrics/const"]
    with open(os.path.join(run_dir, "metrics.jsonl"), "a") as f:
        f.write(json.dumps(row) + "\\n")
    open(os.path.join(run_dir, "checkpoints", "latest.pt"), "w").write(str(tick + 1))
    time.sleep(0.15)
    if stop:  # as gankit run does: a checkpoint at the step it stops, between two ticks
        open(os.path.join(run_dir, "checkpoints", "latest.pt"), "w").write(str(tick + 1.5))
        sys.exit(143)
'''


def fake_sweep(tmp_path, monkeypatch, values, *, ticks=4, extra=(), edit=None):
    """The in-process sweep over ``x=[values]``, its children the stand-in above; ``edit(text)``
    changes the recipe file."""
    from gankit_sweep import driver
    from gankit_sweep.setup import prepare

    script = tmp_path / "child.py"
    script.write_text(FAKE_CHILD)

    def command(recipe, run_dir, sets, *, resume, overwrite, threads):
        value = next(s.split("=", 1)[1] for s in sets if s.startswith("metric.0.value="))
        return [sys.executable, str(script), str(run_dir), value, str(ticks)]

    monkeypatch.setattr(tr, "child_command", command)
    monkeypatch.setattr(driver, "POLL_S", 0.05)
    monkeypatch.setattr(driver, "_checkpoint_progress", lambda p: (float(p.read_text()) / 10, 0.0))
    recipe = tiny(tmp_path, "const")
    if edit is not None:
        recipe.write_text(edit(recipe.read_text()))
    space = values if isinstance(values, str) else f"[{', '.join(map(str, values))}]"
    kwargs = dict(recipe=recipe, params=[f"metric.0.value={space}"], seeds=1, trials=None,
                  jobs=1, study_name="s", folder=tmp_path / "study", storage=None, sampler=None, pruner="none",
                  pruner_startup=1, pruner_warmup=0, metric=None, budget_kimg=None, budget_minutes=None,
                  overrides=(), retry_failed=False, dry_run=False)
    kwargs.update(extra)
    return prepare(**kwargs)


def test_ctrl_c_stops_the_trials_and_the_same_sweep_continues_them(tmp_path, monkeypatch):
    from gan_kit import Interrupted

    sweep = fake_sweep(tmp_path, monkeypatch, [1, 2], ticks=6)
    original = sweep._poll

    def poll(a):  # Ctrl-C once the first trial has written two ticks
        original(a)
        if len(a.reported) >= 2 and sweep.signal is None:
            os.kill(os.getpid(), signal.SIGINT)

    sweep._poll = poll
    with pytest.raises(Interrupted) as e:
        sweep.run()
    assert e.value.exit_code == 130 and "continue the study with `gankit" in str(e.value)
    first = tmp_path / "study" / "c000-s0"
    record = tr.read_state(first)
    assert record["state"] == "interrupted" and record["exit_code"] == 143
    stopped_at = float((first / "checkpoints" / "latest.pt").read_text()) / 10
    assert record["kimg"] == pytest.approx(stopped_at)  # the checkpoint's, further than the last metrics row's
    assert stopped_at > tr.read_rows(first)[-1]["Progress/kimg"]
    assert ("c000-s0", "WAITING") in states(tmp_path / "study", "s")  # queued again, same name
    assert not (tmp_path / "study" / "c001-s0").exists()  # nothing new started after Ctrl-C
    code = fake_sweep(tmp_path, monkeypatch, [1, 2], ticks=6).run()
    assert code == 0
    rows = [json.loads(x) for x in (first / "metrics.jsonl").read_text().splitlines()]
    assert [r["Progress/tick"] for r in rows] == list(range(6))  # continued, not started over
    assert len(tr.read_state(first)["attempts"]) == 2
    done = states(tmp_path / "study", "s")
    assert done.count(("c000-s0", "COMPLETE")) == 1 and done.count(("c001-s0", "COMPLETE")) == 1


def test_a_death_by_signal_is_recorded_as_the_shell_reports_it():
    assert [tr.exit_status(rc) for rc in (-signal.SIGTERM, -signal.SIGINT, -signal.SIGKILL, 143, 2, 0)] == \
        [143, 130, 137, 143, 2, 0]


def test_a_failed_trial_keeps_its_directory_and_says_why(tmp_path, monkeypatch):
    code = fake_sweep(tmp_path, monkeypatch, [-1, 1]).run()
    assert code == 1  # a trial failed
    failed = tr.read_state(tmp_path / "study" / "c000-s0")
    assert failed["state"] == "failed" and failed["reason"] == "error: a trial that cannot train"
    assert tr.read_state(tmp_path / "study" / "c001-s0")["state"] == "complete"
    assert sorted(states(tmp_path / "study", "s")) == [("c000-s0", "FAIL"), ("c001-s0", "COMPLETE")]
    from gan_kit import GankitError

    with pytest.raises(GankitError, match=r"--study s: this study was started with other settings \(--param "
                                          r"'metric.0.value=\[-1, 1\]' then, 'metric.0.value=\[-1, 1, 5\]' now\)"):
        fake_sweep(tmp_path, monkeypatch, [-1, 1, 5])  # the same study, other values: refused before training


@pytest.mark.parametrize("final", ["nan", "missing"])
def test_the_objective_is_the_final_rows_value_and_nan_there_fails_the_trial(tmp_path, monkeypatch, final):
    monkeypatch.setenv("FAKE_FINAL", final)
    code = fake_sweep(tmp_path, monkeypatch, [3]).run()
    assert code == 1  # a trial without a result is a failure, not an earlier tick's 3
    trial = tmp_path / "study" / "c000-s0"
    record = tr.read_state(trial)
    assert record["state"] == "failed" and "value" not in record
    assert ("Metrics/const is nan in the final metrics row at kimg 0.4" if final == "nan" else
            "the final metrics row at kimg 0.4 has no Metrics/const") in record["reason"]
    study = optuna.load_study(study_name="s", storage=storage(tmp_path / "study"))
    assert [(t.state.name, t.value) for t in study.trials] == [("FAIL", None)]
    result = CliRunner().invoke(cli, ["compare", str(tmp_path / "study"), "--json", "--no-html"])
    conf = json.loads(result.output)["configurations"][0]
    assert (conf["n"], conf["mean"], conf["states"], conf["runs"][0]["final"]) == (0, None, {"failed": 1}, None)
    assert conf["runs"][0]["last"] == 3.0  # the earlier ticks' value is shown as such, not counted


def test_compare_counts_a_plain_run_whose_final_metric_is_nan_as_failed(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "recipe.toml").write_text('[run]\nseed = 0\n[[metric]]\nname = "swd"\n')
    rows = [{"Progress/tick": 0, "Progress/kimg": 1.0, "Metrics/swd": 8.0},
            {"Progress/tick": 1, "Progress/kimg": 2.0, "Progress/final": True, "Metrics/swd": float("nan")}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    from gankit_sweep.compare import compare_runs

    group = compare_runs([run]).groups[0]
    assert (group.n, group.mean, group.states()) == (0, None, {"failed": 1})


def test_a_pid_held_by_another_process_now_is_never_waited_for_nor_signalled(tmp_path):
    import socket

    from gankit_sweep import procs

    other = subprocess.Popen(["sleep", "60"])  # holds the pid a dead trial child had
    try:
        me = procs.identity(other.pid)
        assert me["start"] is not None and procs.same(me) is True
        for record in ({"host": socket.gethostname(), "child_pid": other.pid, "child_start": str(int(me["start"]) - 1),
                        "child_boot": me["boot"]},  # the recorded child started at another time
                       {"host": socket.gethostname(), "child_pid": other.pid},  # an older record: no start time
                       {"host": "another-node", "child_pid": other.pid, "child_start": me["start"]}):
            t0 = time.monotonic()
            tr.wait_previous_child(record, tmp_path, timeout=20)
            assert time.monotonic() - t0 < 5 and other.poll() is None, record  # not waited for, still running
            assert procs.kill_if_same(tr.child_record(record)) is False and other.poll() is None
        # the recorded process itself: waited for, and killed at the timeout
        record = {"host": socket.gethostname(), "child_pid": other.pid, "child_start": me["start"],
                  "child_boot": me["boot"]}
        t0 = time.monotonic()
        tr.wait_previous_child(record, tmp_path, timeout=1)
        assert 1 <= time.monotonic() - t0 < 10 and other.wait(5) == -signal.SIGKILL
        assert procs.same(tr.child_record(record)) is False  # gone
    finally:
        other.kill()
        other.wait()


def test_a_trial_of_a_lost_machine_is_taken_over_by_a_live_worker(tmp_path, monkeypatch, capsys):
    from gankit_sweep import driver
    from gankit_sweep import study as st

    monkeypatch.setattr(st, "GRACE_S", 1.5)
    monkeypatch.setattr(driver, "STALE_CHECK_S", 0.2)
    sweep = fake_sweep(tmp_path, monkeypatch, [1, 2])
    # another machine took c000-s0 and was lost: its heartbeat stops now
    tid = st.pop_waiting(sweep.storage, sweep.study_id)
    frozen = sweep.storage.get_trial(tid)
    sweep.storage.set_trial_system_attr(tid, st.WORKER, {"host": "lost-node", "pid": 4242, "trial": frozen.number})
    sweep.storage.set_trial_system_attr(tid, st.BEAT, time.time())
    assert sweep.run() == 0  # this worker ran c001, waited, and took c000 over: no one reran anything
    out = capsys.readouterr().out
    assert "waiting for 1 trial(s) running in other processes" in out and "queued again" in out
    done = states(tmp_path / "study", "s")
    assert sorted(done) == [("c000-s0", "COMPLETE"), ("c000-s0", "FAIL"), ("c001-s0", "COMPLETE")]


def test_a_sampled_configuration_runs_with_every_seed(tmp_path, monkeypatch):
    sweep = fake_sweep(tmp_path, monkeypatch, "uniform(1, 10)", ticks=1,
                       extra=dict(sampler="random", trials=2, seeds=2))
    assert sweep.run() == 0
    study = optuna.load_study(study_name="s", storage=storage(tmp_path / "study"))
    by_name = {t.user_attrs["gankit:name"]: t for t in study.trials}
    assert len(by_name) == 4 and all(t.state.name == "COMPLETE" for t in study.trials)
    configs = sorted({n[:-3] for n in by_name})
    assert configs == ["c000", "c002"]  # the sampling trial's number: seed 1 of c000 took number 1 (docs: Trial names)
    for c in configs:  # both seeds of a configuration: the same sampled value, the value reported
        s0, s1 = by_name[f"{c}-s0"], by_name[f"{c}-s1"]
        assert s0.params == s1.params and 1 <= s0.params["metric.0.value"] <= 10
        assert s0.value == s1.value == pytest.approx(s0.params["metric.0.value"])
        assert tr.read_state(tmp_path / "study" / f"{c}-s1")["seed"] == 1


def test_the_study_remembers_what_the_user_wrote_not_gankits_defaults(tmp_path, monkeypatch, capsys):
    import re

    import gan_kit
    from gan_kit import GankitError

    fake_sweep(tmp_path, monkeypatch, [1, 2], extra=dict(budget_kimg=4.0))  # starts the study; nothing trains
    study = optuna.load_study(study_name="s", storage=storage(tmp_path / "study"))
    record = study.user_attrs["gankit"]
    assert record["budget_kimg"] == 4.0 and record["sets"] == [] and "run" in record["recipe_table"]
    # a gankit update that adds an option with a default changes the resolved recipe, not the file
    monkeypatch.setattr(gan_kit, "recipe_to_toml", lambda *a, **k: "[run]\nnew_option = 1\n")
    assert fake_sweep(tmp_path, monkeypatch, [1, 2], extra=dict(budget_kimg=4.0)) is not None
    with pytest.raises(GankitError) as e:
        fake_sweep(tmp_path, monkeypatch, [1, 2], extra=dict(budget_kimg=8.0))
    assert "(--budget-kimg 4 then, 8 now)" in str(e.value)
    recipe = tmp_path / "tiny.toml"
    with pytest.raises(GankitError) as e:
        fake_sweep(tmp_path, monkeypatch, [1, 2], extra=dict(budget_kimg=8.0, overrides=("run.threads=1",)),
                   edit=lambda text: text.replace("every_kimg = 0.1", "every_kimg = 0.2"))
    msg = str(e.value)
    assert len(msg.splitlines()) == 1
    assert ("(--set none then, 'run.threads=1' now; --budget-kimg 4 then, 8 now; the recipe file "
            f"{recipe}, or a file it extends, changed since the study began: metric.0.every_kimg 0.1 then, "
            "0.2 now)") in msg
    assert not re.search(r"[0-9a-f]{16}", msg) and "run.total_kimg" not in msg  # no hash, no internal --set


def test_the_start_line_says_the_threads_set_by_the_user(tmp_path, monkeypatch, capsys):
    fake_sweep(tmp_path, monkeypatch, [1, 2], extra=dict(overrides=("run.threads=1",), jobs=2))
    assert "; 2 at once x 1 thread(s); " in capsys.readouterr().out


def test_a_study_started_by_an_older_gankit_continues(tmp_path, monkeypatch, capsys):
    from gan_kit import GankitError

    fake_sweep(tmp_path, monkeypatch, [1, 2], extra=dict(budget_kimg=4.0))
    study = optuna.load_study(study_name="s", storage=storage(tmp_path / "study"))
    legacy = {"recipe": "tiny.toml", "recipe_digest": "fb10" * 4, "params": ["metric.0.value=[1, 2]"],
              "sets": ["run.total_kimg=4.0"], "metric": "Metrics/const", "sampler": "grid"}
    study.set_user_attr("gankit", legacy)  # the record an older gankit wrote: the resolved recipe's digest
    with pytest.raises(GankitError, match=r"\(--budget-kimg 4 then, 8 now\)"):
        fake_sweep(tmp_path, monkeypatch, [1, 2], extra=dict(budget_kimg=8.0))
    capsys.readouterr()
    assert fake_sweep(tmp_path, monkeypatch, [1, 2], extra=dict(budget_kimg=4.0)) is not None
    assert "cannot be told apart: continuing as the same study" in capsys.readouterr().err
    study = optuna.load_study(study_name="s", storage=storage(tmp_path / "study"))
    assert study.user_attrs["gankit"]["version"] == 2  # recorded anew, in the new form


def test_dry_run_checks_the_study_as_the_real_run_does_and_says_what_is_left(tmp_path, monkeypatch, capsys):
    from gan_kit import GankitError

    assert fake_sweep(tmp_path, monkeypatch, [-1, 1], ticks=1).run() == 1  # c000 failed, c001 complete
    capsys.readouterr()
    assert fake_sweep(tmp_path, monkeypatch, [-1, 1], extra=dict(dry_run=True, seeds=2)) is None
    out = capsys.readouterr().out
    assert f"study s exists in journal file {tmp_path / 'study' / 'study.journal'}: 1 of 4 trials finished " \
           f"(1 complete)" in out
    assert "failed, not run again (add --retry-failed to): c000-s0" in out and "to run: c000-s1, c001-s1" in out
    fake_sweep(tmp_path, monkeypatch, [-1, 1], extra=dict(dry_run=True, retry_failed=True))
    assert "1 of 2 trials finished (1 complete)\n  to run: c000-s0\n" in capsys.readouterr().out
    with pytest.raises(GankitError, match=r"this study was started with other settings \(--param "):
        fake_sweep(tmp_path, monkeypatch, [-1, 1, 5], extra=dict(dry_run=True))
    fake_sweep(tmp_path, monkeypatch, [1, 2], extra=dict(dry_run=True, study_name="other"))
    assert "study other: new, in journal file" in capsys.readouterr().out
    assert not (tmp_path / "study" / "other").exists()


# ------------------------------------------------------------------ real sweep processes --


def _sweep_cmd(recipe, *args):
    return [sys.executable, "-m", "gan_kit", "sweep", str(recipe), *args]


ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def test_two_processes_share_one_study_and_compare_gives_the_metrics_numbers(tmp_path):
    recipe = tiny(tmp_path)
    cmd = _sweep_cmd(recipe, "--param", "update.name=[d-then-g,g-then-d]", "--seeds", "2",
                     "--out", str(tmp_path / "study"), "--study", "two", "--set", "run.threads=1")
    procs = [subprocess.Popen(cmd, cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    started = [line for out in outs for line in out.splitlines() if ": started (" in line]
    assert len(started) == 4, outs  # every trial once, by one of the two processes
    runs = sorted(d.name for d in (tmp_path / "study").iterdir() if d.is_dir())
    assert runs == ["c000-s0", "c000-s1", "c001-s0", "c001-s1"]
    assert sorted(states(tmp_path / "study", "two")) == [(r, "COMPLETE") for r in runs]
    for r in runs:
        assert len(tr.read_state(tmp_path / "study" / r)["attempts"]) == 1

    result = CliRunner().invoke(cli, ["compare", str(tmp_path / "study"), "--json", "--no-html"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["metric"] == "Metrics/swd" and data["higher_is_better"] is False
    for conf in data["configurations"]:
        assert conf["n"] == 2
        for run in conf["runs"]:
            rows = [json.loads(x) for x in (Path(run["dir"]) / "metrics.jsonl").read_text().splitlines()]
            assert run["final"] == rows[-1]["Metrics/swd"] and run["kimg"] == rows[-1]["Progress/kimg"]
            assert run["train_s"] == rows[-1]["Timing/train_s"]
        assert conf["final_values"] == [r["final"] for r in conf["runs"]]
        assert conf["mean"] == pytest.approx(sum(conf["final_values"]) / 2, rel=1e-12)
    means = [c["mean"] for c in data["configurations"]]
    assert means == sorted(means)  # ranked, lower is better


def test_kill_9_then_the_same_command_resumes_and_a_pruner_stops_a_worse_trial(tmp_path):
    recipe = tiny(tmp_path, "const")
    folder = tmp_path / "study"
    cmd = _sweep_cmd(recipe, "--param", "metric.0.value=[1, 100]", "--out", str(folder), "--study", "k",
                     "--pruner", "median", "--pruner-startup", "1", "--budget-kimg", "0.6",
                     "--set", "run.snapshot_ticks=1", "--set", "run.threads=1")
    first = subprocess.Popen(cmd, cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    trial = folder / "c000-s0"
    deadline = time.monotonic() + 240
    while not (trial / "checkpoints" / "latest.pt").is_file() and time.monotonic() < deadline:
        time.sleep(0.05)
    first.kill()  # kill -9: no handler runs; the child gets SIGTERM (PR_SET_PDEATHSIG) and checkpoints
    first.wait()
    assert not tr.run_finished(trial)
    second = subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "c000-s0: resuming from kimg" in second.stdout, second.stdout
    state = tr.read_state(trial)
    assert state["state"] == "complete" and state["value"] == 1.0
    assert [a["resumed_from_kimg"] is not None and a["resumed_from_kimg"] > 0 for a in state["attempts"]] == [False, True]
    rows = [json.loads(x) for x in (trial / "metrics.jsonl").read_text().splitlines()]
    assert [r["Progress/tick"] for r in rows] == list(range(len(rows))) and rows[-1]["Progress/kimg"] >= 0.6
    # c001 reports 100 at its first tick, worse than the median (1) of the completed trial: pruned
    pruned = tr.read_state(folder / "c001-s0")
    assert pruned["state"] == "pruned" and pruned["pruned_at_tick"] == 0, second.stdout
    assert tr.read_rows(folder / "c001-s0")[-1]["Progress/kimg"] < 0.6  # stopped early, run directory kept
    assert (folder / "c001-s0" / "checkpoints" / "latest.pt").is_file()
    assert sorted(states(folder, "k")) == [("c000-s0", "COMPLETE"), ("c000-s0", "FAIL"), ("c001-s0", "PRUNED")]
    # the same command once more: nothing is run again
    third = subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600)
    assert third.returncode == 0 and "started" not in third.stdout and "resuming" not in third.stdout
    assert "1 complete, 1 pruned" in third.stdout
