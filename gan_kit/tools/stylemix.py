"""``gankit style-mix``: the style-mixing grid of StyleGAN (Karras et al. 2019, sec. 3.1, fig. 3),
laid out as stylegan2-ada-pytorch's style_mixing.py lays it out.

The first row holds the column seeds' images, the first column the row seeds' images, the
top-left cell is blank (black); cell (r, c) is the synthesis of column seed c's ws with the
layers ``styles`` taken from row seed r's ws. Layers are numbered 0 (the coarsest, 4 px) to
``num_ws - 1``: mixing low layers carries pose and shape over from the row seed, high ones
colour and fine texture. Every image is at G's resolution; the grid has no padding.
"""

from __future__ import annotations

import torch

from gan_kit.base.errors import GankitError
from gan_kit.tools.trained import TrainedGenerator

__all__ = ["check_styles", "mixed_styles", "style_mix_grid"]


#: The most mixed cells one grid holds (a 64 x 64 grid): a typo such as ``--rows 0-2000`` would
#: otherwise draw millions of images into one PNG no viewer opens.
MAX_CELLS = 4096


def check_styles(styles: list[int], num_ws: int) -> None:
    """Raise ``GankitError`` (one line naming ``num_ws``) when a layer of ``styles`` is not in
    ``[0, num_ws)``."""
    bad = [s for s in styles if not 0 <= s < num_ws]
    if bad:
        coarse = f"0-{num_ws // 2 - 1}" if num_ws >= 4 else "0"
        raise GankitError(f"--styles: layer {bad[0]} is out of range: this G has num_ws = {num_ws} layers, 0 to "
                          f"{num_ws - 1} (e.g. --styles {coarse}, the coarse half)")


def mixed_styles(row_ws: torch.Tensor, col_ws: torch.Tensor, styles: list[int]) -> torch.Tensor:
    """``ws[R * C, num_ws, w_dim]``, row-major: entry ``r * C + c`` is ``col_ws[c]`` with the
    layers ``styles`` replaced by ``row_ws[r]``'s (``row_ws[R, ...]``, ``col_ws[C, ...]``)."""
    mixed = col_ws.unsqueeze(0).repeat(row_ws.shape[0], 1, 1, 1)  # [R, C, num_ws, w_dim]
    layers = torch.tensor(sorted(set(styles)), dtype=torch.long)
    mixed[:, :, layers] = row_ws[:, None, layers]
    return mixed.flatten(0, 1)


def style_mix_grid(trained: TrainedGenerator, rows: list[int], cols: list[int], styles: list[int], *,
                   truncation_psi: float = 1.0, label: int | None = None, noise_mode: str = "const") -> torch.Tensor:
    """The grid ``[C, r * (len(rows) + 1), r * (len(cols) + 1)]`` in [-1, 1] (r: G's resolution):
    seeds' ws from ``trained.styles(seed_latents(seeds), labels, truncation_psi)``, every image
    ``trained.synthesize(ws, noise_mode)`` (the edges one seed at a time, as ``gankit
    generate`` draws them, the mixed cells in batches); the blank cell is -1 (black). ``label``: the class
    of every image, for a class-conditional G (required there). Raises ``GankitError`` (one
    line) for a G without per-layer styles, a layer outside ``[0, num_ws)``, and what
    ``trained.check`` refuses."""
    G = trained.style_generator("style mixing")
    if len(rows) * len(cols) > MAX_CELLS:
        raise GankitError(f"--rows / --cols: {len(rows)} x {len(cols)} = {len(rows) * len(cols)} mixed images is more "
                          f"than {MAX_CELLS} for one grid (name fewer seeds, or make several grids)")
    check_styles(styles, G.num_ws)
    trained.check(truncation_psi, noise_mode)
    # Each seed mapped and drawn alone, as gankit generate draws it: the edges are its images.
    row_ws = trained.styles(trained.seed_latents(rows), trained.labels(label, len(rows)), truncation_psi,
                            batch_size=1)
    col_ws = trained.styles(trained.seed_latents(cols), trained.labels(label, len(cols)), truncation_psi,
                            batch_size=1)
    row_images = trained.synthesize(row_ws, noise_mode, batch_size=1)
    col_images = trained.synthesize(col_ws, noise_mode, batch_size=1)
    mixed = trained.synthesize(mixed_styles(row_ws, col_ws, styles), noise_mode)
    r = trained.resolution
    grid = torch.full((trained.channels, r * (len(rows) + 1), r * (len(cols) + 1)), -1.0)
    for j, image in enumerate(col_images):
        grid[:, :r, (j + 1) * r:(j + 2) * r] = image
    for i, image in enumerate(row_images):
        grid[:, (i + 1) * r:(i + 2) * r, :r] = image
        for j in range(len(cols)):
            grid[:, (i + 1) * r:(i + 2) * r, (j + 1) * r:(j + 2) * r] = mixed[i * len(cols) + j]
    return grid
