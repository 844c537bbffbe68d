"""Datasets: image-folder on a folder of mixed files (one truncated) and the torchvision sets on
tiny files written in each set's own on-disk format (no download)."""

from __future__ import annotations

import logging
import math
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from gan_kit.builtin.data.datasets import ImageFolder
from gan_kit.builtin.data.torchvision_sets import CIFAR10, MNIST, CelebA, FashionMNIST, celeba_face_box
from gan_kit.plugin_api.components import BuildContext
from gan_kit.runs.run import build_run
from gan_kit.runs.session import train
from gan_kit.base.errors import GankitError, RecipeError
from gan_kit.recipe import load_recipe


def _rgb(w, h, color):
    return Image.new("RGB", (w, h), color)


def make_folder(root: Path) -> dict[str, Path]:
    """PNG / JPEG / BMP / GIF / WEBP files of mixed sizes and modes, one in a sub-folder, plus a
    truncated JPEG, a hidden file and a non-image file."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "sub" / "deeper").mkdir(parents=True)
    files = {
        "rgb.png": _rgb(20, 14, (200, 30, 30)),
        "grey.png": Image.new("L", (9, 9), 128),
        "rgba.png": Image.new("RGBA", (16, 16), (0, 0, 0, 0)),  # fully transparent -> white
        "palette.png": _rgb(12, 20, (10, 200, 10)).convert("P"),
        "deep16.png": Image.fromarray(np.full((10, 10), 32768, dtype=np.uint16)),  # 16-bit grey
        "photo.jpg": _rgb(30, 18, (30, 30, 220)),
        "grey.jpeg": Image.new("L", (8, 12), 60),
        "sub/bitmap.bmp": _rgb(11, 11, (250, 250, 0)),
        "sub/deeper/anim.gif": _rgb(13, 9, (0, 0, 0)).convert("P"),
        "sub/pic.webp": _rgb(10, 16, (90, 90, 90)),
    }
    paths = {}
    for name, im in files.items():
        im.save(root / name)
        paths[name] = root / name
    # A truncated JPEG: a real photo cut in half.
    big = Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8))
    big.save(root / "sub" / "broken.jpg", quality=90)
    data = (root / "sub" / "broken.jpg").read_bytes()
    (root / "sub" / "broken.jpg").write_bytes(data[: len(data) // 2])
    (root / ".hidden.png").write_bytes(b"not an image at all")
    (root / "notes.txt").write_text("not an image")
    return paths


def folder_recipe(tiny_recipe_text: str, extra: str = "", path: str = "imgs") -> str:
    return tiny_recipe_text.replace(
        '[data]\nname = "digits"\nresolution = 8',
        f'[data]\nname = "image-folder"\nresolution = 8\npath = "{path}"\n{extra}')


def test_image_folder_trains_a_tiny_recipe_and_names_the_skipped_file(tmp_path, tiny_recipe_text, write_recipe,
                                                                      caplog):
    make_folder(tmp_path / "imgs")
    recipe_path = write_recipe(folder_recipe(tiny_recipe_text), "folder.toml")
    recipe, plugins = load_recipe(recipe_path)
    with caplog.at_level(logging.WARNING, logger="gankit.data"):
        run = build_run(recipe, plugins)
    assert len(run.dataset) == 10  # 11 image files, the truncated one skipped; hidden and .txt ignored
    assert run.dataset.skipped == [("sub/broken.jpg", run.dataset.skipped[0][1])]
    warning = " ".join(r.getMessage() for r in caplog.records)
    assert "sub/broken.jpg" in warning and "skipped 1 unreadable image file of 11" in warning
    x = torch.stack([run.dataset[i] for i in range(len(run.dataset))])
    assert x.shape == (10, 3, 8, 8) and x.dtype == torch.float32
    assert x.min() >= -1.0 and x.max() <= 1.0
    stats = train(run)
    assert run.cur_nimg >= run.total_nimg
    assert math.isfinite(stats["Loss/D"]) and math.isfinite(stats["Loss/G"])


def test_image_folder_conversions_resize_crop_and_modes(tmp_path):
    paths = make_folder(tmp_path / "imgs")
    # Thirds of a 24x8 image: center-cropping to 8x8 must keep only the middle (green) third.
    thirds = np.zeros((8, 24, 3), np.uint8)
    thirds[:, :8, 0], thirds[:, 8:16, 1], thirds[:, 16:, 2] = 255, 255, 255
    Image.fromarray(thirds).save(tmp_path / "imgs" / "thirds.png")
    ds = ImageFolder(ImageFolder.Options(path=str(tmp_path / "imgs")), BuildContext(resolution=8)).build(8)
    files = [p.relative_to(tmp_path / "imgs").as_posix() for p in ds.files]
    assert sorted(files) == sorted([*paths, "thirds.png"])
    by_name = dict(zip(files, (ds[i] for i in range(len(ds)))))
    mid = by_name["thirds.png"]
    assert torch.allclose(mid[1], torch.ones(8, 8)) and mid[0].max() < -0.99 and mid[2].max() < -0.99
    assert torch.allclose(by_name["rgba.png"], torch.ones(3, 8, 8))  # transparency over white
    deep = by_name["deep16.png"]  # 32768 / 65535 of full scale: mid grey, not clipped to white
    assert deep.abs().max() < 0.02
    red = by_name["rgb.png"]
    assert red[0].mean() > 0.5 and red[1].mean() < -0.6
    grey = ImageFolder(ImageFolder.Options(path=str(tmp_path / "imgs"), channels=1),
                       BuildContext(resolution=4)).build(4)
    assert grey[0].shape == (1, 4, 4)


def test_image_folder_lazy_decoding_skips_the_truncated_file_too(tmp_path, caplog):
    make_folder(tmp_path / "imgs")
    opts = ImageFolder.Options(path=str(tmp_path / "imgs"), cache="none")
    ds = ImageFolder(opts, BuildContext(resolution=8)).build(8)
    assert len(ds) == 11  # the header of the truncated JPEG is fine; its data is not
    with caplog.at_level(logging.WARNING, logger="gankit.data"):
        items = [ds[i] for i in range(len(ds))]
    assert all(t.shape == (3, 8, 8) for t in items)
    assert "broken.jpg" in " ".join(r.getMessage() for r in caplog.records)
    strict = ImageFolder(ImageFolder.Options(path=str(tmp_path / "imgs"), cache="none", on_corrupt="error"),
                         BuildContext(resolution=8)).build(8)
    with pytest.raises(GankitError, match="broken.jpg"):
        [strict[i] for i in range(len(strict))]


def test_image_folder_corrupt_file_is_an_error_by_option(tmp_path, tiny_recipe_text, write_recipe):
    make_folder(tmp_path / "imgs")
    recipe, plugins = load_recipe(write_recipe(folder_recipe(tiny_recipe_text, 'on_corrupt = "error"')))
    with pytest.raises(GankitError) as e:
        build_run(recipe, plugins)
    msg = str(e.value)
    assert "\n" not in msg and "data.path" in msg and "broken.jpg" in msg and 'on_corrupt = "skip"' in msg


@pytest.mark.parametrize("kind", ["empty", "missing", "only-junk"])
def test_image_folder_empty_or_missing_folder_is_one_clear_line(tmp_path, tiny_recipe_text, write_recipe, kind):
    folder = tmp_path / "imgs"
    if kind != "missing":
        folder.mkdir()
    if kind == "only-junk":
        (folder / "readme.txt").write_text("no images")
    recipe_path = write_recipe(folder_recipe(tiny_recipe_text), "folder.toml")
    with pytest.raises(RecipeError) as e:
        load_recipe(recipe_path)
    assert len(e.value.problems) == 1
    line = e.value.problems[0]
    assert line.startswith(f"{recipe_path}: data.path: ")
    assert "'imgs'" in line and str(folder) in line
    assert ("not found" if kind == "missing" else "holds no image files") in line
    # Built without a recipe file (e.g. from a checkpoint's recipe), the factory says the same.
    with pytest.raises(GankitError, match="data.path: .*(not found|holds no image files)"):
        ImageFolder(ImageFolder.Options(path=str(folder)), BuildContext(resolution=8)).build(8)


# ------------------------------------------------------------------------ torchvision sets --


def write_idx(folder: Path, prefix: str, images: np.ndarray) -> None:
    """MNIST's idx-ubyte files (big-endian magic 0x803 / 0x801, counts, then raw bytes)."""
    folder.mkdir(parents=True, exist_ok=True)
    n, h, w = images.shape
    (folder / f"{prefix}-images-idx3-ubyte").write_bytes(struct.pack(">IIII", 0x803, n, h, w) + images.tobytes())
    labels = np.arange(n, dtype=np.uint8) % 10
    (folder / f"{prefix}-labels-idx1-ubyte").write_bytes(struct.pack(">II", 0x801, n) + labels.tobytes())


