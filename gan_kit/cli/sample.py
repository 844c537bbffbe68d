"""``gankit sample``: a grid, an interpolation strip or a GIF from a checkpoint's G_ema."""

from __future__ import annotations

from pathlib import Path

import click

from gan_kit.cli.errors import user_errors
from gan_kit.base.errors import GankitError

__all__ = ["sample"]


@click.command("sample")
@click.argument("checkpoint", type=click.Path(path_type=Path))
@click.option("-n", "--n", "num", type=click.IntRange(1), default=64, show_default=True,
              help="Number of images (with --interpolate: of rows).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the latents; the first image's z is seed SEED's, the one gankit generate --seeds SEED "
                   "draws.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=Path("grid.png"),
              show_default=True, help="Image file for the grid (.gif with --interpolate: an animation).")
@click.option("--truncation", "psi", type=float, default=1.0, show_default=True,
              help="Truncation psi: W pulled toward its average (0 = the average image, 1 = none); "
                   "architectures with a mapping network (stylegan2).")
@click.option("--interpolate", "steps", type=click.IntRange(2), default=None,
              help="Latent interpolation: each row walks from one z to another in STEPS images (spherical, "
                   "as for Gaussian latents; White 2016).")
@click.option("--class", "class_", default=None, metavar="K",
              help="Class-conditional runs: every image of class K, an index or a class name (image-folder's "
                   "sub-folder); default: one row per class.")
@user_errors
def sample(checkpoint: Path, num: int, seed: int, out: Path, psi: float, steps: int | None,
           class_: str | None) -> None:
    """Write a grid of images from the checkpoint's G_ema at its resolution (cells upscaled to at
    least 32 px, like the run's own grids), or a latent interpolation strip or GIF. CHECKPOINT is
    a checkpoint file, a run directory (its checkpoints/latest.pt) or a folder written by `gankit
    export` (read without pickle). The first image is drawn from seed SEED's z, the one `gankit
    generate --seeds SEED` draws. A class-conditional G draws class K with --class K, else one
    row per class."""
    import torch

    from gan_kit.tools.grids import save_grid
    from gan_kit.tools.sampling import interpolate_latents, save_gif
    from gan_kit.tools.seeds import latent_rows
    from gan_kit.tools.trained import open_generator

    suffix = out.suffix.lower()
    if suffix not in (".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff", ".gif"):
        raise GankitError(f"--out: {str(out)!r} has no image extension (use .png or .jpg, or .gif with --interpolate)")
    if suffix == ".gif" and steps is None:
        raise GankitError("--out: a .gif needs --interpolate STEPS (a grid is written as .png or .jpg)")
    trained = open_generator(checkpoint)
    trained.check(psi)
    classes = trained.num_classes
    label = trained.class_label(class_) if class_ is not None else None
    nrow = steps
    if classes and label is None and steps is None:
        per_row = max(1, num // classes)  # one row per class, like the run's own grids
        num, nrow = per_row * classes, per_row
        labels = torch.arange(classes).repeat_interleave(per_row)
    elif classes:  # class K everywhere, or an interpolation row per class, cycling
        labels = torch.full((num,), label, dtype=torch.int64) if label is not None else torch.arange(num) % classes
    else:
        labels = None
    if steps is None:
        z = latent_rows(seed, num, trained.latent_dim)  # row 0: seed SEED's z, as generate draws it
    else:
        pairs = latent_rows(seed, 2 * num, trained.latent_dim).view(num, 2, trained.latent_dim)
        z = interpolate_latents(pairs, steps).flatten(0, 1)
        if labels is not None:
            labels = labels.repeat_interleave(steps)
    images = trained.draw(z, labels, truncation_psi=psi, noise_mode="const")
    if suffix == ".gif":
        save_gif(images.reshape(num, steps, *images.shape[1:]), out)
    else:
        save_grid(images, out, nrow=nrow)
    what = f"{num} interpolations of {steps} images" if steps else f"{num} images"
    if classes:
        what += f" of class {label}" if label is not None else f", {classes} classes"
    click.echo(f"wrote {what} at {trained.resolution}px (alpha {trained.alpha:.2f}) to {out}")
