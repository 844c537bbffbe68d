"""The sweep loop: up to ``--jobs`` trials at once, each a ``gankit run`` child process.

Per trial: take a WAITING trial from the study (or let the sampler propose a configuration),
start its child (resuming the run directory's checkpoint when it has one), report the objective
metric of every metrics.jsonl row that has it to Optuna (step = the tick), stop the child with
SIGTERM when the pruner says so (it writes a checkpoint), and tell Optuna how it ended: COMPLETE
with the final value, PRUNED, or FAIL. Ctrl-C or SIGTERM stops every child the same way and
queues its trial again, so the same command continues the study; a second Ctrl-C stops them at
once.
"""

from __future__ import annotations

import math
import os
import shlex
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import attrs
import click

from optuna.exceptions import UpdateFinishedTrialError

from gan_kit import CheckpointLayout, GankitError, Interrupted
from gankit_sweep import procs
from gankit_sweep import study as st
from gankit_sweep import trials as tr
from gankit_sweep.spaces import Space, config_label

__all__ = ["Objective", "Settings", "Sweep"]

POLL_S = 0.5
STALE_CHECK_S = 5.0


@attrs.frozen
class Objective:
    """The metric a sweep optimises: its metrics.jsonl key (``Metrics/swd``) and direction."""

    key: str
    higher_is_better: bool

    @property
    def direction(self) -> str:
        return "maximize" if self.higher_is_better else "minimize"


@attrs.frozen
class Settings:
    recipe: Path
    spaces: list[Space]
    sets: list[str]
    seeds: int
    trials: int | None
    jobs: int
    threads: int | None
    sampler: str
    folder: Path
    study_name: str
    objective: Objective
    pruning: bool
    retry_failed: bool = False


@attrs.define
class _Active:
    trial: Any
    name: str
    seed: int
    params: dict
    run_dir: Path
    proc: Any = None
    tail: Any = None
    started: float = 0.0
    reported: set = attrs.field(factory=set)
    pruned_at: int | None = None
    beat: float = 0.0
    train_s0: float = 0.0
    slot: int = 0


@attrs.define
class _Others:
    """Whether trials of the study run in other processes (asked at most every ``STALE_CHECK_S``);
    says once that this worker waits for them."""

    checked: float = 0.0
    running: bool | None = None

    def __call__(self, study: Any) -> bool:
        now = time.monotonic()
        if now >= self.checked + STALE_CHECK_S or self.running is None:
            self.checked = now
            running = st.count_states(study).get("running", 0)
            if running and not self.running:
                grace = f"{st.GRACE_S / 60:g} minutes" if st.GRACE_S >= 60 else f"{st.GRACE_S:g} s"
                _echo(f"waiting for {running} trial(s) running in other processes: one whose process dies is taken "
                      f"over here (on this machine at once, elsewhere after {grace} without its heartbeat)")
            self.running = bool(running)
        return self.running


def _timing(a: _Active, rc: int, rows: list[dict]) -> tuple[dict, float | None]:
    """The times, kimg and exit code ``sweep.json`` records for a trial that ended, and the kimg
    of its checkpoint when it stopped between ticks (further than its last row)."""
    last = rows[-1] if rows else {}
    wall = time.monotonic() - a.started if a.started else 0.0
    train = float(last.get("Timing/train_s", a.train_s0)) - a.train_s0 if a.started else 0.0
    timing = dict(kimg=last.get("Progress/kimg"), wall_s=round(wall, 3), train_s=last.get("Timing/train_s"),
                  overhead_s=round(wall - train, 3) if a.started and rows else None, exit_code=rc, child_pid=None,
                  child_start=None, child_boot=None)
    checkpoint, checkpoint_kimg = CheckpointLayout(a.run_dir).latest, None
    if not (rc == 0 and last.get("Progress/final")) and checkpoint.is_file():
        checkpoint_kimg = _checkpoint_progress(checkpoint)[0]
        if checkpoint_kimg is not None and (timing["kimg"] is None or checkpoint_kimg > timing["kimg"]):
            timing["kimg"] = checkpoint_kimg
    return timing, checkpoint_kimg


