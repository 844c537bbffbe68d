"""stylegan2-ada-pytorch's data set layout for ``image-folder``: a zip archive of images and the
same layout unpacked into a folder, with class labels from ``dataset.json``.

``dataset_tool.py`` (stylegan2-ada-pytorch) writes ``00000/img00000000.png``, ``00000/img00000001.png``,
... (1000 images per sub-folder, members stored uncompressed) and, at the top, ``dataset.json``:
``{"labels": [["00000/img00000000.png", 6], ...]}`` or ``{"labels": null}``. Its
``training/dataset.py`` reads the images of the archive in sorted name order and takes each
image's label from that table; the number of classes is the largest label + 1.

Archives made by other tools read the same: member names with Windows separators
(``00000\\img00000000.png``) are read as ``/``-separated, and an archive of the data set's folder
itself (``mydata/00000/...``, ``mydata/dataset.json``, what a file manager's "compress" writes)
as if its members were at the top (``top_folder``, ``set_name``).

Zip members are read lazily, never extracted: the central directory (names, sizes) is read once,
and a member is read and decoded when its image is needed, through a handle each process opens
for itself (a handle inherited through fork shares its file offset with the parent's, so a data
loader worker reading through it would garble both).

Guards (each a one-line error naming the archive, the member and a fix):

- zip bombs, from the sizes in the central directory before anything is decoded: a member that
  would unpack to more than ``MAX_MEMBER_BYTES``, or one over 1 MiB that expands more than
  ``MAX_EXPANSION`` times (images are already compressed: dataset_tool stores them, ratio 1), and
  the same ratio for the whole archive; ``dataset.json`` over ``MAX_LABELS_BYTES``. Decoded
  pixels are capped by Pillow's ``MAX_IMAGE_PIXELS`` as for image files (``gan_kit.training.imageio``);
- a corrupt member (bad CRC, bad compressed data, an unreadable image) is skipped with a warning
  naming the archive and the member, or is an error (``on_corrupt``), as a corrupt file is;
- ``dataset.json``: not JSON, not ``{"labels": ...}``, an entry that is not ``[name, class]``, a
  label that is not a class index or lies outside ``[0, num_classes)``, a name listed twice, a
  name that is not an image of the set (a missing file), an image without a label.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from typing import Sequence

import torch
from PIL import UnidentifiedImageError

from gan_kit.training.data import FileImages
from gan_kit.base.errors import GankitError
from gan_kit.training.imageio import DEFAULT_FRAMING, IMAGE_EXTENSIONS, Framing, has_alpha, load_image, open_image, reason

#: The labels file of the layout, at the top of the archive or folder.
LABELS_FILE = "dataset.json"
#: Archive endings read as zip archives (case-insensitive).
ZIP_SUFFIXES = (".zip",)
#: Other archive endings, refused with a pointer to unpacking or to a zip.
OTHER_ARCHIVES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".7z", ".rar")
#: A member unpacking to more bytes than this is refused (an image file this large is a bomb).
MAX_MEMBER_BYTES = 256 * 1024**2
#: Uncompressed / compressed size above which a member (over EXPANSION_FLOOR) or the whole archive
#: is refused as a zip bomb.
MAX_EXPANSION = 100
EXPANSION_FLOOR = 1024**2
#: dataset.json larger than this is refused (a million labels take about 40 MB).
MAX_LABELS_BYTES = 512 * 1024**2

#: What reading a member can raise: a bad CRC or header (BadZipFile), bad deflate data (zlib),
#: a truncated archive (EOFError), an encrypted member or an unsupported compression (RuntimeError).
MEMBER_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, RuntimeError, OSError, ValueError)

_FIX_ARCHIVE = "re-create it (stylegan2-ada-pytorch's dataset_tool.py --dest=out.zip) or unpack it to a folder"


def is_zip(path: Path) -> bool:
    """Whether ``path`` names a zip archive by its ending (``.zip``)."""
    return path.name.lower().endswith(ZIP_SUFFIXES)


def other_archive(path: Path) -> str | None:
    """The ending of ``path`` if it is an archive kind gankit does not read (tar, 7z, rar)."""
    return next((s for s in OTHER_ARCHIVES if path.name.lower().endswith(s)), None)


def open_zip(path: Path) -> zipfile.ZipFile:
    """``zipfile.ZipFile(path)`` (only the central directory is read). Raises GankitError when the
    file is not a readable zip archive."""
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
        raise GankitError(f"cannot read zip archive {path} ({reason(e)}); {_FIX_ARCHIVE}") from None


def _parts(name: str) -> list[str]:
    """A member name's folders and file name: ``/`` or ``\\`` separated (an archive written on
    Windows by a tool that kept its separators)."""
    return name.replace("\\", "/").split("/")


def _ignored(parts: list[str]) -> bool:
    return parts[0] == "__MACOSX" or any(p.startswith(".") for p in parts)


def top_folder(zf: zipfile.ZipFile) -> str:
    """The one folder every member lies in (``mydata/`` when the archive was made by zipping the
    folder ``mydata`` rather than its contents, as a file manager's "compress" does), with its
    trailing ``/``; "" when the members are at the top, as dataset_tool writes them."""
    files = [p for info in zf.infolist() if not info.is_dir() and not _ignored(p := _parts(info.filename))]
    if not files or any(len(p) == 1 for p in files):
        return ""
    tops = {p[0] for p in files}
    return f"{tops.pop()}/" if len(tops) == 1 else ""


def set_name(name: str, top: str = "") -> str:
    """A member's name in the set: ``/``-separated, relative to the top folder ``top`` - the name
    ``dataset.json`` lists it by."""
    canonical = "/".join(_parts(name))
    return canonical[len(top):] if top and canonical.startswith(top) else canonical


def member_images(zf: zipfile.ZipFile, recursive: bool = True) -> list[str]:
    """Names of the image members (``IMAGE_EXTENSIONS``), each once (a name stored twice is read as
    zipfile reads it: the last entry), in the sorted order of their names in the set
    (``set_name``: a ``\\``-separated name read as ``/``-separated, relative to the one folder an
    archive of a zipped folder holds everything in). Hidden names (a part starting with ``.``) and
    macOS's ``__MACOSX/`` copies are ignored, as hidden files are in folders; without
    ``recursive`` only members at the top of the set."""
    top = top_folder(zf)
    names = {}
    for info in zf.infolist():
        parts = _parts(set_name(info.filename, top))
        if info.is_dir() or _ignored(_parts(info.filename)):
            continue
        if (recursive or len(parts) == 1) and info.filename.lower().endswith(IMAGE_EXTENSIONS):
            names[info.filename] = "/".join(parts)
    return sorted(names, key=lambda n: names[n])


def _bomb(what: str, unpacked: int, packed: int, archive: Path, one_member: bool) -> str | None:
    fix = (f"if {archive.name} is trusted, re-create it with stored (uncompressed) members, as dataset_tool.py "
           f"does, or unpack it to a folder")
    if one_member and unpacked > MAX_MEMBER_BYTES:
        return (f"{what} of {archive} would unpack to {unpacked} bytes, over the limit of {MAX_MEMBER_BYTES} "
                f"per member (gan_kit.builtin.data.archive.MAX_MEMBER_BYTES): a zip bomb or not an image; {fix}")
    if unpacked > EXPANSION_FLOOR and unpacked > MAX_EXPANSION * max(packed, 1):
        return (f"{what} of {archive} would expand {unpacked / max(packed, 1):.0f} times ({packed} -> {unpacked} "
                f"bytes), over the limit of {MAX_EXPANSION} (gan_kit.builtin.data.archive.MAX_EXPANSION): a zip bomb; {fix}")
    return None


def bomb_problem(zf: zipfile.ZipFile, names: Sequence[str], archive: Path) -> str | None:
    """Why the archive is refused as a zip bomb, from its central directory's sizes (nothing is
    decompressed), or None: a member over MAX_MEMBER_BYTES, a member or the whole set of images
    expanding more than MAX_EXPANSION times, dataset.json over MAX_LABELS_BYTES."""
    total = packed = 0
    for name in names:
        info = zf.getinfo(name)
        msg = _bomb(f"member {name}", info.file_size, info.compress_size, archive, one_member=True)
        if msg:
            return msg
        total, packed = total + info.file_size, packed + info.compress_size
    msg = _bomb(f"the {len(names)} images", total, packed, archive, one_member=False)
    if msg:
        return msg
    try:
        size = zf.getinfo(LABELS_FILE).file_size
    except KeyError:
        return None
    if size > MAX_LABELS_BYTES:
        return (f"{LABELS_FILE} of {archive} would unpack to {size} bytes, over the limit of {MAX_LABELS_BYTES} "
                f"(gan_kit.builtin.data.archive.MAX_LABELS_BYTES); {_FIX_ARCHIVE}")
    return None


def read_member(zf: zipfile.ZipFile, name: str) -> bytes:
    """The bytes of member ``name``, at most MAX_MEMBER_BYTES. Raises OSError (a DECODE_ERRORS
    kind, so a bad member is skipped or reported like a corrupt file) for a member that cannot be
    read: bad CRC, bad compressed data, truncated, encrypted, or larger than declared."""
    try:
        with zf.open(name) as f:
            data = f.read(MAX_MEMBER_BYTES + 1)
    except MEMBER_ERRORS as e:
        raise OSError(reason(e)) from None
    if len(data) > MAX_MEMBER_BYTES:
        raise OSError(f"unpacks to more than {MAX_MEMBER_BYTES} bytes (gan_kit.builtin.data.archive.MAX_MEMBER_BYTES)")
    return data


class ZipImages(FileImages):
    """Images decoded from the members of a zip archive on every access, optionally labelled.

    ``files`` are member names. The archive is opened once per process (``handle()``), so data
    loader workers (forked or spawned) each read through their own handle. A member that fails
    (corrupt data or image) is skipped or is an error as in ``FileImages``, named by archive and
    member.
    """

    remedy = "re-create the archive without it (or fix the member)"

    def __init__(self, archive: Path, members: Sequence[str], resolution: int, channels: int, on_corrupt: str = "skip",
                 key: str = "data.path", labels: torch.Tensor | None = None, num_classes: int = 0,
                 framing: Framing = DEFAULT_FRAMING):
        super().__init__(list(members), resolution, channels, on_corrupt, None, key, labels, num_classes, framing)
        self.archive = Path(archive)
        self._zip: zipfile.ZipFile | None = None
        self._pid = -1

    def handle(self) -> zipfile.ZipFile:
        """This process's open archive (opened on first use in each process)."""
        if self._zip is None or self._pid != os.getpid():
            self._zip, self._pid = zipfile.ZipFile(self.archive), os.getpid()
        return self._zip

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_zip": None, "_pid": -1}  # a spawned worker opens its own

    def _load(self, j: int, facts: dict | None = None) -> torch.Tensor:
        name = self.files[j]
        try:
            return load_image(io.BytesIO(read_member(self.handle(), name)), self.resolution, self.channels,
                              name=PurePosixPath(name).name, framing=self.framing, facts=facts)
        except UnidentifiedImageError:  # Pillow's message would name the in-memory stream object
            raise OSError("cannot identify image file") from None

    def _describe(self, j: int) -> str:
        return f"{self.files[j]} in archive {self.archive}"

    def header(self, j: int) -> dict:
        """Read item ``j``'s image header only: ``{"size": (w, h), "alpha": has transparency}``
        (size before EXIF orientation, which does not change squareness); raises what ``_load``
        does."""
        try:
            with self.handle().open(self.files[j]) as f, open_image(f, PurePosixPath(self.files[j]).name) as im:
                return {"size": im.size, "alpha": has_alpha(im)}
        except UnidentifiedImageError:  # Pillow's message would name the member's stream object
            raise OSError("cannot identify image file") from None
        except (zipfile.BadZipFile, zlib.error, EOFError, RuntimeError) as e:  # Pillow's own errors pass as they are
            raise OSError(reason(e)) from None

    def close(self) -> None:
        if self._zip is not None and self._pid == os.getpid():
            self._zip.close()
        self._zip = None


