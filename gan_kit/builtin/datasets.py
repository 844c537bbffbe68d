"""Datasets (kind ``dataset``, recipe table ``[data]``).

Every dataset gives float images in [-1, 1] of shape ``[C, H, W]`` at ``data.resolution``, with
the labels it has (``gan_kit.data`` states the item contract: ``num_classes``, ``labels``):

- ``digits``: the embedded default, scikit-learn's bundled copy of the UCI optical handwritten
  digits (1797 real 8x8 grey images, labels 0-9), so gankit trains with no download.
- ``image-folder``: every image file under a folder (recursive, symbolic links followed), resized
  (shorter side) and centre-cropped; corrupt or truncated files are skipped with a warning naming
  them, or are an error; ``labels = "folders"`` labels each image by its class sub-folder.
- ``mnist``, ``fashion-mnist``, ``cifar10`` (labelled) and ``celeba`` (unlabelled): torchvision's
  sets in their own on-disk layout under ``root`` (``download = true`` fetches them with
  torchvision; off by default).

Every dataset has ``xflip``: the set doubled with left-right mirrored copies (labels kept).
Relative paths (``path``, ``root``: ``option(path=True)``) are resolved when the recipe is loaded,
against the folder of the recipe file that sets them (``--set``: the working directory), and a
run saves them absolute, so resuming works from any directory.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal, Sequence

import attrs
import torch
import torch.nn.functional as F

from gan_kit import DatasetFactory, hookimpl, option
from gan_kit.data import FileImages, TensorImages, UInt8Images, mirrored
from gan_kit.errors import GankitError
# load_image is re-exported: scripts and plugins import it from here.
from gan_kit.imageio import (DECODE_ERRORS, IMAGE_EXTENSIONS, BoxFn, decode_all, list_images, load_image,  # noqa: F401
                             open_image, reason, resize_uint8)

log = logging.getLogger("gankit.data")

#: ``cache = "auto"`` keeps decoded images in memory up to this many bytes.
AUTO_CACHE_BYTES = 2 * 1024**3

_XFLIP_HELP = ("Double the data set with left-right mirrored copies (item i + N is item i flipped; labels kept), "
               "as stylegan2-ada-pytorch's --mirror; not an augmentation of D's inputs.")


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


def resolve_path(value: str, recipe: Any, key: str = "data.path") -> Path:
    """``value`` with ``~`` expanded; a relative path is joined to the recipe file's folder, or to
    the working directory when it was typed on the command line (``--set data.path=...``), like
    ``--out``."""
    p = Path(value).expanduser()
    if p.is_absolute():
        return p
    if recipe is not None and recipe.from_cli(key):
        return Path.cwd() / p
    return _base_dir(recipe) / p


def warn_upscaled(native: int, resolution: int, what: str) -> None:
    """One warning when ``data.resolution`` is above the images' own side ``native`` (pixels,
    the shorter side): they are upscaled, so G learns blurred, interpolated images (rank 0 only
    under several processes)."""
    import os

    if 0 < native < resolution and os.environ.get("RANK", "0") == "0":
        log.warning("warning: data.resolution: %d is above the %dpx of %s: the images are upscaled %.3gx (G learns "
                    "interpolated pixels); set data.resolution = %d, or use larger images", resolution, native, what,
                    resolution / native, native)


def _report_skipped(key: str, where: Path, skipped: list[tuple[str, str]], total: int) -> None:
    shown = "; ".join(f"{name} ({why})" for name, why in skipped[:10])
    more = f"; and {len(skipped) - 10} more" if len(skipped) > 10 else ""
    log.warning("warning: %s: skipped %d unreadable image file%s of %d under %s: %s%s "
                "(set data.on_corrupt = \"error\" to stop instead)", key, len(skipped),
                "" if len(skipped) == 1 else "s", total, where, shown, more)


def _relative(p: Path, where: Path) -> str:
    try:
        return p.relative_to(where).as_posix()
    except ValueError:
        return str(p)


def _file_set(files: Sequence[Path], labels: torch.Tensor | None, num_classes: int, resolution: int,
              channels: int, on_corrupt: str, cache: str, box_fn: BoxFn | None, key: str, where: Path,
              prefix: str, check_headers: bool = True):
    """The dataset of image ``files`` (with their ``labels``): decoded once into memory
    (``cache = "memory"``, or ``"auto"`` within AUTO_CACHE_BYTES) or per access (``"none"``).
    Unreadable files are skipped with one warning naming them, or are a GankitError naming
    ``key`` and the file (``on_corrupt = "error"``). The dataset gets ``files`` (each item's file)
    and ``skipped`` (``(path relative to where, reason)`` of each file left out). With ``cache =
    "none"`` only the headers are read now, and not even those without ``check_headers`` (for
    sets of many known files, such as CelebA's 200k, where opening each at start takes minutes)."""
    per_image = channels * resolution * resolution
    if cache == "auto":
        cache = "memory" if len(files) * per_image <= AUTO_CACHE_BYTES else "none"
    if cache == "none":  # only the header is read now; truncated data is found when decoded
        def check(p: Path):
            try:
                with open_image(p):
                    pass
            except DECODE_ERRORS as e:
                return e
            return None
        outcome = [check(p) if check_headers else None for p in files]
    else:
        outcome = decode_all(list(files), resolution, channels, box_fn)
    keep, skipped = [], []
    for i, (p, item) in enumerate(zip(files, outcome)):
        if isinstance(item, BaseException):
            if on_corrupt == "error":
                raise GankitError(f"{prefix}{key}: cannot read image {p} ({reason(item)}); "
                                  f"remove the file or set data.on_corrupt = \"skip\"")
            skipped.append((_relative(p, where), reason(item)))
        else:
            keep.append(i)
    if skipped:
        _report_skipped(key, where, skipped, len(files))
    if not keep:
        first = f" (first: {skipped[0][0]}: {skipped[0][1]})" if skipped else ""
        raise GankitError(f"{prefix}{key}: none of the {len(files)} image files under {where} could be read{first}")
    kept_files = [files[i] for i in keep]
    kept_labels = labels[torch.as_tensor(keep)] if labels is not None else None
    if cache == "none":
        ds = FileImages(kept_files, resolution, channels, on_corrupt, box_fn, key, kept_labels, num_classes)
    else:
        ds = UInt8Images(torch.stack([outcome[i] for i in keep]), kept_labels, num_classes)
    ds.files, ds.skipped = kept_files, skipped
    return ds


# --------------------------------------------------------------------------------- digits --


class Digits(DatasetFactory):
    """UCI handwritten digits bundled with scikit-learn: 1797 real 8x8 images (labels 0-9) resized to data.resolution, in [-1, 1]."""

    @attrs.frozen
    class Options:
        interpolation: Literal["bilinear", "bicubic", "nearest"] = option(
            "bicubic", help="How the 8x8 images are resized to data.resolution.")
        digits: tuple[int, ...] | None = option(
            None, help="Keep only these classes (e.g. [0, 1]); None = all ten. Labels stay the digits (num_classes 10).")
        max_images: int | None = option(
            None, help="Keep this many images, a fixed random choice (the same for every run) of the whole set after the digits "
                       "filter, for small-data experiments (e.g. 180 = 10%); None = all.", min=1)
        xflip: bool = option(False, help=_XFLIP_HELP)

    def build(self, resolution: int):
        from sklearn.datasets import load_digits

        bunch = load_digits()
        images = torch.tensor(bunch.images, dtype=torch.float32) / 16.0  # [N, 8, 8] in [0, 1]
        labels = torch.as_tensor(bunch.target, dtype=torch.int64)
        if self.options.digits is not None:
            keep = torch.isin(labels, torch.tensor(self.options.digits))
            images, labels = images[keep], labels[keep]
        if self.options.max_images is not None:
            pick = torch.randperm(len(images), generator=torch.Generator().manual_seed(0))[:self.options.max_images]
            images, labels = images[pick.sort().values], labels[pick.sort().values]
        x = images.unsqueeze(1)
        warn_upscaled(8, resolution, "the digits' 8x8 images")
        if resolution != 8:
            mode = self.options.interpolation
            kwargs = {"align_corners": False} if mode != "nearest" else {}
            x = F.interpolate(x, size=(resolution, resolution), mode=mode, **kwargs)
        x = x.clamp(0.0, 1.0) * 2.0 - 1.0
        return mirrored(TensorImages(x, labels, num_classes=10), self.options.xflip)


# --------------------------------------------------------------------------- image-folder --


def written(recipe: Any, key: str, value: str) -> str:
    """A path option as the recipe wrote it (before it was made absolute), for messages."""
    return getattr(recipe, "written_paths", {}).get(key, value)


def _folder_problem(value: str, folder: Path, recursive: bool) -> str | None:
    where = f"{value!r}" + (f" (resolved to {folder})" if str(folder) != value else "")
    if not folder.exists():
        return (f"folder {where} not found; set data.path to a folder of images "
                f"(absolute, or relative to the folder of the recipe file that sets it)")
    if not folder.is_dir():
        return f"{where} is a file, not a folder; set data.path to the folder that holds the images"
    if not list_images(folder, recursive, first_only=True):
        sub = " or its sub-folders" if recursive else " (recursive = false)"
        return (f"folder {where} holds no image files ({', '.join(e[1:] for e in IMAGE_EXTENSIONS)}) in it{sub}; "
                f"add images or fix data.path")
    return None


def folder_classes(folder: Path, files: Sequence[Path]) -> tuple[list[str], torch.Tensor]:
    """Class names (the sorted names of the sub-folders of ``folder`` that hold images) and each
    file's class index (``int64 [len(files)]``), the file's first folder under ``folder``.

    Raises GankitError naming the first file that lies directly in ``folder``.
    """
    firsts = [p.relative_to(folder).parts for p in files]
    loose = [p for p, parts in zip(files, firsts) if len(parts) < 2]
    if loose:
        raise GankitError(f"image {loose[0]} is not in a class sub-folder ({len(loose)} such file"
                          f"{'' if len(loose) == 1 else 's'}); with labels = \"folders\" every image lies in "
                          f"a sub-folder named after its class: move it there, or set data.labels = \"none\"")
    classes = sorted({parts[0] for parts in firsts})
    index = {name: i for i, name in enumerate(classes)}
    return classes, torch.tensor([index[parts[0]] for parts in firsts], dtype=torch.int64)


class ImageFolder(DatasetFactory):
    """Every image file under a folder (png, jpg, jpeg, bmp, webp, gif; recursive, links followed), resized and center-cropped to data.resolution."""

    @attrs.frozen
    class Options:
        path: str = option(help="Folder of images (absolute, or relative to the folder of the recipe file that "
                                "sets it; saved absolute).", path=True)
        channels: Literal[1, 3] = option(3, help="1 = grey (luma), 3 = RGB; transparency is composited over white.")
        recursive: bool = option(True, help="Also read images in sub-folders (hidden files and folders are ignored; "
                                            "symbolic links to folders and files are followed, each real one once).")
        on_corrupt: Literal["skip", "error"] = option(
            "skip", help='A corrupt or truncated file, or one over Pillow\'s decompression-bomb limit '
                         '(PIL.Image.MAX_IMAGE_PIXELS): "skip" it with a warning naming it, or stop with an "error".')
        cache: Literal["auto", "memory", "none"] = option(
            "auto", help='"memory" decodes every file once at start (uint8, C*res*res bytes each); "none" decodes '
                         'per batch (use run.num_workers); "auto" = memory up to 2 GiB.')
        labels: Literal["none", "folders"] = option(
            "none", help='"folders": one sub-folder of data.path per class, class index = position of the '
                         'sub-folder\'s name in sorted order (for class-conditional GANs); "none": unlabelled.')
        xflip: bool = option(False, help=_XFLIP_HELP)

    @classmethod
    def problems(cls, options, recipe):
        if not _from_file(recipe):  # a recipe read back from a checkpoint: checked when built
            return []
        folder = resolve_path(options.path, recipe)
        msg = _folder_problem(written(recipe, "data.path", options.path), folder, options.recursive)
        if msg:
            return [("path", msg)]
        if options.labels == "folders":
            if not options.recursive:
                return [("labels", 'labels = "folders" reads the class sub-folders: set data.recursive = true')]
            try:
                folder_classes(folder, list_images(folder))
            except GankitError as e:
                return [("labels", str(e))]
        return []

    def build(self, resolution: int):
        o, recipe = self.options, self.context.recipe
        prefix = _label(recipe)
        folder = resolve_path(o.path, recipe)
        msg = _folder_problem(written(recipe, "data.path", o.path), folder, o.recursive)
        if msg:
            raise GankitError(f"{prefix}data.path: {msg}")
        files = list_images(folder, o.recursive)
        labels, classes = None, []
        if o.labels == "folders":
            if not o.recursive:
                raise GankitError(f'{prefix}data.labels: labels = "folders" reads the class sub-folders: '
                                  f"set data.recursive = true")
            try:
                classes, labels = folder_classes(folder, files)
            except GankitError as e:
                raise GankitError(f"{prefix}data.labels: {e}") from None
        warn_upscaled(_smallest_side(files[:32]), resolution, f"the smallest of the first images under {folder}")
        ds = _file_set(files, labels, len(classes), resolution, o.channels, o.on_corrupt, o.cache, None,
                       "data.path", folder, prefix)
        ds.classes = classes  # class names in label order ([] when unlabelled)
        return mirrored(ds, o.xflip)


def _smallest_side(files: Sequence[Path]) -> int:
    """The shortest image side among ``files`` (headers only; unreadable files left out), 0 if none."""
    sides = []
    for p in files:
        try:
            with open_image(p) as im:
                sides.append(min(im.size))
        except DECODE_ERRORS:
            continue
    return min(sides, default=0)


_TORCHVISION_SETS = ("MNIST", "FashionMNIST", "CIFAR10", "CelebA", "celeba_face_box")


def __getattr__(name: str):
    """``from gan_kit.builtin.datasets import CIFAR10`` keeps working: the torchvision sets moved
    to ``gan_kit.builtin.torchvision_sets``, which imports this module (so not at the top)."""
    if name in _TORCHVISION_SETS:
        from gan_kit.builtin import torchvision_sets

        return getattr(torchvision_sets, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@hookimpl
def register_datasets(register):
    # The torchvision sets live in their own module, which builds on the helpers above.
    from gan_kit.builtin.torchvision_sets import CIFAR10, MNIST, CelebA, FashionMNIST

    register("digits", Digits)
    register("image-folder", ImageFolder)
    register("mnist", MNIST)
    register("fashion-mnist", FashionMNIST)
    register("cifar10", CIFAR10)
    register("celeba", CelebA)
