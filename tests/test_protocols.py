"""The published metric protocols (fid50k_full, kid50k_full, pr50k3_full, is50k, fid50k and their
count forms): the names read as stylegan2-ada-pytorch's metric_main reads them, the real set equal
to the official data set's items by index, the class labels of generated images drawn from the
data set, the metric constants, and the report line of ``gankit eval``. Everything on the stub
extractor (no weights)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from gan_kit.base.errors import GankitError
from gan_kit.builtin.metrics import feature_extractors as fx
from gan_kit.builtin.metrics.protocols import ISProtocol, KIDProtocol, parse_protocol
from gan_kit.cli import cli
from gan_kit.plugin_api.manager import build_plugins
from gan_kit.testing import make_run
from gan_kit.tools.evaluate import batch_seed, evaluate, image_batches
from gan_kit.tools.realsets import RealRule, official_order, protocol_reals

#: 20 files whose depth-first listing (gankit's image-folder) and sorted relative paths
#: (stylegan2-ada-pytorch's ImageFolderDataset) disagree: files beside folders, "a-b" / "a.b" /
#: "a_b" around "a/", upper case, img10 before img2.
LAYOUT = ["b.png", "a.png", "B.png", "img10.png", "img2.png", "a_b.png", "c.png", "c0.png", "a/x.png", "a/y.png",
          "a/z.png", "a-b/1.png", "a-b/0.png", "a.b/q.png", "A/k.png", "c/d/e.png", "c/d/f.png", "c/g.png",
          "c/c.png", "img1/m.png"]
#: The file of every item of stylegan2-ada-pytorch's ImageFolderDataset(LAYOUT folder, xflip=True),
#: items 0-19 (items 20-39 are the same files with get_details(i).xflip True), recorded by running
#: training/dataset.py of NVlabs/stylegan2-ada-pytorch d72cc7d041b42ec8e806021a205ed9349f87c6a4.
OFFICIAL = ['A/k.png', 'B.png', 'a-b/0.png', 'a-b/1.png', 'a.b/q.png', 'a.png', 'a/x.png', 'a/y.png', 'a/z.png',
            'a_b.png', 'b.png', 'c.png', 'c/c.png', 'c/d/e.png', 'c/d/f.png', 'c/g.png', 'c0.png', 'img1/m.png',
            'img10.png', 'img2.png']


#: Every test starts with an empty feature cache of its own (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("metric_cache_dir")


@pytest.fixture
def folder(tmp_path):
    """LAYOUT as 8x8 RGB PNGs: file i is grey level 12 * i with a white left column (so a flip shows)."""
    root = tmp_path / "folder"
    for i, name in enumerate(LAYOUT):
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        a = np.full((8, 8, 3), 12 * i, np.uint8)
        a[:, 0] = 255
        Image.fromarray(a).save(p)
    return root


def _ready(run):
    """``run`` at its first phase (the final resolution: static growth), as evaluation sets it."""
    run.phase = run.growth.phase_at(0)
    run.set_phase(run.phase)
    return run


def _folder_run(tmp_path, folder, *extra):
    return _ready(make_run(tmp_path / "r", overrides=["data.name=image-folder", f"data.path={folder}",
                                                      "data.resolution=8", "growth={name='static', batch_size=8}",
                                                      *extra]))


def _metric(run, name, **options):
    comp = run.registry.get("metric", name)
    from gan_kit.plugin_api.components import BuildContext

    return comp.factory(comp.Options(feature_extractor="stub", **options),
                        BuildContext(run.recipe.resolution, run.channels, run.recipe))


def _identify(images: torch.Tensor) -> list[tuple[str, bool]]:
    """(file, flipped) of each LAYOUT image in ``[N, 3, 8, 8]`` [-1, 1] images."""
    u8 = ((images + 1) * 127.5).round().to(torch.uint8)
    out = []
    for im in u8:
        flipped = bool(im[0, 0, 7] == 255 and im[0, 0, 0] != 255)
        level = int(im[0, 0, 3])
        out.append((LAYOUT[level // 12], flipped))
    return out


def test_protocol_names_read_as_metric_main_names_them():
    """The count, the real-set rule and pr's neighbourhood come from the name; non-names are refused."""
    full = parse_protocol("fid50k_full")
    assert (full.family, full.count, full.full) == ("fid", 50000, True)
    assert full.real_rule == RealRule(None, keep_xflip=False)
    assert parse_protocol("fid50k").real_rule == RealRule(50000, keep_xflip=True)
    assert parse_protocol("kid50k_full").real_rule == RealRule(1_000_000, keep_xflip=False)
    pr = parse_protocol("pr50k3_full")
    assert (pr.count, pr.neighborhood, pr.real_rule) == (50000, 3, RealRule(200_000, keep_xflip=False))
    assert parse_protocol("pr10k5").real_rule == RealRule(10000, keep_xflip=True)
    assert parse_protocol("is50k").real_rule == RealRule(None, keep_xflip=False)
    assert (parse_protocol("fid200_full").count, parse_protocol("pr200_3_full").neighborhood) == (200, 3)
    assert parse_protocol("fid1k_full").count == 1000 and parse_protocol("kid10k").count == 10000
    for bad in ("fid", "fid0k_full", "is10k_full", "fidk_full", "pr50k_full", "fid50k_fulll", "swd50k"):
        assert parse_protocol(bad) is None, bad
    registry = build_plugins(load_entry_points=False).registry
    assert ("metric", "fid10k_full") in registry and ("metric", "fid10k_ful") not in registry
    comp = registry.get("metric", "pr50k3_full")
    assert comp.name == "pr50k3_full" and comp.factory.spec.neighborhood == 3
    with pytest.raises(KeyError, match="unknown metric 'fid50k_ful'"):
        registry.get("metric", "fid50k_ful")


