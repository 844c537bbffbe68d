"""Datasets (kind ``dataset``, recipe table ``[data]``).

Every dataset gives float images in [-1, 1] of shape ``[C, H, W]`` at ``data.resolution``:

- ``digits``: the embedded default, scikit-learn's bundled copy of the UCI optical handwritten
  digits (1797 real 8x8 grey images), so gankit trains with no download.
- ``image-folder``: every image file under a folder (recursive), resized (shorter side) and
  center-cropped; corrupt or truncated files are skipped with a warning naming them, or are an error.
- ``mnist``, ``fashion-mnist``, ``cifar10``, ``celeba``: torchvision's sets in their own on-disk
  layout under ``root`` (``download = true`` fetches them with torchvision; off by default).

Relative paths (``path``, ``root``) are resolved against the folder of the recipe file; for a
recipe read back from a checkpoint, against the working directory.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import pickle
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

import attrs
import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from gan_kit import DatasetFactory, hookimpl, option
from gan_kit.data import TensorImages
from gan_kit.errors import GankitError

log = logging.getLogger("gankit.data")

#: File name endings ``image-folder`` reads (case-insensitive).
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".webp", ".gif")

#: ``cache = "auto"`` keeps decoded images in memory up to this many bytes.
AUTO_CACHE_BYTES = 2 * 1024**3


# ------------------------------------------------------------------------------- helpers --


def _label(recipe: Any) -> str:
    return f"{recipe.path}: " if recipe is not None else ""


def _base_dir(recipe: Any) -> Path:
    """Folder that relative data paths are resolved against: the recipe file's folder, or the
    working directory for a recipe without a file of its own (one saved in a checkpoint)."""
    if recipe is not None:
        rp = Path(recipe.path)
        if rp.is_file():
            return rp.parent
    return Path.cwd()


def _from_file(recipe: Any) -> bool:
    return recipe is not None and Path(recipe.path).is_file()


def resolve_path(value: str, recipe: Any) -> Path:
    """``value`` with ``~`` expanded; relative paths joined to the recipe file's folder."""
    p = Path(value).expanduser()
    return p if p.is_absolute() else _base_dir(recipe) / p


def list_images(folder: Path, recursive: bool = True, first_only: bool = False) -> list[Path]:
    """Image files (``IMAGE_EXTENSIONS``) under ``folder`` in sorted order; hidden files and
    folders (names starting with ``.``) are ignored. ``first_only`` stops at the first one."""
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".")) if recursive else []
        for name in sorted(filenames):
            if not name.startswith(".") and name.lower().endswith(IMAGE_EXTENSIONS):
                out.append(Path(dirpath) / name)
                if first_only:
                    return out
    return out


def _to_mode(im, channels: int):
    """A decoded PIL image as mode ``L`` (channels 1) or ``RGB`` (channels 3). Transparency is
    composited over white; 16-bit and float grey images are scaled to 8 bits, not clipped."""
    from PIL import Image

    if im.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        arr = np.asarray(im, dtype=np.float32)
        top = 65535.0 if im.mode.startswith("I;16") or arr.max(initial=0) > 255 else 255.0
        if im.mode == "F" and arr.max(initial=0) <= 1.0:
            top = 1.0
        im = Image.fromarray(np.clip(arr / top * 255.0 + 0.5, 0, 255).astype(np.uint8), "L")
    if im.mode == "P":
        im = im.convert("RGBA" if "transparency" in im.info else "RGB")
    if im.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = im.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        im = Image.alpha_composite(background, rgba)
    return im.convert("L" if channels == 1 else "RGB")


def _resize_crop(im, resolution: int, box: tuple[float, float, float, float] | None = None):
    """Crop ``box`` (left, top, right, bottom; None = the whole image), resize so the shorter
    side is ``resolution`` (bicubic, antialiased when shrinking) and center-crop to a square."""
    from PIL import Image

    if box is not None:
        im = im.crop(tuple(int(round(v)) for v in box))
    w, h = im.size
    s = resolution / min(w, h)
    nw, nh = max(resolution, int(round(w * s))), max(resolution, int(round(h * s)))
    if (nw, nh) != (w, h):
        im = im.resize((nw, nh), Image.Resampling.BICUBIC)
    left, top = (nw - resolution) // 2, (nh - resolution) // 2
    return im.crop((left, top, left + resolution, top + resolution))


