"""Labels (digits, image-folder class sub-folders), collation with and without labels, and the
x-flip data option (the data set doubled with mirrored copies)."""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from gan_kit.builtin.data.datasets import Digits, ImageFolder
from gan_kit.plugin_api.components import BuildContext
from gan_kit.training.data import (PhaseBatchSampler, TensorImages, XFlip, collate_images, collate_images_labels,
                          make_loader)
from gan_kit.base.errors import GankitError, RecipeError
from gan_kit.recipe import load_recipe


def _png(path: Path, rgb) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    arr = np.zeros((8, 8, 3), np.uint8)
    arr[:, :4] = rgb  # left half coloured, right half black: a flip is visible
    Image.fromarray(arr).save(path)


def _class_folders(root: Path) -> None:
    """root/dog/ (2 images), root/cat/ (3), root/.hidden/ (ignored)."""
    for i in range(2):
        _png(root / "dog" / f"d{i}.png", (0, 250, 0))
    for i in range(3):
        _png(root / "cat" / f"c{i}.png", (250, 0, 0))
    _png(root / ".hidden" / "h.png", (0, 0, 250))


def test_digits_yield_their_sklearn_labels():
    from sklearn.datasets import load_digits

    target = torch.as_tensor(load_digits().target)
    ds = Digits().build(8)
    assert ds.num_classes == 10 and torch.equal(ds.labels, target)
    image, label = ds[5]
    assert image.shape == (1, 8, 8) and label.dtype == torch.int64 and label.ndim == 0 and int(label) == target[5]
    images, labels = ds.__getitems__([5, 0, 9])
    assert images.shape == (3, 1, 8, 8) and labels.tolist() == target[[5, 0, 9]].tolist()
    assert torch.equal(images[0], image)
    some = Digits(Digits.Options(digits=(3, 7))).build(8)
    assert set(some.labels.tolist()) == {3, 7} and some.num_classes == 10  # the digits themselves
    assert len(some) == int(((target == 3) | (target == 7)).sum())


@pytest.mark.parametrize("cache", ["memory", "none"])
def test_image_folder_labels_from_class_sub_folders(tmp_path, cache):
    _class_folders(tmp_path / "imgs")
    opts = ImageFolder.Options(path=str(tmp_path / "imgs"), labels="folders", cache=cache)
    ds = ImageFolder(opts, BuildContext(resolution=8)).build(8)
    assert ds.classes == ["cat", "dog"] and ds.num_classes == 2
    assert [p.parent.name for p in ds.files] == ["cat"] * 3 + ["dog"] * 2
    assert ds.labels.tolist() == [0, 0, 0, 1, 1]
    for i in range(len(ds)):
        image, label = ds[i]
        red = image[0, :, :4].mean() > 0.9
        assert int(label) == (0 if red else 1)
    plain = ImageFolder(ImageFolder.Options(path=str(tmp_path / "imgs"), cache=cache),
                        BuildContext(resolution=8)).build(8)
    assert plain.num_classes == 0 and plain.labels is None and isinstance(plain[0], torch.Tensor)


@pytest.mark.skipif(sys.platform == "win32" or not hasattr(os, "symlink"), reason="needs symbolic links")
def test_a_linked_class_folder_is_a_class(tmp_path):
    _class_folders(tmp_path / "imgs")
    for i in range(2):
        _png(tmp_path / "elsewhere" / f"b{i}.png", (0, 0, 250))
    (tmp_path / "imgs" / "bird").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    ds = ImageFolder(ImageFolder.Options(path=str(tmp_path / "imgs"), labels="folders"),
                     BuildContext(resolution=8)).build(8)
    assert ds.classes == ["bird", "cat", "dog"] and ds.labels.tolist() == [0, 0, 1, 1, 1, 2, 2]


def test_image_folder_labels_with_a_loose_file_is_one_line(tmp_path, tiny_recipe_text, write_recipe):
    _class_folders(tmp_path / "imgs")
    _png(tmp_path / "imgs" / "loose.png", (9, 9, 9))
    text = tiny_recipe_text.replace('[data]\nname = "digits"\nresolution = 8',
                                    '[data]\nname = "image-folder"\nresolution = 8\npath = "imgs"\nlabels = "folders"')
    recipe_path = write_recipe(text, "folder.toml")
    with pytest.raises(RecipeError) as e:
        load_recipe(recipe_path)
    assert len(e.value.problems) == 1
    line = e.value.problems[0]
    assert line.startswith(f"{recipe_path}: data.labels: ") and "loose.png" in line and 'labels = "none"' in line
    with pytest.raises(GankitError, match=r"data.labels: image .*loose.png is not in a class sub-folder"):
        ImageFolder(ImageFolder.Options(path=str(tmp_path / "imgs"), labels="folders"),
                    BuildContext(resolution=8)).build(8)


