"""The ``mlflow`` tracker: a run logged to an MLflow tracking server or store through
``mlflow.tracking.MlflowClient`` (no global "active run", so nothing leaks between runs in one
process). ``pip install 'gankit[mlflow]'``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import attrs

from gan_kit import GankitError, Tracker, option
from gan_kit.base.errors import clip

__all__ = ["MLflowTracker", "masked_uri"]

#: MLflow's log_batch limits: 100 parameters and 1000 metrics a call; a parameter value is
#: stored up to 6000 characters.
_PARAMS_PER_CALL, _METRICS_PER_CALL, _PARAM_CHARS = 100, 1000, 6000


def masked_uri(uri: str | None) -> str:
    """``uri`` with any password replaced by ``***`` (``https://user:***@host``), for messages:
    a tracking URI may carry credentials, and messages end up in scheduler logs."""
    if not uri:
        return "MLflow's default tracking URI"
    if "@" in uri and "://" in uri:
        scheme, rest = uri.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}" if ":" in creds else f"{scheme}://{user}@{host}"
    return uri


def _password(uri: str) -> str | None:
    if "@" not in uri or "://" not in uri:
        return None
    creds = uri.split("://", 1)[1].rsplit("@", 1)[0]
    return creds.split(":", 1)[1] if ":" in creds else None


class MLflowTracker(Tracker):
    """MLflow (mlflow.org): parameters = the resolved recipe's dotted keys, metrics = every
    metrics.jsonl value at step ``cur_nimg``, artifacts = sample grids under ``samples/`` (and
    checkpoints under ``checkpoints/`` with ``log_checkpoints``). A sweep trial's run is tagged
    ``gankit.study`` and goes to an experiment named after the study unless ``experiment`` is set."""

    @attrs.frozen
    class Options:
        tracking_uri: str | None = option(
            None, help="MLflow tracking URI (a server's http(s) URL, sqlite:///file.db, a folder); None = MLflow's "
                       "own default (MLFLOW_TRACKING_URI, else ./mlflow.db). Put credentials in "
                       "MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD, not in the URI.")
        experiment: str | None = option(
            None, help='Experiment name; None = the sweep\'s study for a gankit sweep trial, else "gankit".')
        run_name: str | None = option(None, help="Name of the tracked run; None = the run directory's name.")
        log_checkpoints: bool = option(False, help="Also upload every checkpoint written (large: off by default).")

    def __init__(self, options: Any = None, context: Any = None):
        super().__init__(options, context)
        self.client: Any = None
        self.run_id: str | None = None

    def start(self, params: dict[str, Any], run_dir: Path, resume_id: str | None) -> str:
        try:
            from mlflow.entities import Param, RunStatus
            from mlflow.exceptions import MlflowException
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise GankitError("tracker mlflow: the mlflow package is not installed "
                              "(pip install 'gankit[mlflow]', or remove the [[tracker]] table)") from None
        o = self.options
        where = masked_uri(o.tracking_uri)
        try:
            if o.tracking_uri:
                _probe_database(o.tracking_uri)
            self.client = MlflowClient(tracking_uri=o.tracking_uri)
            run = None
            if resume_id is not None:
                try:
                    run = self.client.get_run(resume_id)
                except MlflowException:
                    run = None  # the store was reset: start a new tracked run
            if run is None:
                name = o.experiment or params.get("gankit.study") or "gankit"
                experiment = self.client.get_experiment_by_name(name)
                experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(name)
                tags = {"gankit.run_dir": str(Path(run_dir).resolve())}
                if params.get("gankit.study"):
                    tags["gankit.study"] = str(params["gankit.study"])
                run = self.client.create_run(experiment_id, run_name=o.run_name or run_dir.name, tags=tags)
                logged: dict[str, str] = {}
            else:
                self.client.update_run(run.info.run_id, status=RunStatus.to_string(RunStatus.RUNNING))
                logged = dict(run.data.params)
            self.run_id = run.info.run_id
            # MLflow refuses to change a logged parameter: a resumed run's changed keys (run.total_kimg
            # extended, a new lr) are recorded as tags "resume.<key>" instead.
            new = [Param(k, str(v)[:_PARAM_CHARS]) for k, v in params.items() if k not in logged]
            for i in range(0, len(new), _PARAMS_PER_CALL):
                self.client.log_batch(self.run_id, params=new[i:i + _PARAMS_PER_CALL])
            for k, v in params.items():
                if k in logged and logged[k] != str(v)[:_PARAM_CHARS]:
                    self.client.set_tag(self.run_id, f"resume.{k}", str(v)[:_PARAM_CHARS])
        except Exception as e:  # MlflowException, or the store's own (SQLAlchemy, requests) errors
            text = clip(str(e), 300)
            if o.tracking_uri:
                text = text.replace(o.tracking_uri, where)
            if o.tracking_uri and _password(o.tracking_uri) and _password(o.tracking_uri) in text:
                text = ""  # the message spells the password some other way: say only what kind of error it was
            raise GankitError(f"tracker mlflow: {where}: {type(e).__name__}{': ' + text if text else ''} "
                              f"(check tracking_uri and that the server is reachable)") from None
        return self.run_id

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        rows = [Metric(k, v, now, step) for k, v in metrics.items()]
        for i in range(0, len(rows), _METRICS_PER_CALL):
            self.client.log_batch(self.run_id, metrics=rows[i:i + _METRICS_PER_CALL])

    def log_artifact(self, path: Path, folder: str) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path=folder)

    def finish(self, status: str) -> None:
        if self.client is not None and self.run_id is not None:
            self.client.set_terminated(self.run_id, status=status)


#: Database back ends whose server MLflow's SQLAlchemy store connects to, and the seconds one
#: connection attempt may take.
_SERVER_DATABASES = ("postgresql", "postgres", "mysql", "mariadb", "mssql")
_CONNECT_TIMEOUT_S = 10


def _probe_database(uri: str) -> None:
    """Connect once to a database ``uri`` on a server (PostgreSQL, MySQL, ...), so an unreachable
    one fails in seconds: MLflow's store retries the first connection 10 times with exponential
    back-off (about 100 s) before it raises. Raises the driver's error; anything else (a file,
    ``sqlite:``, ``http(s):``, ``databricks``) is left to MLflow."""
    scheme = uri.split(":", 1)[0].lower()
    if scheme.split("+", 1)[0] not in _SERVER_DATABASES:
        return
    import sqlalchemy

    timeout = {"connect_timeout": _CONNECT_TIMEOUT_S} if scheme.startswith(("postgres", "mysql", "mariadb")) else {}
    engine = sqlalchemy.create_engine(uri, connect_args=timeout)
    try:
        with engine.connect():
            pass
    finally:
        engine.dispose()

