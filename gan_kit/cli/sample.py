"""``gankit sample``: a grid, an interpolation strip, a GIF or an MP4 from a checkpoint's G_ema."""

from __future__ import annotations

from pathlib import Path

import click

from gan_kit.cli.errors import user_errors
from gan_kit.base.errors import GankitError
from gan_kit.cli.paths import OutputPath
from gan_kit.cli.transform import output_transform, transform_options
from gan_kit.cli.tricks import trick_options
from gan_kit.tools.sampling import GIF_MAX_FPS
from gan_kit.tools.seeds import SEED_LIMIT

__all__ = ["sample"]


@click.command("sample")
@click.argument("checkpoint", type=click.Path(path_type=str))  # str: hf:// names stay whole
@click.option("-n", "--n", "num", type=click.IntRange(1), default=None,
              help="Number of images (with --interpolate: of walks, laid out ceil(sqrt(N)) a row)  [default: 64; "
                   "with --seeds: one image a seed, one walk through them]")
@click.option("--seed", type=click.IntRange(0, SEED_LIMIT - 1), default=None,
              help="Seed of the latents; the first image's z is seed SEED's, the one gankit generate --seeds SEED "
                   "draws.  [default: 0]")
@click.option("--seeds", default=None, metavar="LIST",
              help="Draw these seeds' z (e.g. 85,100,75, as gankit generate draws them): a grid of their images, or "
                   "with --interpolate a walk through them, keyframe by keyframe (gen_video.py --seeds); -n N splits "
                   "them into N walks of equal length.")
@click.option("--out", type=OutputPath(dir_okay=False, path_type=Path), default=Path("grid.png"),
              show_default=True, help="Image file for the grid (.gif or .mp4 with --interpolate: an animation).")
@click.option("--truncation", "psi", type=float, default=1.0, show_default=True,
              help="Truncation psi: W pulled toward its average (0 = the average image, 1 = none); "
                   "architectures with a mapping network (stylegan2).")
@click.option("--interpolate", "steps", type=click.IntRange(2), default=None,
              help="Latent interpolation: each row walks from one z to another in STEPS images (spherical, "
                   "as for Gaussian latents; White 2016).")
@click.option("--points", type=click.IntRange(2), default=None,
              help="With --interpolate: latents each walk passes through, STEPS images from one to the next.  "
                   "[default: 2]")
@click.option("--space", type=click.Choice(["z", "w"]), default="z", show_default=True,
              help="With --interpolate: walk between the points' z (spherically) or between their W (linearly, as "
                   "gen_video.py; a G with a mapping network). The points' own images are the same either way.")
@click.option("--loop", is_flag=True,
              help="With --interpolate: a closed walk, the last point back to the first (no frame twice at the "
                   "seam), so a GIF or MP4 played in a loop has no jump.")
@click.option("--fps", type=click.FloatRange(0, min_open=True), default=None,
              help=f"Frames per second of a .gif or .mp4 (default: 24 for MP4, 1000/120 for GIF; a GIF stores "
                   f"delays in 1/100 s, so at most {GIF_MAX_FPS:g}).")
@click.option("--class", "class_", default=None, metavar="K",
              help="Class-conditional runs: every image of class K, an index or a class name (image-folder's "
                   "sub-folder); default: one row per class.")
@transform_options
@trick_options
@click.option("--device", default="auto", show_default=True, metavar="DEVICE",
              help="auto (CUDA when present), cpu, cuda or cuda:N.")
