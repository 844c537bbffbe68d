"""``gankit eval CHECKPOINT``: print the metrics of a checkpoint's G_ema (``--baselines``: real vs
real and the untrained G_ema beside it); ``gan_kit.tools.evaluate`` computes them."""

from __future__ import annotations

import json

import click

from gan_kit.cli.errors import user_errors
from gan_kit.tools.evaluate import evaluate_checkpoint

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


_UNITS = {"swd": "x1e3, lower is better", "fid": "lower is better", "kid": "lower is better",
          "precision-recall": "each in [0, 1], higher is better", "is": "higher is better"}


@click.command("eval")
@click.argument("checkpoint", type=click.Path(path_type=str))  # str: hf:// names stay whole
@click.option("--metric", "metrics", multiple=True, metavar="NAME",
              help="Metric to compute (repeatable; default: the recipe's [[metric]] entries, else swd).")
@click.option("--n", "num", type=click.IntRange(2), default=None,
              help="Images per set (default: each metric's num_images; capped at the data's size).")
@click.option("--baselines", is_flag=True,
              help="Also print real vs real (two halves) and untrained G vs real, all at one image count.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a value of the checkpoint's recipe, e.g. --set data.path=/data/faces.")
@click.option("--device", default=None, help='Device ("cpu", "cuda"); default: the recipe\'s run.device.')
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
@user_errors
def eval_command(checkpoint: str, metrics: tuple[str, ...], num: int | None, baselines: bool,
                 overrides: tuple[str, ...], device: str | None, as_json: bool) -> None:
    """Print the metrics of CHECKPOINT's G_ema against the recipe's data. CHECKPOINT is a
    checkpoint file or a run directory (its checkpoints/latest.pt)."""
    out = evaluate_checkpoint(checkpoint, metrics, num, overrides, device, baselines)
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    ph = out["phase"]
    click.echo(f"{out['checkpoint']}: {out['kimg']:g} kimg, phase {ph['index']} at {ph['resolution']}px "
               f"(alpha {ph['alpha']:.2f}); data {out['dataset']}, {out['dataset_size']} images")
    for name, res in out["results"].items():
        unit = _UNITS.get(name, "")
        if "real" in res:
            click.echo(f"{name} ({unit}{'; ' if unit else ''}{res['num_images']} images per set):")
            rows = [("real vs real (two disjoint halves)", res["real"]),
                    ("untrained G_ema vs real", res["untrained"]),
                    (f"trained G_ema ({out['kimg']:g} kimg) vs real", res["trained"])]
            width = max(len(r[0]) for r in rows)
            for label, values in rows:
                click.echo(f"  {label:<{width}}  {_fmt(values, name)}")
        else:
            click.echo(f"{name} ({unit}): {_fmt(res['trained'], name)}")
