"""``gankit generate``: one PNG per seed, ``seedNNNN.png``, or per saved W vector, ``projNN.png``
(the files and names of stylegan2-ada-pytorch's generate.py, Karras et al. 2020b), each at G's
own resolution, lossless.

The folder is checked before any drawing (``gan_kit.tools.outputs.check_folder``: one line
naming it when it cannot be written), and the PNGs are drawn into temporary files beside their
names and renamed together once all are drawn: an interrupted or failed run leaves the folder
as it was, never some new images beside old ones of the same list. Files of other names in the
folder are left alone.

Seed ``s`` draws ``z = seed_latents([s])`` (``gan_kit.tools.seeds``: on the CPU, so the same on
every device), the z that ``gankit sample --seed s`` draws first and that the exported
``model.ts`` / ``model.onnx`` turn into the same image. A W file is what ``gankit project``
writes (stylegan2-ada-pytorch's projector.py ``projected_w.npz`` layout): key ``w``, float
``[N, num_ws, w_dim]`` or ``[num_ws, w_dim]``, read without pickle.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import torch

from gan_kit.base.errors import GankitError, clip
from gan_kit.tools.grids import MODES, save_image
from gan_kit.tools.outputs import check_folder, staged_outputs
from gan_kit.tools.trained import BATCH, TrainedGenerator

__all__ = ["seed_name", "w_name", "load_ws", "generate_seeds", "generate_from_w"]


def seed_name(seed: int) -> str:
    """``seed0042.png``: 4 digits, zero padded (a larger seed just has more)."""
    return f"seed{seed:04d}.png"


def w_name(index: int) -> str:
    """``proj00.png`` for the W at ``index`` of a W file."""
    return f"proj{index:02d}.png"


def _check_channels(trained: TrainedGenerator) -> None:
    if trained.channels not in MODES:
        raise GankitError(f"{trained.source}: its G makes {trained.channels}-channel images, which no PNG holds "
                          f"(1 to 4 channels: gray, gray + alpha, RGB, RGBA)")


def load_ws(path: str | Path, trained: TrainedGenerator) -> torch.Tensor:
    """The W vectors of ``path`` (an .npz with key ``w``, float ``[N, num_ws, w_dim]`` or
    ``[num_ws, w_dim]``) as float32 ``[N, num_ws, w_dim]`` for ``trained``'s G. Raises
    ``GankitError`` (one line naming the file and a fix) for a G without per-layer styles, a
    missing or unreadable file, no ``w``, another shape, a non-float or non-finite ``w``."""
    G = trained.style_generator("drawing from W (--w)")
    path = Path(path)
    where = f"--w: {path}"
    if not path.is_file():
        raise GankitError(f"{where}: file not found (the .npz that gankit project writes)")
    try:
        data = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile):
        # numpy's own text for a foreign file suggests loading it with pickle, which a W file never needs
        raise GankitError(f"{where}: not an .npz file (give the projected_w.npz gankit project writes, or one "
                          f"written with np.savez(path, w=ws))") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise GankitError(f"{where}: a single array, not an .npz with key 'w' (write it with np.savez(path, w=ws))")
    with data:
        if "w" not in data.files:
            raise GankitError(f"{where}: no array 'w' (it has {', '.join(data.files) or 'none'}); the file of gankit "
                              f"project holds w[N, num_ws, w_dim]")
        try:
            w = data["w"]
        except ValueError as e:  # an object array, which only pickle could read
            raise GankitError(f"{where}: w is not a plain array ({clip(str(e))})") from None
    if not np.issubdtype(w.dtype, np.floating):
        raise GankitError(f"{where}: w is {w.dtype}, not floats (W vectors are float32)")
    shape = f"[N, {G.num_ws}, {G.w_dim}] or [{G.num_ws}, {G.w_dim}]"
    if w.ndim == 2:
        w = w[None]
    if w.ndim != 3 or tuple(w.shape[1:]) != (G.num_ws, G.w_dim):
        raise GankitError(f"{where}: w has shape {list(w.shape)}; this G takes {shape} (num_ws = {G.num_ws}, "
                          f"w_dim = {G.w_dim}): project with this checkpoint")
    if w.shape[0] == 0:
        raise GankitError(f"{where}: w holds no W vector (shape {list(w.shape)})")
    if not np.isfinite(w).all():
        raise GankitError(f"{where}: w holds NaN or infinite values")
    return torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32))


def generate_seeds(trained: TrainedGenerator, seeds: list[int], outdir: str | Path, *, truncation_psi: float = 1.0,
                   label: int | None = None, noise_mode: str = "const") -> list[Path]:
    """Write ``outdir/seedNNNN.png`` for each seed (repeats written once): G's image of
    ``seed_latents([seed])`` with ``truncation_psi``, class ``label`` (a class-conditional G
    needs one) and ``noise_mode``, each seed drawn alone, so its pixels do not depend on the
    other seeds of the list (``gan_kit.tools.trained.BATCH``). Returns the files in seed order.
    Raises ``GankitError`` (one line) for what ``trained.check`` refuses, a missing class, or
    more than 4 channels."""
    _check_channels(trained)
    trained.check(truncation_psi, noise_mode)
    seeds = list(dict.fromkeys(seeds))
    trained.labels(label, 1)  # a class-conditional G without a class: one line, before any work
    outdir = check_folder(outdir, "--outdir")
    written = []
    with staged_outputs("--outdir") as staged:  # every PNG drawn first, then all renamed
        for i in range(0, len(seeds), BATCH):
            chunk = seeds[i:i + BATCH]
            images = trained.draw(trained.seed_latents(chunk), trained.labels(label, len(chunk)),
                                  truncation_psi=truncation_psi, noise_mode=noise_mode, batch_size=1)
            for seed, image in zip(chunk, images):
                save_image(image, staged.path(outdir / seed_name(seed)))
                written.append(outdir / seed_name(seed))
    return written


def generate_from_w(trained: TrainedGenerator, ws: torch.Tensor, outdir: str | Path, *,
                    noise_mode: str = "const") -> list[Path]:
    """Write ``outdir/projNN.png`` for each ``ws[i]`` of ``ws[N, num_ws, w_dim]``: its image
    ``G.synthesis(ws[i:i+1], noise_mode)``, one W at a time as stylegan2-ada-pytorch's
    generate.py ``--projected-w`` draws them. Returns the files. Raises ``GankitError`` for a G without per-layer
    styles, a refused noise mode or more than 4 channels."""
    _check_channels(trained)
    outdir = check_folder(outdir, "--outdir")
    written = []
    with staged_outputs("--outdir") as staged:  # every PNG drawn first, then all renamed
        for i in range(0, ws.shape[0], BATCH):
            images = trained.synthesize(ws[i:i + BATCH], noise_mode=noise_mode, batch_size=1)
            for k, image in enumerate(images):
                save_image(image, staged.path(outdir / w_name(i + k)))
                written.append(outdir / w_name(i + k))
    return written
