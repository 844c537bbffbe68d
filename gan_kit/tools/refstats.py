"""Reference statistics files: the mean ``mu [D]`` and covariance ``sigma [D, D]`` of a real set's
features, which FID compares a generator's against (Heusel et al. 2017).

Three kinds are read, all ``.npz`` with the arrays ``mu`` and ``sigma``:

- clean-fid's (``np.savez_compressed(outf, mu=mu, sigma=sigma)``, ``sigma = np.cov(feats,
  rowvar=False)``) and TTUR's (``fid_stats_*.npz``, the same two keys): no record of how they
  were made, so only the feature dimension can be checked;
- gankit's own: the same two arrays (float64, unbiased covariance as ``np.cov``) plus ``gankit``,
  a JSON text with ``backbone``, ``weights_file``, ``weights_sha256``, ``dim``, ``protocol``,
  ``reals`` (the real-set rule in words), ``resize``, ``count``, ``data_sha256`` (of the uint8
  images in order) and ``format``. Arrays only: the file is read with ``allow_pickle=False``.

``write_stats`` writes under a temporary name in the destination's folder and renames it when
complete. ``mismatch`` names what differs between a file and the metric about to use it.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from gan_kit.base.errors import GankitError

__all__ = ["RefStats", "read_stats", "write_stats", "mismatch", "check_destination", "FORMAT"]

#: The ``format`` of gankit's statistics files.
FORMAT = "gankit-reference-stats-1"

#: The metadata a gankit file holds, in the order ``mismatch`` checks them.
CHECKED = ("backbone", "weights_sha256", "dim", "reals", "resize")


@attrs.frozen
class RefStats:
    """``mu [D]`` and ``sigma [D, D]`` (float64) of a real set; ``meta``: gankit's metadata, empty
    for a clean-fid or TTUR file; ``path``: where it was read from."""

    mu: np.ndarray
    sigma: np.ndarray
    meta: dict = attrs.field(factory=dict)
    path: str = ""

    @property
    def dim(self) -> int:
        return int(self.mu.shape[0])


def read_stats(path: str | Path) -> RefStats:
    """The statistics in ``path``. Raises ``GankitError`` (one line naming the file) when it cannot be
    read, lacks ``mu`` or ``sigma``, or their shapes disagree (``[D]`` and ``[D, D]``)."""
    path = Path(path).expanduser()
    try:
        with np.load(path, allow_pickle=False) as z:
            keys = set(z.files)
            missing = [k for k in ("mu", "sigma") if k not in keys]
            if missing:
                raise GankitError(f"--against: {path} holds {sorted(keys) or 'no arrays'}, not {' and '.join(missing)}; "
                                  f"a statistics file has mu and sigma (clean-fid, TTUR, or gankit eval --write-stats)")
            mu, sigma = np.asarray(z["mu"], np.float64), np.asarray(z["sigma"], np.float64)
            meta = json.loads(str(z["gankit"])) if "gankit" in keys else {}
    except GankitError:
        raise
    except FileNotFoundError:
        raise GankitError(f"--against: {path} not found; give a .npz of mu and sigma") from None
    except (OSError, ValueError, json.JSONDecodeError) as e:
        raise GankitError(f"--against: cannot read {path} as a .npz statistics file ({type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else e!r}); write one with gankit eval --write-stats") from None
    if mu.ndim != 1 or sigma.shape != (mu.shape[0], mu.shape[0]):
        raise GankitError(f"--against: {path}: mu has shape {list(mu.shape)} and sigma {list(sigma.shape)}; "
                          f"expected [D] and [D, D]")
    return RefStats(mu, sigma, meta, str(path))


def check_destination(path: str | Path, overwrite: bool = False) -> Path:
    """``path`` as a destination for ``write_stats``, checked before the long work: a ``.npz`` name,
    in a folder that exists and can be written, not an existing file unless ``overwrite``.
    Raises ``GankitError``."""
    path = Path(path).expanduser()
    if path.suffix != ".npz":
        raise GankitError(f"--write-stats: {path} should end in .npz (numpy would add the suffix itself); "
                          f"name it {path.name}.npz")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise GankitError(f"--write-stats: folder {folder} does not exist; create it or choose another path")
    if not os.access(folder, os.W_OK):
        raise GankitError(f"--write-stats: cannot write in folder {folder}; choose another path")
    if path.is_dir():
        raise GankitError(f"--write-stats: {path} is a folder; give a file name ending in .npz")
    if path.exists() and not overwrite:
        raise GankitError(f"--write-stats: {path} exists; remove it, choose another name, or add --overwrite")
    return path


def write_stats(path: str | Path, mu: np.ndarray, sigma: np.ndarray, meta: dict[str, Any]) -> Path:
    """Write ``mu``, ``sigma`` (as float64) and ``meta`` (JSON, ``format`` added) to ``path``
    atomically: under a temporary name in the same folder, renamed when complete. Readable by
    clean-fid (``np.load(f)["mu"]``) and by ``read_stats``."""
    path = Path(path).expanduser()
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp.npz")
    text = json.dumps({**meta, "format": FORMAT}, sort_keys=True)
    try:
        np.savez_compressed(tmp, mu=np.asarray(mu, np.float64), sigma=np.asarray(sigma, np.float64),
                            gankit=np.array(text))
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def mismatch(stats: RefStats, want: dict[str, Any]) -> tuple[str | None, str | None]:
    """``(refusal, note)`` for using ``stats`` where the metric's features are ``want`` (the same
    keys as gankit's metadata). ``refusal``: one line naming what differs (the dimension for any
    file; backbone, weights, real-set rule and resize mode for gankit's), or None. ``note``: for a
    file without metadata, what could not be checked."""
    where = f"--against: {stats.path}"
    if stats.dim != want["dim"]:
        return (f"{where} holds {stats.dim}-d statistics, and {want['backbone']} gives {want['dim']}-d features; "
                f"use a file of that backbone, or the metric of the file's backbone"), None
    if not stats.meta:
        return None, (f"{stats.path} is a plain mu/sigma file (clean-fid or TTUR): its dimension ({stats.dim}) "
                      f"matches; its backbone, weights, resize mode and real set cannot be checked")
    for key in CHECKED:
        have, need = stats.meta.get(key), want.get(key)
        if key == "weights_sha256" and (have is None or need is None):
            continue  # a backbone without a weights file (the stub)
        if have != need:
            return (f"{where} was written with {key} {have!r}, and this metric uses {need!r}; write the file again "
                    f"with this metric (gankit eval --write-stats), or evaluate with the file's settings"), None
    return None, None
