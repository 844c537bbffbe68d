"""Datasets (kind ``dataset``, recipe table ``[data]``).

Every dataset gives float images in [-1, 1] of shape ``[C, H, W]`` at ``data.resolution``, with
the labels it has (``gan_kit.training.data`` states the item contract: ``num_classes``, ``labels``):

- ``digits``: the embedded default, scikit-learn's bundled copy of the UCI optical handwritten
  digits (1797 real 8x8 grey images, labels 0-9), so gankit trains with no download.
- ``image-folder``: every image file under a folder (recursive, symbolic links followed), or in
  a zip archive (stylegan2-ada-pytorch's ``dataset_tool.py`` layout, read lazily:
  ``gan_kit.builtin.data.archive``), resized (shorter side) and centre-cropped; corrupt or truncated
  files are skipped with a warning naming them, or are an error; ``labels = "folders"`` labels
  each image by its class sub-folder, ``"dataset.json"`` (and ``"auto"`` when the file is there)
  by that file's table.
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
import os
from pathlib import Path
from typing import Any, Literal, Sequence

import attrs
import torch
import torch.nn.functional as F

from gan_kit import DatasetFactory, hookimpl, option
from gan_kit.builtin.data import archive
from gan_kit.builtin.data.file_sets import AUTO_CACHE_BYTES, file_set  # noqa: F401  (AUTO_CACHE_BYTES: re-exported)
from gan_kit.training.data import TensorImages, mirrored
from gan_kit.base.errors import GankitError
# load_image is re-exported: scripts and plugins import it from here.
from gan_kit.training.imageio import (DECODE_ERRORS, IMAGE_EXTENSIONS, Framing, list_images, load_image, open_image,  # noqa: F401
                             reason, resize_uint8)

log = logging.getLogger("gankit.data")

XFLIP_HELP = ("Double the data set with left-right mirrored copies (item i + N is item i flipped; labels kept), "
               "as stylegan2-ada-pytorch's --mirror; not an augmentation of D's inputs.")


# ------------------------------------------------------------------------------- helpers --


def recipe_label(recipe: Any) -> str:
    """``"<recipe file>: "``, the prefix of a data error's message (empty without a recipe)."""
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


def warn_upscaled(native: int, resolution: int, what: str, other_fix: str | None = "or use larger images",
                  interpolation: str = "bicubic interpolation", recipe: Any = None) -> None:
    """One warning when ``data.resolution`` is above the images' own side ``native`` (pixels,
    the shorter side): they are upscaled with ``interpolation`` (named in the line, with the key
    that sets it if any), so G learns blurred, interpolated images (rank 0 only under several
    processes). ``other_fix`` (None: none) comes after "set data.resolution = N, "; every line also names
    ``data.upscale = "allow"``, the key every data set takes to say it is meant (``recipe``'s
    ``data.upscale = "allow"`` silences it)."""
    import os

    slot = getattr(getattr(recipe, "data", None), "slot", None)
    if getattr(slot, "upscale", "warn") == "allow":
        return
    if 0 < native < resolution and os.environ.get("RANK", "0") == "0":
        log.warning("warning: data.resolution: %d is above the %dpx of %s: the images are upscaled %.3gx by %s "
                    "(G learns interpolated pixels); set data.resolution = %d, %sor set data.upscale = \"allow\" "
                    "to upscale on purpose (silences this)", resolution, native, what, resolution / native,
                    interpolation, native, f"{other_fix}, " if other_fix else "")


# --------------------------------------------------------------------------------- digits --


