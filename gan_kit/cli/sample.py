"""``gankit sample``: a grid, an interpolation strip, a GIF or an MP4 from a checkpoint's G_ema."""

from __future__ import annotations

from pathlib import Path

import click

from gan_kit.cli.errors import user_errors
from gan_kit.base.errors import GankitError
from gan_kit.tools.seeds import SEED_LIMIT

__all__ = ["sample"]


@click.command("sample")
@click.argument("checkpoint", type=click.Path(path_type=str))  # str: hf:// names stay whole
@click.option("-n", "--n", "num", type=click.IntRange(1), default=64, show_default=True,
              help="Number of images (with --interpolate: of walks, laid out ceil(sqrt(N)) a row).")
@click.option("--seed", type=click.IntRange(0, SEED_LIMIT - 1), default=0, show_default=True,
              help="Seed of the latents; the first image's z is seed SEED's, the one gankit generate --seeds SEED "
                   "draws.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=Path("grid.png"),
              show_default=True, help="Image file for the grid (.gif or .mp4 with --interpolate: an animation).")
@click.option("--truncation", "psi", type=float, default=1.0, show_default=True,
              help="Truncation psi: W pulled toward its average (0 = the average image, 1 = none); "
                   "architectures with a mapping network (stylegan2).")
@click.option("--interpolate", "steps", type=click.IntRange(2), default=None,
              help="Latent interpolation: each row walks from one z to another in STEPS images (spherical, "
                   "as for Gaussian latents; White 2016).")
@click.option("--points", type=click.IntRange(2), default=2, show_default=True,
              help="With --interpolate: latents each walk passes through, STEPS images from one to the next.")
@click.option("--loop", is_flag=True,
              help="With --interpolate: a closed walk, the last point back to the first (no frame twice at the "
                   "seam), so a GIF or MP4 played in a loop has no jump.")
@click.option("--fps", type=click.FloatRange(0, min_open=True), default=None,
              help="Frames per second of a .gif or .mp4 (default: 24 for MP4, 1000/120 for GIF).")
@click.option("--class", "class_", default=None, metavar="K",
              help="Class-conditional runs: every image of class K, an index or a class name (image-folder's "
                   "sub-folder); default: one row per class.")
@user_errors
def sample(checkpoint: str, num: int, seed: int, out: Path, psi: float, steps: int | None, points: int,
           loop: bool, fps: float | None, class_: str | None) -> None:
    """Write a grid of images from the checkpoint's G_ema at its resolution (cells upscaled to at
    least 32 px, like the run's own grids), or a latent interpolation strip, GIF or MP4. CHECKPOINT
    is a checkpoint file, a run directory (its checkpoints/latest.pt) or a folder written by
    `gankit export` (read without pickle). The first image is drawn from seed SEED's z, the one
    `gankit generate --seeds SEED` draws. A class-conditional G draws class K with --class K, else
    one row per class.

    An animation (--interpolate with --out walk.gif or walk.mp4) shows the N walks side by side; a
    GIF plays forth and back, an MP4 once, and --loop closes each walk so that both loop seamlessly."""
    import torch

    from gan_kit.tools.grids import save_grid
    from gan_kit.tools.sampling import save_gif, walk_latents
    from gan_kit.tools.seeds import latent_rows
    from gan_kit.tools.trained import open_generator
    from gan_kit.tools.video import check_video_support, save_mp4

    suffix = out.suffix.lower()
    if suffix not in (".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff", ".gif", ".mp4"):
        raise GankitError(f"--out: {str(out)!r} has no image extension (use .png or .jpg, or .gif / .mp4 with "
                          f"--interpolate)")
    animated = suffix in (".gif", ".mp4")
    if animated and steps is None:
        raise GankitError(f"--out: a {suffix} needs --interpolate STEPS (a grid is written as .png or .jpg)")
    if steps is None and (loop or points != 2):
        raise GankitError(f"{'--loop' if loop else '--points'}: shapes a latent walk; add --interpolate STEPS")
    if fps is not None and not animated:
        raise GankitError(f"--fps: {str(out)!r} is a still image; --fps sets the speed of a .gif or .mp4")
    if suffix == ".mp4":
        check_video_support(f"--out {out}")
    trained = open_generator(checkpoint)
    trained.check(psi)
    classes = trained.num_classes
    label = trained.class_label(class_) if class_ is not None else None
    nrow = None
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
        points_z = latent_rows(seed, points * num, trained.latent_dim).view(num, points, trained.latent_dim)
        walks = walk_latents(points_z, steps, loop=loop)
        frames = nrow = walks.shape[1]  # a row per walk
        z = walks.flatten(0, 1)
        if labels is not None:
            labels = labels.repeat_interleave(frames)
    images = trained.draw(z, labels, truncation_psi=psi, noise_mode="const")
    if suffix == ".gif":
        ms = 120 if fps is None else max(1, round(1000 / fps))
        save_gif(images.reshape(num, frames, *images.shape[1:]), out, ms_per_frame=ms, bounce=not loop)
    elif suffix == ".mp4":
        save_mp4(images.reshape(num, frames, *images.shape[1:]), out, fps=24.0 if fps is None else fps)
    else:
        save_grid(images, out, nrow=nrow)
    what = f"{num} {'closed ' if loop else ''}interpolations of {frames} images" if steps else f"{num} image{'s' if num != 1 else ''}"
    if classes:
        what += f" of class {label}" if label is not None else f", {classes} classes"
    click.echo(f"wrote {what} at {trained.resolution}px (alpha {trained.alpha:.2f}) to {out}")
