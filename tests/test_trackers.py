"""Experiment trackers (``[[tracker]]``), checked with the real clients: an MLflow run read back
with ``MlflowClient`` from a local SQLite store, a W&B run written offline and read back from its
``.wandb`` record log - the recipe as parameters, every metric of every tick, the grids, the run's
status on success and on Ctrl-C, and a resumed run continuing the same tracked run."""

from __future__ import annotations

import json
import os
import signal
import struct
import zlib
from pathlib import Path

import pytest
import wandb
from click.testing import CliRunner
from mlflow.tracking import MlflowClient

from gan_kit import hookimpl
from gan_kit.builtin.reporting.trackers import IDS_FILE, flat_params
from gan_kit.builtin.reporting.trackers.mlflow import masked_uri
from gan_kit.cli import cli
from gan_kit.runs.session import train
from gan_kit.base.errors import Interrupted
from gan_kit.testing import make_run

SHORT = ["run.total_kimg=0.12", "run.tick_kimg=0.032"]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """MLflow's SQLite store puts artifacts under ./mlruns of the working directory: keep them in
    the test's folder, not the checkout."""
    monkeypatch.chdir(tmp_path)


class SignalAt:
    """Sends SIGINT to this process after iteration ``at`` of a run that was not resumed."""

    def __init__(self, at: int):
        self.at = at

    @hookimpl
    def step_finished(self, run, stats):
        if run.step == self.at and not run.resumed_from:
            os.kill(os.getpid(), signal.SIGINT)


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def numbers(row: dict) -> dict[str, float]:
    return {k: float(v) for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def mlflow_tracker(db: Path) -> str:
    return f"tracker=[{{name='mlflow', tracking_uri='sqlite:///{db}', experiment='tests'}}]"


def test_flat_params_are_dotted_keys_with_array_items_by_number():
    table = {"optim": {"lr": 0.001, "betas": [0.0, 0.99]}, "penalty": [{"name": "r1", "weight": 10.0}], "plugins": []}
    assert flat_params(table) == {"optim.lr": 0.001, "optim.betas": "[0.0, 0.99]", "penalty.0.name": "r1",
                                  "penalty.0.weight": 10.0, "plugins": "[]"}


def test_mlflow_run_holds_the_recipe_every_tick_and_the_grids(tmp_path):
    db = tmp_path / "mlflow.db"
    run = make_run(tmp_path, overrides=[*SHORT, mlflow_tracker(db)])
    train(run)
    run_id = json.loads((run.out_dir / IDS_FILE).read_text())["tracker[0].mlflow"]
    client = MlflowClient(f"sqlite:///{db}")
    tracked = client.get_run(run_id)
    assert tracked.info.status == "FINISHED"
    assert client.get_experiment(tracked.info.experiment_id).name == "tests"
    params = tracked.data.params
    assert params["optim.lr"] == "0.001" and params["penalty.0.name"] == "gradient-penalty"
    assert params["run.total_kimg"] == "0.12" and params["architecture.name"] == "pggan"
    written = rows(run.out_dir)
    assert len(written) == 4
    for key in ("Loss/D", "Loss/G", "Progress/kimg", "Timing/img_per_s"):
        history = sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))
        expected = [(round(r["Progress/kimg"] * 1000), pytest.approx(r[key])) for r in written]
        assert history == expected, key
    # every number of every line, none left out
    logged = {m for m in tracked.data.metrics}
    assert logged == set().union(*(numbers(r) for r in written))
    grids = {Path(a.path).name for a in client.list_artifacts(run_id, "samples")}
    assert grids == {p.name for p in (run.out_dir / "samples").glob("*.png")}
    assert {"tick-0000.png", "tick-0003.png", "final.png"} <= grids


def test_mlflow_ctrl_c_marks_the_run_killed_and_resume_continues_it(tmp_path):
    db = tmp_path / "mlflow.db"
    run = make_run(tmp_path, overrides=[*SHORT, mlflow_tracker(db)], plugins=[SignalAt(6)])
    with pytest.raises(Interrupted):
        train(run)
    run_id = json.loads((run.out_dir / IDS_FILE).read_text())["tracker[0].mlflow"]
    client = MlflowClient(f"sqlite:///{db}")
    assert client.get_run(run_id).info.status == "KILLED"
    before = sorted(m.step for m in client.get_metric_history(run_id, "Loss/D"))
    resumed = make_run(tmp_path, overrides=[*SHORT, "run.total_kimg=0.16", mlflow_tracker(db)], plugins=[SignalAt(6)])
    train(resumed, resume=True)
    assert json.loads((run.out_dir / IDS_FILE).read_text())["tracker[0].mlflow"] == run_id
    assert len(client.search_runs([client.get_run(run_id).info.experiment_id])) == 1  # no second tracked run
    tracked = client.get_run(run_id)
    assert tracked.info.status == "FINISHED"
    steps = sorted(m.step for m in client.get_metric_history(run_id, "Loss/D"))
    assert steps[:len(before)] == before and len(steps) == len(rows(run.out_dir)) == 5  # each tick once
    assert tracked.data.params["run.total_kimg"] == "0.12"  # MLflow keeps a parameter's first value ...
    assert tracked.data.tags["resume.run.total_kimg"] == "0.16"  # ... and the resumed run's change is a tag