@pytest.mark.parametrize("cls,folder", [(MNIST, "MNIST"), (FashionMNIST, "FashionMNIST")])
def test_mnist_and_fashion_mnist_from_raw_idx_files(tmp_path, cls, folder):
    train_images = np.zeros((5, 28, 28), np.uint8)
    train_images[:, :, 14:] = 255  # right half white
    write_idx(tmp_path / folder / "raw", "train", train_images)
    write_idx(tmp_path / folder / "raw", "t10k", np.full((3, 28, 28), 255, np.uint8))
    ds = cls(cls.Options(root=str(tmp_path)), BuildContext(resolution=32)).build(32)
    x, y = ds[0]  # a labelled set: (image, label)
    assert len(ds) == 5 and x.shape == (1, 32, 32)
    assert x[:, :, :12].max() < -0.95 and x[:, :, 20:].min() > 0.95
    assert ds.num_classes == 10 and ds.labels.tolist() == [0, 1, 2, 3, 4]
    assert y.dtype == torch.int64 and y.ndim == 0 and int(ds[3][1]) == 3
    both = cls(cls.Options(root=str(tmp_path), split="all", channels=3), BuildContext(resolution=16)).build(16)
    x7, y7 = both[7]
    assert len(both) == 8 and x7.shape == (3, 16, 16) and torch.allclose(x7, torch.ones(3, 16, 16))
    assert both.labels.tolist() == [0, 1, 2, 3, 4, 0, 1, 2] and int(y7) == 2  # train then t10k labels
    images, labels = both.__getitems__([7, 0])
    assert images.shape == (2, 3, 16, 16) and labels.tolist() == [2, 0]