# ------------------------------------------------------------------------------ labels --


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} such {one if n == 1 else many}"


def parse_labels(raw: bytes, where: str, names: Sequence[str], num_classes: int | None
                 ) -> tuple[torch.Tensor | None, int]:
    """``(labels int64 [len(names)], num_classes)`` of the images ``names`` (``/``-separated paths
    relative to the top of the set) from the text of a ``dataset.json`` (``where`` names it);
    ``(None, 0)`` for ``{"labels": null}``.

    ``num_classes`` None: the largest label + 1 (stylegan2-ada-pytorch's ``label_shape``);
    a count: every label must be below it.

    Raises GankitError (a one-line message without the recipe key) for any problem listed in the
    module docstring.
    """
    try:
        doc = json.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise GankitError(f"{where} is not valid JSON ({reason(e)}); expected "
                          f'{{"labels": [["00000/img00000000.png", 6], ...]}} or {{"labels": null}}') from None
    if not isinstance(doc, dict) or "labels" not in doc:
        raise GankitError(f'{where} has no "labels" key; expected {{"labels": [["00000/img00000000.png", 6], ...]}} '
                          f'or {{"labels": null}} (set data.labels = "none" to ignore it)')
    entries = doc["labels"]
    if entries is None:
        return None, 0
    if not isinstance(entries, list):
        raise GankitError(f'{where}: "labels" is {type(entries).__name__}, not a list of [file name, class index] '
                          f"pairs or null")
    table: dict[str, tuple[int, int]] = {}
    for i, entry in enumerate(entries):
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)):
            raise GankitError(f"{where}: labels[{i}] is {json.dumps(entry)[:80]}; expected [file name, class index] "
                              f'such as ["00000/img00000000.png", 6]')
        name, label = entry[0].replace("\\", "/"), entry[1]
        if isinstance(label, bool) or not isinstance(label, int):
            raise GankitError(f"{where}: the label of {name} is {json.dumps(label)[:80]}, not a class index: gankit's "
                              f"conditional networks take one integer class 0, 1, ... per image (vector labels are "
                              f'not supported); fix the labels or set data.labels = "none"')
        if label < 0 or (num_classes is not None and label >= num_classes):
            bound = "num_classes" if num_classes is None else f"data.num_classes = {num_classes}"
            fix = "" if label < 0 else f"; set data.num_classes = {label + 1} or more, or fix the label"
            raise GankitError(f"{where}: the label of {name} is {label}, outside [0, {bound}){fix}"
                              + ("; class labels are 0, 1, ..." if label < 0 else ""))
        if name in table:
            raise GankitError(f"{where}: {name} is labelled twice (labels[{table[name][1]}] and labels[{i}]); "
                              f"keep one entry per image")
        table[name] = (label, i)
    present = set(names)
    missing = [n for n in table if n not in present]
    if missing:
        count = _plural(len(missing), "entry", "entries")
        raise GankitError(f"{where} names {missing[0]}, which is not an image of the set ({count}); add the file or "
                          f"remove its entry")
    unlabelled = [n for n in names if n not in table]
    if unlabelled:
        count = _plural(len(unlabelled), "image", "images")
        raise GankitError(f'image {unlabelled[0]} has no label in {where} ({count}); add ["{unlabelled[0]}", class] '
                          f'entries, or set data.labels = "none" to train without labels')
    labels = torch.tensor([table[n][0] for n in names], dtype=torch.int64)
    if num_classes is None:
        num_classes = int(labels.max()) + 1 if len(labels) else 0
    return labels, num_classes


