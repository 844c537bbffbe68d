"""gan_kit.training.imageio: listing through symbolic links (cycles guarded), decoding cost bounded by the
target resolution, pixels unchanged for ordinary images, decompression bombs refused in one line."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from gan_kit.builtin.data.datasets import ImageFolder
from gan_kit.plugin_api.components import BuildContext
from gan_kit.base.errors import GankitError
from gan_kit.training.imageio import ImageTooLarge, crop_resize, list_images, load_image

needs_symlinks = pytest.mark.skipif(not hasattr(os, "symlink") or sys.platform == "win32",
                                    reason="symbolic links need a POSIX file system")


def _png(path: Path, value: int, size=(8, 8)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((size[1], size[0], 3), value, np.uint8)).save(path)


def _linked_layout(tmp_path: Path) -> Path:
    """root/own/o0-3.png (real), root/shared -> ../pool (8 images), root/one.png -> ../pool/p0.png."""
    root, pool = tmp_path / "root", tmp_path / "pool"
    for i in range(4):
        _png(root / "own" / f"o{i}.png", i * 40)
    for i in range(8):
        _png(pool / f"p{i}.png", 200)
    (root / "shared").symlink_to("../pool", target_is_directory=True)
    (root / "one.png").symlink_to("../pool/p0.png")
    return root


@needs_symlinks
def test_list_images_follows_linked_folders_and_files_each_real_file_once(tmp_path):
    root = _linked_layout(tmp_path)
    found = [p.relative_to(root).as_posix() for p in list_images(root)]
    # one.png comes first (a folder's files before its sub-folders) and is pool/p0.png, so
    # shared/p0.png, the same real file, is not listed again.
    assert found == ["one.png", "own/o0.png", "own/o1.png", "own/o2.png", "own/o3.png",
                     *[f"shared/p{i}.png" for i in range(1, 8)]]
    only_file = tmp_path / "only_file"
    only_file.mkdir()
    (only_file / "x.png").symlink_to(tmp_path / "pool" / "p3.png")
    assert list_images(only_file) == [only_file / "x.png"]
    assert list_images(root, recursive=False) == [root / "one.png"]


@needs_symlinks
def test_list_images_survives_link_cycles_and_two_links_to_one_folder(tmp_path):
    root = _linked_layout(tmp_path)
    (root / "own" / "up").symlink_to("..", target_is_directory=True)  # a link to an ancestor: a cycle
    (root / "own" / "self").symlink_to(".", target_is_directory=True)
    (root / "again").symlink_to("../pool", target_is_directory=True)  # the linked folder a second time
    (root / "dangling.png").symlink_to(tmp_path / "nowhere.png")
    found = [p.relative_to(root).as_posix() for p in list_images(root)]
    # Sorted walk: "again" comes before "own" and "shared", so the pool is read through it once;
    # own/up and own/self lead to folders already read.
    assert found == ["one.png", *[f"again/p{i}.png" for i in range(1, 8)], "own/o0.png", "own/o1.png",
                     "own/o2.png", "own/o3.png"]
    assert len({os.path.realpath(root / p) for p in found}) == 12


@needs_symlinks
def test_image_folder_reads_a_folder_whose_only_content_is_a_linked_folder(tmp_path):
    _linked_layout(tmp_path)
    only = tmp_path / "only_links"
    only.mkdir()
    (only / "train").symlink_to("../pool", target_is_directory=True)
    ds = ImageFolder(ImageFolder.Options(path=str(only)), BuildContext(resolution=8)).build(8)
    assert len(ds) == 8 and torch.allclose(ds[0], torch.full((3, 8, 8), 200 / 127.5 - 1))
    both = ImageFolder(ImageFolder.Options(path=str(tmp_path / "root")), BuildContext(resolution=8)).build(8)
    assert len(both) == 12


# ---------------------------------------------------------------------------------- pixels --


def _old_resize_then_crop(im: Image.Image, resolution: int) -> Image.Image:
    """The previous decoding path: resize the whole image (shorter side = resolution), then crop."""
    w, h = im.size
    s = resolution / min(w, h)
    nw, nh = max(resolution, int(round(w * s))), max(resolution, int(round(h * s)))
    if (nw, nh) != (w, h):
        im = im.resize((nw, nh), Image.Resampling.BICUBIC)
    left, top = (nw - resolution) // 2, (nh - resolution) // 2
    return im.crop((left, top, left + resolution, top + resolution))


@pytest.mark.parametrize("size", [(40, 30), (30, 40), (13, 57)])
@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_crop_resize_gives_the_pixels_of_resizing_the_whole_image(size, mode):
    # An ordinary image: values in [64, 192], so no bicubic overshoot clips at 0 or 255 (where
    # Pillow's choice of pass order may differ, see crop_resize's docstring).
    rng = np.random.default_rng(1)
    shape = (size[1], size[0], 3) if mode == "RGB" else (size[1], size[0])
    im = Image.fromarray(rng.integers(64, 193, shape, dtype=np.uint8))
    for resolution in (8, 16, 32, 64):  # shrinking and enlarging
        old = np.asarray(_old_resize_then_crop(im, resolution), dtype=np.int16)
        new = np.asarray(crop_resize(im, resolution), dtype=np.int16)
        assert new.shape == old.shape
        assert np.abs(new - old).max() <= 1, (size, mode, resolution)


def test_load_image_of_extreme_aspect_strips_stays_within_a_small_memory_bound(tmp_path):
    # Pillow allocates image memory in C (tracemalloc does not see it), so the peak RSS growth is
    # measured in a fresh process. The old path made a 1536000x256 RGB image here (1.2 GB).
    script = textwrap.dedent(f"""
        import resource, time
        from pathlib import Path
        import numpy as np
        from PIL import Image
        from gan_kit.training.imageio import load_image
        d = Path({str(tmp_path)!r})
        Image.fromarray(np.full((1, 6000, 3), 90, np.uint8)).save(d / "wide.png")   # 6000 x 1
        Image.fromarray(np.full((6000, 1, 3), 90, np.uint8)).save(d / "tall.png")   # 1 x 6000
        load_image(d / "wide.png", 8, 3)  # warm up the decoder's own buffers
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        start = time.perf_counter()
        for name in ("wide.png", "tall.png"):
            t = load_image(d / name, 256, 3)
            assert tuple(t.shape) == (3, 256, 256) and int(t.min()) == int(t.max()) == 90, name
        print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024, time.perf_counter() - start)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    grown_mb, seconds = map(float, out.stdout.split())
    assert grown_mb < 32, f"decoding two 1x6000 strips at resolution 256 grew the peak RSS by {grown_mb:.0f} MB"
    assert seconds < 2.0


