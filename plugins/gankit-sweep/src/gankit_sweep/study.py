"""The Optuna study of a sweep: its storage, sampler and pruner, the trials it queues, which trial
a worker takes next, and the trials whose worker died.

Storage: a journal file ``<study folder>/study.journal`` by default (no server; several processes
on one machine, or on many machines when the folder is on a shared file system), or any Optuna
storage URL (``postgresql://...``, ``mysql://...``, ``sqlite:///...``; ``redis://...`` as a
journal), or the path of a journal file.

Every trial is one (configuration, seed). Its name (``c007-s2``: configuration 7, seed 2) is stable
across retries, so a retried trial finds its run directory and resumes it. A grid enqueues every
(configuration x seed) once; random and TPE sample a configuration and enqueue its other seeds
with the same parameters. A worker takes only WAITING trials through the storage's atomic state
change (what ``Study.ask`` does), so several processes never run one trial twice.

A worker that dies (kill -9, a lost machine) leaves RUNNING trials behind. Such a trial is failed
and queued again (Optuna's ``RetryHeartbeatStaleTrialCallback``) when its worker process is gone
(same host), or when its heartbeat is older than ``GRACE_S``: Optuna's own heartbeat on RDB
storages, a ``gankit:heartbeat`` system attribute on journal storages (Optuna 5.0 has no
heartbeat there).
"""

from __future__ import annotations

import contextlib
import hashlib
import time
import warnings
from pathlib import Path
from typing import Any, Iterator

from gan_kit import GankitError
from gankit_sweep import procs
from gankit_sweep import storage as stg
from gankit_sweep.storage import STORAGE_FORMS

__all__ = ["HEARTBEAT_S", "GRACE_S", "open_storage", "open_study", "trial_name", "enqueue_grid", "ensure_seeds",
           "pop_waiting", "is_duplicate", "claim", "heartbeat", "recover_stale", "retry", "worker_alive", "names",
           "requeue_failed", "count_states", "name_states", "find_study", "STORAGE_FORMS"]

#: A worker records each running trial's heartbeat this often (seconds) ...
HEARTBEAT_S = 30
#: ... and a trial whose heartbeat is older than this is taken as its worker's death.
GRACE_S = 300

NAME, SEED, CONFIG = "gankit:name", "gankit:seed", "gankit:config"
WORKER, BEAT = "gankit:worker", "gankit:heartbeat"


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Optuna's experimental-feature and ask-outside-optimize warnings say nothing to a gankit user."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def journal_path(url: str | None, folder: Path) -> Path | None:
    """The journal file of ``--storage url`` (default: the one in ``folder``); None for a URL."""
    if url is None:
        return folder / "study.journal"
    if "://" not in url and not url.startswith("sqlite:"):
        return Path(url)
    return None


def _rdb_exists(su: Any) -> bool:
    """Whether the database of ``su`` holds Optuna's tables (False for a SQLite file not there)."""
    import sqlalchemy
    from sqlalchemy.pool import NullPool

    if su.backend == "sqlite" and ":///" in su.url and not Path(su.url.split(":///", 1)[1]).is_file():
        return False
    engine = sqlalchemy.create_engine(su.url, poolclass=NullPool)
    try:
        return sqlalchemy.inspect(engine).has_table("studies")
    finally:
        engine.dispose()


def open_storage(url: str | None, folder: Path, *, existing: bool = False) -> tuple[Any, str]:
    """``(storage, description)`` for ``--storage url`` (default: the journal file in ``folder``;
    the URL forms and drivers: ``gankit_sweep.storage``). ``existing``: open only a storage that
    is already there (a journal file that exists, a database holding Optuna's tables);
    ``(None, description)`` otherwise - nothing is created. The description masks the password.

    Workers that open a new database at the same moment should do so inside
    ``storage.serialised``; the errors such a race still produces are retried here.

    Raises ``GankitError`` (one line naming the cause, never the password) when the storage
    cannot be opened."""
    from optuna.storages import JournalStorage, RDBStorage, RetryHeartbeatStaleTrialCallback
    from optuna.storages.journal import JournalFileBackend

    with quiet():
        path = journal_path(url, folder)
        if path is not None:
            if existing and not path.is_file():
                return None, f"journal file {path}"
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                return JournalStorage(JournalFileBackend(str(path))), f"journal file {path}"
            except OSError as e:
                raise GankitError(f"--storage {path}: cannot create the journal file: {e.strerror} "
                                  f"(check the folder and its permissions)") from None
        su = stg.parse_url(url)
        if su.backend == "redis":
            try:
                from optuna.storages.journal import JournalRedisBackend

                return JournalStorage(JournalRedisBackend(su.url)), f"redis journal {su.shown}"
            except Exception as e:  # noqa: BLE001 - redis not installed, no server
                raise GankitError(stg.problem(su, e)) from None
        tries = [0]

        def attempt() -> Any:
            tries[0] += 1
            if existing and not _rdb_exists(su):
                return None
            return RDBStorage(su.url, heartbeat_interval=HEARTBEAT_S, grace_period=GRACE_S,
                              heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback())

        try:
            return stg.with_retries(attempt), f"database {su.shown}"
        except GankitError:
            raise
        except Exception as e:  # noqa: BLE001 - a driver missing, a server down, a bad URL: one line each
            raise GankitError(stg.problem(su, e, tries[0])) from None


