"""image-folder on stylegan2-ada-pytorch's data set layout: the zip archive dataset_tool.py writes
(images in 00000/ sub-folders, dataset.json labels), the same layout as a folder, and one line for
each kind of bad archive."""

from __future__ import annotations

import io
import json
import logging
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from gan_kit.builtin.data import archive
from gan_kit.builtin.data.datasets import ImageFolder
from gan_kit.cli import cli
from gan_kit.plugin_api.components import BuildContext
from gan_kit.runs.run import build_run
from gan_kit.runs.session import train
from gan_kit.base.errors import GankitError, RecipeError
from gan_kit.recipe import load_recipe

COLOURS = [(250, 0, 0), (0, 250, 0), (0, 0, 250)]


def _png(rgb, size: int = 8, noise: bool = False) -> bytes:
    arr = np.zeros((size, size, 3), np.uint8)
    arr[:, : size // 2] = rgb  # left half coloured: a class is visible in the image
    if noise:  # pixels that do not compress: a cut file loses pixel data, not its header
        arr[:] = np.random.default_rng(0).integers(0, 255, arr.shape, dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def _name(i: int) -> str:
    """dataset_tool.py's member name of image i: 1000 images per sub-folder."""
    return f"{i // 1000:05d}/img{i:08d}.png"


def write_set(dest: Path, classes: list[int], labels: object = "from-classes", extra: dict | None = None,
              compression: int = zipfile.ZIP_STORED) -> Path:
    """A data set in dataset_tool.py's layout: image i coloured COLOURS[classes[i]], labelled
    classes[i] in dataset.json (``labels`` replaces the table: None writes {"labels": null},
    "absent" no file). ``dest`` ending in .zip: an archive written as dataset_tool writes it
    (stored members); else a folder. ``extra``: more members ``{name: bytes}``."""
    files = {_name(i): _png(COLOURS[c % 3]) for i, c in enumerate(classes)}
    if labels == "from-classes":
        labels = [[_name(i), c] for i, c in enumerate(classes)]
    if labels != "absent":
        files["dataset.json"] = json.dumps({"labels": labels}).encode()
    files.update(extra or {})
    if dest.suffix == ".zip":
        with zipfile.ZipFile(dest, "w", compression=compression) as zf:
            for name, data in files.items():
                zf.writestr(name, data)
    else:
        for name, data in files.items():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes(data)
    return dest


def build(path: Path, **options):
    return ImageFolder(ImageFolder.Options(path=str(path), **options), BuildContext(resolution=8)).build(8)


def zip_recipe(tiny_recipe_text: str, path: str = "data.zip", extra: str = "") -> str:
    return tiny_recipe_text.replace('[data]\nname = "digits"\nresolution = 8',
                                    f'[data]\nname = "image-folder"\nresolution = 8\npath = "{path}"\n{extra}')


CLASSES = [0, 1, 2, 1, 0, 2, 2, 1, 0, 1, 1, 0]


# ------------------------------------------------------------------------------ reading --


def test_a_dataset_tool_zip_trains_a_conditional_run(tmp_path, tiny_recipe_text, write_recipe):
    write_set(tmp_path / "data.zip", CLASSES)
    recipe, plugins = load_recipe(write_recipe(zip_recipe(tiny_recipe_text), "zip.toml"),
                                  overrides=["architecture.conditional=true", "run.total_kimg=0.05"])
    run = build_run(recipe, plugins)
    assert run.num_classes == 3 and run.dataset.labels.tolist() == CLASSES  # max label + 1 classes
    assert run.dataset.files == [_name(i) for i in range(len(CLASSES))]  # sorted member names
    for i in (0, 1, 2):
        image, label = run.dataset[i]
        assert int(label) == CLASSES[i]
        assert image[CLASSES[i], :, :4].min() > 0.9 and image[:, :, 4:].max() < -0.9  # its class's colour
    stats = train(run)
    assert run.cur_nimg >= run.total_nimg and np.isfinite(stats["Loss/G"])


@pytest.mark.parametrize("cache", ["memory", "none"])
def test_the_zip_and_the_same_layout_as_a_folder_give_the_same_set(tmp_path, cache):
    a = build(write_set(tmp_path / "data.zip", CLASSES), cache=cache)
    b = build(write_set(tmp_path / "folder", CLASSES), cache=cache)
    assert len(a) == len(b) == len(CLASSES) and a.num_classes == b.num_classes == 3
    assert torch.equal(a.labels, b.labels)
    for i in range(len(a)):
        assert torch.equal(a[i][0], b[i][0])
    assert isinstance(a, archive.ZipImages) == (cache == "none")  # "none": members decoded per access
    unlabelled = build(tmp_path / "data.zip", labels="none")
    assert unlabelled.labels is None and isinstance(unlabelled[0], torch.Tensor)
    nulls = build(write_set(tmp_path / "null.zip", CLASSES, labels=None))
    assert nulls.labels is None and nulls.num_classes == 0  # {"labels": null}: dataset_tool's unlabelled set


def test_num_classes_declared_or_from_the_largest_label(tmp_path):
    write_set(tmp_path / "data.zip", [0, 1, 1, 0])
    assert build(tmp_path / "data.zip").num_classes == 2  # stylegan2-ada-pytorch: max label + 1
    assert build(tmp_path / "data.zip", num_classes=5).num_classes == 5  # classes 2-4 have no images yet


def test_members_are_listed_as_image_folder_lists_files(tmp_path):
    extra = {"__MACOSX/00000/._img00000000.png": b"resource fork", ".hidden.png": _png(COLOURS[0]),
             "notes.txt": b"not an image", "top.png": _png(COLOURS[2])}
    with zipfile.ZipFile(write_set(tmp_path / "data.zip", [0, 1], labels="absent", extra=extra)) as zf:
        assert archive.member_images(zf) == [_name(0), _name(1), "top.png"]
        assert archive.member_images(zf, recursive=False) == ["top.png"]


def test_each_process_reads_through_its_own_handle(tmp_path, monkeypatch):
    ds = build(write_set(tmp_path / "data.zip", CLASSES), cache="none")
    first = ds.handle()
    assert ds.handle() is first and torch.equal(ds[3][0], build(tmp_path / "data.zip")[3][0])
    monkeypatch.setattr(archive.os, "getpid", lambda: -12345)  # as a forked data loader worker sees it
    assert ds.handle() is not first and ds[3][0].shape == (3, 8, 8)
    clone = __import__("pickle").loads(__import__("pickle").dumps(ds))  # a spawned worker's copy
    assert clone._zip is None and torch.equal(clone[5][0], ds[5][0])


def test_a_worker_reads_the_zip_and_a_corrupt_member_stops_in_one_line(tmp_path, tiny_recipe_text, write_recipe):
    # Image 12's header is whole, its pixels are cut: found only when a worker decodes it.
    cut = _png(COLOURS[0], size=16, noise=True)
    write_set(tmp_path / "data.zip", CLASSES + [0], extra={_name(12): cut[: len(cut) // 2]})
    text = zip_recipe(tiny_recipe_text, extra='cache = "none"\non_corrupt = "error"')
    recipe, plugins = load_recipe(write_recipe(text, "zip.toml"), overrides=["run.num_workers=1"])
    run = build_run(recipe, plugins)
    with pytest.raises(GankitError) as e:
        train(run)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"data.path: cannot read image {_name(12)} in archive ")
    assert "data.zip" in msg and 'on_corrupt = "skip"' in msg


# ------------------------------------------------------------------------- bad archives --


def _one_problem(tmp_path, tiny_recipe_text, write_recipe, extra: str = "") -> str:
    path = write_recipe(zip_recipe(tiny_recipe_text, extra=extra), "zip.toml")
    with pytest.raises(RecipeError) as e:
        load_recipe(path)
    assert len(e.value.problems) == 1
    line = e.value.problems[0]
    assert "\n" not in line and line.startswith(f"{path}: data.")
    return line


def _corrupt_crc(path: Path) -> None:
    """Flip a pixel byte of the stored member 00000/img00000002.png: its CRC no longer matches."""
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(_name(2))
    data = bytearray(path.read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    data[start + info.compress_size - 20] ^= 0xFF
    path.write_bytes(bytes(data))


BAD = {
    "missing-file": (lambda p: write_set(p, [0, 1], labels=[[_name(0), 0], [_name(1), 1], [_name(7), 1]]),
                     "", ["data.labels:", f"names {_name(7)}, which is not an image of the set", "add the file"]),
    "label-over-count": (lambda p: write_set(p, [0, 1, 5]), "num_classes = 3",
                         ["data.labels:", f"the label of {_name(2)} is 5, outside [0, data.num_classes = 3)",
                          "set data.num_classes = 6"]),
    "negative-label": (lambda p: write_set(p, [0, 1], labels=[[_name(0), 0], [_name(1), -1]]), "",
                       ["data.labels:", "is -1, outside [0, num_classes)"]),
    "vector-label": (lambda p: write_set(p, [0, 1], labels=[[_name(0), [0.5, 0.5]], [_name(1), 1]]), "",
                     ["data.labels:", "is [0.5, 0.5], not a class index"]),
    "unlabelled-image": (lambda p: write_set(p, [0, 1], labels=[[_name(0), 0]]), "",
                         ["data.labels:", f"image {_name(1)} has no label", 'data.labels = "none"']),
    "twice": (lambda p: write_set(p, [0, 1], labels=[[_name(0), 0], [_name(1), 1], [_name(0), 1]]), "",
              ["data.labels:", "labelled twice (labels[0] and labels[2])"]),
    "not-json": (lambda p: write_set(p, [0, 1], extra={"dataset.json": b"{labels: oops"}), "",
                 ["data.labels:", "dataset.json is not valid JSON"]),
    "required-json": (lambda p: write_set(p, [0, 1], labels="absent"), 'labels = "dataset.json"',
                      ["data.labels:", "has no dataset.json at its top"]),
    "not-a-zip": (lambda p: p.write_bytes(b"PK\x03\x04 but nothing else"), "",
                  ["data.path:", "cannot read zip archive", "File is not a zip file"]),
    "no-images": (lambda p: write_set(p, [], labels="absent", extra={"readme.txt": b"x"}), "",
                  ["data.path:", "holds no image files"]),
    "zip-bomb": (lambda p: write_set(p, [0], labels="absent", compression=zipfile.ZIP_DEFLATED,
                                     extra={"00000/img00000001.png": bytes(4 * 1024**2)}), "",
                 ["data.path:", f"member {_name(1)} of ", "would expand", "times", "zip bomb"]),
    # Each member below the 1 MiB floor of the per-member check; together they expand 1000-fold.
    "zip-bomb-of-small-members": (lambda p: write_set(p, [], labels="absent", compression=zipfile.ZIP_DEFLATED,
                                                      extra={_name(i): bytes(900_000) for i in range(3)}), "",
                                  ["data.path:", "the 3 images of ", "would expand", "zip bomb"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_each_bad_archive_is_one_line_at_load(tmp_path, tiny_recipe_text, write_recipe, case):
    make, options, wanted = BAD[case]
    make(tmp_path / "data.zip")
    line = _one_problem(tmp_path, tiny_recipe_text, write_recipe, options)
    for part in wanted:
        assert part in line, (part, line)


def test_a_member_larger_than_the_limit_is_refused(tmp_path, monkeypatch):
    write_set(tmp_path / "data.zip", [0, 1])
    monkeypatch.setattr(archive, "MAX_MEMBER_BYTES", 50)  # each 8x8 PNG is about 80 bytes
    msg = archive.zip_problem(tmp_path / "data.zip", True)
    assert msg.startswith(f"member {_name(0)} of ") and "would unpack to" in msg and "MAX_MEMBER_BYTES" in msg


def test_a_corrupt_member_is_skipped_by_name_or_stops_in_one_line(tmp_path, tiny_recipe_text, write_recipe, caplog):
    _corrupt_crc(write_set(tmp_path / "data.zip", CLASSES))
    with caplog.at_level(logging.WARNING, logger="gankit.data"):
        ds = build(tmp_path / "data.zip")
    assert len(ds) == len(CLASSES) - 1 and _name(2) not in ds.files
    assert ds.labels.tolist() == CLASSES[:2] + CLASSES[3:]  # the labels follow their images
    warning = " ".join(r.getMessage() for r in caplog.records)
    assert _name(2) in warning and "Bad CRC-32" in warning
    path = write_recipe(zip_recipe(tiny_recipe_text, extra='on_corrupt = "error"'), "zip.toml")
    recipe, plugins = load_recipe(path)
    with pytest.raises(GankitError) as e:
        build_run(recipe, plugins)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{path}: data.path: cannot read image {_name(2)} in archive ")
    assert str(tmp_path / "data.zip") in msg and "Bad CRC-32" in msg


def test_an_image_over_the_pixel_limit_inside_the_zip_is_refused_before_decoding(tmp_path, monkeypatch, caplog):
    write_set(tmp_path / "data.zip", [0, 1], extra={"00000/big.png": _png(COLOURS[1], size=32)})
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 500)  # 8x8 = 64 passes, 32x32 = 1024 does not
    with caplog.at_level(logging.WARNING, logger="gankit.data"):
        ds = build(tmp_path / "data.zip", labels="none", cache="none")
    assert ds.files == [_name(0), _name(1)]
    assert "00000/big.png" in caplog.text and "decompression-bomb limit" in caplog.text


def test_a_zip_given_to_the_cli_and_other_archives_get_one_line(tmp_path, tiny_recipe_text, write_recipe):
    write_set(tmp_path / "data.zip", [0, 1], labels=[[_name(0), 0], [_name(1), 1], [_name(4), 0]])
    path = write_recipe(zip_recipe(tiny_recipe_text), "zip.toml")
    result = CliRunner().invoke(cli, ["recipe", "check", str(path)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    (tmp_path / "data.tar.gz").write_bytes(b"\x1f\x8b")
    path = write_recipe(zip_recipe(tiny_recipe_text, path="data.tar.gz"), "tar.toml")
    with pytest.raises(RecipeError) as e:
        load_recipe(path)
    assert e.value.problems == [f"{path}: data.path: 'data.tar.gz' (resolved to {tmp_path / 'data.tar.gz'}) is a "
                                f".tar.gz archive, which image-folder does not read; unpack it to a folder, or pack the "
                                f"images as a .zip (stylegan2-ada-pytorch's dataset_tool.py --dest=out.zip)"]


def test_a_dataset_tool_zip_given_to_a_torchvision_set_points_to_image_folder(tmp_path, tiny_recipe_text, write_recipe):
    write_set(tmp_path / "cifar10.zip", [0, 1])  # dataset_tool.py --source=cifar-10-python.tar.gz writes such a zip
    text = tiny_recipe_text.replace('[data]\nname = "digits"\nresolution = 8',
                                    '[data]\nname = "cifar10"\nresolution = 8\nroot = "cifar10.zip"')
    path = write_recipe(text, "c.toml")
    recipe, plugins = load_recipe(path)
    with pytest.raises(GankitError) as e:
        build_run(recipe, plugins)
    assert str(e.value) == (f"{path}: data.root: {tmp_path / 'cifar10.zip'} is a zip archive, not a folder; a zip of "
                            f"images (stylegan2-ada-pytorch's dataset_tool.py layout) is read by name = "
                            f"\"image-folder\" with path = \"cifar10.zip\"")


def test_a_folder_in_the_layout_names_its_dataset_json_problems_too(tmp_path, tiny_recipe_text, write_recipe):
    write_set(tmp_path / "data", [0, 1], labels=[[_name(0), 0], [_name(1), 1], [_name(7), 1]])
    path = write_recipe(zip_recipe(tiny_recipe_text, path="data"), "folder.toml")
    with pytest.raises(RecipeError) as e:
        load_recipe(path)
    assert e.value.problems == [f"{path}: data.labels: {tmp_path / 'data' / 'dataset.json'} names {_name(7)}, which "
                                f"is not an image of the set (1 such entry); add the file or remove its entry"]


@pytest.mark.parametrize("layout", ["backslashes", "top-folder", "both"])
def test_an_archive_made_on_windows_or_by_zipping_the_folder_reads_as_dataset_tools(tmp_path, layout):
    """A zip written with Windows separators (``00000\\img00000000.png``) or by compressing the
    data set's folder itself (``mydata/00000/...``, ``mydata/dataset.json``) is the same set,
    labels included, as dataset_tool's archive."""
    reference = build(write_set(tmp_path / "data.zip", CLASSES))
    other = tmp_path / f"{layout}.zip"
    with zipfile.ZipFile(tmp_path / "data.zip") as src, zipfile.ZipFile(other, "w") as dst:
        for info in src.infolist():
            name = info.filename
            if layout in ("backslashes", "both"):
                name = name.replace("/", "\\")
            if layout in ("top-folder", "both"):
                name = ("mydata\\" if layout == "both" else "mydata/") + name
            dst.writestr(name, src.read(info.filename))
    ds = build(other)
    assert len(ds) == len(CLASSES) and ds.num_classes == 3 and torch.equal(ds.labels, reference.labels)
    for i in range(len(ds)):
        assert torch.equal(ds[i][0], reference[i][0])