def zip_labels(zf: zipfile.ZipFile, archive: Path, names: Sequence[str], required: bool,
               num_classes: int | None) -> tuple[torch.Tensor | None, int]:
    """Labels of the archive's images ``names`` from its ``dataset.json`` (see ``parse_labels``);
    ``(None, 0)`` when there is none, unless ``required`` (then a GankitError)."""
    top = top_folder(zf)
    stored = next((i.filename for i in zf.infolist() if set_name(i.filename, top) == LABELS_FILE), LABELS_FILE)
    where = f"{archive}:{stored}"
    try:
        zf.getinfo(stored)
    except KeyError:
        if required:
            raise GankitError(f'labels = "dataset.json", but {archive} has no {LABELS_FILE} at its top; add one '
                              f'({{"labels": [["00000/img00000000.png", 6], ...]}}) or set data.labels = "none"'
                              ) from None
        return None, 0
    try:
        raw = zf.read(stored)
    except MEMBER_ERRORS as e:
        raise GankitError(f"cannot read {where} ({reason(e)}); {_FIX_ARCHIVE}") from None
    return parse_labels(raw, where, [set_name(n, top) for n in names], num_classes)


def folder_labels(folder: Path, files: Sequence[Path], required: bool,
                  num_classes: int | None) -> tuple[torch.Tensor | None, int]:
    """Labels of the image ``files`` under ``folder`` from ``folder/dataset.json`` (names are the
    files' paths relative to ``folder``, ``/``-separated); ``(None, 0)`` when there is none,
    unless ``required``."""
    path = folder / LABELS_FILE
    if not path.is_file():
        if required:
            raise GankitError(f'labels = "dataset.json", but there is no {path}; add one '
                              f'({{"labels": [["00000/img00000000.png", 6], ...]}}) or set data.labels = "none"')
        return None, 0
    size = path.stat().st_size
    if size > MAX_LABELS_BYTES:
        raise GankitError(f"{path} holds {size} bytes, over the limit of {MAX_LABELS_BYTES} "
                          f"(gan_kit.builtin.data.archive.MAX_LABELS_BYTES)")
    names = [p.relative_to(folder).as_posix() for p in files]
    return parse_labels(path.read_bytes(), str(path), names, num_classes)


def zip_problem(archive: Path, recursive: bool) -> str | None:
    """Why ``archive`` cannot serve as a data set (unreadable, no images, a zip bomb), or None."""
    try:
        with open_zip(archive) as zf:
            names = member_images(zf, recursive)
            if not names:
                where = "" if recursive else " at its top (recursive = false)"
                return (f"zip archive {archive} holds no image files ({', '.join(e[1:] for e in IMAGE_EXTENSIONS)})"
                        f"{where}; fix data.path")
            return bomb_problem(zf, names, archive)
    except GankitError as e:
        return str(e)