def open_study(storage: Any, name: str, direction: str, sampler: Any, pruner: Any, spec: dict,
               legacy_digest: Any) -> tuple[Any, list[str]]:
    """Create study ``name`` or load it; ``(study, warnings)``. A study that exists must have
    been started with the same ``spec`` (``gankit_sweep.spec``), else ``GankitError`` naming
    what differs; a legacy record is replaced by ``spec`` once accepted."""
    import optuna

    from gankit_sweep.spec import ATTR, check_spec, upgrade_needed

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with quiet():
        study = optuna.create_study(storage=storage, study_name=name, direction=direction, sampler=sampler,
                                    pruner=pruner, load_if_exists=True)
    saved = study.user_attrs.get(ATTR)
    if saved is None:
        study.set_user_attr(ATTR, spec)
        return study, []
    warnings = check_spec(name, saved, spec, legacy_digest)
    if upgrade_needed(saved):
        study.set_user_attr(ATTR, spec)
    return study, warnings


def find_study(storage: Any, name: str) -> Any:
    """Study ``name`` in ``storage`` if it exists (None otherwise); creates nothing."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        storage.get_study_id_from_name(name)
    except KeyError:
        return None
    with quiet():
        return optuna.load_study(study_name=name, storage=storage)


def recipe_digest(text: str) -> str:
    """The digest an older gankit recorded: of the recipe resolved with every default (``spec``
    reads such a study)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def trial_name(config: int, seed: int) -> str:
    return f"c{config:03d}-s{seed}"


def names(study: Any) -> dict[str, list[Any]]:
    """Trial name -> its Optuna trials (a retried or duplicated name has several), oldest first."""
    out: dict[str, list[Any]] = {}
    for t in study.get_trials(deepcopy=False):
        n = t.user_attrs.get(NAME)
        if n is not None:
            out.setdefault(n, []).append(t)
    return out


@contextlib.contextmanager
def _enqueue_lock(folder: Path) -> Iterator[None]:
    """Processes on this machine (and, where fcntl locks reach, on a shared file system) enqueue
    one at a time; ``is_duplicate`` settles what a race elsewhere enqueues twice."""
    import fcntl

    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".enqueue.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def enqueue_grid(study: Any, configs: list[dict], seeds: int, folder: Path) -> int:
    """Queue every (configuration x seed) not yet in the study; returns how many were queued."""
    added = 0
    with _enqueue_lock(folder), quiet():
        have = names(study)
        for i, params in enumerate(configs):
            for s in range(seeds):
                name = trial_name(i, s)
                if name not in have:
                    study.enqueue_trial(params, user_attrs={NAME: name, SEED: s, CONFIG: i})
                    added += 1
    return added


def ensure_seeds(study: Any, params: dict, config: int, seeds: int, folder: Path) -> None:
    """Queue the seeds of a sampled configuration that the study lacks (idempotent: also after a
    worker died between sampling it and queueing them)."""
    with _enqueue_lock(folder), quiet():
        have = names(study)
        for s in range(seeds):
            name = trial_name(config, s)
            if name not in have:
                study.enqueue_trial(params, user_attrs={NAME: name, SEED: s, CONFIG: config})


def pop_waiting(storage: Any, study_id: int) -> int | None:
    """Take a WAITING trial - one queued again to continue first, else the oldest - by setting it
    RUNNING through the storage, which refuses a trial another process took first (``Study.ask``'s
    own pop). Returns its trial id, or None."""
    import optuna
    from optuna.trial import TrialState

    waiting = storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.WAITING,))
    for t in sorted(waiting, key=lambda t: ("failed_trial" not in t.system_attrs, t.number)):
        try:
            if storage.set_trial_state_values(t._trial_id, state=TrialState.RUNNING):
                return t._trial_id
        except optuna.exceptions.UpdateFinishedTrialError:
            continue
    return None


def is_duplicate(study: Any, trial: Any, name: str) -> bool:
    """Whether another trial of the same name holds the run: one COMPLETE or PRUNED, or an older
    one WAITING or RUNNING (two processes that queued one grid at once)."""
    from optuna.trial import TrialState

    for t in names(study).get(name, []):
        if t.number == trial.number:
            continue
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED):
            return True
        if t.state in (TrialState.RUNNING, TrialState.WAITING) and t.number < trial.number:
            return True
    return False


def me() -> dict:
    """This worker as a trial's claim records it (``gankit_sweep.procs.identity``)."""
    return procs.identity()


def worker_alive(worker: dict | None) -> bool | None:
    """True/False for a worker on this host (the same process - pid, start time, boot - still
    runs, or provably not), None for a worker elsewhere or one this machine cannot tell (only its
    heartbeat can)."""
    return procs.same(worker)


