"""Reference statistics files: clean-fid's and TTUR's mu/sigma .npz and gankit's own (with what it
was made from): read, written atomically, equal to clean-fid's math on the same features, used by
``gankit eval --against`` and refused in one line when they do not fit. On the stub extractor."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from gan_kit.base.errors import GankitError
from gan_kit.builtin.metrics import feature_extractors as fx
from gan_kit.builtin.metrics.feature_passes import FeatureAccumulator, mean_and_covariance
from gan_kit.cli import cli
from gan_kit.testing import make_run
from gan_kit.tools.refstats import check_destination, mismatch, read_stats, write_stats


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("GANKIT_CACHE_DIR", str(tmp_path / "cache"))
    fx.clear_caches()
    yield
    fx.clear_caches()


@pytest.fixture
def folder(tmp_path):
    """20 8x8 RGB PNGs of distinct random content."""
    root = tmp_path / "imgs"
    root.mkdir()
    rng = np.random.default_rng(0)
    for i in range(20):
        Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(root / f"{i:02d}.png")
    return root


@pytest.fixture
def checkpoint(tmp_path, folder):
    run = make_run(tmp_path / "r", overrides=["data.name=image-folder", f"data.path={folder}", "data.resolution=8",
                                              "growth={name='static', batch_size=8}",
                                              "metric=[{name='fid50k_full', feature_extractor='stub'}]"])
    run.phase = run.growth.phase_at(0)
    run.save_checkpoint("latest")
    return str(run.out_dir / "checkpoints" / "latest.pt")


def _invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_a_clean_fid_file_round_trips_and_only_its_dimension_is_checked(tmp_path):
    """clean-fid writes np.savez_compressed(outf, mu=mu, sigma=sigma) (cleanfid/fid.py); read back
    exactly, with no metadata, so only the dimension is checked and the rest is said to be unchecked."""
    g = np.random.default_rng(1)
    feats = g.standard_normal((50, 6))
    mu, sigma = np.mean(feats, axis=0), np.cov(feats, rowvar=False)
    path = tmp_path / "cifar10_clean_train_32.npz"
    np.savez_compressed(path, mu=mu, sigma=sigma)
    stats = read_stats(path)
    assert np.array_equal(stats.mu, mu) and np.array_equal(stats.sigma, sigma) and stats.meta == {}
    refusal, note = mismatch(stats, {"dim": 6, "backbone": "stub"})
    assert refusal is None and "cannot be checked" in note and "(6)" in note
    refusal, _ = mismatch(stats, {"dim": 2048, "backbone": "inception-v3-compat"})
    assert "holds 6-d statistics, and inception-v3-compat gives 2048-d features" in refusal
    # gankit's own file is clean-fid's two arrays plus a JSON text: clean-fid's reader takes it as is.
    ours = write_stats(tmp_path / "ours.npz", mu, sigma, {"backbone": "stub", "dim": 6})
    with np.load(ours) as z:  # cleanfid/features.py: stats = np.load(fpath); stats["mu"], stats["sigma"]
        assert np.array_equal(z["mu"], mu) and np.array_equal(z["sigma"], sigma)
    assert read_stats(ours).meta["backbone"] == "stub"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cifar10_clean_train_32.npz", "ours.npz"]  # no temporary


def test_mu_sigma_and_the_frechet_distance_equal_clean_fid_and_torch_fidelity():
    """The streamed float64 sums give clean-fid's fid_from_feats statistics (np.mean, np.cov), and
    the distance equals cleanfid.fid.frechet_distance and torch-fidelity's to 1e-6 relative."""
    from cleanfid.fid import fid_from_feats, frechet_distance
    from torch_fidelity.metric_fid import fid_statistics_to_metric

    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(300, 12, generator=g), torch.rand(260, 12, generator=g) * 1.3 + 0.1
    stats = []
    for feats in (a, b):
        acc = FeatureAccumulator(frozenset({"stats"}))
        for i, part in enumerate(feats.split(64)):  # batch by batch, as a pass streams them
            acc.add(i, {"pool": part})
        mu, sigma = mean_and_covariance(acc.result())
        x = feats.numpy()  # cleanfid.fid.get_batch_features returns these; fid_from_feats takes:
        np.testing.assert_allclose(mu.numpy(), np.mean(x, axis=0), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(sigma.numpy(), np.cov(x, rowvar=False), rtol=1e-5, atol=1e-8)
        stats.append((mu.numpy(), sigma.numpy()))
    (m1, s1), (m2, s2) = stats
    ours = fid_statistics_to_metric({"mu": m1, "sigma": s1}, {"mu": m2, "sigma": s2}, verbose=False)
    ours = float(ours["frechet_inception_distance"])
    x1, x2 = a.numpy().astype(np.float64), b.numpy().astype(np.float64)
    clean = frechet_distance(np.mean(x1, axis=0), np.cov(x1, rowvar=False), np.mean(x2, axis=0),
                             np.cov(x2, rowvar=False))
    assert ours == pytest.approx(clean, rel=1e-6)
    assert ours == pytest.approx(fid_from_feats(x1, x2), rel=1e-6)  # clean-fid from the features themselves


def test_write_stats_then_against_equals_the_protocol_against_the_data(tmp_path, folder, checkpoint):
    """--write-stats of a folder writes all 20 reals' mu/sigma (np.mean / np.cov of their stub
    features) with its metadata; eval --against that file gives the FID that fid50k_full gives
    against the data itself."""
    out = tmp_path / "stats.npz"
    result = _invoke("eval", "--write-stats", out, folder, "--set",
                     "metric=[{name='fid50k_full', feature_extractor='stub'}]")
    assert result.exit_code == 0, result.output
    assert "fid50k_full reference statistics of 20 reals (all reals, max_images off, no x-flips), stub" in result.output
    stats = read_stats(out)
    meta = stats.meta
    assert (meta["backbone"], meta["dim"], meta["count"], meta["protocol"]) == ("stub", 64, 20, "fid50k_full")
    assert len(meta["data_sha256"]) == 64 and meta["resize"] == "legacy_tensorflow"
    images = torch.stack([torch.from_numpy(np.array(Image.open(folder / f"{i:02d}.png"))).permute(2, 0, 1)
                          for i in range(20)])
    ex = fx.get_extractor("stub", None, "cpu", "fid")
    feats = ex.extract(images)["pool"].double().numpy()
    np.testing.assert_allclose(stats.mu, feats.mean(axis=0), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(stats.sigma, np.cov(feats, rowvar=False), rtol=1e-7, atol=1e-12)

    against = _invoke("eval", checkpoint, "--against", out, "--n", "24", "--json")
    assert against.exit_code == 0, against.output
    direct = _invoke("eval", checkpoint, "--metric", "fid50k_full", "--n", "24", "--json")
    a = json.loads(against.output)["results"]["fid50k_full"]
    d = json.loads(direct.output)["results"]["fid50k_full"]
    assert a["trained"]["Metrics/fid50k_full"] == pytest.approx(d["trained"]["Metrics/fid50k_full"], rel=1e-9)
    text = _invoke("eval", checkpoint, "--against", out, "--n", "24").output
    assert f"24 generated (num_images; the protocol's 50,000) vs {out} (20 reals, all reals" in text


def test_files_of_another_backbone_dimension_or_protocol_are_refused_in_one_line(tmp_path, checkpoint):
    """The refusal names what differs; kid with a statistics file is refused (mu and sigma serve
    FID only); a plain file's unchecked parts are said."""
    mu, sigma = np.zeros(64), np.eye(64)
    base = {"backbone": "stub", "weights_sha256": None, "dim": 64, "reals": "all reals, max_images off, no x-flips",
            "resize": "legacy_tensorflow", "protocol": "fid50k_full", "count": 20}
    cases = [({"backbone": "inception-v3-compat"}, "was written with backbone 'inception-v3-compat', and this "
                                                   "metric uses 'stub'"),
             ({"reals": "first 50000 reals, max_images off, x-flips as trained"}, "was written with reals 'first 50000"),
             ({"resize": "clean"}, "was written with resize 'clean'")]
    for change, message in cases:
        path = write_stats(tmp_path / "x.npz", mu, sigma, {**base, **change})
        result = _invoke("eval", checkpoint, "--against", path, "--metric", "fid50k_full", "--n", "8")
        assert result.exit_code == 2 and message in result.output and len(result.output.strip().splitlines()) == 1, \
            result.output
    np.savez_compressed(tmp_path / "plain.npz", mu=np.zeros(2048), sigma=np.eye(2048))
    result = _invoke("eval", checkpoint, "--against", tmp_path / "plain.npz", "--metric", "fid50k_full")
    assert result.exit_code == 2 and "holds 2048-d statistics, and stub gives 64-d features" in result.output
    np.savez_compressed(tmp_path / "plain64.npz", mu=np.zeros(64), sigma=np.eye(64))
    result = _invoke("eval", checkpoint, "--against", tmp_path / "plain64.npz", "--metric", "fid50k_full", "--n", "8")
    assert result.exit_code == 0 and "backbone, weights, resize mode and real set cannot be checked" in result.output
    result = _invoke("eval", checkpoint, "--against", tmp_path / "plain64.npz", "--metric", "kid50k_full")
    assert result.exit_code == 2 and "--against: kid50k_full needs the real images' features" in result.output
    np.savez_compressed(tmp_path / "feats.npz", feats=np.zeros((3, 64)))  # clean-fid's KID file
    result = _invoke("eval", checkpoint, "--against", tmp_path / "feats.npz")
    assert result.exit_code == 2 and "holds ['feats'], not mu and sigma" in result.output


def test_the_destination_is_checked_before_the_work_and_written_whole(tmp_path, folder, monkeypatch):
    """An existing file (without --overwrite), a missing folder or another suffix: one line before any
    image is read; a failure while writing leaves no file and no temporary behind."""
    (tmp_path / "old.npz").write_bytes(b"old")
    with pytest.raises(GankitError, match="exists; remove it, choose another name, or add --overwrite"):
        check_destination(tmp_path / "old.npz")
    assert check_destination(tmp_path / "old.npz", overwrite=True) == tmp_path / "old.npz"
    with pytest.raises(GankitError, match="folder .*nowhere does not exist"):
        check_destination(tmp_path / "nowhere" / "s.npz")
    with pytest.raises(GankitError, match="should end in .npz"):
        check_destination(tmp_path / "s.stats")
    read = []
    monkeypatch.setattr(fx, "stream_features", lambda *a, **k: read.append(1))
    result = _invoke("eval", "--write-stats", tmp_path / "old.npz", folder)
    assert result.exit_code == 2 and "exists" in result.output and not read
    assert (tmp_path / "old.npz").read_bytes() == b"old"

    def broken(path, **arrays):
        open(path, "wb").write(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez_compressed", broken)
    with pytest.raises(OSError):
        write_stats(tmp_path / "new.npz", np.zeros(2), np.eye(2), {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["imgs", "old.npz"]