@user_errors
def sample(checkpoint: str, num: int | None, seed: int | None, seeds: str | None, out: Path, psi: float,
           steps: int | None, points: int | None, space: str, loop: bool, fps: float | None, class_: str | None,
           translate: str | None, rotate: str | None, truncation_normal: float | None, standing_stats: int,
           standing_batch: int, device: str) -> None:
    """Write a grid of images from the checkpoint's G_ema at its resolution (cells upscaled to at least
    32 px, like the run's own grids), or a latent interpolation strip, GIF or MP4. CHECKPOINT is
    a checkpoint file, a run directory (its checkpoints/latest.pt) or a folder written by
    `gankit export` (read without pickle). The first image is drawn from seed SEED's z, the one
    `gankit generate --seeds SEED` draws; --seeds draws exactly the seeds named. A class-
    conditional G draws class K with --class K, else one row per class.  An animation
    (--interpolate with --out walk.gif or walk.mp4) shows the N walks side by side; a GIF plays
    forth and back, an MP4 once, and --loop closes each walk so that both loop seamlessly.
    Frames are drawn and encoded a few at a time, so a long walk takes no more memory than a
    short one. The file is written under a temporary name and renamed when complete: an
    interrupted or failed run leaves the previous file. A model trained elsewhere works too: a
    network-snapshot .pkl of stylegan2-ada-pytorch, StyleGAN3 or R3GAN, or a TF-era StyleGAN2
    pickle (read without running it), and hf://OWNER/REPO/FILE. --translate / --rotate move a
    StyleGAN3 G's output (every image and frame) through its input transform, as `gankit
    generate`. --truncation-normal T draws z from the normal truncated to [-T, T] (BigGAN's
    truncation trick); --standing-stats N recomputes a BatchNorm G's running statistics from N
    batches first (BigGAN's standing statistics)."""
    import torch

    from gan_kit.tools.grids import save_grid
    from gan_kit.tools.outputs import check_file, staged_outputs, write_error
    from gan_kit.tools.sampling import draw_walk, gif_delay, walk_frames, walk_keys, walk_length, write_gif
    from gan_kit.tools.seeds import parse_numbers
    from gan_kit.tools.trained import open_generator
    from gan_kit.tools.video import VideoWriter, check_video_support

    suffix = out.suffix.lower()
    if suffix not in (".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff", ".gif", ".mp4"):
        raise GankitError(f"--out: {str(out)!r} has no image extension (use .png or .jpg, or .gif / .mp4 with "
                          f"--interpolate)")
    animated = suffix in (".gif", ".mp4")
    if animated and steps is None:
        raise GankitError(f"--out: a {suffix} needs --interpolate STEPS (a grid is written as .png or .jpg)")
    if steps is None and (loop or points is not None or space != "z"):
        option = "--loop" if loop else "--points" if points is not None else "--space"
        raise GankitError(f"{option}: shapes a latent walk; add --interpolate STEPS")
    if fps is not None and not animated:
        raise GankitError(f"--fps: {str(out)!r} is a still image; --fps sets the speed of a .gif or .mp4")
    if seeds is not None and seed is not None:
        raise GankitError("--seed / --seeds: give one of them (--seed N draws N's z and the next ones from its "
                          "generator; --seeds draws exactly the seeds named)")
    if seeds is not None and points is not None:
        raise GankitError("--points: with --seeds the walk passes through the seeds named; leave --points out")
    delay = gif_delay(1000 / 120 if fps is None else fps) if suffix == ".gif" else 0
    if suffix == ".mp4":
        check_video_support(f"--out {out}")
    moved = output_transform(translate, rotate)
    numbers = parse_numbers(seeds, "--seeds", limit=SEED_LIMIT) if seeds is not None else None
    walks, per_walk = _walk_shape(numbers, num, steps, points)
    check_file(out, "--out")  # before the generator is read and any image drawn
    trained = open_generator(checkpoint, device=device).with_tricks(truncation_normal, standing_stats, standing_batch)
    trained.check(psi)
    if moved is not None:
        trained.set_output_transform(*moved)
    if space == "w":
        trained.style_generator("a walk in W (--space w)")
    classes = trained.num_classes
    label = trained.class_label(class_) if class_ is not None else None
    nrow = None
    num = walks
    if classes and label is None and steps is None and numbers is None:
        per_row = max(1, num // classes)  # one row per class, like the run's own grids
        num, nrow = per_row * classes, per_row
        labels = torch.arange(classes).repeat_interleave(per_row)
    elif classes:  # class K everywhere, or an interpolation row per class, cycling
        labels = torch.full((num,), label, dtype=torch.int64) if label is not None else torch.arange(num) % classes
    else:
        labels = None
    start = 0 if seed is None else seed
    if steps is None:
        z = trained.seed_latents(numbers) if numbers is not None else trained.latent_rows(start, num)
        with staged_outputs("--out") as staged:
            save_grid(trained.draw(z, labels, truncation_psi=psi, noise_mode="const"), staged.path(out), nrow=nrow)
        frames = 0
    else:
        if numbers is not None:
            keys = trained.seed_latents(numbers).view(num, per_walk, trained.latent_dim)
        else:
            keys = trained.latent_rows(start, per_walk * num).view(num, per_walk, trained.latent_dim)
        frames = walk_length(per_walk, steps, loop)
        if animated:
            source = walk_frames(trained, keys, steps, loop, labels=labels, truncation_psi=psi, space=space)
            try:
                if suffix == ".gif":
                    write_gif(source, out, delay, bounce=not loop)
                else:
                    with VideoWriter(out, fps=24.0 if fps is None else fps) as video:
                        for frame in source:
                            video.append(frame)
            except OSError as e:  # the disk filled up, the folder went away: the previous file stays
                raise GankitError(write_error("--out", out, e)) from None
        else:  # a still strip: every image is in the picture anyway
            keys = walk_keys(trained, keys, labels=labels, truncation_psi=psi, space=space)
            images = draw_walk(trained, keys, steps, 0, frames, loop, labels=labels, truncation_psi=psi, space=space)
            with staged_outputs("--out") as staged:
                save_grid(images.flatten(0, 1), staged.path(out), nrow=frames)
    if steps:
        through = f" through seeds {', '.join(map(str, numbers))}" if numbers is not None else ""
        what = (f"{num} {'closed ' if loop else ''}interpolation{'s' if num != 1 else ''}{through} of {frames} images"
                + (" in W" if space == "w" else ""))
    else:
        what = f"{num} image{'s' if num != 1 else ''}" + (f" of seeds {seeds}" if numbers is not None else "")
    if classes:
        what += f" of class {label}" if label is not None else f", {classes} classes"
    if suffix == ".gif" and fps is not None and abs(100 / delay - fps) > 1e-9:
        what += f" ({100 / delay:g} fps: GIF stores delays in 1/100 s)"
    click.echo(f"wrote {what} at {trained.resolution}px (alpha {trained.alpha:.2f}) to {out}")


def _walk_shape(numbers: list[int] | None, num: int | None, steps: int | None, points: int | None) -> tuple[int, int]:
    """``(walks or images, points a walk)`` from -n, --seeds and --points; one-line errors for
    seeds that do not split into -n walks of at least 2."""
    if numbers is None:
        return (64 if num is None else num), (2 if points is None else points)
    if steps is None:
        if num is not None and num != len(numbers):
            raise GankitError(f"-n: --seeds names {len(numbers)} images; leave -n out (the grid has one image a seed)")
        return len(numbers), 1
    walks = 1 if num is None else num
    if len(numbers) % walks or len(numbers) // walks < 2:
        raise GankitError(f"--seeds: {len(numbers)} seeds do not make {walks} walk{'s' if walks != 1 else ''} of 2 or "
                          f"more seeds each (give a multiple of {walks}, at least {2 * walks}, or another -n)")
    return walks, len(numbers) // walks
