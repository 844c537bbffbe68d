"""fid, kid, precision-recall and is: their values against torch-fidelity's own pipeline on the
same image files, their math on features with known answers, the caches (extractor passes
counted), and their values in metrics.jsonl, TensorBoard and the report. Everything runs on the
stub extractor (no download), except the check against the real InceptionV3, which needs its
weights in the torch hub cache."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from gan_kit import Backbone
from gan_kit.builtin.metrics import feature_extractors as fx
from gan_kit.builtin.data.datasets import Digits
from gan_kit.builtin.metrics.inception import FID, KID, InceptionScore, PrecisionRecall
from gan_kit.cli import cli
from gan_kit.runs.run import build_run
from gan_kit.runs.session import train
from gan_kit.base.errors import GankitError, RecipeError
from gan_kit.recipe import load_recipe
from gan_kit.tools.report import load_metrics, metric_directions

ALL = (FID, KID, PrecisionRecall, InceptionScore)


#: Every test starts with an empty feature cache of its own (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("metric_cache_dir")


def stub(cls, **options):
    return cls(cls.Options(feature_extractor="stub", **options))


def image_sets(n: int = 24, side: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """(fake, real) uint8 RGB sets ``[n, 3, side, side]``: real digits, and digits with noise."""
    x = Digits().build(side).images[:2 * n].expand(-1, 3, -1, -1)
    real = fx.to_uint8(x[:n])
    noisy = (x[n:] + 0.4 * torch.randn(x[n:].shape, generator=torch.Generator().manual_seed(1))).clamp(-1, 1)
    return fx.to_uint8(noisy), real


def as_float(u8: torch.Tensor) -> torch.Tensor:
    return u8.float() / 127.5 - 1.0  # to_uint8 gives back exactly u8


def save_pngs(u8: torch.Tensor, folder: Path) -> Path:
    folder.mkdir(parents=True)
    for i, im in enumerate(u8):
        Image.fromarray(im.permute(1, 2, 0).numpy()).save(folder / f"{i:04d}.png")
    return folder


# ------------------------------------------------------------- against torch-fidelity --


def _register_stub_with_torch_fidelity() -> str:
    """The stub as a torch-fidelity feature extractor, so torch-fidelity's own pipeline (files
    read from disk, its batching, its metric settings) runs on the same network."""
    import torch_fidelity
    from torch_fidelity.feature_extractor_base import FeatureExtractorBase
    from torch_fidelity.registry import FEATURE_EXTRACTORS_REGISTRY

    class FidelityStub(FeatureExtractorBase):
        def __init__(self, name, features_list, **kwargs):
            super().__init__(name, features_list)
            self.net = fx.StubNet()

        def forward(self, x):
            pool, logits = self.net(x)
            return tuple({"pool": pool, "logits": logits}[k] for k in self.features_list)

        @staticmethod
        def get_provided_features_list():
            return "pool", "logits"

        @staticmethod
        def get_default_feature_layer_for_metric(metric):
            return "logits" if metric == "isc" else "pool"

        @staticmethod
        def can_be_compiled():
            return False

    if "gankit-stub" not in FEATURE_EXTRACTORS_REGISTRY:
        torch_fidelity.register_feature_extractor("gankit-stub", FidelityStub)
    return "gankit-stub"


def test_values_equal_torch_fidelity_on_the_same_image_files(tmp_path):
    import torch_fidelity

    fake, real = image_sets()
    expected = torch_fidelity.calculate_metrics(
        input1=str(save_pngs(fake, tmp_path / "fake")), input2=str(save_pngs(real, tmp_path / "real")),
        cuda=False, isc=True, fid=True, kid=True, prc=True, feature_extractor=_register_stub_with_torch_fidelity(),
        isc_splits=4, kid_subsets=10, kid_subset_size=16, prc_neighborhood=3, rng_seed=7, cache=False,
        save_cpu_ram=True, verbose=False)
    got = {}
    for metric in (stub(FID, num_images=24), stub(KID, num_images=24, subsets=10, subset_size=16, seed=7),
                   stub(PrecisionRecall, num_images=24, neighborhood=3), stub(InceptionScore, num_images=24,
                                                                                  splits=4, seed=7)):
        got.update(metric.compute(lambda k: as_float(fake[:k]), as_float(real), "cpu"))
    pairs = {"Metrics/fid": "frechet_inception_distance", "Metrics/kid": "kernel_inception_distance_mean",
             "Metrics/kid/std": "kernel_inception_distance_std", "Metrics/precision": "precision",
             "Metrics/recall": "recall", "Metrics/is": "inception_score_mean", "Metrics/is/std": "inception_score_std"}
    assert set(got) == set(pairs)
    for ours, theirs in pairs.items():
        assert got[ours] == pytest.approx(expected[theirs], rel=1e-6, abs=1e-9), ours
    assert got["Metrics/fid"] > 0 and 0 < got["Metrics/precision"] < 1 and 1 < got["Metrics/is"]


_WEIGHTS = fx.weights_path("inception-v3-compat")


@pytest.mark.skipif(not _WEIGHTS.is_file(),
                    reason=f"the real InceptionV3 weights are not at {_WEIGHTS} (gankit never downloads them)")
def test_the_real_inception_gives_what_the_fidelity_command_gives(tmp_path):
    fake, real = image_sets(n=32)
    out = subprocess.run([str(Path(sys.executable).parent / "fidelity"), "--cpu", "--fid", "--kid", "--isc", "--json",
                          "--silent", "--kid-subset-size", "16", "--kid-subsets", "10", "--isc-splits", "4",
                          "--rng-seed", "7", "--no-cache", "--input1", str(save_pngs(fake, tmp_path / "fake")),
                          "--input2", str(save_pngs(real, tmp_path / "real"))],
                         capture_output=True, text=True, timeout=600, check=True)
    expected = json.loads(out.stdout)
    got = {}
    for metric in (FID(FID.Options(num_images=32)), KID(KID.Options(num_images=32, subsets=10, subset_size=16, seed=7)),
                   InceptionScore(InceptionScore.Options(num_images=32, splits=4, seed=7))):
        got.update(metric.compute(lambda k: as_float(fake[:k]), as_float(real), "cpu"))
    assert got["Metrics/fid"] == pytest.approx(expected["frechet_inception_distance"], rel=1e-5)
    assert got["Metrics/kid"] == pytest.approx(expected["kernel_inception_distance_mean"], rel=1e-5, abs=1e-7)
    assert got["Metrics/is"] == pytest.approx(expected["inception_score_mean"], rel=1e-5)


# --------------------------------------------------------------------- known answers --


def test_precision_recall_is_the_k_nearest_neighbour_ball_test():
    g = torch.Generator().manual_seed(0)
    fake, real = torch.randn(30, 5, generator=g) + 0.7, torch.randn(40, 5, generator=g)
    k = 3

    def covered(probes, manifold):  # Kynkaanniemi et al. 2019, eq. (1)-(3), written out with numpy
        p, m = probes.numpy().astype(np.float64), manifold.numpy().astype(np.float64)
        radius = np.sort(np.linalg.norm(m[:, None] - m[None], axis=-1), axis=1)[:, k]  # k-th neighbour, self excluded
        return float(np.mean((np.linalg.norm(p[:, None] - m[None], axis=-1) <= radius[None]).any(axis=1)))

    pr = stub(PrecisionRecall, neighborhood=k)
    res = pr.from_features({"pool": fake}, {"pool": real}, "cpu")
    assert res["Metrics/precision"] == pytest.approx(covered(fake, real))
    assert res["Metrics/recall"] == pytest.approx(covered(real, fake))
    assert 0.1 < res["Metrics/precision"] < 0.9  # a case where the balls matter
    same = pr.from_features({"pool": real}, {"pool": real}, "cpu")
    assert same == {"Metrics/precision": 1.0, "Metrics/recall": 1.0}
    far = pr.from_features({"pool": real + 100.0}, {"pool": real}, "cpu")
    assert far == {"Metrics/precision": 0.0, "Metrics/recall": 0.0}


def test_inception_score_and_fid_on_features_with_known_values():
    is_ = stub(InceptionScore, splits=1)
    confident = torch.eye(4).repeat(10, 1) * 60.0  # every class equally often, each predicted with certainty
    assert is_.from_features({"logits": confident}, None, "cpu")["Metrics/is"] == pytest.approx(4.0, rel=1e-6)
    assert is_.from_features({"logits": torch.zeros(40, 4)}, None, "cpu")["Metrics/is"] == pytest.approx(1.0)
    real = torch.randn(200, 6, generator=torch.Generator().manual_seed(2))
    shift = torch.tensor([1.0, -2.0, 0.5, 0.0, 0.0, 3.0])
    # equal covariances: FID = |mean difference|^2 (Heusel et al. 2017, eq. 6)
    fid = stub(FID).from_features({"pool": real + shift}, {"pool": real}, "cpu")["Metrics/fid"]
    assert fid == pytest.approx(float(shift.square().sum()), rel=1e-5)


# ---------------------------------------------------------------------------- caches --


def test_features_are_cached_by_the_exact_images(metric_cache_dir, caplog):
    fake, real = image_sets()
    fid, kid = stub(FID, num_images=24), stub(KID, num_images=24, subsets=4, subset_size=8)
    ex = fid.extractor("cpu")
    assert kid.extractor("cpu") is ex  # one extractor per process
    gen = lambda k: as_float(fake[:k])  # noqa: E731
    first = fid.compute(gen, as_float(real), "cpu")
    kid.compute(gen, as_float(real), "cpu")
    assert (ex.passes, ex.images_seen) == (2, 48)  # one pass per set, shared by fid and kid
    assert fid.compute(gen, as_float(real), "cpu") == first and ex.passes == 2
    other = real.clone()
    other[3, 0, 5, 5] ^= 1  # one pixel changed: another set
    fid.compute(gen, as_float(other), "cpu")
    assert ex.passes == 3
    files = sorted(metric_cache_dir.glob("*.pt"))
    assert len(files) == 2 and all("stub-24x16px-" in f.name for f in files)
    fx.clear_caches()  # a new process: the real features come from disk
    fid2 = stub(FID, num_images=24)
    assert fid2.compute(gen, as_float(real), "cpu") == first
    assert fid2.extractor("cpu").images_seen == 24  # only the generated set went through the network
    fx.clear_caches()
    for f in files:
        f.write_bytes(b"cut short")
    with caplog.at_level(logging.WARNING, logger="gankit.metrics"):
        assert stub(FID, num_images=24).compute(gen, as_float(real), "cpu") == first
    assert "ignoring unreadable feature cache" in caplog.text


def test_metric_problems_and_missing_weights_are_one_line(tmp_path, monkeypatch, tiny_recipe_text, write_recipe):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch-home"))
    monkeypatch.setattr(torch.hub, "_hub_dir", None)
    hub = tmp_path / "torch-home" / "hub" / "checkpoints"
    for cls, file, url in [(PrecisionRecall, "vgg16-397923af.pth", fx.VGG16_URL),
                           (InceptionScore, fx.INCEPTION_FILE, fx.INCEPTION_URL)]:
        with pytest.raises(GankitError) as e:
            cls()
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith(f"{cls.metric_name} needs the ")
        assert f"{hub / file} (gankit never downloads it: fetch {url} to that path" in msg
    text = tiny_recipe_text + ('\n[[metric]]\nname = "precision-recall"\nfeature_extractor = "stub"\nnum_images = 3\n'
                               '\n[[metric]]\nname = "is"\nfeature_extractor = "stub"\nnum_images = 8\n')
    with pytest.raises(RecipeError) as e:
        load_recipe(write_recipe(text))
    assert [p.split(": ", 1)[1] for p in e.value.problems] == [
        "metric[0].neighborhood: neighborhood = 3 needs more than that many images; num_images is 3 "
        "(see gankit list-plugins --kind metric -v)",
        "metric[1].splits: splits = 10 needs at least as many images; num_images is 8 "
        "(see gankit list-plugins --kind metric -v)"]


# ------------------------------------------------------ during training and in reports --


METRICS = """
[[metric]]
name = "fid"
feature_extractor = "stub"
num_images = 48
every_kimg = 0.1

