"""``gankit style-mix``: a style-mixing grid of column seeds' layers in row seeds' images, as
stylegan2-ada-pytorch's style_mixing.py (``gan_kit.tools.stylemix``)."""

from __future__ import annotations

from pathlib import Path

import click

from gan_kit.base.errors import GankitError
from gan_kit.cli.errors import user_errors
from gan_kit.cli.paths import OutputPath

__all__ = ["style_mix"]


@click.command("style-mix")
@click.argument("checkpoint", type=click.Path(path_type=str))  # str: hf:// names stay whole
@click.option("--rows", required=True, metavar="LIST", help="Row seeds, e.g. 85,100,75: the W of each cell in their row.")
@click.option("--cols", required=True, metavar="LIST",
              help="Column seeds, e.g. 55,821,1789: the layers --styles of each cell in their column come from them.")
@click.option("--styles", default=None, metavar="LIST",
              help="Layers taken from the column seed, 0 (coarsest) to num_ws - 1: low ones carry pose and shape, high "
                   "ones colour and texture. A 16 px G has num_ws = 6, a 1024 px one 18. Default: the first 7/18 of "
                   "num_ws, rounded (0-6 at num_ws 18 as style_mixing.py, 0-1 at 6).")
@click.option("--from-rows", is_flag=True,
              help="Swap the roles: each cell is the column seed's W with the layers --styles taken from the row seed.")
@click.option("--out", type=OutputPath(dir_okay=False, path_type=Path), required=True, help="The grid's .png file.")
@click.option("--truncation", "psi", type=float, default=1.0, show_default=True,
              help="Truncation psi of every seed's W (0 = the average image, 1 = none).")
@click.option("--class", "class_", default=None, metavar="K",
              help="Class-conditional runs (needed there): class K for every seed, an index or a class name.")
@click.option("--noise-mode", default="const", show_default=True, metavar="const|random|none",
              help="Synthesis noise: const (the same grid every time), random or none.")
@click.option("--device", default="auto", show_default=True, metavar="DEVICE", help="auto (CUDA when present), cpu, cuda or cuda:N.")
@user_errors
def style_mix(checkpoint: str, rows: str, cols: str, styles: str | None, from_rows: bool, out: Path, psi: float,
              class_: str | None, noise_mode: str, device: str) -> None:
    """Write a style-mixing grid from CHECKPOINT's G_ema (a G with per-layer styles, e.g. stylegan2):
    cell (row, col) is the row seed's W with the layers --styles taken from the column seed
    (--from-rows: the other way round). The column seeds' own images run along the top, the row
    seeds' down the left, as stylegan2-ada-pytorch's style_mixing.py. CHECKPOINT is a checkpoint
    file, a run directory or a folder written by `gankit export`. A model trained elsewhere
    works too: a network-snapshot .pkl of stylegan2-ada-pytorch, StyleGAN3 or R3GAN, or a TF-era
    StyleGAN2 pickle (read without running it), and hf://OWNER/REPO/FILE."""
    from gan_kit.tools.grids import save_image
    from gan_kit.tools.outputs import check_file, staged_outputs
    from gan_kit.tools.seeds import SEED_LIMIT, parse_numbers
    from gan_kit.tools.stylemix import default_styles, style_mix_grid
    from gan_kit.tools.trained import open_generator

    if out.suffix.lower() != ".png":
        raise GankitError(f"--out: {str(out)!r} is not a .png (the grid is written lossless, pixel for pixel)")
    row_seeds = parse_numbers(rows, "--rows", limit=SEED_LIMIT)
    col_seeds = parse_numbers(cols, "--cols", limit=SEED_LIMIT)
    layers = parse_numbers(styles, "--styles", example="0-1") if styles is not None else None
    check_file(out, "--out")  # before the generator is read and any image drawn
    trained = open_generator(checkpoint, device=device)
    trained.style_generator("style mixing")  # before anything else is checked: the reason it cannot work
    label = trained.class_label(class_) if class_ is not None else None
    grid = style_mix_grid(trained, row_seeds, col_seeds, layers, truncation_psi=psi, label=label, noise_mode=noise_mode,
                          from_rows=from_rows)
    with staged_outputs("--out") as staged:  # a temporary name beside it, renamed when whole
        save_image(grid, staged.path(out))
    if styles is None:
        coarse = default_styles(trained.G.num_ws)
        styles = f"0-{coarse[-1]}" if len(coarse) > 1 else "0"
    click.echo(f"wrote a {len(row_seeds)} x {len(col_seeds)} style-mixing grid (layers {styles} of "
               f"{trained.G.num_ws} from the {'row' if from_rows else 'column'} seeds) of {trained.resolution}px "
               f"images to {out}")
