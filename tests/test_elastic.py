"""Training as clusters run it, with torchrun on loopback (gloo, 2 processes, the tiny recipe):
an elastic restart (``--max-restarts``, two agents as two nodes) after a worker is SIGKILLed
continues from checkpoints/latest.pt and ends with the weights of an uninterrupted run; ``--resume-if-exists``
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


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_nodes_restart_a_killed_worker_from_latest_and_end_as_an_uninterrupted_run(tiny_recipe, tmp_path):
    """Two torchrun agents (two "nodes" on loopback, c10d rendezvous, one worker each), the rank-1
    worker SIGKILLed mid-run: both agents restart their workers (each node counting only its own
    restarts), the restarted workers meet, continue from checkpoints/latest.pt and end with the
    weights of an uninterrupted run."""
    plugin = tmp_path / "killer.py"
    plugin.write_text(KILLER)
    marker = tmp_path / "kill-armed"
    common = ["--set", f"plugins=['{plugin.as_posix()}']", "--set", "run.snapshot_ticks=1"]
    env = {**os.environ, "GANKIT_TEST_KILL_MARKER": str(marker)}
    marker.write_text("")
    endpoint = f"127.0.0.1:{_free_port()}"
    nodes = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1",
                               "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", "--rdzv-id=elastic-test",
                               "--max-restarts=1", "-m", "gan_kit", "run", str(tiny_recipe), "--out",
                               str(tmp_path / "elastic"), "--resume-if-exists", *common],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    outputs = [node.communicate(timeout=600) for node in nodes]
    for node, (_, err) in zip(nodes, outputs):
        assert node.returncode == 0, err[-3000:]
    assert not marker.exists()  # the worker was killed ...
    assert any("resuming at kimg 0.104" in err for _, err in outputs), outputs[0][1][-3000:]  # ... and continued
    straight = subprocess.run([*TORCHRUN, "-m", "gan_kit", "run", str(tiny_recipe), "--out",
                               str(tmp_path / "straight"), *common], capture_output=True, text=True, timeout=600,
                              env=env)
    assert straight.returncode == 0, straight.stderr[-3000:]
    a, b = _weights(tmp_path / "elastic"), _weights(tmp_path / "straight")
    assert a["cur_nimg"] == b["cur_nimg"] == 200
    for net in ("G", "D", "G_ema"):
        for k in b[net]:
            assert torch.equal(a[net][k], b[net][k]), f"{net}.{k} differs from the uninterrupted run"


def test_resume_if_exists_starts_continues_ends_a_finished_run_and_refuses_another_recipe(tiny_recipe, tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "gan_kit", "run", str(tiny_recipe), "--out", str(out), "--resume-if-exists"]
    first = subprocess.run([*cmd, "--set", "run.total_kimg=0.1"], capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "resuming" not in first.stderr
    again = subprocess.run([*cmd, "--set", "run.total_kimg=0.2"], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming at kimg 0.104" in again.stderr
    assert _weights(out)["cur_nimg"] == 200
    finished = subprocess.run([*cmd, "--set", "run.total_kimg=0.2"], capture_output=True, text=True, timeout=600)
    assert finished.returncode == 0, finished.stderr[-2000:]  # a start after the end (a requeue) is a success ...
    assert "has finished its run (kimg 0.2)" in finished.stderr
    assert _weights(out)["cur_nimg"] == 200  # ... that trains nothing
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


def test_a_restarted_worker_meets_in_a_fresh_store_whatever_an_earlier_start_posted(monkeypatch):
    """torchrun keeps its agent's store across ``--max-restarts``, and each node counts restarts
    on its own: rank 0 of every start hosts a new store and posts it there, and the other ranks
    reach that one - not the store an earlier start posted (its rank 0 is gone), and none of the
    keys (gloo/NCCL addresses) the earlier start wrote."""
    import datetime
    import threading

    import torch.distributed as dist

    from gan_kit.training import distributed

    agent = dist.TCPStore("127.0.0.1", 0, world_size=1, is_master=True, wait_for_workers=False)
    for k, v in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(agent.port), "WORLD_SIZE": "2",
                 "TORCHELASTIC_USE_AGENT_STORE": "True"}.items():
        monkeypatch.setenv(k, v)
    timeout = datetime.timedelta(seconds=60)
    earlier = dist.TCPStore("127.0.0.1", 0, world_size=1, is_master=True, wait_for_workers=False)
    earlier.set("default_pg/rank_1", "127.0.0.1:22412")  # the first start's peer address ...
    agent.set(distributed.ROUND_KEY, f"{earlier.port} old-token")
    del earlier  # ... and its rank 0 is gone with its store
    got = {}

    def rank(r):
        monkeypatch.setenv("RANK", str(r))  # read at once below, before the other thread sets it
        got[r] = distributed.round_store(timeout)

    one = threading.Thread(target=rank, args=(1,))
    one.start()  # rank 1 first: it finds the earlier start's post and must wait for the new one
    import time

    time.sleep(1.0)
    rank(0)
    one.join(60)
    (s0, r0, w0), (s1, r1, w1) = got[0], got[1]
    assert (r0, w0, r1, w1) == (0, 2, 1, 2)
    s0.set("hello", "from rank 0")
    assert s1.get("hello") == b"from rank 0"  # one store ...
    assert not s1.check(["default_pg/rank_1"])  # ... without the earlier start's keys
