"""``gankit generate``: one PNG per seed, or per W vector of a file (``gan_kit.tools.generate``)."""

from __future__ import annotations

from pathlib import Path

import click

from gan_kit.base.errors import GankitError
from gan_kit.cli.errors import user_errors
from gan_kit.cli.paths import OutputPath
from gan_kit.cli.transform import output_transform, transform_options
from gan_kit.cli.tricks import trick_options

__all__ = ["generate"]


@click.command("generate")
@click.argument("checkpoint", type=click.Path(path_type=str))  # str: hf:// names stay whole
@click.option("--seeds", default=None, metavar="LIST",
              help="Seeds to draw: numbers and inclusive ranges, e.g. 0-7,42; one PNG each, seedNNNN.png.")
@click.option("--outdir", type=OutputPath(file_okay=False, path_type=Path), required=True,
              help="Folder for the PNGs (created; files of the same names are replaced, all together once every image "
                   "is drawn).")
@click.option("--truncation", "psi", type=float, default=1.0, show_default=True,
              help="Truncation psi: W pulled toward its average (0 = the average image, 1 = none); "
                   "architectures with a mapping network (stylegan2).")
@click.option("--class", "class_", default=None, metavar="K",
              help="Class-conditional runs (needed there): class K, an index or a class name.")
@click.option("--noise-mode", default="const", show_default=True, metavar="const|random|none",
              help="Synthesis noise (stylegan2): const (the same image every time), random (fresh noise from the "
                   "torch RNG) or none.")
@click.option("--w", "w_path", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="FILE.npz",
              help="Draw from the W vectors of this file instead of seeds (gankit project's output: key w, "
                   "[N, num_ws, w_dim]); one PNG each, projNN.png.")
@transform_options
@trick_options
@click.option("--device", default="auto", show_default=True, metavar="DEVICE", help="auto (CUDA when present), cpu, cuda or cuda:N.")
@user_errors
def generate(checkpoint: str, seeds: str | None, outdir: Path, psi: float, class_: str | None, noise_mode: str,
             w_path: Path | None, translate: str | None, rotate: str | None, truncation_normal: float | None,
             standing_stats: int, standing_batch: int, device: str) -> None:
    """Write one PNG per seed, seedNNNN.png (or per W vector of --w FILE.npz, projNN.png), from
    CHECKPOINT's G_ema at its resolution, lossless. Seed N's image is the one `gankit sample
    --seed N -n 1` draws and the exported model.ts / model.onnx make from seed N's z. CHECKPOINT
    is a checkpoint file, a run directory (its checkpoints/latest.pt) or a folder written by
    `gankit export`. A model trained elsewhere works too: a network-snapshot .pkl of
    stylegan2-ada-pytorch, StyleGAN3 or R3GAN, or a TF-era StyleGAN2 pickle (read without
    running it), and hf://OWNER/REPO/FILE. --translate / --rotate move a StyleGAN3 G's output
    through its input transform (the inverse matrix, as gen_images.py). --truncation-normal T
    draws each seed's z from the normal truncated to [-T, T] (BigGAN's truncation trick: entries
    beyond T redrawn from the seed's generator); --standing-stats N recomputes a BatchNorm G's
    running statistics from N batches first (BigGAN's standing statistics)."""
    from gan_kit.tools.generate import generate_from_w, generate_seeds, load_ws
    from gan_kit.tools.outputs import check_folder
    from gan_kit.tools.seeds import SEED_LIMIT, parse_numbers
    from gan_kit.tools.trained import open_generator

    if seeds is None and w_path is None:
        raise GankitError("--seeds: give the seeds to draw (e.g. --seeds 0-7,42), or --w FILE.npz to draw saved W")
    if seeds is not None and w_path is not None:
        raise GankitError("--seeds / --w: give one of them (--w draws the file's W vectors, which no seed makes)")
    if w_path is not None and psi != 1.0:
        raise GankitError("--truncation: --w draws the file's W vectors as they are; leave --truncation out")
    if w_path is not None and truncation_normal is not None:
        raise GankitError("--truncation-normal: --w draws the file's W vectors, which no z makes; leave it out")
    if w_path is not None and class_ is not None:
        raise GankitError("--class: --w draws the file's W vectors, whose class the mapping network already put "
                          "in; leave --class out")
    moved = output_transform(translate, rotate)
    numbers = parse_numbers(seeds, "--seeds", limit=SEED_LIMIT) if seeds is not None else []
    check_folder(outdir, "--outdir")  # before the generator is read and any image drawn
    trained = open_generator(checkpoint, device=device).with_tricks(truncation_normal, standing_stats, standing_batch)
    trained.check(psi, noise_mode)
    if moved is not None:
        trained.set_output_transform(*moved)
    if w_path is not None:
        written = generate_from_w(trained, load_ws(w_path, trained), outdir, noise_mode=noise_mode)
        what = f" from the W of {w_path}"
    else:
        label = trained.class_label(class_) if class_ is not None else None
        written = generate_seeds(trained, numbers, outdir, truncation_psi=psi, label=label, noise_mode=noise_mode)
        what = f" of class {label}" if label is not None else ""
    names = written[0].name if len(written) == 1 else f"{written[0].name} ... {written[-1].name}"
    click.echo(f"wrote {len(written)} image{'s' if len(written) != 1 else ''} ({names}){what} at "
               f"{trained.resolution}px to {outdir}")

