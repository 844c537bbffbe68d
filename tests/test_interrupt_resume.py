"""A run never loses work: SIGINT / SIGTERM finish the iteration and checkpoint, resume
from the run directory alone, changed optimizer settings take effect on resume, refused changes
are one line, the tick counter and metrics.jsonl continue where the checkpoint was."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys

import pytest
import torch

from gan_kit import CheckpointError, GankitError, hookimpl
from gan_kit.runs import checkpoint as ckpt
from gan_kit.runs.session import train
from gan_kit.base.errors import Interrupted
from gan_kit.runs.launch import load_for_run
from gan_kit.recipe import load_recipe
from gan_kit.runs.run import build_run


class SignalAt:
    """A plugin that sends ``signum`` to this process after iteration ``at`` (1-based), ``times``
    times (a second Ctrl-C)."""

    def __init__(self, at: int, signum: int = signal.SIGINT, times: int = 1):
        self.at, self.signum, self.times = at, signum, times

    @hookimpl
    def step_finished(self, run, stats):
        if run.step == self.at:
            for _ in range(self.times):
                os.kill(os.getpid(), self.signum)


def build(path, out, overrides=(), extra=()):
    recipe, plugins = load_recipe(path, [f"run.out_dir='{out}'", *overrides], extra_plugins=list(extra))
    return build_run(recipe, plugins)


def state_of(run):
    nets = {f"{n}.{k}": v.clone() for n in ("G", "D", "G_ema") for k, v in getattr(run, n).state_dict().items()}
    return nets, run.opt_G.state_dict(), run.opt_D.state_dict()


def assert_same(a, b):
    for k in a[0]:
        assert torch.equal(a[0][k], b[0][k]), k
    for oa, ob in ((a[1], b[1]), (a[2], b[2])):
        for i, st in oa["state"].items():
            for key, v in st.items():
                assert torch.equal(torch.as_tensor(v), torch.as_tensor(ob["state"][i][key])), (i, key)


SHORT = ["run.total_kimg=0.12", "run.tick_kimg=0.032"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_checkpoints_at_the_iteration_and_resume_is_bit_identical(tiny_recipe, tmp_path, signum):
    straight = build(tiny_recipe, tmp_path / "straight", SHORT)
    train(straight)
    # 15 iterations in all (8 images each); the signal comes after a random one of them
    at = random.Random(signum).randint(1, 13)
    run = build(tiny_recipe, tmp_path / "split", SHORT, extra=[SignalAt(at, signum)])
    # what was installed before: Python's default_int_handler, or SIG_IGN in a process started in
    # the background by a non-interactive shell (which ignores SIGINT for it)
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with pytest.raises(Interrupted) as e:
        train(run)
    assert e.value.exit_code == (130 if signum == signal.SIGINT else 143)
    assert f"at kimg {at * 8 / 1000:.3f} (step {at})" in str(e.value)
    assert f"continue with `gankit run --resume {tmp_path / 'split'}`" in str(e.value)
    saved = ckpt.load(tmp_path / "split" / "checkpoints" / "latest.pt")
    assert saved["step"] == at and saved["cur_nimg"] == at * 8
    # train's handlers are gone after it: the ones from before are back
    assert {s: signal.getsignal(s) for s in before} == before
    recipe, plugins, changes = load_for_run(None, None, (), str(tmp_path / "split"))
    assert changes == []
    resumed = build_run(recipe, plugins)
    train(resumed, resume=True)
    assert resumed.step == straight.step
    assert_same(state_of(straight), state_of(resumed))


def test_a_second_ctrl_c_stops_at_once(tiny_recipe, tmp_path):
    run = build(tiny_recipe, tmp_path / "r", SHORT, extra=[SignalAt(2, signal.SIGINT, times=2)])
    with pytest.raises(Interrupted) as e:
        train(run)
    assert str(e.value) == (f"stopped at once by a second Ctrl-C (kimg 0.016); no checkpoint was written; continue "
                            f"with `gankit run --resume {tmp_path / 'r'}`")
    assert not (tmp_path / "r" / "checkpoints" / "latest.pt").exists()


def test_cli_ctrl_c_exits_130_with_a_checkpoint_and_resume_from_the_run_directory(tiny_recipe, tmp_path):
    out = tmp_path / "cli"
    plugin = tmp_path / "sigplug.py"
    plugin.write_text("import os, signal\nfrom gan_kit import hookimpl\n"
                      "@hookimpl\ndef step_finished(run, stats):\n"
                      "    if run.step == 3 and not run.resumed_from:\n        os.kill(os.getpid(), signal.SIGINT)\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "gan_kit", "run", str(tiny_recipe), "--out", str(out),
           "--set", f"plugins=['{plugin}']", *[x for s in SHORT for x in ("--set", s)]]
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert first.returncode == 130, first.stderr
    last = first.stderr.strip().splitlines()[-1]
    assert last == (f"stopped: interrupted by SIGINT at kimg 0.024 (step 3); checkpoint written to "
                    f"{out / 'checkpoints' / 'latest.pt'}; continue with `gankit run --resume {out}`")
    second = subprocess.run([sys.executable, "-m", "gan_kit", "run", "--resume", str(out)],
                            capture_output=True, text=True, env=env, timeout=120)
    assert second.returncode == 0, second.stderr
    assert ckpt.load(out / "checkpoints" / "latest.pt")["cur_nimg"] == 120


def test_tick_numbers_and_metrics_continue_after_resume(tiny_recipe, tmp_path):
    straight = build(tiny_recipe, tmp_path / "straight", SHORT)
    train(straight)
    rows_straight = [json.loads(x) for x in (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()]
    # checkpoint after tick 1 (snapshot every tick), then killed (no checkpoint) after two more ticks
    out = tmp_path / "split"
    run = build(tiny_recipe, out, [*SHORT, "run.snapshot_ticks=1"])
    train(run, max_steps=4)  # ticks at 32 images; stops at step 4 = kimg 0.032: tick 0 done
    assert ckpt.load(out / "checkpoints" / "latest.pt")["tick"] == run.tick
    # rows written after the checkpoint by a run that then died: a resumed run drops them
    with open(out / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"Progress/tick": 5, "Progress/kimg": 9.9, "Loss/D": 0.0}) + "\n")
    resumed = build(tiny_recipe, out, [*SHORT, "run.snapshot_ticks=1"])
    train(resumed, resume=True)
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    ticks = [r["Progress/tick"] for r in rows]
    assert ticks == list(range(len(ticks))), ticks  # no tick numbered twice, none left over
    kimg = [r["Progress/kimg"] for r in rows]
    assert kimg == sorted(kimg) and kimg[-1] == rows_straight[-1]["Progress/kimg"]
    samples = sorted(p.name for p in (out / "samples").glob("tick-*.png"))
    assert samples == [f"tick-{t:04d}.png" for t in ticks]


def test_changed_optimizer_settings_take_effect_on_resume(tiny_recipe, tmp_path):
    out = tmp_path / "r"
    train(build(tiny_recipe, out, ["run.total_kimg=0.016"]))
    recipe, plugins, changes = load_for_run(None, None, ("run.total_kimg=0.032", "optim.lr=0.0005",
                                                         "optim.betas=[0.5, 0.9]", "optim.eps=1e-6"), str(out))
    assert "optim.betas: [0.0, 0.99] -> [0.5, 0.9]" in changes and "optim.lr: 0.001 -> 0.0005" in changes
    run = build_run(recipe, plugins)
    train(run, resume=True)
    for opt in (run.opt_G, run.opt_D):
        for group in opt.param_groups:
            assert group["lr"] == 0.0005 and group["betas"] == (0.5, 0.9) and group["eps"] == 1e-6
    assert ckpt.load(out / "checkpoints" / "latest.pt")["opt_G"]["param_groups"][0]["betas"] == (0.5, 0.9)


@pytest.mark.parametrize("override, key", [("optim.name=sgd", "optim.name"),
                                           ("architecture.fmap_max=16", "architecture.fmap_max"),
                                           ("architecture.name=dcgan", "architecture.name"),
                                           ("data.xflip=true", "data.xflip"),
                                           ("growth.stable_kimg=0.002", "growth.stable_kimg"),
                                           ("loss.name=bce", "loss.name"),
                                           ("penalty=[]", "penalty"),
                                           ("run.seed=3", "run.seed")])
def test_a_change_that_cannot_happen_mid_run_is_refused_in_one_line(tiny_recipe, tmp_path, override, key):
    out = tmp_path / "r"
    train(build(tiny_recipe, out, ["run.total_kimg=0.016"]))
    with pytest.raises(CheckpointError) as e:
        load_for_run(None, None, (override, "run.total_kimg=0.032"), str(out))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"--resume: --set {key}: {key} cannot change in a resumed run")
    # the same change in a recipe file given with --resume names the key too
    path = tmp_path / "changed.toml"
    recipe_text = (tmp_path / "tiny.toml").read_text() if (tmp_path / "tiny.toml").exists() else tiny_recipe.read_text()
    path.write_text(recipe_text)
    if "=" in override and "[" not in override and "{" not in override and not override.startswith("architecture.name"):
        with pytest.raises((CheckpointError, GankitError)) as e2:
            load_for_run(path, out, (override, "run.total_kimg=0.032"), "")
        assert "\n" not in str(e2.value) and key in str(e2.value)


def test_resume_advice_is_never_circular(tiny_recipe, tmp_path):
    out = tmp_path / "r"
    with pytest.raises(GankitError, match=r"no checkpoint at .*\(no run there\); start one with `gankit run RECIPE"):
        load_for_run(None, None, (), str(out))
    # a run that died before its first checkpoint: the fix is to start it again, with --overwrite
    run = build(tiny_recipe, out, ["run.total_kimg=0.016"])
    with pytest.raises(Interrupted):
        train(build(tiny_recipe, out, ["run.total_kimg=0.016"], extra=[SignalAt(1)]), overwrite=True)
    (out / "checkpoints" / "latest.pt").unlink()
    with pytest.raises(GankitError) as e:
        load_for_run(None, None, (), str(out))
    assert f"start it again with `gankit run {out / 'recipe.toml'} --out {out} --overwrite`" in str(e.value)
    with pytest.raises(GankitError) as e:
        train(run)
    assert "--overwrite" in str(e.value) and "--resume" not in str(e.value)


def test_report_of_a_run_interrupted_and_resumed_twice_has_monotonic_curves_and_the_schedules_phases(
        tiny_recipe, tmp_path):
    from gan_kit.tools.report import load_metrics, phase_spans

    out = tmp_path / "twice"
    over = [*SHORT, "run.tick_kimg=0.008", "run.snapshot_ticks=3"]
    for at in (4, 9):  # SIGINT after iteration 4, then after 9; snapshots every 3 ticks between
        run = build(tiny_recipe, out, over, extra=[SignalAt(at)])
        with pytest.raises(Interrupted):
            train(run, resume=at != 4)
    train(build(tiny_recipe, out, over), resume=True)
    rows, bad = load_metrics(out)
    assert bad == 0
    kimg = [r["Progress/kimg"] for r in rows]
    assert all(a < b for a, b in zip(kimg, kimg[1:])), kimg
    assert [r["Progress/tick"] for r in rows] == list(range(len(rows)))
    spans = phase_spans(out, rows)
    # 4 px until 0.04 kimg, then 8 px fading until 0.08 and stable to the end (0.12)
    assert [(s.index, s.resolution, s.start_kimg, s.fade_end_kimg, s.end_kimg) for s in spans] == [
        (0, 4, 0.0, 0.0, 0.04), (1, 8, 0.04, 0.08, 0.12)]
    assert [r["Progress/resolution"] for r in rows] == [4 if k <= 0.04 else 8 for k in kimg]


@pytest.mark.parametrize("at", [4, 6])  # on the step that ends a tick, and inside one
def test_an_interrupt_loses_no_tick_and_no_step_of_a_ticks_average(tiny_recipe, tmp_path, at):
    over = [*SHORT, "run.tick_kimg=0.032"]  # a tick every 4 steps
    straight = build(tiny_recipe, tmp_path / "straight", over)
    train(straight)
    run = build(tiny_recipe, tmp_path / "split", over, extra=[SignalAt(at)])
    with pytest.raises(Interrupted):
        train(run)
    train(build(tiny_recipe, tmp_path / "split", over), resume=True)
    rows = {n: [json.loads(x) for x in (tmp_path / n / "metrics.jsonl").read_text().splitlines()]
            for n in ("straight", "split")}
    assert [(r["Progress/tick"], r["Progress/kimg"]) for r in rows["split"]] == \
           [(r["Progress/tick"], r["Progress/kimg"]) for r in rows["straight"]]
    for a, b in zip(rows["straight"], rows["split"]):  # the tick spanning the interrupt averages all its steps
        assert a["Loss/D"] == pytest.approx(b["Loss/D"], rel=1e-6) and a["Loss/G"] == pytest.approx(b["Loss/G"], rel=1e-6)


def test_retyping_a_fixed_value_on_resume_is_no_change(tiny_recipe, tmp_path):
    out = tmp_path / "r"
    train(build(tiny_recipe, out, ["run.total_kimg=0.016"]))
    _, _, changes = load_for_run(None, None, ("growth.batch_size=8", "loss.name=hinge", "run.total_kimg=0.032"),
                                 str(out))
    assert changes == ["run.total_kimg: 0.016 -> 0.032"]