def test_full_reals_are_the_official_image_folder_items_by_index(tmp_path, folder):
    """fid50k_full: every file once, no x-flips (the run trains with them), in the order of
    stylegan2-ada-pytorch's ImageFolderDataset - which is not gankit's listing order."""
    run = _folder_run(tmp_path, folder, "data.xflip=true")
    assert len(run.dataset) == 40
    gankit_order = [p.relative_to(folder).as_posix() for p in run.dataset.files]
    assert gankit_order != OFFICIAL  # the layout tells the two orders apart
    metric = _metric(run, "fid50k_full", batch_size=6)
    dataset, indices = protocol_reals(run, metric.real_rule)
    assert len(dataset) == 20
    assert [dataset.files[int(j)].relative_to(folder).as_posix() for j in indices] == OFFICIAL
    # The images the metric reads, batch by batch: those files, unflipped, in that order.
    fakes, reals = image_batches(run, metric, 7)
    assert (fakes.n, reals.n) == (7, 20)
    read = torch.cat([images for _, images in reals])
    assert _identify(read) == [(name, False) for name in OFFICIAL]
    # Evaluated: 50 generated images (more than the 40 items of the x-flipped training set: never
    # capped) and the 20 reals.
    value = evaluate(run, _metric(run, "fid50_full"))["Metrics/fid50_full"]
    assert np.isfinite(value) and fx.get_extractor("stub", None, "cpu", "fid").images_seen == 50 + 20


def test_a_zip_archive_of_the_folder_gives_the_official_order_too(tmp_path, folder):
    """A zip of the folder (with a top folder, as a file manager zips it): items in the order of
    the official ImageFolderDataset on that zip (sorted member names; recorded: the names of
    OFFICIAL under mydata/)."""
    import zipfile

    archive = tmp_path / "set.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for name in LAYOUT:  # stored in gankit's listing order, not sorted
            zf.write(folder / name, f"mydata/{name}")
    run = _folder_run(tmp_path / "z", archive)
    metric = _metric(run, "fid50k_full", batch_size=6)
    dataset, indices = protocol_reals(run, metric.real_rule)
    assert [dataset.files[int(j)] for j in indices] == [f"mydata/{n}" for n in OFFICIAL]
    _, reals = image_batches(run, metric, 7)
    assert _identify(torch.cat([images for _, images in reals])) == [(n, False) for n in OFFICIAL]


def test_legacy_reals_are_the_first_n_official_items_with_the_trained_x_flips(tmp_path, folder):
    """fid<N>k keeps the training set's x-flips (metric_main updates only max_size): the first N
    items are the originals in official order, then their mirror images in the same order."""
    run = _folder_run(tmp_path, folder, "data.xflip=true")
    metric = _metric(run, "fid26")
    _, reals = image_batches(run, metric, 26)
    read = torch.cat([images for _, images in reals])
    assert _identify(read) == [(n, False) for n in OFFICIAL] + [(n, True) for n in OFFICIAL[:6]]
    # Without x-flips in the recipe the legacy set is the first N files.
    run = _folder_run(tmp_path / "b", folder)
    _, reals = image_batches(run, _metric(run, "fid5"), 5)
    assert _identify(torch.cat([images for _, images in reals])) == [(n, False) for n in OFFICIAL[:5]]


