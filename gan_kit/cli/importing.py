"""``gankit import``: a model trained elsewhere (a network-snapshot pickle of stylegan2-ada-pytorch,
StyleGAN3 or R3GAN, a TF-era StyleGAN2 pickle, or a file a plugin's importer reads) as a gankit
model folder (``gan_kit.tools.importing``)."""

from __future__ import annotations

from pathlib import Path

import click

from gan_kit.cli.errors import user_errors
from gan_kit.tools.importing import describe, import_model

__all__ = ["import_command"]


@click.command("import")
@click.argument("source", metavar="FILE")
@click.option("--out", type=click.Path(path_type=Path), required=True,
              help="Folder to write (new, empty, or an earlier import): checkpoints/latest.pt and recipe.toml.")
@user_errors
def import_command(source: str, out: Path) -> None:
    """Import FILE, a model trained elsewhere, into a gankit model folder, without running any
    code the file holds. FILE is a path or hf://OWNER/REPO/FILE (read through huggingface_hub's
    cache). The folder reads like a run directory: gankit generate OUT --seeds 0-3, style-mix,
    project, sample, eval and export take it, and gankit run OUT/recipe.toml --init-from OUT
    fine-tunes it. Every command also takes FILE itself. `gankit list-plugins --kind importer`
    lists the formats."""
    state, name = import_model(source, out)
    imported = state["imported"]
    click.echo(f"imported {describe(state)} (importer {name}) from {imported['file']} (SHA-256 "
               f"{imported['sha256'][:16]}...) to {out}: checkpoints/latest.pt, recipe.toml")
    click.echo(f"next: gankit generate {out} --seeds 0-3 --outdir out; to fine-tune, set data.path in "
               f"{out / 'recipe.toml'} and run gankit run {out / 'recipe.toml'} --init-from {out}")
