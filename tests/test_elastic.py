"""Training as clusters run it, with torchrun on loopback (gloo, 2 processes, the tiny recipe):
an elastic restart (``--max-restarts``) after a worker is SIGKILLed continues from
checkpoints/latest.pt and ends with the weights of an uninterrupted run; ``--resume-if-exists``
is the one command that starts or continues; a rank stopped by another rank's SIGTERM exits 143."""

from __future__ import annotations

import os
import subprocess
import sys

import torch

from gan_kit.runs import checkpoint as ckpt

# Kills the rank-1 worker (SIGKILL: no handler runs, as when a node is lost) at iteration 18 of the
# first start, while a marker file is there; the tick at 0.104 kimg (iteration 13) wrote latest.pt.
KILLER = '''
import os, signal
from pathlib import Path
from gan_kit import hookimpl

@hookimpl
def step_finished(run, stats):
    marker = Path(os.environ["GANKIT_TEST_KILL_MARKER"])
    if run.rank == 1 and run.step == 18 and marker.exists():
        marker.unlink()
        os.kill(os.getpid(), signal.SIGKILL)
'''

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]


def _weights(run_dir) -> dict:
    return ckpt.load(run_dir / "checkpoints" / "latest.pt")


def test_torchrun_max_restarts_continues_from_latest_and_ends_as_an_uninterrupted_run(tiny_recipe, tmp_path):
    plugin = tmp_path / "killer.py"
    plugin.write_text(KILLER)
    marker = tmp_path / "kill-armed"
    common = ["--set", f"plugins=['{plugin.as_posix()}']", "--set", "run.snapshot_ticks=1"]
    env = {**os.environ, "GANKIT_TEST_KILL_MARKER": str(marker)}
    marker.write_text("")
    elastic = subprocess.run([*TORCHRUN, "--max-restarts=1", "-m", "gan_kit", "run", str(tiny_recipe), "--out",
                              str(tmp_path / "elastic"), *common], capture_output=True, text=True, timeout=600,
                             env=env)
    assert elastic.returncode == 0, elastic.stderr[-3000:]
    assert not marker.exists()  # the worker was killed ...
    assert "resuming at kimg 0.104" in elastic.stderr, elastic.stderr[-3000:]  # ... and the restart continued
    straight = subprocess.run([*TORCHRUN, "-m", "gan_kit", "run", str(tiny_recipe), "--out",
                               str(tmp_path / "straight"), *common], capture_output=True, text=True, timeout=600,
                              env=env)
    assert straight.returncode == 0, straight.stderr[-3000:]
    a, b = _weights(tmp_path / "elastic"), _weights(tmp_path / "straight")
    assert a["cur_nimg"] == b["cur_nimg"] == 200
    for net in ("G", "D", "G_ema"):
        for k in b[net]:
            assert torch.equal(a[net][k], b[net][k]), f"{net}.{k} differs from the uninterrupted run"


def test_resume_if_exists_starts_then_continues_and_refuses_another_recipe(tiny_recipe, tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "gan_kit", "run", str(tiny_recipe), "--out", str(out), "--resume-if-exists"]
    first = subprocess.run([*cmd, "--set", "run.total_kimg=0.1"], capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "resuming" not in first.stderr
    again = subprocess.run([*cmd, "--set", "run.total_kimg=0.2"], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming at kimg 0.104" in again.stderr
    assert _weights(out)["cur_nimg"] == 200
    other = subprocess.run([*cmd, "--set", "run.total_kimg=0.3", "--set", "loss.name=bce"], capture_output=True,
                           text=True, timeout=600)
    assert other.returncode == 2
    lines = other.stderr.strip().splitlines()
    assert len(lines) == 1 and "loss.name" in lines[0] and "cannot change in a resumed run" in lines[0], lines


def test_a_rank_stopped_by_another_ranks_sigterm_exits_143(tiny_recipe, tmp_path):
    """SIGTERM reaches only rank 1 (a scheduler's preemption signal to one process): every rank stops
    at the same iteration, writes the checkpoint, and exits as SIGTERM does, 143 - not 130."""
    plugin = tmp_path / "term_rank_1.py"
    plugin.write_text("import os, signal\nfrom gan_kit import hookimpl\n"
                      "@hookimpl\ndef step_finished(run, stats):\n"
                      "    if run.step == 3 and run.rank == 1:\n        os.kill(os.getpid(), signal.SIGTERM)\n")
    out = tmp_path / "two"
    done = subprocess.run([sys.executable, "-m", "gan_kit", "run", str(tiny_recipe), "--nproc", "2", "--out", str(out),
                           "--set", f"plugins=['{plugin.as_posix()}']", "--set", "run.total_kimg=5"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 143, done.stderr[-2000:]  # the exit code of rank 0, the first process
    assert done.stderr.count("stopped: interrupted by SIGTERM") == 1
    assert 0 < _weights(out)["cur_nimg"] < 5000


def test_a_restarted_worker_meets_in_a_store_without_the_first_starts_keys(monkeypatch):
    """torchrun keeps one store across ``--max-restarts``: the keys (gloo/NCCL addresses) the first
    start's workers wrote must be invisible to the restarted ones, or a restarted rank connects to a
    dead worker's port ("Connection refused") or hangs."""
    import datetime

    import torch.distributed as dist

    from gan_kit.training import distributed

    server = dist.TCPStore("127.0.0.1", 0, world_size=1, is_master=True, wait_for_workers=False)
    for k, v in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(server.port), "RANK": "0", "WORLD_SIZE": "1",
                 "TORCHELASTIC_USE_AGENT_STORE": "True"}.items():
        monkeypatch.setenv(k, v)
    timeout = datetime.timedelta(seconds=30)
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    first, rank, world = distributed.attempt_store(timeout)
    assert (rank, world) == (0, 1)
    first.set("rank_1", "127.0.0.1:22412")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    restarted, _, _ = distributed.attempt_store(timeout)
    assert not restarted.check(["rank_1"])  # the dead worker's address is not read back ...
    restarted.set("rank_1", "127.0.0.1:30000")
    assert first.get("rank_1") == b"127.0.0.1:22412"  # ... and the two starts never share a key
    assert restarted.get("rank_1") == b"127.0.0.1:30000"