def load_image(path: Path, resolution: int, channels: int,
               box_fn: Callable[[int, int], tuple] | None = None) -> torch.Tensor:
    """Decode one image file to ``uint8 [channels, resolution, resolution]``.

    Raises ``OSError`` / ``ValueError`` (PIL's errors) for a corrupt or truncated file.
    """
    from PIL import Image, ImageOps

    with Image.open(path) as im:
        if im.format == "JPEG" and box_fn is None:
            im.draft("L" if channels == 1 else "RGB", (resolution, resolution))  # DCT-domain downscale
        im.load()  # raises for truncated data
        im = ImageOps.exif_transpose(im)
        im = _to_mode(im, channels)
        box = box_fn(*im.size) if box_fn is not None else None
        im = _resize_crop(im, resolution, box)
        arr = np.asarray(im, dtype=np.uint8)
    t = torch.from_numpy(arr.copy())
    return t.unsqueeze(0) if t.ndim == 2 else t.permute(2, 0, 1).contiguous()


def _to_float(x: torch.Tensor) -> torch.Tensor:
    """``uint8`` images -> float in [-1, 1]."""
    return x.float().div_(127.5).sub_(1.0)


class UInt8Images(Dataset):
    """In-memory ``uint8 [N, C, H, W]`` images served as float in [-1, 1] (batched indexing
    through ``__getitems__``). Keeps a quarter of the memory of float images."""

    def __init__(self, images: torch.Tensor):
        if images.dtype != torch.uint8 or images.ndim != 4:
            raise ValueError(f"expected uint8 [N,C,H,W] images, got {images.dtype} {tuple(images.shape)}")
        self.images = images.contiguous()

    def __len__(self) -> int:
        return self.images.shape[0]

    def __getitem__(self, i: int) -> torch.Tensor:
        return _to_float(self.images[i])

    def __getitems__(self, indices: list[int]) -> torch.Tensor:
        return _to_float(self.images[torch.as_tensor(indices, dtype=torch.long)])


class FileImages(Dataset):
    """Images decoded from files on every access (for folders too large to hold in memory).

    A file that fails to decode is, with ``on_corrupt="skip"``, replaced by the next readable
    file (deterministically) and reported once by name; with ``"error"`` it raises GankitError.
    """

    def __init__(self, files: Sequence[Path], resolution: int, channels: int, on_corrupt: str = "skip",
                 box_fn: Callable | None = None, key: str = "data.path"):
        self.files = list(files)
        self.resolution, self.channels, self.on_corrupt = resolution, channels, on_corrupt
        self.box_fn, self.key = box_fn, key
        self.bad: set[int] = set()

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> torch.Tensor:
        n = len(self.files)
        for k in range(n):
            j = (i + k) % n
            if j in self.bad:
                continue
            try:
                return _to_float(load_image(self.files[j], self.resolution, self.channels, self.box_fn))
            except (OSError, ValueError, SyntaxError) as e:
                if self.on_corrupt == "error":
                    raise GankitError(f"{self.key}: cannot read image {self.files[j]} ({_reason(e)}); "
                                      f"remove the file or set on_corrupt = \"skip\"") from None
                self.bad.add(j)
                log.warning("warning: %s: skipped unreadable image %s (%s)", self.key, self.files[j], _reason(e))
        raise GankitError(f"{self.key}: none of the {n} image files could be read")


def _reason(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:160] if text else type(e).__name__


def _decode_all(files: list[Path], resolution: int, channels: int, box_fn=None) -> list[torch.Tensor | BaseException]:
    """Decode every file (threads); an unreadable file gives its exception instead of a tensor."""
    from PIL import Image

    def one(p: Path):
        try:
            return load_image(p, resolution, channels, box_fn)
        except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
            return e

    workers = min(8, os.cpu_count() or 1)
    if len(files) < 64 or workers == 1:
        return [one(p) for p in files]
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:  # PIL decodes without the GIL
        return list(pool.map(one, files, chunksize=32))