def test_a_tracking_uri_with_a_password_is_never_printed(tmp_path, monkeypatch):
    secret = "s3cr3t-pw"
    assert masked_uri(f"postgresql://alice:{secret}@db.example:5432/ml") == "postgresql://alice:***@db.example:5432/ml"
    recipe = tmp_path / "tiny.toml"
    make_run(tmp_path)  # writes the tiny recipe
    result = CliRunner().invoke(cli, ["run", str(recipe), "--set",
                                      f"tracker=[{{name='mlflow', tracking_uri='postgresql://alice:{secret}@127.0.0.1:9/x'}}]"])
    assert result.exit_code == 2, result.output
    assert "tracker mlflow" in result.output and "alice:***@127.0.0.1" in result.output
    assert secret not in result.output and "Traceback" not in result.output


def wandb_records(run_dir: Path) -> list:
    """Every record of the W&B runs under ``run_dir/wandb`` in the order written: the ``.wandb``
    files are a 7-byte header (":W&B", magic, version) and then LevelDB's log format (32 KiB
    blocks counted from the file's start, of records each with a 7-byte header - CRC-32 of the
    type and data, length, type - and a piece of a protobuf ``Record``). Every piece's CRC is
    checked, so a cut or damaged file fails here by name. A piece whose bytes are whole but that
    this protobuf cannot decode is left out (one of W&B's own bookkeeping records failed so once
    on a loaded machine); a record the test reads that is left out fails its assertions."""
    from google.protobuf.message import DecodeError
    from wandb.proto import wandb_internal_pb2 as pb

    out = []
    for path in sorted(run_dir.glob("wandb/*run-*/run-*.wandb"), key=lambda p: p.stat().st_mtime):
        data = path.read_bytes()
        assert data[:4] == b":W&B"
        pos, block, pieces = 7, 32768, b""
        while pos + 7 <= len(data):
            if block - pos % block < 7:  # a block's tail too short for a header is padding
                pos += block - pos % block
                continue
            crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
            if length == 0 and kind == 0:
                break
            piece = data[pos + 7:pos + 7 + length]
            assert len(piece) == length and zlib.crc32(piece, zlib.crc32(bytes([kind]))) == crc, \
                f"{path}: the record at byte {pos} is cut or corrupt ({len(data)} bytes read)"
            pieces += piece
            pos += 7 + length
            if kind in (1, 4):  # FULL or LAST
                record = pb.Record()
                try:
                    record.ParseFromString(pieces)
                    out.append(record)
                except DecodeError:
                    pass
                pieces = b""
    return out


def test_wandb_offline_run_holds_the_recipe_every_tick_and_resumes_the_same_run(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    tracker = "tracker=[{name='wandb', mode='offline', project='tests'}]"
    run = make_run(tmp_path, overrides=[*SHORT, tracker], plugins=[SignalAt(6)])
    with pytest.raises(Interrupted):
        train(run)
    first = json.loads((run.out_dir / IDS_FILE).read_text())["tracker[0].wandb"]
    resumed = make_run(tmp_path, overrides=[*SHORT, tracker], plugins=[SignalAt(6)])
    train(resumed, resume=True)
    assert json.loads((run.out_dir / IDS_FILE).read_text())["tracker[0].wandb"] == first
    wandb.teardown()  # W&B's service process may still be writing the run's file after finish()
    records = wandb_records(run.out_dir)
    runs = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert runs and {r.run_id for r in runs} == {first}
    config = {}  # the run record carries the config; later config records update it
    for r in records:
        kind = r.WhichOneof("record_type")
        if kind in ("run", "config"):
            items = r.run.config.update if kind == "run" else r.config.update
            config.update({item.key: json.loads(item.value_json) for item in items})
    assert config["optim.lr"] == 0.001 and config["penalty.0.name"] == "gradient-penalty"
    history = [{item.key or item.nested_key[0]: json.loads(item.value_json) for item in r.history.item}
               for r in records if r.WhichOneof("record_type") == "history"]
    logged = [(h["Progress/nimg"], h["Loss/D"]) for h in history if "Loss/D" in h]
    assert logged == [(round(r["Progress/kimg"] * 1000), pytest.approx(r["Loss/D"])) for r in rows(run.out_dir)]
    images = [h for h in history if any(k.startswith("samples/") for k in h)]
    assert any("samples/final" in h for h in images) and any("samples/tick" in h for h in images)
    statuses = [json.loads(item.value_json) for r in records if r.WhichOneof("record_type") == "summary"
                for item in r.summary.update if item.key == "gankit/status"]
    assert statuses[0] == "KILLED" and statuses[-1] == "FINISHED"
    exits = [r.exit.exit_code for r in records if r.WhichOneof("record_type") == "exit"]
    assert exits == [1, 0]