def test_full_reals_ignore_the_limited_data_subset_and_generated_counts_are_not_capped(tmp_path):
    """digits with max_images = 36: the protocol compares against all 1797 digits (max_size=None),
    in index order, and generates its own count even above the data set's size."""
    run = _ready(make_run(tmp_path, overrides=["data.max_images=36", "growth={name='static', batch_size=8}"]))
    assert len(run.dataset) == 36
    metric = _metric(run, "fid2k_full")
    dataset, indices = protocol_reals(run, metric.real_rule)
    assert len(dataset) == 1797 and indices.tolist() == list(range(1797))
    fakes, reals = image_batches(run, metric, metric.num_images)
    assert (fakes.n, reals.n) == (2000, 1797)
    _, indices = protocol_reals(run, _metric(run, "kid1k").real_rule)
    assert indices.tolist() == list(range(1000))  # the first N, not a seeded draw


def test_generated_labels_are_drawn_from_the_full_data_sets_items(tmp_path, monkeypatch):
    """A conditional G gets, for each generated image, the label of a uniformly drawn item of the
    protocol's data set (metric_utils: dataset.get_label(np.random.randint(len(dataset)))), here
    the whole digits set rather than the 36-image training subset; seeded per batch."""
    run = _ready(make_run(tmp_path, overrides=["data.max_images=36", "data.digits=[0, 1, 2]",
                                              "architecture.conditional=true", "growth={name='static', batch_size=8}"]))
    metric = _metric(run, "fid50k_full", batch_size=16)
    seen = []
    monkeypatch.setattr(run, "generate", lambda z, labels=None, **kw: seen.append(labels) or
                        torch.zeros(z.shape[0], 1, 8, 8))
    fakes, _ = image_batches(run, metric, 32)
    fakes.load(1)
    full_labels, _ = protocol_reals(run, metric.real_rule)
    full_labels = full_labels.labels
    assert len(full_labels) > 500  # the three classes of all 1797 digits
    g = torch.Generator().manual_seed(batch_seed(metric.seed, 1, 1))
    torch.randn(16, run.latent_dim, generator=g)
    assert torch.equal(seen[0], full_labels[torch.randint(len(full_labels), (16,), generator=g)])