def study_storage(study: Any) -> Any:
    """The Optuna storage object behind ``study``."""
    return study._storage  # the storage this module opened; Study keeps no public handle to it


def claim(study: Any, trial: Any) -> None:
    """Mark ``trial`` as run by this process (``recover_stale`` reads it) and beat once."""
    study_storage(study).set_trial_system_attr(trial._trial_id, WORKER, {**me(), "trial": trial.number})
    heartbeat(study, trial._trial_id)


def _native(storage: Any) -> bool:
    from optuna.storages._heartbeat import BaseHeartbeat

    return isinstance(storage, BaseHeartbeat) and storage.get_heartbeat_interval() is not None


def heartbeat(study: Any, trial_id: int) -> None:
    storage = study_storage(study)
    if _native(storage):
        storage.record_heartbeat(trial_id)
    else:
        storage.set_trial_system_attr(trial_id, BEAT, time.time())


def retry(study: Any, frozen: Any) -> None:
    """Queue a copy of ``frozen`` (same parameters, distributions and name) to run again, as
    Optuna's ``RetryHeartbeatStaleTrialCallback`` does, without the dead worker's marks."""
    import optuna
    from optuna.trial import TrialState

    system = {k: v for k, v in frozen.system_attrs.items() if k not in (WORKER, BEAT)}
    system["failed_trial"] = system.get("failed_trial", frozen.number)
    system["retry_history"] = [*system.get("retry_history", []), frozen.number]
    user = {k: v for k, v in frozen.user_attrs.items() if k != STATE}
    with quiet():
        study.add_trial(optuna.trial.create_trial(state=TrialState.WAITING, params=frozen.params,
                                                  distributions=frozen.distributions, user_attrs=user,
                                                  system_attrs=system))


STATE = "gankit:state"
#: Why a trial failed when it is to continue (its copy queued), not to be given up.
CONTINUED = ("worker died", "interrupted")
#: A trial taken from the queue is claimed within moments; one unclaimed this long lost its worker.
CLAIM_S = 60


def _alive(t: Any, now: float, native: bool) -> bool:
    worker = t.system_attrs.get(WORKER)
    if not worker or worker.get("trial") != t.number:  # taken, not claimed yet (or a copy's old mark)
        started = t.datetime_start.timestamp() if t.datetime_start else now
        return now - started < CLAIM_S
    alive = worker_alive(worker)
    if alive is not None:
        return alive
    if native:
        return True  # Optuna's fail_stale_trials judges workers elsewhere by their heartbeat
    return now - float(t.system_attrs.get(BEAT, now)) < GRACE_S


def recover_stale(study: Any, mine: set[int]) -> list[str]:
    """Fail and queue again every RUNNING trial whose worker is gone; returns their names.
    ``mine``: trial numbers this process runs (never stale)."""
    import optuna
    from optuna.trial import TrialState

    storage, now, recovered = study_storage(study), time.time(), []
    native = _native(storage)
    if native:
        with quiet():
            optuna.storages.fail_stale_trials(study)  # its callback (set in open_storage) queues the retry
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if t.number in mine or _alive(t, now, native):
            continue
        try:
            storage.set_trial_user_attr(t._trial_id, STATE, "worker died")  # a finished trial takes no attributes
            if not storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # another process recovered it first
        retry(study, storage.get_trial(t._trial_id))
        recovered.append(t.user_attrs.get(NAME, f"#{t.number}"))
    return recovered


def requeue_failed(study: Any, retry_failed: bool) -> list[str]:
    """Queue again every trial name whose trials all failed and whose last failure is to continue
    (its process died between failing it and queueing its copy), or - ``retry_failed`` - any
    failure but a duplicate; returns the names."""
    again = []
    for name, ts in names(study).items():
        last = ts[-1].user_attrs.get(STATE)
        if all(t.state.name == "FAIL" for t in ts) and (last in CONTINUED or (retry_failed and last != "duplicate")):
            retry(study, ts[-1])
            again.append(name)
    return sorted(again)


def count_states(study: Any) -> dict[str, int]:
    """How many trial names are complete, pruned, running, waiting or failed (a name counts once,
    by its most advanced trial)."""
    counts: dict[str, int] = {}
    for ts in names(study).values():
        states = {t.state.name for t in ts}
        state = next((s for s in ("COMPLETE", "PRUNED", "RUNNING", "WAITING") if s in states), "FAIL").lower()
        counts[state] = counts.get(state, 0) + 1
    return counts



def name_states(study: Any) -> dict[str, str]:
    """Trial name -> ``complete``, ``pruned``, ``running``, ``waiting`` (queued, or failed in a
    way that continues: interrupted, worker died) or ``failed`` (run again only with
    ``--retry-failed``), by its most advanced trial."""
    out = {}
    for name, ts in names(study).items():
        states = {t.state.name for t in ts}
        state = next((s for s in ("COMPLETE", "PRUNED", "RUNNING", "WAITING") if s in states), None)
        if state is None:
            state = "WAITING" if ts[-1].user_attrs.get(STATE) in CONTINUED else "FAILED"
        out[name] = state.lower()
    return out