# ------------------------------------------------------------------------------- collation --


def test_collate_images_and_collate_images_labels():
    images = torch.randn(4, 1, 8, 8)
    labels = torch.tensor([3, 1, 4, 1])
    for batch in ((images, labels), [(images[i], labels[i]) for i in range(4)]):
        assert torch.equal(collate_images(batch), images)
        got_images, got_labels = collate_images_labels(batch)
        assert torch.equal(got_images, images) and got_labels.dtype == torch.int64
        assert got_labels.tolist() == [3, 1, 4, 1]
    for batch in (images, [images[i] for i in range(4)]):
        assert torch.equal(collate_images(batch), images)
        got_images, got_labels = collate_images_labels(batch)
        assert torch.equal(got_images, images) and got_labels is None


@pytest.mark.parametrize("with_labels", [False, True])
def test_make_loader_chooses_the_collation(with_labels):
    labels = torch.arange(10) % 3
    ds = TensorImages(torch.randn(10, 1, 4, 4), labels, num_classes=3)
    sampler = PhaseBatchSampler(len(ds), seed=0, start=0, batch_for=lambda position: (4, 1))
    batch = next(iter(make_loader(ds, sampler, num_workers=0, pin_memory=False, with_labels=with_labels)))
    idx = next(iter(sampler))
    if with_labels:
        images, got = batch
        assert torch.equal(images, ds.images[idx]) and got.tolist() == labels[idx].tolist()
    else:
        assert torch.equal(batch, ds.images[idx])
    unlabelled = TensorImages(torch.randn(10, 1, 4, 4))
    batch = next(iter(make_loader(unlabelled, sampler, 0, False, with_labels=with_labels)))
    assert (batch[1] is None) if with_labels else torch.equal(batch, unlabelled.images[idx])


# ---------------------------------------------------------------------------------- x-flip --


def test_xflip_doubles_digits_with_mirrored_copies_and_keeps_labels():
    base = Digits().build(8)
    ds = Digits(Digits.Options(xflip=True)).build(8)
    n = len(base)
    assert len(ds) == 2 * n and ds.num_classes == 10
    assert torch.equal(ds.labels, torch.cat([base.labels, base.labels]))
    for i in (0, 17, n - 1):
        (a, la), (b, lb) = ds[i], ds[i + n]
        assert torch.equal(a, base[i][0]) and int(la) == int(lb) == int(base[i][1])
        assert torch.equal(b, a.flip(-1)) and not torch.equal(b, a)
        assert torch.equal(b[..., 0], a[..., -1])  # column 0 of the mirror is the last column
    idx = [n + 3, 3, 2 * n - 1, 0]
    images, labels = ds.__getitems__(idx)
    assert torch.equal(images, torch.stack([ds[i][0] for i in idx]))
    assert labels.tolist() == [int(ds[i][1]) for i in idx]
    with pytest.raises(IndexError):
        ds[2 * n]
    copy = pickle.loads(pickle.dumps(ds))  # what a spawned loader worker receives
    assert len(copy) == 2 * n and torch.equal(copy[n + 3][0], ds[n + 3][0])


def test_labels_out_of_range_are_refused():
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        TensorImages(torch.zeros(2, 1, 4, 4), torch.tensor([0, 3]), num_classes=3)
    with pytest.raises(ValueError, match="shape"):
        TensorImages(torch.zeros(2, 1, 4, 4), torch.tensor([0]), num_classes=3)


def test_xflip_on_an_unlabelled_folder_and_through_a_recipe(tmp_path, tiny_recipe_text, write_recipe):
    _class_folders(tmp_path / "imgs")
    ds = ImageFolder(ImageFolder.Options(path=str(tmp_path / "imgs"), xflip=True, cache="none"),
                     BuildContext(resolution=8)).build(8)
    assert isinstance(ds, XFlip) and len(ds) == 10 and ds.num_classes == 0 and ds.labels is None
    assert len(ds.files) == 5  # the base set's attributes
    a, b = ds[1], ds[6]
    assert a[0, :, :4].mean() > 0.9 and a[0, :, 4:].max() < -0.9  # red on the left
    assert torch.equal(b, a.flip(-1))
    assert torch.equal(ds.__getitems__([6, 1]), torch.stack([b, a]))
    recipe, _ = load_recipe(write_recipe(tiny_recipe_text, "r.toml"), overrides=["data.xflip=true"])
    assert recipe.data.options.xflip is True
