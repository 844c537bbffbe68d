"""Reference statistics files: clean-fid's and TTUR's mu/sigma .npz and gankit's own (with what it
was made from): read, written atomically, equal to clean-fid's math on the same features, used by
``gankit eval --against`` and refused in one line when they do not fit. On the stub extractor."""

from __future__ import annotations

import json
import re

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


#: Every test starts with an empty feature cache of its own (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("metric_cache_dir")


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
             ({"resize": "clean"}, "was written with resize 'clean', and this metric uses 'legacy_tensorflow'")]
    for change, message in cases:
        path = write_stats(tmp_path / "x.npz", mu, sigma, {**base, **change})
        # --backbone / --resize given: the file's own settings are not taken over them
        result = _invoke("eval", checkpoint, "--against", path, "--metric", "fid50k_full", "--n", "8",
                         "--backbone", "stub", "--resize", "legacy_tensorflow")
        assert result.exit_code == 2 and message in result.output and len(result.output.strip().splitlines()) == 1, \
            result.output
    np.savez_compressed(tmp_path / "plain.npz", mu=np.zeros(2048), sigma=np.eye(2048))
    result = _invoke("eval", checkpoint, "--against", tmp_path / "plain.npz", "--metric", "fid50k_full")
    assert result.exit_code == 2 and "holds 2048-d statistics, and stub gives 64-d features" in result.output
    np.savez_compressed(tmp_path / "plain64.npz", mu=np.zeros(64), sigma=np.eye(64))
    result = _invoke("eval", checkpoint, "--against", tmp_path / "plain64.npz", "--metric", "fid50k_full", "--n", "8")
    assert result.exit_code == 0 and "backbone, weights, resize mode, real set and image resolution cannot be checked" in result.output
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
    with pytest.raises(GankitError, match=r"--write-stats: cannot write .*new\.npz \(") as e:
        write_stats(tmp_path / "new.npz", np.zeros(2), np.eye(2), {})
    assert ".tmp" not in str(e.value)  # the final path, never the hidden temporary name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["imgs", "old.npz"]


def test_a_destination_that_cannot_take_a_file_is_refused_before_any_image_is_read(tmp_path, folder, monkeypatch):
    """/proc exists and os.access may call it writable, yet no file can be made there: the check
    creates and removes a file in the folder first, and names the final path's folder."""
    read = []
    monkeypatch.setattr(fx, "stream_features", lambda *a, **k: read.append(1))
    result = _invoke("eval", "--write-stats", "/proc/x.npz", folder)
    assert result.exit_code == 2 and "--write-stats: cannot create files in /proc" in result.output, result.output
    assert ".tmp" not in result.output and not read and len(result.output.strip().splitlines()) == 1


@pytest.fixture
def progressive(tmp_path, folder):
    """A progressive run (4 px, then 8 px) saved in its first phase, at 4 px."""
    run = make_run(tmp_path / "p", overrides=["data.name=image-folder", f"data.path={folder}", "data.resolution=8",
                                              "metric=[{name='fid200_full', feature_extractor='stub'}]"])
    run.phase = run.growth.phase_at(0)
    run.save_checkpoint("latest")
    assert run.phase.resolution == 4
    return str(run.out_dir / "checkpoints" / "latest.pt")