def _report_skipped(key: str, where: Path, skipped: list[tuple[str, str]], total: int, option_hint: str) -> None:
    shown = "; ".join(f"{name} ({why})" for name, why in skipped[:10])
    more = f"; and {len(skipped) - 10} more" if len(skipped) > 10 else ""
    log.warning("warning: %s: skipped %d unreadable image file%s of %d under %s: %s%s (%s)", key, len(skipped),
                "" if len(skipped) == 1 else "s", total, where, shown, more, option_hint)


def _resize_uint8(x: torch.Tensor, resolution: int, channels: int | None) -> torch.Tensor:
    """``uint8 [N,C,H,W]`` -> ``uint8 [N,channels,resolution,resolution]``: shorter side resized
    (bicubic, antialiased when shrinking), center-cropped, grey <-> RGB converted (ITU-R 601 luma)."""
    n, c, h, w = x.shape
    out = []
    for i in range(0, n, 4096):
        chunk = x[i:i + 4096].float()
        if channels == 1 and c == 3:
            chunk = (chunk * torch.tensor([0.299, 0.587, 0.114]).view(1, 3, 1, 1)).sum(1, keepdim=True)
        elif channels == 3 and c == 1:
            chunk = chunk.expand(-1, 3, -1, -1)
        if (h, w) != (resolution, resolution):
            s = resolution / min(h, w)
            nh, nw = max(resolution, round(h * s)), max(resolution, round(w * s))
            chunk = F.interpolate(chunk, size=(nh, nw), mode="bicubic", align_corners=False,
                                  antialias=s < 1)
            top, left = (nh - resolution) // 2, (nw - resolution) // 2
            chunk = chunk[..., top:top + resolution, left:left + resolution]
        out.append(chunk.round_().clamp_(0, 255).to(torch.uint8))
    return torch.cat(out).contiguous()


# --------------------------------------------------------------------------------- digits --


class Digits(DatasetFactory):
    """UCI handwritten digits bundled with scikit-learn: 1797 real 8x8 images resized to data.resolution, in [-1, 1]."""

    @attrs.frozen
    class Options:
        interpolation: Literal["bilinear", "bicubic", "nearest"] = option(
            "bicubic", help="How the 8x8 images are resized to data.resolution.")
        digits: tuple[int, ...] | None = option(None, help="Keep only these classes (e.g. [0, 1]); None = all ten.")

    def build(self, resolution: int):
        from sklearn.datasets import load_digits

        bunch = load_digits()
        images = torch.tensor(bunch.images, dtype=torch.float32) / 16.0  # [N, 8, 8] in [0, 1]
        if self.options.digits is not None:
            keep = torch.isin(torch.as_tensor(bunch.target), torch.tensor(self.options.digits))
            images = images[keep]
        x = images.unsqueeze(1)
        if resolution != 8:
            mode = self.options.interpolation
            kwargs = {"align_corners": False} if mode != "nearest" else {}
            x = F.interpolate(x, size=(resolution, resolution), mode=mode, **kwargs)
        x = x.clamp(0.0, 1.0) * 2.0 - 1.0
        return TensorImages(x)


# --------------------------------------------------------------------------- image-folder --


def _folder_problem(value: str, folder: Path, recursive: bool) -> str | None:
    where = f"{value!r}" + (f" (resolved to {folder})" if str(folder) != value else "")
    if not folder.exists():
        return (f"folder {where} not found; set data.path to a folder of images "
                f"(absolute, or relative to the recipe's folder)")
    if not folder.is_dir():
        return f"{where} is a file, not a folder; set data.path to the folder that holds the images"
    if not list_images(folder, recursive, first_only=True):
        sub = " or its sub-folders" if recursive else " (recursive = false)"
        return (f"folder {where} holds no image files ({', '.join(e[1:] for e in IMAGE_EXTENSIONS)}) in it{sub}; "
                f"add images or fix data.path")
    return None