class Sweep:
    """Runs the trials of ``study`` with ``settings``; ``run()`` returns the exit code."""

    def __init__(self, settings: Settings, study: Any, storage: Any):
        self.s, self.study, self.storage = settings, study, storage
        self.study_id = storage.get_study_id_from_name(study.study_name)
        self.active: list[_Active] = []
        self.signal: int | None = None
        self.forwarded = False
        self.failed = 0
        self.devices = _devices()
        self.others = _Others()

    # -------------------------------------------------------------------------------- loop --

    def run(self) -> int:
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self._prepare()
            self._loop()
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
            if self.active:  # an error in the loop itself: stop the children, keep their trials
                self.signal = self.signal or signal.SIGTERM
                self._forward(signal.SIGTERM)
                for a in list(self.active):
                    a.proc.wait()
                    self._finish(a, a.proc.returncode)
        return self._summary()

    def _on_signal(self, signum, frame) -> None:
        if self.signal is None:
            self.signal = signum
            _echo(f"{signal.Signals(signum).name}: stopping {len(self.active)} running trial(s) at their next step "
                  f"(each writes a checkpoint); Ctrl-C again stops them at once")
        elif signum == signal.SIGINT:
            self._forward(signal.SIGINT)

    def _forward(self, signum: int) -> None:
        for a in self.active:
            if a.proc.poll() is None:
                a.proc.send_signal(signum)

    def _prepare(self) -> None:
        recovered = st.recover_stale(self.study, set())
        if recovered:
            _echo(f"queued again (their sweep process is gone): {', '.join(recovered)}")
        if self.s.sampler != "grid":  # a larger --seeds adds seeds to the configurations sampled so far
            for config, params in sampled_configs(self.study).items():
                st.ensure_seeds(self.study, params, config, self.s.seeds, self.s.folder)
        again = st.requeue_failed(self.study, self.s.retry_failed)
        if again:
            _echo(f"queued again: {', '.join(sorted(again))}")

    def _loop(self) -> None:
        next_check = time.monotonic() + STALE_CHECK_S
        while True:
            if self.signal is not None and not self.forwarded:
                self.forwarded = True
                self._forward(signal.SIGTERM)
            if time.monotonic() >= next_check:
                recovered = st.recover_stale(self.study, {a.trial.number for a in self.active})
                if recovered:
                    _echo(f"queued again (their sweep process is gone): {', '.join(recovered)}")
                next_check = time.monotonic() + STALE_CHECK_S
            while self.signal is None and len(self.active) < self.s.jobs and self._start_next():
                pass
            if not self.active:
                # Nothing left for this worker, but trials run in other processes: wait for them,
                # so that one whose machine is lost (its heartbeat stale beyond the grace) is
                # taken over here, with no one having to run the command again.
                others = self.signal is None and self.others(self.study)
                if not others:
                    break
                time.sleep(POLL_S)
                continue
            for a in list(self.active):
                self._poll(a)
            time.sleep(POLL_S)

    # ------------------------------------------------------------------------ taking trials --

    def _start_next(self) -> bool:
        """Take the next trial and start it; False when there is none for this process."""
        import optuna

        while True:
            tid = st.pop_waiting(self.storage, self.study_id)
            if tid is not None:
                trial = optuna.trial.Trial(self.study, tid)
            elif self.s.sampler != "grid" and len(sampled_configs(self.study)) < (self.s.trials or 0):
                with st.quiet():
                    trial = self.study.ask()
            else:
                return False
            params = {sp.key: sp.suggest(trial) for sp in self.s.spaces}
            name = trial.user_attrs.get(st.NAME)
            if name is None:  # a configuration the sampler just proposed: this is its seed 0
                name = st.trial_name(trial.number, 0)
                for k, v in ((st.NAME, name), (st.SEED, 0), (st.CONFIG, trial.number)):
                    trial.set_user_attr(k, v)
            seed = int(trial.user_attrs.get(st.SEED, 0))
            if self.s.sampler != "grid" and seed == 0:
                st.ensure_seeds(self.study, params, int(trial.user_attrs[st.CONFIG]), self.s.seeds, self.s.folder)
            if st.is_duplicate(self.study, trial, name):
                trial.set_user_attr(st.STATE, "duplicate")
                self.study.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
                continue
            st.claim(self.study, trial)
            self._launch(_Active(trial, name, seed, params, self.s.folder / name))
            return True

    def _launch(self, a: _Active) -> None:
        old = tr.read_state(a.run_dir)
        if old.get("study") not in (None, self.s.study_name) or (old.get("params") not in (None, a.params)):
            _tell_fail(self.study, a.trial,
                       f"{a.run_dir} holds a trial of another study ({old.get('study')}, {old.get('params')})")
            raise GankitError(f"{a.run_dir}: holds a run of study {old.get('study')!r} with other parameters; give "
                              f"this study its own folder with --out (or another --study name)")
        tr.wait_previous_child(old, a.run_dir)
        label = config_label(a.params)
        record = dict(study=self.s.study_name, trial=a.name, number=a.trial.number, params=a.params, seed=a.seed,
                      metric=self.s.objective.key, higher_is_better=self.s.objective.higher_is_better,
                      host=socket.gethostname(), sweep_pid=os.getpid(), state="running")
        if tr.run_finished(a.run_dir):  # trained to its end before the sweep that ran it died
            tr.write_state(a.run_dir, **record)
            _echo(f"{a.name}: already trained to its end in {a.run_dir}")
            a.tail = tr.MetricsTail(a.run_dir / "metrics.jsonl")
            self._finish(a, 0)
            return
        checkpoint = CheckpointLayout(a.run_dir).latest
        resume = checkpoint.is_file()
        resumed_kimg = None
        if resume:
            resumed_kimg, a.train_s0 = _checkpoint_progress(checkpoint)
        sets = [*self.s.sets, *(x for sp in self.s.spaces for x in sp.sets(a.params[sp.key])), f"run.seed={a.seed}"]
        overwrite = not resume and any((a.run_dir / n).exists() for n in ("metrics.jsonl", "recipe.toml", "samples"))
        cmd = tr.child_command(self.s.recipe, a.run_dir, sets, resume=resume, overwrite=overwrite,
                               threads=self.s.threads)
        a.slot = min(set(range(self.s.jobs)) - {b.slot for b in self.active})
        env = dict(os.environ)
        if len(self.devices) > 1:
            env["CUDA_VISIBLE_DEVICES"] = self.devices[a.slot % len(self.devices)]
        a.started = time.monotonic()
        a.proc = tr.spawn(cmd, a.run_dir, self.s.threads, env)
        a.tail = tr.MetricsTail(a.run_dir / "metrics.jsonl")
        a.beat = time.monotonic()
        attempts = [*old.get("attempts", []), {"trial": a.trial.number, "resumed_from_kimg": resumed_kimg,
                                               "started": time.strftime("%Y-%m-%d %H:%M:%S")}]
        child = procs.identity(a.proc.pid)
        tr.write_state(a.run_dir, **record, child_pid=a.proc.pid, child_start=child["start"],
                       child_boot=child["boot"], attempts=attempts)
        self.active.append(a)
        how = f"resuming from kimg {resumed_kimg:g}" if resume else "started"
        _echo(f"{a.name}: {how} ({label}, seed {a.seed}) -> {a.run_dir}")

    # --------------------------------------------------------------------------- watching --

    def _poll(self, a: _Active) -> None:
        for row in a.tail.new_rows():
            self._report(a, row)
        if time.monotonic() - a.beat >= st.HEARTBEAT_S:
            st.heartbeat(self.study, a.trial._trial_id)
            a.beat = time.monotonic()
        rc = a.proc.poll()
        if rc is not None:
            for row in a.tail.new_rows():
                self._report(a, row)
            self._finish(a, rc)

    def _report(self, a: _Active, row: dict) -> None:
        value = row.get(self.s.objective.key)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            return
        step = int(row.get("Progress/tick", 0))
        if step in a.reported:
            return
        a.reported.add(step)
        try:
            a.trial.report(float(value), step)
        except UpdateFinishedTrialError:  # failed by another process that took this one for dead
            return
        if (self.s.pruning and a.pruned_at is None and self.signal is None and not row.get("Progress/final")
                and a.trial.should_prune()):
            a.pruned_at = step
            a.proc.send_signal(signal.SIGTERM)
            _echo(f"{a.name}: pruned at tick {step} ({self.s.objective.key} = {value:.4g}); stopping it")

    def _finish(self, a: _Active, rc: int) -> None:
        from optuna.trial import TrialState

        if a in self.active:
            self.active.remove(a)
        rc = tr.exit_status(rc)
        rows = tr.read_rows(a.run_dir)
        last = rows[-1] if rows else {}
        values = tr.metric_values(rows, self.s.objective.key)
        timing, checkpoint_kimg = _timing(a, rc, rows)
        wall = timing["wall_s"]
        final = bool(last.get("Progress/final"))
        key = self.s.objective.key
        # The objective is the final row's value: a metric that is NaN or failed at the end is no
        # result, whatever it was at an earlier tick (compare reads it the same way).
        value = tr.final_value(last, key) if final else None
        if rc == 0 and final and value is not None:
            self.study.tell(a.trial, value, skip_if_finished=True)
            best = (max if self.s.objective.higher_is_better else min)(v for _, v in values)
            tr.write_state(a.run_dir, state="complete", value=value, best=best, **timing)
            _echo(f"{a.name}: complete, {key} = {value:.4g} at kimg {last.get('Progress/kimg', 0):g} "
                  f"({wall:.1f} s, {timing['overhead_s'] or 0:.1f} s of it outside training)")
        elif a.pruned_at is not None:
            self.study.tell(a.trial, state=TrialState.PRUNED, skip_if_finished=True)
            tr.write_state(a.run_dir, state="pruned", pruned_at_tick=a.pruned_at,
                           value=values[-1][1] if values else None, **timing)
        elif self.signal is not None and rc in (128 + signal.SIGINT, 128 + signal.SIGTERM):
            _set_attr(a.trial, st.STATE, "interrupted")
            self.study.tell(a.trial, state=TrialState.FAIL, skip_if_finished=True)
            st.retry(self.study, st.study_storage(self.study).get_trial(a.trial._trial_id))
            tr.write_state(a.run_dir, state="interrupted", **timing)
            kimg = checkpoint_kimg
            where = f"its checkpoint at kimg {kimg:g}" if kimg is not None else "the start (no checkpoint yet)"
            _echo(f"{a.name}: stopped; queued to continue from {where}")
        else:
            reason = (tr.no_final_value(last, key) if rc == 0 and final
                      else f"the run finished without {key} in metrics.jsonl (did the metric fail? see sweep.log)"
                      if rc == 0 else tr.last_log_line(a.run_dir) or f"exit code {rc}")
            _tell_fail(self.study, a.trial, reason)
            tr.write_state(a.run_dir, state="failed", reason=reason, **timing)
            self.failed += 1
            how = f"exit code {rc}" if rc else "no result"
            _echo(f"{a.name}: failed ({how}): {reason} [{a.run_dir / tr.LOG_FILE}]")

    # ---------------------------------------------------------------------------- summary --

    def _summary(self) -> int:
        counts = st.count_states(self.study)
        text = ", ".join(f"{n} {k}" for k, n in counts.items()) or "no trials"
        command = _command()
        if self.signal is not None:
            code = 130 if self.signal == signal.SIGINT else 143
            raise Interrupted(f"sweep interrupted ({text}); continue the study with {command}", exit_code=code)
        _echo(f"study {self.s.study_name}: {text}; compare with `gankit compare {self.s.folder}`")
        if counts.get("running"):
            _echo(f"{counts['running']} trial(s) still run in other processes; one whose process died is taken "
                  f"over by the next {command}")
        return 1 if self.failed else 0