#: Seed of data.max_images's fixed choice of images.
_SUBSET_SEED = 20_260_512


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
        xflip: bool = option(False, help=XFLIP_HELP)

    def build(self, resolution: int):
        from sklearn.datasets import load_digits

        bunch = load_digits()
        images = torch.tensor(bunch.images, dtype=torch.float32) / 16.0  # [N, 8, 8] in [0, 1]
        labels = torch.as_tensor(bunch.target, dtype=torch.int64)
        if self.options.digits is not None:
            keep = torch.isin(labels, torch.tensor(self.options.digits))
            images, labels = images[keep], labels[keep]
        if self.options.max_images is not None:
            # A stream of its own: seed 0 is also the metrics' draw of real images (randperm of the
            # whole set), so the subset would be the first images every full-set metric draws.
            pick = torch.randperm(len(images), generator=torch.Generator().manual_seed(_SUBSET_SEED))
            pick = pick[:self.options.max_images].sort().values
            images, labels = images[pick], labels[pick]
        x = images.unsqueeze(1)
        # A recipe that names data.interpolation upscales on purpose (the main recipe grows to
        # 16x16 to show two growth steps): no warning for a choice the recipe states.
        recipe = self.context.recipe
        chosen = recipe is not None and "interpolation" in ((getattr(recipe, "raw", None) or {}).get("data") or {})
        if not chosen:
            mode = self.options.interpolation
            # data.upscale, not data.interpolation: a recipe that names the digits' own key
            # breaks `--set data.name=image-folder`, which takes no such key
            warn_upscaled(8, resolution, "the digits' 8x8 images", None,
                          interpolation=f"{mode} interpolation (data.interpolation)", recipe=recipe)
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
        what = "zip archive" if archive.is_zip(folder) else "folder"
        return (f"{what} {where} not found; set data.path to a folder of images or a zip archive of them "
                f"(absolute, or relative to the folder of the recipe file that sets it)")
    if folder.is_file() and archive.is_zip(folder):
        return archive.zip_problem(folder, recursive)
    if not folder.is_dir():
        other = archive.other_archive(folder)
        if other:
            return (f"{where} is a {other} archive, which image-folder does not read; unpack it to a folder, "
                    f"or pack the images as a .zip (stylegan2-ada-pytorch's dataset_tool.py --dest=out.zip)")
        return (f"{where} is a file, not a folder or a .zip archive; set data.path to the folder that holds the "
                f"images, or to a zip archive of them")
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


def _rgb(v) -> str | None:
    """A colour option's problem: not three integers 0-255."""
    if any(not 0 <= c <= 255 for c in v):
        return f"must be [R, G, B] with each 0-255, got {list(v)}"
    return None