class ImageFolder(DatasetFactory):
    """Every image file under a folder (png, jpg, jpeg, bmp, webp, gif; recursive), resized and center-cropped to data.resolution."""

    @attrs.frozen
    class Options:
        path: str = option(help="Folder of images (absolute, or relative to the recipe file's folder).")
        channels: Literal[1, 3] = option(3, help="1 = grey (luma), 3 = RGB; transparency is composited over white.")
        recursive: bool = option(True, help="Also read images in sub-folders (hidden files and folders are ignored).")
        on_corrupt: Literal["skip", "error"] = option(
            "skip", help='A corrupt or truncated file: "skip" it with a warning naming it, or stop with an "error".')
        cache: Literal["auto", "memory", "none"] = option(
            "auto", help='"memory" decodes every file once at start (uint8, C*res*res bytes each); "none" decodes '
                         'per batch (use run.num_workers); "auto" = memory up to 2 GiB.')

    @classmethod
    def problems(cls, options, recipe):
        if not _from_file(recipe):  # a recipe read back from a checkpoint: checked when built
            return []
        msg = _folder_problem(options.path, resolve_path(options.path, recipe), options.recursive)
        return [("path", msg)] if msg else []

    def build(self, resolution: int):
        o, recipe = self.options, self.context.recipe
        label = _label(recipe)
        folder = resolve_path(o.path, recipe)
        msg = _folder_problem(o.path, folder, o.recursive)
        if msg:
            raise GankitError(f"{label}data.path: {msg}")
        files = list_images(folder, o.recursive)
        per_image = o.channels * resolution * resolution
        cache = o.cache if o.cache != "auto" else ("memory" if len(files) * per_image <= AUTO_CACHE_BYTES else "none")
        hint = 'set data.on_corrupt = "error" to stop instead'
        if cache == "none":
            from PIL import Image

            good, skipped = [], []
            for p in files:  # header check only; truncated data is found when decoded
                try:
                    with Image.open(p):
                        pass
                    good.append(p)
                except (OSError, ValueError, SyntaxError) as e:
                    if o.on_corrupt == "error":
                        raise GankitError(f"{label}data.path: cannot read image {p} ({_reason(e)}); "
                                          f"remove the file or set data.on_corrupt = \"skip\"") from None
                    skipped.append((str(p.relative_to(folder)), _reason(e)))
            if skipped:
                _report_skipped("data.path", folder, skipped, len(files), hint)
            if not good:
                raise GankitError(f"{label}data.path: none of the {len(files)} image files under {folder} could be read")
            ds = FileImages(good, resolution, o.channels, o.on_corrupt, key="data.path")
            ds.skipped = skipped
            return ds
        decoded = _decode_all(files, resolution, o.channels)
        images, kept, skipped = [], [], []
        for p, item in zip(files, decoded):
            if isinstance(item, BaseException):
                if o.on_corrupt == "error":
                    raise GankitError(f"{label}data.path: cannot read image {p} ({_reason(item)}); "
                                      f"remove the file or set data.on_corrupt = \"skip\"")
                skipped.append((str(p.relative_to(folder)), _reason(item)))
            else:
                images.append(item)
                kept.append(p)
        if skipped:
            _report_skipped("data.path", folder, skipped, len(files), hint)
        if not images:
            raise GankitError(f"{label}data.path: none of the {len(files)} image files under {folder} could be read "
                              f"(first: {skipped[0][0]}: {skipped[0][1]})")
        ds = UInt8Images(torch.stack(images))
        ds.files, ds.skipped = kept, skipped  # the file of each item; (relative path, reason) skipped
        return ds


# ------------------------------------------------------------------------ torchvision sets --


