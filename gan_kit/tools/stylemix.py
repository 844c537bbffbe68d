"""``gankit style-mix``: the style-mixing grid of StyleGAN (Karras et al. 2019, sec. 3.1, fig. 3),
laid out as stylegan2-ada-pytorch's style_mixing.py lays it out.

The first row holds the column seeds' images, the first column the row seeds' images, the
top-left cell is blank (black); cell (r, c) is the synthesis of row seed r's ws with the layers
``styles`` taken from column seed c's ws (style_mixing.py's ``w = w_dict[row_seed].clone();
w[col_styles] = w_dict[col_seed][col_styles]``); ``from_rows`` swaps the roles (column seed c's ws,
layers ``styles`` from row seed r). Layers are numbered 0 (the coarsest, 4 px) to ``num_ws - 1``:
mixing low layers carries pose and shape over from the seed they come from, high ones colour and
fine texture. Every image is at G's resolution; the grid has no padding.
"""

from __future__ import annotations

import torch

from gan_kit.base.errors import GankitError
from gan_kit.tools.trained import TrainedGenerator

__all__ = ["check_styles", "default_styles", "mixed_styles", "style_mix_grid"]


#: The most mixed cells one grid holds (a 64 x 64 grid): a typo such as ``--rows 0-2000`` would
#: otherwise draw millions of images into one PNG no viewer opens.
MAX_CELLS = 4096


def default_styles(num_ws: int) -> list[int]:
    """The coarse layers ``0 .. k - 1`` with ``k = round(7 * num_ws / 18)`` (at least 1): the first
    7/18 of G's layers, which is style_mixing.py's default ``0-6`` on a 1024 px StyleGAN2
    (``num_ws = 18``, the styles up to 32 px) scaled to G's depth - ``0-1`` at 16 px
    (``num_ws = 6``), ``0-4`` at 256 px (14)."""
    return list(range(max(1, int(7 * num_ws / 18 + 0.5))))


def check_styles(styles: list[int], num_ws: int) -> None:
    """Raise ``GankitError`` (one line naming ``num_ws``) when a layer of ``styles`` is not in
    ``[0, num_ws)``."""
    bad = [s for s in styles if not 0 <= s < num_ws]
    if bad:
        coarse = default_styles(num_ws)
        example = f"0-{coarse[-1]}" if len(coarse) > 1 else "0"
        raise GankitError(f"--styles: layer {bad[0]} is out of range: this G has num_ws = {num_ws} layers, 0 to "
                          f"{num_ws - 1} (e.g. --styles {example}, the coarse layers and the default)")


def mixed_styles(row_ws: torch.Tensor, col_ws: torch.Tensor, styles: list[int], *,
                 from_rows: bool = False) -> torch.Tensor:
    """``ws[R * C, num_ws, w_dim]``, row-major (``row_ws[R, num_ws, w_dim]``, ``col_ws[C, ...]``):
    entry ``r * C + c`` is ``row_ws[r]`` with the layers ``styles`` replaced by ``col_ws[c]``'s, as
    style_mixing.py mixes; with ``from_rows``, ``col_ws[c]`` with the layers ``styles`` from
    ``row_ws[r]``."""
    R, C = row_ws.shape[0], col_ws.shape[0]
    rows = row_ws[:, None].expand(R, C, *row_ws.shape[1:])
    cols = col_ws[None].expand(R, C, *col_ws.shape[1:])
    base, donor = (cols, rows) if from_rows else (rows, cols)
    mixed = base.clone()  # [R, C, num_ws, w_dim]
    layers = torch.tensor(sorted(set(styles)), dtype=torch.long)
    mixed[:, :, layers] = donor[:, :, layers]
    return mixed.flatten(0, 1)


def style_mix_grid(trained: TrainedGenerator, rows: list[int], cols: list[int], styles: list[int] | None = None, *,
                   truncation_psi: float = 1.0, label: int | None = None, noise_mode: str = "const",
                   from_rows: bool = False) -> torch.Tensor:
    """The grid ``[C, r * (len(rows) + 1), r * (len(cols) + 1)]`` in [-1, 1] (r: G's resolution):
    seeds' ws from ``trained.styles(seed_latents(seeds), labels, truncation_psi)``, every image
    ``trained.synthesize(ws, noise_mode)`` (the edges one seed at a time, as ``gankit
    generate`` draws them, the mixed cells ``mixed_styles(row_ws, col_ws, styles, from_rows)`` in
    batches); the blank cell is -1 (black). ``styles`` None: ``default_styles(num_ws)``. ``label``: the class
    of every image, for a class-conditional G (required there). Raises ``GankitError`` (one
    line) for a G without per-layer styles, a layer outside ``[0, num_ws)``, and what
    ``trained.check`` refuses."""
    G = trained.style_generator("style mixing")
    if len(rows) * len(cols) > MAX_CELLS:
        raise GankitError(f"--rows / --cols: {len(rows)} x {len(cols)} = {len(rows) * len(cols)} mixed images is more "
                          f"than {MAX_CELLS} for one grid (name fewer seeds, or make several grids)")
    styles = default_styles(G.num_ws) if styles is None else styles
    check_styles(styles, G.num_ws)
    trained.check(truncation_psi, noise_mode)
    # Each seed mapped and drawn alone, as gankit generate draws it: the edges are its images.
    row_ws = trained.styles(trained.seed_latents(rows), trained.labels(label, len(rows)), truncation_psi,
                            batch_size=1)
    col_ws = trained.styles(trained.seed_latents(cols), trained.labels(label, len(cols)), truncation_psi,
                            batch_size=1)
    row_images = trained.synthesize(row_ws, noise_mode, batch_size=1)
    col_images = trained.synthesize(col_ws, noise_mode, batch_size=1)
    mixed = trained.synthesize(mixed_styles(row_ws, col_ws, styles, from_rows=from_rows), noise_mode)
    r = trained.resolution
    grid = torch.full((trained.channels, r * (len(rows) + 1), r * (len(cols) + 1)), -1.0)
    for j, image in enumerate(col_images):
        grid[:, :r, (j + 1) * r:(j + 2) * r] = image
    for i, image in enumerate(row_images):
        grid[:, (i + 1) * r:(i + 2) * r, :r] = image
        for j in range(len(cols)):
            grid[:, (i + 1) * r:(i + 2) * r, (j + 1) * r:(j + 2) * r] = mixed[i * len(cols) + j]
    return grid
