"""``gankit export``: a checkpoint's G_ema as safetensors + config.json + model card, TorchScript
and ONNX (``gan_kit.tools.export``)."""

from __future__ import annotations

from pathlib import Path

import click

from gan_kit.cli.errors import user_errors
from gan_kit.cli.paths import OutputPath
from gan_kit.cli.tricks import trick_options
from gan_kit.tools.export import FORMATS, export_model

__all__ = ["export"]


@click.command("export")
@click.argument("checkpoint", type=click.Path(path_type=str))  # str: hf:// names stay whole
@click.option("--out", type=OutputPath(file_okay=False, path_type=Path), required=True,
              help="Folder to write (created; files in it are replaced): the Hub's model layout.")
@click.option("--format", "formats", default=",".join(FORMATS), show_default=True,
              help="Comma-separated: safetensors (weights for gankit sample / --init-from), torchscript "
                   "(model.ts), onnx (model.onnx). config.json, README.md and samples.png are always written.")
@click.option("--truncation", "psi", type=float, default=1.0, show_default=True,
              help="Truncation psi baked into model.ts / model.onnx (architectures with a mapping network).")
@trick_options
@user_errors
def export(checkpoint: str, out: Path, formats: str, psi: float, truncation_normal: float | None, standing_stats: int,
           standing_batch: int) -> None:
    """Export CHECKPOINT's G_ema to a folder that runs without gankit: model.safetensors, config.json,
    README.md (a model card for the Hugging Face Hub), samples.png, model.ts and model.onnx.
    CHECKPOINT is a checkpoint file or a run directory (its checkpoints/latest.pt).
    `huggingface_hub.upload_folder` publishes the folder as it is. A model trained elsewhere
    works too: a network-snapshot .pkl of stylegan2-ada-pytorch, StyleGAN3 or R3GAN, or a TF-era
    StyleGAN2 pickle (read without running it), and hf://OWNER/REPO/FILE. --standing-stats bakes
    BigGAN's standing statistics into G_ema's BatchNorm buffers; --truncation-normal T records in
    config.json that z is meant to come from the normal truncated to [-T, T] and draws
    samples.png from it (the traced model takes any z)."""
    chosen = [f.strip() for f in formats.split(",") if f.strip()]
    config = export_model(checkpoint, out, chosen, psi, truncation_normal=truncation_normal,
                          standing_stats=standing_stats, standing_batch=standing_batch)
    files = [name for name in config["files"].values() if name]
    click.echo(f"exported {config['architecture']} G_ema at {config['resolution']}px "
               f"({config['kimg']} kimg) to {out}: {', '.join(['config.json', 'README.md'] + files)}")