class _TorchvisionSet(DatasetFactory):
    """Shared options and error handling of the torchvision datasets."""

    #: torchvision class name, the folder it keeps under root, and a human name.
    tv_class = ""
    folder = ""
    title = ""

    @attrs.frozen
    class Options:
        root: str = option("~/.cache/gankit/datasets",
                           help="Folder that holds the dataset's own folder (relative to the recipe's folder).")
        download: bool = option(False, help="Download the set with torchvision when it is missing (needs internet).")
        split: Literal["train", "test", "all"] = option("train", help="Which part of the set to train on.")
        channels: int | None = option(None, help="1 or 3 to convert grey <-> RGB; None = the set's own channels.",
                                      validator=lambda v: None if v in (1, 3) else f"must be 1 or 3, got {v!r}")

    def _root(self) -> Path:
        return resolve_path(self.options.root, self.context.recipe)

    def _download(self, root: Path, **kwargs) -> None:
        import torchvision.datasets as tvd

        try:
            getattr(tvd, self.tv_class)(str(root), download=True, **kwargs)
        except Exception as e:  # network errors come in many types; one line is what the user needs
            raise GankitError(f"{_label(self.context.recipe)}data.download: downloading {self.title} into {root} "
                              f"failed ({type(e).__name__}: {_reason(e)}); fetch it by hand into "
                              f"{root / self.folder} or check the connection") from None

    def _missing(self, root: Path, what: str) -> GankitError:
        return GankitError(
            f"{_label(self.context.recipe)}data.root: {self.title} not found: {what} under {root / self.folder}; "
            f"set data.download = true (needs internet) or point data.root at the folder that holds "
            f"'{self.folder}/'")

    def _finish(self, images: torch.Tensor, resolution: int) -> UInt8Images:
        return UInt8Images(_resize_uint8(images, resolution, self.options.channels))


class MNIST(_TorchvisionSet):
    """torchvision MNIST (raw idx files under ROOT/MNIST/raw), 28x28 grey digits resized to data.resolution."""

    tv_class, folder, title = "MNIST", "MNIST", "MNIST"

    def build(self, resolution: int):
        import torchvision.datasets as tvd

        root = self._root()
        cls = getattr(tvd, self.tv_class)
        trains = {"train": [True], "test": [False], "all": [True, False]}[self.options.split]
        parts = []
        for train in trains:
            try:
                ds = cls(str(root), train=train, download=False)
            except RuntimeError:
                if self.options.download:
                    self._download(root, train=train)
                    ds = cls(str(root), train=train, download=False)
                else:
                    prefix = "train" if train else "t10k"
                    raise self._missing(root, f"raw/{prefix}-images-idx3-ubyte and raw/{prefix}-labels-idx1-ubyte "
                                              f"(and the other split's files)") from None
            parts.append(torch.as_tensor(ds.data, dtype=torch.uint8))
        return self._finish(torch.cat(parts).unsqueeze(1), resolution)


class FashionMNIST(MNIST):
    """torchvision FashionMNIST (raw idx files under ROOT/FashionMNIST/raw), 28x28 grey clothes resized to data.resolution."""

    tv_class, folder, title = "FashionMNIST", "FashionMNIST", "FashionMNIST"