def test_stats_record_their_resolution_and_a_progressive_phase_at_another_is_refused(tmp_path, progressive):
    """--write-stats of a progressive checkpoint's recipe uses its final 8 px; the checkpoint's
    images are 4 px (direct eval compares faded 4 px reals), so --against refuses naming both
    resolutions and the fix; stats written at 4 px are accepted."""
    out = tmp_path / "st8.npz"
    assert _invoke("eval", "--write-stats", out, progressive, "--metric", "fid200_full").exit_code == 0
    meta = read_stats(out).meta
    assert (meta["resolution"], meta["channels"], meta["input_size"]) == (8, 3, 32)
    result = _invoke("eval", progressive, "--against", out, "--n", "8")
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert "holds statistics of 8 px reals (3 channels), and the generated images are 4 px" in result.output
    assert "--write-stats OUT.npz SOURCE --resolution 4" in result.output and "final phase" in result.output
    out4 = tmp_path / "st4.npz"
    assert _invoke("eval", "--write-stats", out4, progressive, "--metric", "fid200_full", "--resolution",
                   "4").exit_code == 0
    assert read_stats(out4).meta["resolution"] == 4
    result = _invoke("eval", progressive, "--against", out4, "--n", "8", "--json")
    assert result.exit_code == 0, result.output
    against = json.loads(result.output)["results"]["fid200_full"]
    assert against["protocol"]["note"] is None
    direct = json.loads(_invoke("eval", progressive, "--metric", "fid200_full", "--n", "8", "--json").output)
    # the reals box-filtered to 4 px, as direct evaluation at the 4 px phase reads them: the same figure
    assert against["trained"]["Metrics/fid200_full"] == pytest.approx(
        direct["results"]["fid200_full"]["trained"]["Metrics/fid200_full"], rel=1e-9)
    result = _invoke("eval", "--write-stats", tmp_path / "x.npz", progressive, "--metric", "fid200_full",
                     "--resolution", "6")
    assert result.exit_code == 2 and "--resolution: 6 is not a power of two from 4 to the data's 8 px" in result.output


def test_a_plain_file_says_the_resolution_cannot_be_checked_and_why_it_may_differ(tmp_path, progressive):
    """A clean-fid/TTUR file records no resolution: the note says so, names the generated images'
    4 px and that the backbone resizes every image to its input (32 px for the stub)."""
    np.savez_compressed(tmp_path / "plain64.npz", mu=np.zeros(64), sigma=np.eye(64))
    result = _invoke("eval", progressive, "--against", tmp_path / "plain64.npz", "--n", "8")
    assert result.exit_code == 0, result.output
    assert "image resolution cannot be checked (the generated images are 4 px; stub resizes every image to " \
           "32 px" in result.output


@pytest.mark.parametrize("entry, said", [("[1, 2]", "is [1, 2] (a JSON list)"), ("5", "is 5 (a JSON int)"),
                                         ("{not json", "is not JSON"),
                                         ('{"count": "many"}', "key 'count' holds \"many\", not a int")])
def test_a_malformed_gankit_entry_is_one_line_naming_the_file_and_key(tmp_path, entry, said):
    """The gankit entry must be a JSON object with typed keys; anything else is one line, not an
    AttributeError from deep inside."""
    path = tmp_path / "bad.npz"
    np.savez_compressed(path, mu=np.zeros(4), sigma=np.eye(4), gankit=np.array(entry))
    with pytest.raises(GankitError) as e:
        read_stats(path)
    text = str(e.value)
    assert f"--against: {path}: its 'gankit' entry" in text and said in text and "\n" not in text


@pytest.mark.parametrize("mu, sigma, said", [
    (np.array([0.0, np.nan, 0.0]), np.eye(3), "mu holds 1 NaN or inf"),
    (np.zeros(3), np.diag([1.0, np.inf, 1.0]), "sigma holds 1 NaN or inf"),
    (np.zeros(3), np.array([[1.0, 0.5, 0], [0, 1, 0], [0, 0, 1]]), "sigma is not symmetric"),
    (np.zeros(3), -np.eye(3), "sigma is not positive semi-definite (eigenvalue -1"),
])
def test_impossible_mu_or_sigma_are_refused_when_read(tmp_path, mu, sigma, said):
    """NaN/inf, an asymmetric or negative-definite sigma would give a NaN or negative FID: refused
    at read time naming the file and what is wrong."""
    path = tmp_path / "s.npz"
    np.savez_compressed(path, mu=mu, sigma=sigma)
    with pytest.raises(GankitError, match=re.escape(said)) as e:
        read_stats(path)
    assert str(path) in str(e.value)
    feats = np.random.default_rng(0).standard_normal((3, 5))  # fewer samples than dims: PSD, rank-deficient
    np.savez_compressed(path, mu=feats.mean(0), sigma=np.cov(feats, rowvar=False))
    assert read_stats(path).dim == 5