class ImageFolder(DatasetFactory):
    """Every image file under a folder or in a zip archive (png, jpg, jpeg, bmp, webp, gif; stylegan2-ada-pytorch's dataset_tool layout with dataset.json labels), resized and center-cropped to data.resolution."""

    @attrs.frozen
    class Options:
        path: str = option(help="Folder of images or .zip archive of them (absolute, or relative to the folder of the "
                                "recipe file that sets it; saved absolute); a zip, e.g. from stylegan2-ada-pytorch's "
                                "dataset_tool.py, is read lazily.", path=True)
        channels: Literal[1, 3] = option(3, help="1 = grey (luma), 3 = RGB (4 with alpha = \"keep\").")
        alpha: Literal["composite", "keep"] = option(
            "composite", help='Transparent images (RGBA, LA, palette with transparency): "composite" flattens them onto '
                              'data.background (out = a * colour + (1 - a) * background); "keep" keeps alpha as a 4th '
                              "channel (RGBA, 4 channels; opaque images get alpha 255; needs channels = 3).")
        background: tuple[int, int, int] = option(
            (255, 255, 255), help="[R, G, B] (0-255) that transparency is composited over (alpha = \"composite\").",
            validator=_rgb)
        fit: Literal["crop", "pad"] = option(
            "crop", help='Non-square images: "crop" resizes the shorter side to data.resolution and keeps the centre '
                         'square (the ends are cut off); "pad" resizes the longer side and letterboxes the whole image '
                         "on data.pad_color.")
        pad_color: tuple[int, int, int] | None = option(
            None, help='[R, G, B] (0-255) of the padding of fit = "pad"; None = data.background. With alpha = "keep" '
                       "the padding is transparent (alpha 0).", validator=lambda v: None if v is None else _rgb(v))
        recursive: bool = option(True, help="Also read images in sub-folders (hidden files and folders are ignored; "
                                            "symbolic links to folders and files are followed, each real one once).")
        on_corrupt: Literal["skip", "error"] = option(
            "skip", help='A corrupt or truncated file or archive member, or one over Pillow\'s decompression-bomb limit '
                         '(PIL.Image.MAX_IMAGE_PIXELS): "skip" it with a warning naming it, or stop with an "error".')
        cache: Literal["auto", "memory", "none"] = option(
            "auto", help='"memory" decodes every file once at start (uint8, C*res*res bytes each); "none" decodes '
                         'per batch (use run.num_workers); "auto" = memory up to 2 GiB.')
        labels: Literal["auto", "none", "folders", "dataset.json"] = option(
            "auto", help='"dataset.json": the table of that file at the top of the folder or archive '
                         '({"labels": [["00000/img00000000.png", 6], ...]}, as stylegan2-ada-pytorch\'s dataset_tool.py '
                         'writes); "auto": that table when the file is there, else unlabelled; "folders": one sub-folder '
                         'of data.path per class, class index = position of the sub-folder\'s name in sorted order; '
                         '"none": unlabelled.')
        num_classes: int | None = option(
            None, min=1, max=2**20, help="Classes of dataset.json labels: None = the largest label + 1 (as "
                                         "stylegan2-ada-pytorch); a count makes a label at or above it an error.")
        xflip: bool = option(False, help=XFLIP_HELP)

    @classmethod
    def problems(cls, options, recipe):
        if options.alpha == "keep" and options.channels != 3:
            return [("alpha", 'alpha = "keep" gives RGBA (4 channels) and needs channels = 3; set channels = 3, or '
                              'alpha = "composite" for grey images')]
        if options.num_classes is not None and options.labels not in ("auto", "dataset.json"):
            return [("num_classes", f'num_classes counts dataset.json labels; with labels = "{options.labels}" '
                                    f"leave it out")]
        if not _from_file(recipe):  # a recipe read back from a checkpoint: checked when built
            return []
        path = resolve_path(options.path, recipe)
        msg = _folder_problem(written(recipe, "data.path", options.path), path, options.recursive)
        if msg:
            return [("path", msg)]
        if path.is_dir() and (options.labels == "none" or (options.labels == "auto" and
                                                           not (path / archive.LABELS_FILE).is_file())):
            return []  # nothing to check without listing a folder that may hold a million files
        try:
            zf = cls._list(options, path)[-1]
        except GankitError as e:
            return [("labels", str(e))]
        if zf is not None:
            zf.close()
        return []

    @classmethod
    def resolved_options(cls, options, recipe):
        # The padding colour the images were framed with, whether the recipe named it or not.
        if options.pad_color is None:
            return attrs.evolve(options, pad_color=options.background)
        return options

    @staticmethod
    def _list(o, path: Path):
        """``(files or member names, labels, num_classes, class names, open archive or None)``.
        Raises GankitError (without the key) for a labels problem."""
        zf = archive.open_zip(path) if path.is_file() else None
        files = archive.member_images(zf, o.recursive) if zf is not None else list_images(path, o.recursive)
        try:
            if o.labels == "folders":
                if not o.recursive:
                    raise GankitError('labels = "folders" reads the class sub-folders: set data.recursive = true')
                top = (Path(), [Path(n) for n in files]) if zf is not None else (path, files)  # members: top-relative
                classes, labels = folder_classes(*top)
                return files, labels, len(classes), classes, zf
            if o.labels == "none":
                return files, None, 0, [], zf
            required = o.labels == "dataset.json"
            if zf is not None:
                labels, k = archive.zip_labels(zf, path, files, required, o.num_classes)
            else:
                labels, k = archive.folder_labels(path, files, required, o.num_classes)
            return files, labels, k, [], zf
        except GankitError:
            if zf is not None:
                zf.close()
            raise

    def build(self, resolution: int):
        o, recipe = self.options, self.context.recipe
        prefix = recipe_label(recipe)
        path = resolve_path(o.path, recipe)
        msg = _folder_problem(written(recipe, "data.path", o.path), path, o.recursive)
        if msg:
            raise GankitError(f"{prefix}data.path: {msg}")
        try:
            files, labels, num_classes, classes, zf = self._list(o, path)
        except GankitError as e:
            raise GankitError(f"{prefix}data.labels: {e}") from None
        lazy = None
        framing = Framing(fit=o.fit, background=o.background, pad_color=o.pad_color)
        channels = 4 if o.alpha == "keep" else o.channels
        if zf is None:
            # fit = "pad" scales the longer side to the resolution, so that side says if it upscales
            warn_upscaled(_smallest_side(files[:32], longer=o.fit == "pad"), resolution,
                          f"the smallest of the first images under {path}",
                          interpolation="bicubic interpolation (Pillow)", recipe=recipe)
        else:
            lazy = archive.ZipImages(path, files, resolution, channels, o.on_corrupt, "data.path", labels,
                                     num_classes, framing)
            lazy._zip, lazy._pid = zf, os.getpid()  # the handle the listing opened serves this process
        ds = file_set(files, labels, num_classes, resolution, channels, o.on_corrupt, o.cache, None,
                       "data.path", path, prefix, lazy=lazy, framing=framing, report_fit=True)
        if lazy is not None and not isinstance(ds, archive.ZipImages):
            lazy.close()  # decoded into memory: the archive is not read again
        ds.classes = classes  # class names in label order ([] when unlabelled or numbered by dataset.json)
        return mirrored(ds, o.xflip)


def _smallest_side(files: Sequence[Path], longer: bool = False) -> int:
    """The shortest image side among ``files`` (with ``longer``: the smallest of their longer
    sides; headers only; unreadable files left out), 0 if none."""
    sides = []
    for p in files:
        try:
            with open_image(p) as im:
                sides.append(max(im.size) if longer else min(im.size))
        except DECODE_ERRORS:
            continue
    return min(sides, default=0)


@hookimpl
def register_datasets(register):
    register("digits", Digits)
    register("image-folder", ImageFolder)