[[metric]]
name = "kid"
feature_extractor = "stub"
num_images = 48
subsets = 5
subset_size = 16
every_kimg = 0.1

[[metric]]
name = "precision-recall"
feature_extractor = "stub"
num_images = 48
every_kimg = 0.1

[[metric]]
name = "is"
feature_extractor = "stub"
num_images = 48
splits = 4
every_kimg = 0.1
"""

KEYS = ["Metrics/fid", "Metrics/kid", "Metrics/kid/std", "Metrics/precision", "Metrics/recall", "Metrics/is",
        "Metrics/is/std"]


def test_metrics_at_every_metric_tick_in_jsonl_tensorboard_report_and_eval(tiny_recipe_text, write_recipe, metric_cache_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    text = tiny_recipe_text.replace("[growth]\nname = \"progressive\"\nstart_resolution = 4\nfade_kimg = 0.04\n"
                                    "stable_kimg = 0.04\n", "[growth]\nname = \"static\"\n") + METRICS
    recipe, plugins = load_recipe(write_recipe(text, "metrics.toml"), overrides=["run.snapshot_ticks=1"])
    run = build_run(recipe, plugins)
    train(run)
    rows, _ = load_metrics(run.out_dir)
    ticks = [r for r in rows if "Metrics/fid" in r]
    assert len(ticks) == len(rows) >= 2  # every tick is a metric tick here, the last one included
    for r in ticks:
        assert all(np.isfinite(r[k]) for k in KEYS) and 0 <= r["Metrics/precision"] <= 1 and r["Metrics/is"] >= 1
    # The real images (one phase, one resolution) went through the extractor once; each tick's
    # generated set once, for all four metrics.
    ex = fx.get_extractor("stub", None, "cpu", "fid")
    assert (ex.passes, ex.images_seen) == (1 + len(ticks), 48 * (1 + len(ticks)))
    assert len(list(metric_cache_dir.glob("digits-stub-48x8px-*.pt"))) == 1

    acc = EventAccumulator(str(run.out_dir / "events"))
    acc.Reload()
    for k in KEYS:
        assert [round(e.value, 5) for e in acc.Scalars(k)] == [round(r[k], 5) for r in ticks], k

    result = CliRunner().invoke(cli, ["report", str(run.out_dir)])
    assert result.exit_code == 0, result.output
    html = (run.out_dir / "report.html").read_text()
    for k, better in [("Metrics/fid", "lower"), ("Metrics/precision", "higher"), ("Metrics/recall", "higher"),
                      ("Metrics/is", "higher"), ("Metrics/kid", "lower")]:
        assert f"<tr><th>{k}</th><td>{rows[-1][k]:.4g} <span class='muted'>at {rows[-1]['Progress/kimg']:g} kimg; " \
               f"{better} is better</span>" in html
    assert {"fid": False, "kid": False, "precision": True, "recall": True, "is": True}.items() <= \
        metric_directions().items()

    fx.clear_caches()  # gankit eval, as a new process would: the real features come from disk
    result = CliRunner().invoke(cli, ["eval", str(run.out_dir / "checkpoints" / "latest.pt"), "--metric", "fid",
                                      "--json"])
    assert result.exit_code == 0, result.output
    trained = json.loads(result.output)["results"]["fid"]["trained"]
    assert trained["Metrics/fid"] == pytest.approx(rows[-1]["Metrics/fid"], rel=1e-5)
    assert fx.get_extractor("stub", None, "cpu", "fid").images_seen == 48


class StubFile(Backbone):
    """The stub's architecture loaded from a weights file."""

    weights_file = "stub.pt"
    weights_source = "file:///weights/stub.pt"
    input_size = 32
    resize = "legacy_tensorflow"
    resizes_inside = True
    normalisation = "x / 127.5 - 1, then its own bilinear resize to 32x32"
    feature_dim = 64
    logits_dim = 10

    def build(self, path, resize):
        net = fx.StubNet()
        net.load_state_dict(torch.load(path, weights_only=True))
        return net


