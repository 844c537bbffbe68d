"""``gankit eval CHECKPOINT``: print the metrics of a checkpoint's G_ema (``--baselines``: real vs
real and the untrained G_ema beside it; ``--against stats.npz``: FID against reference statistics);
``gankit eval --write-stats OUT.npz SOURCE``: write a data set's reference statistics.
``gan_kit.tools.evaluate`` computes them."""

from __future__ import annotations

import json

import click

from gan_kit.cli.errors import user_errors
from gan_kit.cli.tricks import trick_options
from gan_kit.tools.evaluate import evaluate_checkpoint, protocol_line, write_reference_stats

__all__ = ["eval_command"]


def _fmt(values: dict[str, float], name: str) -> str:
    """``12.34 [32px 10.1, 16px 14.5]`` from ``{"Metrics/swd": .., "Metrics/swd/32": ..}``. A model
    trained elsewhere works too: a network-snapshot .pkl of stylegan2-ada-pytorch, StyleGAN3 or
    R3GAN, or a TF-era StyleGAN2 pickle (read without running it), and hf://OWNER/REPO/FILE."""
    head = values.get(f"Metrics/{name}")
    levels, others = [], []
    for k, v in values.items():
        rest = k[len(f"Metrics/{name}/"):] if k.startswith(f"Metrics/{name}/") else None
        if rest is not None:
            (levels if rest.isdigit() else others).append(f"{rest}px {v:.2f}" if rest.isdigit() else f"{rest} {v:.4g}")
    parts = (levels if len(levels) > 1 else []) + others  # one level repeats the head value
    if head is None and len(values) == 1:
        head = next(iter(values.values()))
    text = f"{head:.4g}" if head is not None else ", ".join(f"{k} {v:.4g}" for k, v in values.items())
    return text + (f"  [{', '.join(parts)}]" if parts else "")


def _protocol_value(values: dict[str, float], name: str) -> str:
    """``12.34``, ``0.0123 (std 0.0004)``, ``precision 0.712, recall 0.455`` of a protocol's values."""
    head = values.get(f"Metrics/{name}")
    if head is None:
        return ", ".join(f"{k.rsplit('_', 1)[-1]} {v:.4g}" for k, v in values.items())
    std = values.get(f"Metrics/{name}/std")
    return f"{head:.4g}" + (f" (std {std:.2g})" if std is not None else "")


_UNITS = {"swd": "x1e3, lower is better", "fid": "lower is better", "kid": "lower is better",
          "precision-recall": "each in [0, 1], higher is better", "is": "higher is better",
          **dict.fromkeys(("eqt50k_int", "eqt50k_frac", "eqr50k"), "PSNR in dB, higher is better")}


@click.command("eval")
@click.argument("checkpoint", type=click.Path(path_type=str))  # str: hf:// names stay whole
@click.option("--metric", "metrics", multiple=True, metavar="NAME",
              help="Metric to compute (repeatable; default: the recipe's [[metric]] entries, else swd).")
@click.option("--n", "num", type=click.IntRange(2), default=None,
              help="Images per set (default: each metric's num_images; capped at the data's size); for a "
                   "published protocol (fid50k_full) the generated count only: its reals stay the name's.")
@click.option("--baselines", is_flag=True,
              help="Also print real vs real (two halves) and untrained G vs real, all at one image count.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a value of the checkpoint's recipe, e.g. --set data.path=/data/faces.")
@click.option("--device", default=None, help='Device ("cpu", "cuda"); default: the recipe\'s run.device.')
@click.option("--against", metavar="STATS.npz", default=None,
              help="FID of G_ema against reference statistics (mu, sigma: clean-fid's, TTUR's, or gankit's own from "
                   "--write-stats) instead of the data; FID protocols only (default: the file's, else fid50k_full).")
@click.option("--write-stats", "write_stats", metavar="OUT.npz", default=None,
              help="Write the reference statistics of the real set of --metric (an FID protocol, default fid50k_full) "
                   "to OUT.npz, and nothing else; CHECKPOINT is then the data's source: a recipe (.toml), a checkpoint "
                   "or run directory, or a folder or zip of images.")
@click.option("--backbone", metavar="NAME", default=None,
              help="Backbone of every feature metric computed (fid, kid, the protocols; --write-stats too), over the "
                   "recipe's feature_extractor: inception-v3-compat, clip-vit-b32, dinov2-vit-l14, stub, ... With "
                   "--against: default the file's.")
