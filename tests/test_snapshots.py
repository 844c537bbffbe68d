"""Checkpoint retention, sample intervals and raw-G grids."""

from __future__ import annotations

import torch

from gan_kit.runs import checkpoint as ckpt
from gan_kit.runs.session import train
from gan_kit.testing import make_run


def test_keep_the_last_snapshots_and_one_every_k_ticks(tmp_path):
    # 25 steps of 8 images, a tick every 8 images: 25 ticks, a snapshot at every tick
    run = make_run(tmp_path, overrides=["run.tick_kimg=0.008", "run.snapshot_ticks=1", "run.keep_snapshots=2",
                                        "run.keep_every_ticks=10", "run.sample_ticks=0"])
    train(run)
    names = sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("snapshot-*.pt"))
    ticks = sorted(int(n.split("tick")[1][:-3]) for n in names)
    assert ticks == [0, 10, 20, 23, 24], names  # every 10th, and the last two
    last = ckpt.load(tmp_path / "run" / "checkpoints" / "snapshot-000000-tick24.pt")
    latest = ckpt.load(tmp_path / "run" / "checkpoints" / "latest.pt")
    assert last["cur_nimg"] == latest["cur_nimg"] == 200
    assert all(torch.equal(last["G"][k], v) for k, v in latest["G"].items())
    # no sample grid at the ticks (sample_ticks = 0), only the phase and final ones
    assert not list((tmp_path / "run" / "samples").glob("tick-*.png"))
    assert (tmp_path / "run" / "samples" / "final.png").is_file()


def test_sample_grids_every_k_ticks_and_from_the_raw_generator(tmp_path):
    run = make_run(tmp_path, overrides=["run.tick_kimg=0.04", "run.sample_ticks=2", "run.sample_G=true"])
    train(run)
    samples = tmp_path / "run" / "samples"
    assert sorted(p.name for p in samples.glob("tick-*.png")) == ["tick-0000.png", "tick-0002.png", "tick-0004.png"]
    assert sorted(p.name for p in samples.glob("G-tick-*.png")) == ["G-tick-0000.png", "G-tick-0002.png", "G-tick-0004.png"]
    assert (samples / "G-tick-0002.png").read_bytes() != (samples / "tick-0002.png").read_bytes()


def test_files_saved_beside_a_checkpoint_go_with_its_links_and_deletions(tmp_path):
    """A kept snapshot or a phase checkpoint is a link to latest.pt with every file saved under
    its name (a summary a format change writes next to it); pruning deletes them together."""
    from gan_kit.runs.layout import CheckpointLayout

    layout = CheckpointLayout(tmp_path)
    layout.folder.mkdir()
    layout.latest.write_bytes(b"state")
    layout.latest.with_suffix(".json").write_text('{"step": 3}')
    (layout.folder / ".latest.pt.tmp").write_bytes(b"half")  # a write in progress is no companion
    snap = layout.snapshot(3000, tick=5)
    layout.link(layout.latest, snap)
    assert snap.read_bytes() == b"state" and snap.with_suffix(".json").read_text() == '{"step": 3}'
    assert layout.snapshots() == [(5, snap)]
    layout.remove(snap)
    assert layout.snapshots() == [] and not snap.with_suffix(".json").exists()
    assert layout.latest.with_suffix(".json").exists()  # the source keeps its own
    assert CheckpointLayout.run_dir_of(snap) == tmp_path and CheckpointLayout.run_dir_of(tmp_path / "x.pt") is None