def _weights_file_extractor(monkeypatch, tmp_path) -> tuple[Path, Path]:
    """A backbone that loads its network from a weights file (the stub's architecture), and two
    such files of one name and one size with different values - two fine-tuned detectors, or a
    file re-downloaded in place."""
    monkeypatch.setitem(fx.BACKBONES, "stub-file", StubFile)
    files = []
    for seed, folder in ((1, "wA"), (2, "wB")):
        torch.manual_seed(seed)
        sd = {k: torch.randn_like(v) * 0.3 for k, v in fx.StubNet().state_dict().items()}
        (tmp_path / folder).mkdir()
        torch.save(sd, tmp_path / folder / "stub.pt")
        files.append(tmp_path / folder / "stub.pt")
    return files[0], files[1]


def test_the_real_feature_cache_tells_weights_files_of_one_name_and_size_apart(metric_cache_dir, tmp_path, monkeypatch):
    """Two weights files with one name and one byte size but other values: the second never gets
    the first one's cached real features, on disk or in memory; the same file does."""
    wa, wb = _weights_file_extractor(monkeypatch, tmp_path)
    assert wa.name == wb.name and wa.stat().st_size == wb.stat().st_size
    assert wa.read_bytes() != wb.read_bytes()
    fake, real = image_sets()
    gen = lambda k: as_float(fake[:k])  # noqa: E731

    def fid(weights, cache=True):
        return FID(FID.Options(feature_extractor="stub-file", weights=str(weights), num_images=24,
                               cache=cache)).compute(gen, as_float(real), "cpu")

    fid_a = fid(wa)
    fid_b = fid(wb)  # wA's real features are on disk and in memory now
    fx.clear_caches()
    fid_b_uncached = fid(wb, cache=False)
    fx.clear_caches()
    assert fid_b == fid_b_uncached != fid_a
    assert fid(wb) == fid_b_uncached  # from the disk cache, now wB's
    assert len(list(metric_cache_dir.glob("*.pt"))) == 2  # one file per extractor, neither overwriting the other
    # The same path rewritten in place with other weights (a new modification time): a new extractor.
    fx.clear_caches()
    assert fid(wa) == fid_a
    wa.write_bytes(wb.read_bytes())
    assert fid(wa) == fid_b_uncached


def test_the_extractor_key_names_resize_normalisation_version_and_weights_content(tmp_path, monkeypatch):
    """The cache key's extractor part changes with the weights' content, the resize mode, the
    normalisation and the implementation version."""
    wa, wb = _weights_file_extractor(monkeypatch, tmp_path)
    ident = fx.extractor_ident("stub-file", wa)
    assert fx.weights_digest(wa) in ident and StubFile.normalisation in ident and "gankit-1" in ident
    assert "legacy_tensorflow" in ident
    assert fx.extractor_ident("stub-file", wb) != ident
    for mode in ("clean", "legacy_pytorch", "pil_uint8", "pil_uint8_crop"):
        assert fx.extractor_ident("stub-file", wa, mode) != ident
    other_norm = type("StubFile2", (StubFile,), {"normalisation": "x / 255"})
    monkeypatch.setitem(fx.BACKBONES, "stub-file", other_norm)
    assert fx.extractor_ident("stub-file", wa) != ident
    newer = type("StubFile3", (StubFile,), {"version": lambda self: "gankit-2"})
    monkeypatch.setitem(fx.BACKBONES, "stub-file", newer)
    assert fx.extractor_ident("stub-file", wa) != ident
