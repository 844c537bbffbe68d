"""Image files: listing them (symbolic links followed, cycles guarded), decoding one to a square
``uint8`` tensor at a target resolution with bounded cost, and resizing in-memory image tensors.

The dataset factories (``gan_kit.builtin.data.datasets``) build on these; nothing here knows a recipe.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import re
import warnings
from pathlib import Path
from typing import IO, Callable, Literal

import attrs
import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageOps

from gan_kit.base.errors import clip

log = logging.getLogger("gankit.data")

#: File name endings ``image-folder`` reads (case-insensitive).
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".webp", ".gif")

#: What an image is decoded from: a file's path, or an open binary stream (a zip archive's member
#: read into ``io.BytesIO``), named in messages by the ``name`` argument of ``open_image``.
Source = Path | IO[bytes]

#: A crop box ``(left, top, right, bottom)`` in pixels of the decoded image, from its ``(w, h)``.
BoxFn = Callable[[int, int], tuple[float, float, float, float]]

# load_image refuses every image over Pillow's limit itself with a one-line reason (see
# ImageTooLarge), so Pillow's own warning for the same image would only repeat it on stderr.
warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)


class ImageTooLarge(ValueError):
    """An image with more pixels than ``PIL.Image.MAX_IMAGE_PIXELS`` (Pillow's decompression-bomb
    guard): decoding it could take gigabytes, so it is refused like a corrupt file."""


# ------------------------------------------------------------------------------- listing --


def list_images(folder: Path, recursive: bool = True, first_only: bool = False) -> list[Path]:
    """Image files (``IMAGE_EXTENSIONS``) under ``folder``, in sorted order (a folder's files,
    then its sub-folders); hidden files and folders (names starting with ``.``) are ignored.

    Symbolic links to folders and to files are followed. Each real folder is read once and each
    real file is listed once (the first path that reaches it, in that order), so a link back to an
    ancestor (a cycle) or two links to one folder add nothing twice. Returned paths are the paths
    as reached (through the links), so they stay relative to ``folder``. A broken link is skipped
    with a warning naming it. ``first_only`` stops at the first image.
    """
    out: list[Path] = []
    seen_dirs: set[str] = set()
    seen_files: set[str] = set()
    stack = [Path(folder)]  # depth-first; sub-folders pushed in reverse so they pop sorted
    while stack:
        here = stack.pop()
        real = os.path.realpath(here)
        if real in seen_dirs:
            continue
        seen_dirs.add(real)
        try:
            entries = sorted(os.scandir(here), key=lambda e: e.name)
        except OSError as e:
            log.warning("warning: cannot list folder %s (%s); skipped", here, e.strerror or e)
            continue
        subdirs = []
        for entry in entries:
            if entry.name.startswith("."):
                continue
            path = here / entry.name
            if entry.is_dir():  # follows links
                subdirs.append(path)
            elif entry.is_file():
                if not entry.name.lower().endswith(IMAGE_EXTENSIONS):
                    continue
                real_file = os.path.realpath(path) if entry.is_symlink() else os.path.join(real, entry.name)
                if real_file in seen_files:
                    continue
                seen_files.add(real_file)
                out.append(path)
                if first_only:
                    return out
            elif entry.is_symlink() and not first_only:
                log.warning("warning: skipped broken symbolic link %s -> %s", path, os.readlink(path))
        if recursive:
            stack.extend(reversed(subdirs))
    return out


# ------------------------------------------------------------------------------ decoding --


#: Pillow modes that carry an alpha channel.
ALPHA_MODES = ("RGBA", "LA", "PA", "RGBa", "La")

RGB = tuple[int, int, int]


@attrs.frozen
class Framing:
    """How an image of any shape and mode becomes a square of the target side.

    fit:        ``"crop"``: the shorter side resized to the target, the centre square kept (the
                part of a non-square image past it is lost); ``"pad"``: the longer side resized to
                the target and the image centred on a square of ``pad_color`` (letterbox: the
                whole image kept).
    background: the colour (R, G, B, 0-255) transparency is composited over, unless alpha is kept
                (4 channels).
    pad_color:  the colour of the padding; None = ``background``. With alpha kept, padding is
                transparent (alpha 0) in this colour.
    """

    fit: Literal["crop", "pad"] = "crop"
    background: RGB = (255, 255, 255)
    pad_color: RGB | None = None

    @property
    def pad(self) -> RGB:
        return self.background if self.pad_color is None else self.pad_color


#: The framing image-folder used before it had options: centre crop, composited over white.
DEFAULT_FRAMING = Framing()


def has_alpha(im: Image.Image) -> bool:
    """Whether a decoded (or merely opened) image has transparency: an alpha channel, or a
    palette / single colour marked transparent (PNG's tRNS, GIF's transparency index)."""
    return im.mode in ALPHA_MODES or "transparency" in im.info


def to_mode(im: Image.Image, channels: int, background: RGB = (255, 255, 255)) -> Image.Image:
    """A decoded PIL image as mode ``L`` (channels 1), ``RGB`` (3) or ``RGBA`` (4: alpha kept,
    255 where the image has none). Unless kept, transparency is composited over ``background``:
    ``out = a * c + (1 - a) * background`` per channel, ``a = alpha / 255`` (Porter & Duff 1984,
    "over"; Pillow's ``alpha_composite``); grey is the ITU-R 601 luma of the composite. 16-bit
    and float grey images are scaled to 8 bits, not clipped."""
    if im.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        arr = np.asarray(im, dtype=np.float32)
        top = 65535.0 if im.mode.startswith("I;16") or arr.max(initial=0) > 255 else 255.0
        if im.mode == "F" and arr.max(initial=0) <= 1.0:
            top = 1.0
        im = Image.fromarray(np.clip(arr / top * 255.0 + 0.5, 0, 255).astype(np.uint8), "L")
    target = {1: "L", 3: "RGB", 4: "RGBA"}[channels]
    if im.mode == target and (channels == 4 or not has_alpha(im)):
        return im  # convert() would copy it unchanged
    if channels == 4:
        return im.convert("RGBA")
    if has_alpha(im):
        rgba = im.convert("RGBA")
        backdrop = Image.new("RGBA", rgba.size, (*background, 255))
        im = Image.alpha_composite(backdrop, rgba)
    return im.convert("L" if channels == 1 else "RGB")


def pad_resize(im: Image.Image, resolution: int, pad_color: RGB,
               box: tuple[float, float, float, float] | None = None) -> Image.Image:
    """Crop ``box`` (None = the whole image), resize so that the longer side is ``resolution``
    (bicubic, antialiased when shrinking; the shorter side rounded, at least 1 pixel) and centre
    the image on a ``resolution`` square of ``pad_color`` (letterbox; the odd pixel of padding
    goes right / bottom). ``RGBA`` images are padded with transparent ``pad_color`` and resized
    with premultiplied alpha, so transparent pixels' colours do not bleed into the edges."""
    if box is not None:
        im = im.crop(tuple(int(round(v)) for v in box))
    w, h = im.size
    s = resolution / max(w, h)
    nw, nh = max(1, min(resolution, int(round(w * s)))), max(1, min(resolution, int(round(h * s))))
    if (nw, nh) != (w, h):
        if im.mode == "RGBA":
            im = im.convert("RGBa").resize((nw, nh), Image.Resampling.BICUBIC).convert("RGBA")
        else:
            im = im.resize((nw, nh), Image.Resampling.BICUBIC)
    if (nw, nh) == (resolution, resolution):
        return im
    if im.mode == "RGBA":
        fill: object = (*pad_color, 0)
    elif im.mode == "L":
        fill = Image.new("RGB", (1, 1), tuple(pad_color)).convert("L").getpixel((0, 0))
    else:
        fill = tuple(pad_color)
    canvas = Image.new(im.mode, (resolution, resolution), fill)
    canvas.paste(im, ((resolution - nw) // 2, (resolution - nh) // 2))
    return canvas


def crop_resize(im: Image.Image, resolution: int, box: tuple[float, float, float, float] | None = None):
    """Crop ``box`` (left, top, right, bottom; None = the whole image), then give the centre
    ``resolution`` x ``resolution`` square of the image resized so that its shorter side is
    ``resolution`` (bicubic, antialiased when shrinking).

    Only the source region under that square is resampled (``Image.resize(box=...)`` with the
    square's exact fractional source coordinates), so the cost is bounded by the target size and
    the source square, never by the resized whole image: a 1x6000 strip at resolution 256 used to
    be resized to 1536000x256 pixels (1.2 GB) before the crop. Each output pixel has the filter
    centre and support of resizing the whole image and then centre-cropping, so the results agree
    within 1/255, except where a bicubic overshoot clips in Pillow's 8-bit intermediate image
    between its horizontal and vertical passes: Pillow orders the passes by their cost, so the
    order (and which overshoots clip) can differ from that of the whole-image resize.
    """
    if box is not None:
        im = im.crop(tuple(int(round(v)) for v in box))
    w, h = im.size
    s = resolution / min(w, h)
    # Size the whole image would be resized to, and the centre square's offset in it.
    nw, nh = max(resolution, int(round(w * s))), max(resolution, int(round(h * s)))
    left, top = (nw - resolution) // 2, (nh - resolution) // 2
    if (nw, nh) == (w, h):
        if (w, h) == (resolution, resolution):
            return im  # already the square: crop() would copy it unchanged
        return im.crop((left, top, left + resolution, top + resolution))
    sx, sy = nw / w, nh / h
    source = (left / sx, top / sy, (left + resolution) / sx, (top + resolution) / sy)
    return im.resize((resolution, resolution), Image.Resampling.BICUBIC, box=source)


def _too_large(name: str, what: str) -> ImageTooLarge:
    return ImageTooLarge(
        f"{what} is over Pillow's decompression-bomb limit of {Image.MAX_IMAGE_PIXELS} pixels "
        f"(PIL.Image.MAX_IMAGE_PIXELS); downscale {name}, or raise PIL.Image.MAX_IMAGE_PIXELS in a plugin "
        f"module if the file is trusted")


def _is_jpeg(path: Source) -> bool:
    if isinstance(path, Path):
        with open(path, "rb") as f:
            return f.read(3) == b"\xff\xd8\xff"
    at = path.tell()
    head = path.read(3)
    path.seek(at)
    return head == b"\xff\xd8\xff"


def open_image(path: Source, name: str | None = None, draft: tuple[str, int] | None = None) -> Image.Image:
    """``PIL.Image.open(path)``: the header is read, the pixel data is not yet decoded. ``path``
    may be an open binary stream, then called ``name`` in messages. ``draft``: ``(mode, side)``
    for a JPEG that will be decoded at a reduced scale (Pillow's draft mode, 1/2 to 1/8 a side in
    the DCT domain) while both sides stay at least ``side``: the pixel limit below applies to the
    reduced size, so a 100-megapixel camera photo opens at a few megapixels. The file's own size
    is kept in ``im.info["gankit_file_size"]``.

    Raises ``ImageTooLarge`` (a ValueError whose message gives the fix) for an image whose decoded
    size is over ``PIL.Image.MAX_IMAGE_PIXELS``, and Pillow's ``OSError`` / ``ValueError`` for a
    file it cannot identify.
    """
    name = name or (path.name if isinstance(path, Path) else "the image")
    try:
        im = Image.open(path)
    except Image.DecompressionBombError as e:  # over twice the limit: Pillow refuses at the header
        if draft is None or not _is_jpeg(path):
            pixels = re.search(r"\((\d+) pixels\)", str(e))
            raise _too_large(name, f"{pixels.group(1)} pixels" if pixels else "the image") from None
        from PIL import JpegImagePlugin

        im = JpegImagePlugin.JpegImageFile(str(path) if isinstance(path, Path) else path)  # no limit at the header
    size, mode = im.size, im.mode
    if draft is not None and im.format == "JPEG":
        im.draft(draft[0], (draft[1], draft[1]))  # both sides stay >= draft[1], enough for crop and pad alike
    im.info["gankit_file_size"], im.info["gankit_file_mode"] = size, mode
    (w, h), limit = im.size, Image.MAX_IMAGE_PIXELS
    if limit is not None and w * h > limit:
        im.close()
        decoded = f" (decoded at {w}x{h})" if im.size != size else ""
        raise _too_large(name, f"{size[0]}x{size[1]} = {size[0] * size[1]} pixels{decoded}")
    return im


def load_image(path: Source, resolution: int, channels: int, box_fn: BoxFn | None = None,
               name: str | None = None, framing: Framing = DEFAULT_FRAMING,
               facts: dict | None = None) -> torch.Tensor:
    """Decode one image file (or open binary stream, called ``name`` in messages) to
    ``uint8 [channels, resolution, resolution]`` (channels 1, 3, or 4 = RGBA with alpha kept):
    EXIF orientation applied, converted by ``to_mode`` (transparency composited over
    ``framing.background`` unless kept), cropped to ``box_fn(w, h)`` when given, then fitted to
    the square by ``framing.fit``: the centre square resized (``crop_resize``) or the whole image
    letterboxed (``pad_resize``). JPEGs without a box are decoded at a reduced scale in the DCT
    domain (Pillow's draft mode) when that still covers ``resolution``, so a JPEG over Pillow's
    pixel limit is read when its reduced size is under it. ``facts``, when given, is filled with
    ``size`` ((w, h) of the file, after EXIF orientation - not the reduced decode's), ``mode``
    (the file's Pillow mode) and ``alpha`` (whether the image had transparency).

    Raises ``ImageTooLarge`` (a ValueError) for an image over ``PIL.Image.MAX_IMAGE_PIXELS``
    (after draft mode's reduction) before its pixel data is decoded, and ``OSError`` /
    ``ValueError`` (Pillow's errors) for a corrupt or truncated file.
    """
    draft = ("L" if channels == 1 else "RGB", resolution) if box_fn is None else None
    with open_image(path, name, draft=draft) as im:
        file_size = im.info.get("gankit_file_size", im.size)
        before = im.size
        im.load()  # raises for truncated data
        ImageOps.exif_transpose(im, in_place=True)  # without an orientation tag: no copy
        if facts is not None:
            turned = im.size != before and im.size == before[::-1]
            facts["size"], facts["alpha"] = (file_size[::-1] if turned else file_size), has_alpha(im)
            facts["mode"] = im.info.get("gankit_file_mode", im.mode)
        im = to_mode(im, channels, framing.background)
        box = box_fn(*im.size) if box_fn is not None else None
        if framing.fit == "pad":
            im = pad_resize(im, resolution, framing.pad, box)
        else:
            im = crop_resize(im, resolution, box)
        arr = np.asarray(im, dtype=np.uint8)
    # One copy from the (read-only) pixel buffer into the contiguous [C, H, W] tensor.
    chw = arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)
    return torch.from_numpy(chw.copy())  # order "C": contiguous


#: What decoding a bad file raises: Pillow's errors for corrupt or truncated data, and ImageTooLarge.
DECODE_ERRORS = (OSError, ValueError, SyntaxError, Image.DecompressionBombError)


def reason(e: BaseException) -> str:
    """The first line of an exception's message (whole words, at most 300 characters: ``clip``),
    or its type name."""
    return clip(str(e), 300) or type(e).__name__


def decode_all(files: list, resolution: int, channels: int, box_fn: BoxFn | None = None,
               load: Callable[[object], torch.Tensor] | None = None) -> list[torch.Tensor | BaseException]:
    """``load_image`` of every file (in threads for 64 files or more), or ``load(item)`` of every
    item when given (a zip archive's members); an unreadable one gives its exception (one of
    ``DECODE_ERRORS``) in place of its tensor."""

    def one(p):
        try:
            return load(p) if load is not None else load_image(p, resolution, channels, box_fn)
        except DECODE_ERRORS as e:
            return e

    workers = min(8, os.cpu_count() or 1)
    if len(files) < 64 or workers == 1:
        return [one(p) for p in files]
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:  # Pillow decodes without the GIL
        return list(pool.map(one, files, chunksize=32))


# ------------------------------------------------------------------------ tensor resizing --


def resize_uint8(x: torch.Tensor, resolution: int, channels: int | None) -> torch.Tensor:
    """``uint8 [N,C,H,W]`` -> ``uint8 [N,channels,resolution,resolution]``: shorter side resized
    (bicubic, antialiased when shrinking), centre-cropped, grey <-> RGB converted (ITU-R BT.601
    luma weights 0.299, 0.587, 0.114); ``channels`` None keeps C. Works in chunks of 4096 images
    so the float copy stays small."""
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