def test_a_file_that_is_not_a_npz_is_one_line(tmp_path):
    """A text file or a .npy is 'not a .npz of mu and sigma', never numpy's allow_pickle advice."""
    (tmp_path / "t.npz").write_text("hello\n")
    np.save(tmp_path / "a.npy", np.zeros(3))
    for path in (tmp_path / "t.npz", tmp_path / "a.npy"):
        with pytest.raises(GankitError) as e:
            read_stats(path)
        assert "is not a .npz of mu and sigma" in str(e.value) and "pickle" not in str(e.value)


def test_plain_fid_with_against_names_the_protocol_to_use(tmp_path, checkpoint):
    """fid (not a protocol) with --against: the refusal says --against serves the FID protocols and
    names the one to use - not that the file 'serves FID alone'."""
    np.savez_compressed(tmp_path / "plain64.npz", mu=np.zeros(64), sigma=np.eye(64))
    result = _invoke("eval", checkpoint, "--against", tmp_path / "plain64.npz", "--metric", "fid")
    assert result.exit_code == 2, result.output
    assert "--against serves the FID protocols (fid50k_full, fid10k_full, ...)" in result.output
    assert "use --metric fid50k_full" in result.output and "FID alone" not in result.output


def test_json_with_against_names_the_stats_file(tmp_path, checkpoint):
    np.savez_compressed(tmp_path / "plain64.npz", mu=np.zeros(64), sigma=np.eye(64))
    result = _invoke("eval", checkpoint, "--against", tmp_path / "plain64.npz", "--n", "8", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["against"] == str(tmp_path / "plain64.npz")


def test_backbone_option_chooses_the_features_of_write_stats_and_eval(tmp_path, folder, checkpoint):
    """--backbone stub applies to every feature metric computed, for a folder's --write-stats (no
    recipe entry) and for a protocol the checkpoint's recipe has no entry for; --set metric.0... is
    not needed."""
    out = tmp_path / "s.npz"
    result = _invoke("eval", "--write-stats", out, folder, "--metric", "fid200_full", "--backbone", "stub")
    assert result.exit_code == 0, result.output
    assert read_stats(out).meta["backbone"] == "stub"
    result = _invoke("eval", checkpoint, "--metric", "fid100_full", "--backbone", "stub", "--n", "8", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["results"]["fid100_full"]["protocol"]["backbone"] == "stub"
    result = _invoke("eval", checkpoint, "--metric", "fid100_full", "--backbone", "nope", "--n", "8")
    assert result.exit_code == 2 and "unknown backbone 'nope'" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1


def test_against_takes_the_backbone_and_resize_from_the_files_metadata(tmp_path, folder, checkpoint):
    """A stub file written with resize clean evaluates fid100_full (no recipe entry: Inception by
    default) with the stub and clean resize, as written; a file of a backbone whose weights are
    absent names the weights file it needs, not the recipe's Inception."""
    out = tmp_path / "s.npz"
    assert _invoke("eval", "--write-stats", out, folder, "--metric", "fid100_full", "--backbone", "stub",
                   "--resize", "clean").exit_code == 0
    result = _invoke("eval", checkpoint, "--against", out, "--n", "8", "--json")
    assert result.exit_code == 0, result.output
    desc = json.loads(result.output)["results"]["fid100_full"]["protocol"]
    assert (desc["backbone"], desc["resize"]) == ("stub", "clean")
    meta = {**read_stats(out).meta, "backbone": "clip-vit-b-32", "dim": 64, "resize": "pil_uint8_crop",
            "weights_file": "open_clip_pytorch_model.bin"}
    clip_file = write_stats(tmp_path / "clip.npz", np.zeros(64), np.eye(64), meta)
    result = _invoke("eval", checkpoint, "--against", clip_file, "--n", "8")
    assert result.exit_code == 2 and "clip-vit-b-32 weights file" in result.output, result.output


def test_a_weights_dir_without_the_file_is_named_in_the_error(tmp_path, monkeypatch, checkpoint):
    """$GANKIT_WEIGHTS_DIR set but lacking the backbone's file: the error names that folder too, and
    the --weights option."""
    monkeypatch.setenv("GANKIT_WEIGHTS_DIR", str(tmp_path / "wdir"))
    result = _invoke("eval", checkpoint, "--metric", "fid100_full", "--backbone", "inception-v3-compat", "--n", "8")
    assert result.exit_code == 2, result.output
    assert f"$GANKIT_WEIGHTS_DIR ({tmp_path / 'wdir'}), which lacks weights-inception-2015-12-05-6726825d.pth" in result.output
    assert "--weights FILE" in result.output


def test_the_same_tensors_under_two_file_names_are_the_same_weights(tmp_path):
    """torch.save writes the file's name into it, so ViT-B-32.pt and open_clip_pytorch_model.bin of
    identical tensors differ byte for byte; the statistics check compares the tensors' digest and
    accepts them, and a real difference is refused naming both file names beside the digests."""
    state = {"visual.proj": torch.arange(6.0).reshape(2, 3), "logit_scale": torch.tensor(4.6)}
    a, b = tmp_path / "ViT-B-32.pt", tmp_path / "open_clip_pytorch_model.bin"
    torch.save(state, a)
    torch.save(state, b)
    assert fx.weights_digest(a) != fx.weights_digest(b)
    assert fx.weights_state_digest(a) == fx.weights_state_digest(b) is not None
    torch.save({**state, "logit_scale": torch.tensor(4.7)}, tmp_path / "other.pt")
    assert fx.weights_state_digest(tmp_path / "other.pt") != fx.weights_state_digest(a)

    def meta(path):
        return {"backbone": "clip-vit-b-32", "dim": 4, "weights_file": path.name, "reals": "r", "resize": "clean",
                "weights_sha256": fx.weights_digest(path), "weights_tensors_sha256": fx.weights_state_digest(path)}

    stats = read_stats(write_stats(tmp_path / "s.npz", np.zeros(4), np.eye(4), meta(a)))
    assert mismatch(stats, meta(b)) == (None, None)
    refusal, _ = mismatch(stats, meta(tmp_path / "other.pt"))
    assert "with the weights ViT-B-32.pt (tensors sha256" in refusal and "uses other.pt (tensors sha256" in refusal


@pytest.mark.parametrize("name, said", [
    ("fid99999999k_full", "metric fid99999999k_full: 99,999,999,000 generated images is more than the 16,777,216"),
    ("pr200_1000_full", "metric pr200_1000_full: neighbourhood 1000 needs more than 1000 images of each set, and 200"),
    ("pr200_25_full", "pr200_25_full: neighbourhood 25 needs more than 25 real images, and the protocol's real set "
                      "holds 20"),
])
def test_impossible_protocol_names_are_refused_before_any_feature(name, said, checkpoint, monkeypatch):
    """The 2^24 cap of num_images applies to the name's count; a pr neighbourhood not below the
    generated or the real count is refused before a feature is computed."""
    read = []
    monkeypatch.setattr(fx, "stream_features", lambda *a, **k: read.append(1))
    result = _invoke("eval", checkpoint, "--metric", name, "--backbone", "stub")
    assert result.exit_code == 2 and said in result.output and not read, result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_mid_fade_checkpoint_is_noted_against_a_file(tmp_path, folder):
    """In a fade, direct evaluation blends the reals as training did; a file's reals are not:
    --against says so beside the figure."""
    run = make_run(tmp_path / "f", overrides=["data.name=image-folder", f"data.path={folder}", "data.resolution=8",
                                              "metric=[{name='fid200_full', feature_extractor='stub'}]"])
    nimg = next(n for n in range(0, 200, 4) if 0 < float(run.growth.phase_at(n).alpha) < 1)
    run.phase = run.growth.phase_at(nimg)
    run.save_checkpoint("latest")
    ckpt = str(run.out_dir / "checkpoints" / "latest.pt")
    out = tmp_path / "s.npz"
    assert _invoke("eval", "--write-stats", out, ckpt, "--metric", "fid200_full").exit_code == 0
    result = _invoke("eval", ckpt, "--against", out, "--n", "8")
    assert result.exit_code == 0 and "note: the checkpoint is mid-fade (alpha 0." in result.output, result.output
