"""The data set of a list of image files (a folder's, a zip archive's members, CelebA's split):
decoded once into memory or per access, unreadable files skipped with one warning naming them (or
an error), and the one line that says how many images fitting to squares cropped, padded or
flattened. ``image-folder`` and ``celeba`` build on it (``gan_kit.builtin.data.datasets``,
``gan_kit.builtin.data.torchvision_sets``)."""

from __future__ import annotations

import copy
import logging
import os
from pathlib import Path
from typing import Sequence

import torch

from gan_kit.training.data import FileImages, UInt8Images
from gan_kit.base.errors import GankitError
from gan_kit.training.imageio import DECODE_ERRORS, DEFAULT_FRAMING, BoxFn, Framing, decode_all, has_alpha, open_image, reason

__all__ = ["AUTO_CACHE_BYTES", "file_set", "fit_report"]

log = logging.getLogger("gankit.data")

#: ``cache = "auto"`` keeps decoded images in memory up to this many bytes.
AUTO_CACHE_BYTES = 2 * 1024**3


def _report_skipped(key: str, where: Path, skipped: list[tuple[str, str]], total: int) -> None:
    shown = "; ".join(f"{name} ({why})" for name, why in skipped[:10])
    more = f"; and {len(skipped) - 10} more" if len(skipped) > 10 else ""
    log.warning("warning: %s: skipped %d unreadable image file%s of %d under %s: %s%s "
                "(set data.on_corrupt = \"error\" to stop instead)", key, len(skipped),
                "" if len(skipped) == 1 else "s", total, where, shown, more)


def _relative(p: Path | str, where: Path) -> str:
    if isinstance(p, str):  # a zip archive's member name
        return p
    try:
        return p.relative_to(where).as_posix()
    except ValueError:
        return str(p)


def fit_report(key: str, where: Path, facts: Sequence[dict], framing: Framing, channels: int) -> str | None:
    """The one line that says what fitting the images to squares did (None when it changed none):
    how many were non-square and so center-cropped or padded, and how many had an alpha channel
    (an RGBA file counts whether or not a pixel is transparent),
    composited over ``framing.background`` or kept (``channels`` 4). ``facts``: one ``{"size":
    (w, h), "alpha": bool}`` per image (``load_image``'s, or a header's)."""
    n = len(facts)
    odd = sum(1 for f in facts if f["size"][0] != f["size"][1])
    alpha = sum(1 for f in facts if f["alpha"])
    parts = []
    if odd:
        if framing.fit == "pad":
            fill = f"transparent pixels (colour {tuple(framing.pad)})" if channels == 4 else str(tuple(framing.pad))
            parts.append(f"{odd} non-square padded (letterboxed) with {fill} to keep them whole")
        else:
            parts.append(f"{odd} non-square center-cropped, their ends cut off (data.fit = \"pad\" keeps them whole)")
    if alpha:
        if channels == 4:
            parts.append(f"{alpha} with an alpha channel, kept as a 4th channel")
        else:
            parts.append(f"{alpha} with an alpha channel flattened onto {tuple(framing.background)} "
                         f"(data.background; data.alpha = \"keep\" keeps it as a 4th channel)")
    if not parts:
        return None
    return f"note: {key}: of the {n} images under {where}, " + "; ".join(parts)


def file_set(files: Sequence[Path], labels: torch.Tensor | None, num_classes: int, resolution: int,
              channels: int, on_corrupt: str, cache: str, box_fn: BoxFn | None, key: str, where: Path,
              prefix: str, check_headers: bool = True, lazy: FileImages | None = None,
              framing: Framing = DEFAULT_FRAMING, report_fit: bool = False):
    """The dataset of image ``files`` (with their ``labels``): decoded once into memory
    (``cache = "memory"``, or ``"auto"`` within AUTO_CACHE_BYTES) or per access (``"none"``).
    Unreadable files are skipped with one warning naming them, or are a GankitError naming
    ``key`` and the file (``on_corrupt = "error"``). The dataset gets ``files`` (each item's file)
    and ``skipped`` (``(path relative to where, reason)`` of each file left out). With ``cache =
    "none"`` only the headers are read now, and not even those without ``check_headers`` (for
    sets of many known files, such as CelebA's 200k, where opening each at start takes minutes).
    ``lazy``: the per-access dataset of all ``files`` when they are not files on disk (a zip
    archive's ``ZipImages``, whose ``files`` are member names). ``framing``: how images become
    squares; ``report_fit``: log ``fit_report``'s line (from the decoded images, or with ``cache =
    "none"`` from their headers)."""
    if lazy is None:
        lazy = FileImages(files, resolution, channels, on_corrupt, box_fn, key, labels, num_classes, framing)
    facts: list[dict] = [{} for _ in files]
    per_image = channels * resolution * resolution
    if cache == "auto":
        cache = "memory" if len(files) * per_image <= AUTO_CACHE_BYTES else "none"
    if cache == "none":  # only the header is read now; truncated data is found when decoded
        def check(j: int):
            try:
                if hasattr(lazy, "header"):
                    facts[j] = lazy.header(j)
                else:
                    with open_image(files[j]) as im:
                        facts[j] = {"size": im.size, "alpha": has_alpha(im)}
            except DECODE_ERRORS as e:
                return e
            return None
        outcome = [check(j) if check_headers else None for j in range(len(files))]
    else:
        outcome = decode_all(list(range(len(files))), resolution, channels, load=lambda j: lazy._load(j, facts[j]))
    keep, skipped = [], []
    for i, (p, item) in enumerate(zip(files, outcome)):
        if isinstance(item, BaseException):
            if on_corrupt == "error":
                raise GankitError(f"{prefix}{key}: cannot read image {lazy._describe(i)} ({reason(item)}); "
                                  f"{lazy.remedy} or set data.on_corrupt = \"skip\"")
            skipped.append((_relative(p, where), reason(item)))
        else:
            keep.append(i)
    if skipped:
        _report_skipped(key, where, skipped, len(files))
    if not keep:
        first = f" (first: {skipped[0][0]}: {skipped[0][1]})" if skipped else ""
        raise GankitError(f"{prefix}{key}: none of the {len(files)} image files under {where} could be read{first}")
    if report_fit and (cache != "none" or check_headers):
        line = fit_report(key, where, [facts[i] for i in keep], framing, channels)
        if line and os.environ.get("RANK", "0") == "0":
            log.warning("%s", line)
    kept_files = [files[i] for i in keep]
    kept_labels = labels[torch.as_tensor(keep)] if labels is not None else None
    if cache == "none":
        ds = copy.copy(lazy)
        ds.files, ds.bad = kept_files, set()
        ds._set_labels(kept_labels, num_classes)
    else:
        ds = UInt8Images(torch.stack([outcome[i] for i in keep]), kept_labels, num_classes)
    ds.files, ds.skipped = kept_files, skipped
    return ds