def test_kid_and_is_use_metric_mains_constants(monkeypatch):
    """kid: 100 subsets of min(1000, n) images, the cubic kernel; is: 10 splits of the generated
    images in order (Salimans et al.'s score per split, written out with numpy as inception_score.py
    computes it)."""
    import torch_fidelity.metric_kid as tf_kid

    calls = []
    monkeypatch.setattr(tf_kid, "kid_features_to_metric", lambda f, r, **kw: calls.append(kw) or
                        {"kernel_inception_distance_mean": 0.5, "kernel_inception_distance_std": 0.1})
    g = torch.Generator().manual_seed(0)
    kid = KIDProtocol.for_name("kid50k_full")
    metric = kid(kid.Options(feature_extractor="stub", seed=3))
    for n_fake, n_real, size in [(1100, 1200, 1000), (300, 400, 300), (900, 200, 200)]:
        got = metric.from_features({"pool": torch.randn(n_fake, 4, generator=g)},
                                   {"pool": torch.randn(n_real, 4, generator=g)}, "cpu")
        assert got == {"Metrics/kid50k_full": 0.5, "Metrics/kid50k_full/std": 0.1}
        assert calls[-1] == {"kid_subsets": 100, "kid_subset_size": size, "kid_kernel": "poly",
                             "kid_kernel_poly_degree": 3, "kid_kernel_poly_gamma": None, "kid_kernel_poly_coef0": 1,
                             "rng_seed": 3, "verbose": False}

    logits = torch.randn(200, 10, generator=g) * 3
    is_ = ISProtocol.for_name("is50k")
    got = is_(is_.Options(feature_extractor="stub")).from_features({"logits": logits}, None, "cpu")
    probs = torch.softmax(logits.double(), dim=1).numpy()
    scores = []
    for i in range(10):
        part = probs[i * 200 // 10:(i + 1) * 200 // 10]
        kl = part * (np.log(part) - np.log(np.mean(part, axis=0, keepdims=True)))
        scores.append(np.exp(np.mean(np.sum(kl, axis=1))))
    assert got["Metrics/is50k"] == pytest.approx(float(np.mean(scores)), rel=1e-6)
    assert got["Metrics/is50k/std"] == pytest.approx(float(np.std(scores)), rel=1e-5)


def test_eval_prints_protocol_backbone_weights_resize_and_counts(tmp_path, folder):
    """gankit eval CKPT --metric fid50k_full: one line per protocol with the counts, the backbone and
    its weights file, and the resize mode; --n changes the generated count and says so."""
    run = _folder_run(tmp_path, folder, "metric=[{name='fid50k_full', feature_extractor='stub'},"
                                        "{name='is10k', feature_extractor='stub'}]")
    run.save_checkpoint("latest")
    ckpt = str(run.out_dir / "checkpoints" / "latest.pt")
    result = CliRunner().invoke(cli, ["eval", ckpt, "--metric", "fid50k_full", "--metric", "is10k", "--n", "40"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    fid = next(line for line in lines if line.startswith("fid50k_full "))
    assert ("(40 generated (num_images; the protocol's 50,000) vs all 20 reals, stub no weights file, "
            "resize legacy_tensorflow)") in fid
    assert any(line.startswith("is10k ") and "40 generated (num_images; the protocol's 10,000), stub" in line
               for line in lines)
    result = CliRunner().invoke(cli, ["eval", ckpt, "--metric", "fid50k_full", "--n", "40", "--json"])
    out = json.loads(result.output)["results"]["fid50k_full"]
    assert out["protocol"]["reals"] == 20 and np.isfinite(out["trained"]["Metrics/fid50k_full"])
    result = CliRunner().invoke(cli, ["eval", ckpt, "--metric", "fid50k_full", "--baselines"])
    assert result.exit_code == 2 and "--baselines: fid50k_full is a published protocol" in result.output


def test_official_order_of_plain_sets_is_their_index_order():
    """Sets without files (digits, tensors) keep their order; x-flips follow the originals."""
    from gan_kit.training.data import TensorImages
    from gan_kit.training.data.datasets import XFlip

    base = TensorImages(torch.zeros(5, 1, 4, 4))
    assert official_order(base) == [0, 1, 2, 3, 4]
    assert official_order(XFlip(base)) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]


def test_the_progress_bar_counts_every_batch_and_restarts_for_a_second_pass(monkeypatch):
    """On a terminal, a watched set advances its bar by each batch's images; read again (the
    digest pass, then the features pass), the bar starts over. Off a terminal nothing is shown."""
    import sys

    from gan_kit.tools import progress

    load = progress.watched("real images", lambda i: i, 10, 4)
    with progress.showing_progress():
        assert [load(i) for i in range(3)] == [0, 1, 2]  # not a terminal here: the loader as it was
        assert progress.active_bar() is None
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    with progress.showing_progress():
        bar = progress.active_bar()
        for i in range(3):
            load(i)
        (task,) = bar.tasks
        assert (task.completed, task.total, task.finished) == (10, 10, True)
        load(0)
        assert (task.completed, task.description) == (4, "real images (features)")


def test_a_family_name_needs_a_for_name_and_resolves_after_exact_names():
    """A registered name with a <...> placeholder is a family: its factory must say which names
    are members (for_name); an exact name of another component wins over a family's member."""
    from gan_kit.base.errors import PluginError
    from gan_kit.builtin.metrics.inception import FID
    from gan_kit.builtin.metrics.protocols import FIDProtocol
    from gan_kit.plugin_api.registry import Registry

    registry = Registry()
    with pytest.raises(PluginError, match=r"names a family .* needs a classmethod for_name"):
        registry.add("metric", "fid<N>k", FID, "p")
    registry.add("metric", "fid<N>k[_full]", FIDProtocol, "p")
    registry.add("metric", "fid1k_full", FID, "q")
    assert registry.get("metric", "fid1k_full").factory is FID
    assert registry.get("metric", "fid2k_full").factory.spec.count == 2000
    assert ("metric", "fid<N>k[_full]") in registry and ("metric", "fid<N>k") not in registry
    with pytest.raises(GankitError, match="name one protocol of the family"):
        FIDProtocol(FIDProtocol.Options(feature_extractor="stub"))