class CIFAR10(_TorchvisionSet):
    """torchvision CIFAR10 (python pickle batches under ROOT/cifar-10-batches-py), 32x32 RGB resized to data.resolution."""

    tv_class, folder, title = "CIFAR10", "cifar-10-batches-py", "CIFAR10"
    TRAIN = [f"data_batch_{i}" for i in range(1, 6)]
    TEST = ["test_batch"]

    def build(self, resolution: int):
        # The batches are read directly (their documented pickle format) rather than through
        # torchvision's class, which also requires the md5 sum of every file to match the
        # published ones; a missing file is still an error, and a download checks the md5.
        root = self._root()
        names = {"train": self.TRAIN, "test": self.TEST, "all": self.TRAIN + self.TEST}[self.options.split]
        base = root / self.folder
        missing = [n for n in names if not (base / n).is_file()]
        if missing and self.options.download:
            self._download(root)
            missing = [n for n in names if not (base / n).is_file()]
        if missing:
            raise self._missing(root, ", ".join(missing))
        arrays = []
        for n in names:
            try:
                with open(base / n, "rb") as f:
                    entry = pickle.load(f, encoding="latin1")
                arrays.append(np.asarray(entry["data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
            except (OSError, pickle.UnpicklingError, EOFError, KeyError, ValueError) as e:
                raise GankitError(f"{_label(self.context.recipe)}data.root: {base / n} is not a CIFAR10 python "
                                  f"batch ({_reason(e)}); delete it and download again") from None
        return self._finish(torch.from_numpy(np.concatenate(arrays)), resolution)


def celeba_face_box(w: int, h: int) -> tuple[float, float, float, float]:
    """PGGAN's CelebA crop (``dataset_tool.py create_celeba``): the 128x128 square centred at
    (89, 121) of the 178x218 aligned images, scaled to the image's actual size."""
    side = 128.0 * min(w / 178.0, h / 218.0)
    cx, cy = 89.0 * w / 178.0, 121.0 * h / 218.0
    return cx - side / 2, cy - side / 2, cx + side / 2, cy + side / 2


class CelebA(_TorchvisionSet):
    """torchvision CelebA (ROOT/celeba/img_align_celeba + list_eval_partition.txt), faces cropped and resized to data.resolution."""

    tv_class, folder, title = "CelebA", "celeba", "CelebA"

    @attrs.frozen
    class Options(_TorchvisionSet.Options):
        split: Literal["train", "valid", "test", "all"] = option("train", help="Partition of list_eval_partition.txt.")
        crop: Literal["face", "center"] = option(
            "face", help='"face" = PGGAN\'s 128x128 crop at (89, 121) of the aligned image; "center" = center square.')
        on_corrupt: Literal["skip", "error"] = option(
            "skip", help="A corrupt image file: skip it with a warning, or stop.")
        cache: Literal["auto", "memory", "none"] = option(
            "auto", help='"memory" decodes all images at start; "none" per batch; "auto" = memory up to 2 GiB.')

    def build(self, resolution: int):
        o = self.options
        root = self._root()
        base = root / self.folder
        images = base / "img_align_celeba"
        partition = base / "list_eval_partition.txt"
        needs_partition = o.split != "all"
        if (not images.is_dir() or (needs_partition and not partition.is_file())) and o.download:
            self._download(root, split="all", target_type=[])
        if not images.is_dir():
            raise self._missing(root, "img_align_celeba/")
        if needs_partition and not partition.is_file():
            raise self._missing(root, "list_eval_partition.txt (or use data.split = \"all\")")
        if needs_partition:
            want = {"train": "0", "valid": "1", "test": "2"}[o.split]
            names = []
            for line in partition.read_text().splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[1] == want:
                    names.append(parts[0])
            files = [images / n for n in names]
            absent = [f.name for f in files if not f.is_file()]
            if absent:
                raise self._missing(root, f"{len(absent)} image(s) listed in list_eval_partition.txt, e.g. "
                                          f"img_align_celeba/{absent[0]}")
        else:
            files = list_images(images, recursive=False)
        if not files:
            raise self._missing(root, f"images of split {o.split!r}")
        channels = o.channels or 3
        box_fn = celeba_face_box if o.crop == "face" else None
        per_image = channels * resolution * resolution
        cache = o.cache if o.cache != "auto" else ("memory" if len(files) * per_image <= AUTO_CACHE_BYTES else "none")
        if cache == "none":
            return FileImages(files, resolution, channels, o.on_corrupt, box_fn, key="data.root")
        decoded = _decode_all(files, resolution, channels, box_fn)
        good = [t for t in decoded if isinstance(t, torch.Tensor)]
        skipped = [(p.name, _reason(t)) for p, t in zip(files, decoded) if not isinstance(t, torch.Tensor)]
        if skipped and o.on_corrupt == "error":
            raise GankitError(f"{_label(self.context.recipe)}data.root: cannot read image {images / skipped[0][0]} "
                              f"({skipped[0][1]}); remove it or set data.on_corrupt = \"skip\"")
        if skipped:
            _report_skipped("data.root", images, skipped, len(files), 'set data.on_corrupt = "error" to stop instead')
        if not good:
            raise self._missing(root, "readable images")
        return UInt8Images(torch.stack(good))


@hookimpl
def register_datasets(register):
    register("digits", Digits)
    register("image-folder", ImageFolder)
    register("mnist", MNIST)
    register("fashion-mnist", FashionMNIST)
    register("cifar10", CIFAR10)
    register("celeba", CelebA)