@click.option("--resize", metavar="MODE", default=None,
              help="Resize mode of every feature metric (clean, legacy_tensorflow, legacy_pytorch, pil_uint8, "
                   "pil_uint8_crop); default the recipe's, else the backbone's. With --against: default the file's.")
@click.option("--weights", metavar="FILE", default=None,
              help="The backbone's weights file, for every feature metric; default the recipe's, else "
                   "$GANKIT_WEIGHTS_DIR or the torch hub cache. With --against: the file's, found there by name.")
@click.option("--resolution", "resolution", type=int, default=None, metavar="N",
              help="--write-stats: box-filter the reals down to N px first, as eval of a progressive checkpoint "
                   "in its N px phase reads them (default: the data's resolution).")
@click.option("--overwrite", is_flag=True, help="--write-stats: replace an existing OUT.npz.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@trick_options
@user_errors
def eval_command(checkpoint: str, metrics: tuple[str, ...], num: int | None, baselines: bool,
                 overrides: tuple[str, ...], device: str | None, against: str | None, write_stats: str | None,
                 backbone: str | None, resize: str | None, weights: str | None, resolution: int | None,
                 overwrite: bool, as_json: bool, truncation_normal: float | None, standing_stats: int,
                 standing_batch: int) -> None:
    """Print the metrics of CHECKPOINT's G_ema against the recipe's data. CHECKPOINT is a
    checkpoint file or a run directory (its checkpoints/latest.pt); with --write-stats, the
    source of the data whose statistics are written. --truncation-normal and --standing-stats
    draw the trained G_ema with BigGAN's sampling tricks (the baselines' untrained one without)."""
    features = {"feature_extractor": backbone, "resize": resize, "weights": weights}
    if write_stats is not None:
        if len(metrics) > 1 or baselines or against or num or truncation_normal is not None or standing_stats:
            raise click.UsageError("--write-stats takes one --metric (an FID protocol) and no --baselines, --against, "
                                   "--n, --truncation-normal or --standing-stats")
        meta = write_reference_stats(checkpoint, write_stats, metrics[0] if metrics else "fid50k_full", overrides,
                                     device, overwrite, progress=not as_json, features=features,
                                     resolution=resolution)
        if as_json:
            click.echo(json.dumps(meta, indent=2))
            return
        click.echo(f"wrote {meta['path']}: {meta['protocol']} reference statistics of {meta['count']:,} reals "
                   f"({meta['reals']}), {meta['backbone']} {meta['weights_file'] or 'no weights file'}, "
                   f"{meta['dim']}-d, resize {meta['resize']}")
        return
    if overwrite or resolution is not None:
        raise click.UsageError("--overwrite and --resolution go with --write-stats")
    out = evaluate_checkpoint(checkpoint, metrics, num, overrides, device, baselines, against, progress=not as_json,
                              features=features, truncation_normal=truncation_normal, standing_stats=standing_stats,
                              standing_batch=standing_batch)
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    ph = out["phase"]
    click.echo(f"{out['checkpoint']}: {out['kimg']:g} kimg, phase {ph['index']} at {ph['resolution']}px "
               f"(alpha {ph['alpha']:.2f}); data {out['dataset']}, {out['dataset_size']} images")
    for name, res in out["results"].items():
        unit = _UNITS.get(name, "")
        if "protocol" in res:
            desc = res["protocol"]
            click.echo(protocol_line(name, _protocol_value(res["trained"], name), desc))
            if desc.get("note"):
                click.echo(f"note: {desc['note']}")
        elif "real" in res:
            click.echo(f"{name} ({unit}{'; ' if unit else ''}{res['num_images']} images per set):")
            rows = [("real vs real (two disjoint halves)", res["real"]),
                    ("untrained G_ema vs real", res["untrained"]),
                    (f"trained G_ema ({out['kimg']:g} kimg) vs real", res["trained"])]
            width = max(len(r[0]) for r in rows)
            for label, values in rows:
                click.echo(f"  {label:<{width}}  {_fmt(values, name)}")
        else:
            click.echo(f"{name}{f' ({unit})' if unit else ''}: {_fmt(res['trained'], name)}")