def test_torchvision_set_missing_is_one_clear_line(tmp_path):
    for cls in (MNIST, FashionMNIST, CIFAR10, CelebA):
        with pytest.raises(GankitError) as e:
            cls(cls.Options(root=str(tmp_path / "nothing")), BuildContext(resolution=8)).build(8)
        msg = str(e.value)
        assert "\n" not in msg and "data.root" in msg and "download = true" in msg and str(tmp_path) in msg


def test_cifar10_from_python_pickle_batches(tmp_path):
    base = tmp_path / "cifar-10-batches-py"
    base.mkdir()
    for i, name in enumerate([f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]):
        img = np.zeros((2, 3, 32, 32), np.uint8)
        img[:, i % 3] = 255  # batch i is pure red, green or blue (planes R, G, B in each row)
        entry = {"batch_label": name, "labels": [i, i], "data": img.reshape(2, 3072), "filenames": ["a", "b"]}
        (base / name).write_bytes(pickle.dumps(entry))
    (base / "batches.meta").write_bytes(pickle.dumps({"label_names": [str(k) for k in range(10)]}))
    ds = CIFAR10(CIFAR10.Options(root=str(tmp_path)), BuildContext(resolution=16)).build(16)
    assert len(ds) == 10 and ds[0][0].shape == (3, 16, 16) and ds.num_classes == 10
    for i in range(5):
        x, y = ds[2 * i]
        assert torch.allclose(x[i % 3], torch.ones(16, 16)) and x.sum() == -2 * 16 * 16 + 16 * 16
        assert int(y) == i  # batch i's labels are [i, i]
    test = CIFAR10(CIFAR10.Options(root=str(tmp_path), split="test", channels=1), BuildContext(resolution=8)).build(8)
    x, y = test[0]
    assert len(test) == 2 and x.shape == (1, 8, 8) and int(y) == 5
    assert abs(float(x.mean()) - (0.114 * 2 - 1)) < 0.01  # pure blue as ITU-R 601 luma


def test_celeba_from_aligned_images_and_partition_file(tmp_path):
    base = tmp_path / "celeba"
    (base / "img_align_celeba").mkdir(parents=True)
    lines = []
    for i, part in enumerate([0, 0, 1, 2], start=1):
        im = np.full((218, 178, 3), 40, np.uint8)  # dark border
        l, t, r, b = (int(round(v)) for v in celeba_face_box(178, 218))
        im[t:b, l:r] = (230, 20, 20)  # the face region is red
        Image.fromarray(im).save(base / "img_align_celeba" / f"{i:06d}.jpg", quality=95)
        lines.append(f"{i:06d}.jpg {part}")
    (base / "list_eval_partition.txt").write_text("\n".join(lines) + "\n")
    ds = CelebA(CelebA.Options(root=str(tmp_path)), BuildContext(resolution=16)).build(16)
    assert len(ds) == 2 and ds[0].shape == (3, 16, 16)
    x = ds[0]
    assert x[0].min() > 0.6 and x[1].max() < -0.6  # only the (red) face crop is kept
    center = CelebA(CelebA.Options(root=str(tmp_path), split="all", crop="center"),
                    BuildContext(resolution=16)).build(16)
    assert len(center) == 4
    assert center[0][0].min() < -0.5  # the center square reaches the dark border
    test = CelebA(CelebA.Options(root=str(tmp_path), split="test"), BuildContext(resolution=8)).build(8)
    assert len(test) == 1
