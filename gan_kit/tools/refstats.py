"""Reference statistics files: the mean ``mu [D]`` and covariance ``sigma [D, D]`` of a real set's
features, which FID compares a generator's against (Heusel et al. 2017).

Three kinds are read, all ``.npz`` with the arrays ``mu`` and ``sigma``:

- clean-fid's (``np.savez_compressed(outf, mu=mu, sigma=sigma)``, ``sigma = np.cov(feats,
  rowvar=False)``) and TTUR's (``fid_stats_*.npz``, the same two keys): no record of how they
  were made, so only the feature dimension can be checked;
- gankit's own: the same two arrays (float64, unbiased covariance as ``np.cov``) plus ``gankit``,
  a JSON text with ``backbone``, ``weights_file``, ``weights_sha256`` (of the file's bytes),
  ``weights_tensors_sha256`` (of its tensors: names, dtypes, shapes, bytes), ``dim``, ``protocol``,
  ``reals`` (the real-set rule in words), ``resize``, ``count``, ``data_sha256`` (of the uint8
  images in order), ``resolution`` and ``channels`` (of the real images the features were
  computed from) and ``format``. Arrays only: the file is read with ``allow_pickle=False``.

Every file is checked when read: finite ``mu`` and ``sigma``, ``sigma`` symmetric and positive
semi-definite (a covariance), and ``gankit`` a JSON object; else one line naming the file.

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

from gan_kit.base.errors import GankitError, clip
from gan_kit.tools.outputs import check_file, write_error

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
    read as a ``.npz``, lacks ``mu`` or ``sigma``, their shapes disagree (``[D]`` and ``[D, D]``),
    they hold NaN or inf, ``sigma`` is not symmetric or not positive semi-definite, or its
    ``gankit`` entry is not gankit's metadata (a JSON object)."""
    path = Path(path).expanduser()
    not_npz = f"--against: {path} is not a .npz of mu and sigma; give clean-fid's, TTUR's or gankit eval --write-stats' file"
    try:
        with np.load(path, allow_pickle=False) as z:
            if not isinstance(z, np.lib.npyio.NpzFile):
                raise GankitError(not_npz)
            keys = set(z.files)
            missing = [k for k in ("mu", "sigma") if k not in keys]
            if missing:
                raise GankitError(f"--against: {path} holds {sorted(keys) or 'no arrays'}, not {' and '.join(missing)}; "
                                  f"a statistics file has mu and sigma (clean-fid, TTUR, or gankit eval --write-stats)")
            mu, sigma = np.asarray(z["mu"], np.float64), np.asarray(z["sigma"], np.float64)
            text = str(z["gankit"]) if "gankit" in keys else None
    except GankitError:
        raise
    except FileNotFoundError:
        raise GankitError(f"--against: {path} not found; give a .npz of mu and sigma") from None
    except IsADirectoryError:
        raise GankitError(f"--against: {path} is a folder; give a .npz of mu and sigma") from None
    except PermissionError as e:
        raise GankitError(f"--against: cannot read {path} ({e.strerror}); give a .npz of mu and sigma") from None
    except (OSError, ValueError, TypeError, EOFError, KeyError):  # a text, pickle or truncated file
        raise GankitError(not_npz) from None
    meta = _metadata(path, text) if text is not None else {}
    if mu.ndim != 1 or sigma.shape != (mu.shape[0], mu.shape[0]):
        raise GankitError(f"--against: {path}: mu has shape {list(mu.shape)} and sigma {list(sigma.shape)}; "
                          f"expected [D] and [D, D]")
    problem = covariance_problem(mu, sigma)
    if problem:
        raise GankitError(f"--against: {path}: {problem}; these are not a mean and covariance of features - write "
                          f"the file again (gankit eval --write-stats)")
    return RefStats(mu, sigma, meta, str(path))


#: The metadata keys ``read_stats`` checks the type of, and the types each may hold.
_META_TYPES = {"backbone": (str,), "weights_file": (str, type(None)), "weights_sha256": (str, type(None)),
               "weights_tensors_sha256": (str, type(None)),
               "dim": (int,), "protocol": (str,), "reals": (str,), "resize": (str,), "count": (int,),
               "resolution": (int,), "channels": (int,)}


def _metadata(path: Path, text: str) -> dict[str, Any]:
    """The ``gankit`` entry of ``path`` read: a JSON object whose known keys hold their types."""
    fix = "write the file again with gankit eval --write-stats, or drop the gankit entry to use it as a plain file"
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as e:
        raise GankitError(f"--against: {path}: its 'gankit' entry is not JSON ({e.msg}); {fix}") from None
    if not isinstance(meta, dict):
        raise GankitError(f"--against: {path}: its 'gankit' entry is {clip(json.dumps(meta), 40)} (a JSON "
                          f"{type(meta).__name__}), not an object of gankit's metadata; {fix}")
    for key, types in _META_TYPES.items():
        if key in meta and (not isinstance(meta[key], types) or isinstance(meta[key], bool)):
            raise GankitError(f"--against: {path}: its 'gankit' entry's key {key!r} holds "
                              f"{clip(json.dumps(meta[key]), 40)}, not a {types[0].__name__}; {fix}")
    return meta