def _command() -> str:
    """This sweep's command line in backticks, as it may be printed: a ``--storage`` password left
    out, to be given in ``GANKIT_STORAGE_PASSWORD`` (printed lines end up in scheduler logs)."""
    from gankit_sweep.storage import PASSWORD_ENV, command_form

    args, hidden = command_form(sys.argv[1:])
    text = "gankit " + " ".join(shlex.quote(x) for x in args)
    return f"`{text}` (with the database password in {PASSWORD_ENV})" if hidden else f"`{text}`"


def _tell_fail(study: Any, trial: Any, reason: str) -> None:
    from optuna.trial import TrialState

    _set_attr(trial, st.STATE, "failed")
    _set_attr(trial, "gankit:reason", reason[:300])
    study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)


def _set_attr(trial: Any, key: str, value: Any) -> None:
    try:
        trial.set_user_attr(key, value)
    except UpdateFinishedTrialError:  # failed meanwhile by a process that took this one for dead
        pass


def _echo(msg: str) -> None:
    click.echo(msg)
    sys.stdout.flush()


def sampled_configs(study: Any) -> dict[int, dict]:
    """Configuration number -> its parameters, over every trial that has them."""
    out: dict[int, dict] = {}
    for t in study.get_trials(deepcopy=False):
        c = t.user_attrs.get(st.CONFIG)
        if c is not None and t.params:
            out.setdefault(int(c), dict(t.params))
    return out


def _checkpoint_progress(path: Path) -> tuple[float | None, float]:
    """(kimg, training seconds) a checkpoint was written at."""
    from gan_kit import load_checkpoint

    try:
        state = load_checkpoint(path)
    except GankitError:
        return None, 0.0
    return state["cur_nimg"] / 1000, float(state.get("train_seconds", 0.0))


def _devices() -> list[str]:
    """The CUDA devices trials spread over (one each, round robin) when there are several."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d for d in visible.split(",") if d.strip()]
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001 - no CUDA here
        return []