# ----------------------------------------------------------------------------------- bombs --


@pytest.mark.parametrize("limit", [1000, 500])  # over the limit (Pillow warns), over twice (Pillow raises)
def test_decompression_bomb_is_refused_in_one_line_naming_the_file(tmp_path, monkeypatch, limit):
    _png(tmp_path / "imgs" / "big.png", 10, size=(40, 30))  # 1200 pixels
    _png(tmp_path / "imgs" / "ok.png", 10, size=(20, 20))  # 400 pixels
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", limit)
    with pytest.raises(ImageTooLarge) as e:
        load_image(tmp_path / "imgs" / "big.png", 8, 3)
    msg = str(e.value)
    assert "\n" not in msg and "big.png" in msg and "1200 pixels" in msg and f"limit of {limit}" in msg
    assert "PIL.Image.MAX_IMAGE_PIXELS" in msg
    assert load_image(tmp_path / "imgs" / "ok.png", 8, 3).shape == (3, 8, 8)
    for cache in ("memory", "none"):
        opts = ImageFolder.Options(path=str(tmp_path / "imgs"), cache=cache)
        ds = ImageFolder(opts, BuildContext(resolution=8)).build(8)
        assert len(ds) == 1 and ds.skipped[0][0] == "big.png" and "decompression-bomb" in ds.skipped[0][1]
        strict = ImageFolder.Options(path=str(tmp_path / "imgs"), cache=cache, on_corrupt="error")
        with pytest.raises(GankitError) as err:
            ImageFolder(strict, BuildContext(resolution=8)).build(8)
        line = str(err.value)
        assert "\n" not in line and "data.path" in line and "big.png" in line and "MAX_IMAGE_PIXELS" in line