def covariance_problem(mu: np.ndarray, sigma: np.ndarray) -> str | None:
    """What makes ``mu [D]`` / ``sigma [D, D]`` impossible as a mean and covariance, or None:
    NaN or inf, ``sigma`` not symmetric (beyond 1e-6 of its largest entry) or with an eigenvalue
    below ``-1e-6`` times its largest (a covariance is positive semi-definite; rounding gives
    eigenvalues a little below 0)."""
    for name, a in (("mu", mu), ("sigma", sigma)):
        bad = ~np.isfinite(a)
        if bad.any():
            return f"{name} holds {int(bad.sum())} NaN or inf value(s)"
    scale = float(np.abs(sigma).max()) if sigma.size else 0.0
    asym = float(np.abs(sigma - sigma.T).max()) if sigma.size else 0.0
    if asym > 1e-6 * scale:
        return f"sigma is not symmetric (sigma - sigma.T reaches {asym:.3g})"
    if sigma.size:
        eig = np.linalg.eigvalsh((sigma + sigma.T) / 2)
        if eig[0] < -1e-6 * max(float(np.abs(eig).max()), 1e-300):
            return (f"sigma is not positive semi-definite (eigenvalue {eig[0]:.3g}; a covariance has none below 0)")
    return None


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
    if path.is_dir():
        raise GankitError(f"--write-stats: {path} is a folder; give a file name ending in .npz")
    if path.exists() and not overwrite:
        raise GankitError(f"--write-stats: {path} exists; remove it, choose another name, or add --overwrite")
    check_file(path, "--write-stats")  # creates and removes a file beside it: /proc, a read-only disk
    return path


def write_stats(path: str | Path, mu: np.ndarray, sigma: np.ndarray, meta: dict[str, Any]) -> Path:
    """Write ``mu``, ``sigma`` (as float64) and ``meta`` (JSON, ``format`` added) to ``path``
    atomically: under a temporary name in the same folder, renamed when complete. Readable by
    clean-fid (``np.load(f)["mu"]``) and by ``read_stats``. Raises ``GankitError`` naming ``path``
    for a failed write."""
    path = Path(path).expanduser()
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp.npz")
    text = json.dumps({**meta, "format": FORMAT}, sort_keys=True)
    try:
        np.savez_compressed(tmp, mu=np.asarray(mu, np.float64), sigma=np.asarray(sigma, np.float64),
                            gankit=np.array(text))
        os.replace(tmp, path)
    except OSError as e:  # named by the final path: the temporary name means nothing to the user
        raise GankitError(write_error("--write-stats", path, e)) from None
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def mismatch(stats: RefStats, want: dict[str, Any]) -> tuple[str | None, str | None]:
    """``(refusal, note)`` for using ``stats`` where the metric's features are ``want`` (the same
    keys as gankit's metadata; ``resolution`` and ``channels``: the generated images', ``input_size``:
    the side the backbone resizes every image to). ``refusal``: one line naming what
    differs (the dimension for any file; backbone, weights, real-set rule, resize mode and the
    images' resolution and channels for gankit's), or None. ``note``: what could not be checked."""
    where = f"--against: {stats.path}"
    if stats.dim != want["dim"]:
        return (f"{where} holds {stats.dim}-d statistics, and {want['backbone']} gives {want['dim']}-d features; "
                f"use a file of that backbone, or the metric of the file's backbone"), None
    res = want.get("resolution")
    if not stats.meta:
        return None, (f"{stats.path} is a plain mu/sigma file (clean-fid or TTUR): its dimension ({stats.dim}) "
                      f"matches; its backbone, weights, resize mode, real set and image resolution cannot be checked"
                      + _resolution_note(want))
    for key in CHECKED:
        have, need = stats.meta.get(key), want.get(key)
        if key == "weights_sha256":
            tensors, wanted = stats.meta.get("weights_tensors_sha256"), want.get("weights_tensors_sha256")
            if tensors is not None and wanted is not None:  # the same tensors, whatever file holds them
                have, need, what = tensors, wanted, "tensors sha256"
            else:
                what = "file sha256"
            if have is None or need is None:
                continue  # a backbone without a weights file (the stub)
            if have != need:
                return (f"{where} was written with the weights {stats.meta.get('weights_file')} ({what} {have}), "
                        f"and this metric uses {want.get('weights_file')} ({what} {need}); give the file's weights "
                        f"(--weights FILE), or write the statistics again with these"), None
            continue
        if have != need:
            return (f"{where} was written with {key} {have!r}, and this metric uses {need!r}; write the file again "
                    f"with this metric (gankit eval --write-stats), or evaluate with the file's settings"), None
    have_res, have_ch = stats.meta.get("resolution"), stats.meta.get("channels")
    if have_res is None or res is None:
        return None, (None if res is None else f"{stats.path} records no image resolution (written before gankit "
                      f"recorded it): it cannot be checked" + _resolution_note(want))
    if have_res != res or (have_ch is not None and want.get("channels") is not None and have_ch != want["channels"]):
        return (f"{where} holds statistics of {have_res} px reals ({_channels(have_ch)}), and the generated images "
                f"are {res} px ({_channels(want.get('channels'))}; a progressive run evaluates at its phase's "
                f"resolution); write statistics at {res} px (gankit eval --write-stats OUT.npz SOURCE --resolution "
                f"{res}), or evaluate a checkpoint of the final phase"), None
    return None, None


def _channels(n: int | None) -> str:
    return "channels unknown" if n is None else f"{n} channel{'s' if n != 1 else ''}"


def _resolution_note(want: dict[str, Any]) -> str:
    """The generated images' resolution, said beside a file that records none."""
    res, side = want.get("resolution"), want.get("input_size")
    if res is None:
        return ""
    text = f" (the generated images are {res} px"
    if side:
        text += (f"; {want['backbone']} resizes every image to {side} px, so reals of another resolution give a "
                 f"figure, as published statistics of full-size images do, but not the one of reals at {res} px")
    return text + ")"
