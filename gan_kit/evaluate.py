"""``gankit eval CHECKPOINT``: evaluate a checkpoint's G_ema with the recipe's metrics.

The recipe saved in the checkpoint rebuilds the networks and the dataset (``--set`` overrides it,
e.g. ``--set data.path=/data/faces`` when a relative image folder no longer resolves). Real images
are drawn and faded exactly as during training (``gan_kit.evaluate.evaluate``), so with the
same ``num_images`` the figure equals the final ``Metrics/...`` value in metrics.jsonl.

``--baselines`` puts the figure in context, all at one image count per set: real vs real (two
disjoint halves of the data: the floor a perfect G would reach at this sample size), the
untrained G_ema (the recipe's initialisation, same seed) vs real, and the trained G_ema vs real.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import click

from gan_kit.cli_errors import user_errors as _user_errors

__all__ = ["eval_command", "evaluate_checkpoint", "evaluate"]


def evaluate(run, metric, num_images: int | None = None) -> dict[str, float]:
    """Run ``metric`` on ``run``'s G_ema at the current phase against real images drawn with the
    metric's seed and faded exactly as during training (the same figure as metrics.jsonl)."""
    from gan_kit.allocator import ordinary_allocation

    # Training's kept blocks (run.retain_cpu_memory) go back to the kernel, and this pass's
    # tensors, of other shapes, are not kept after it.
    with ordinary_allocation():
        return _evaluate(run, metric, num_images)


def _evaluate(run, metric, num_images: int | None) -> dict[str, float]:
    import torch

    from gan_kit.phase import fade_real

    n = num_images or metric.num_images
    reals = run.real_images(min(n, len(run.dataset)), seed=metric.seed)
    reals = fade_real(reals, run.phase.resolution, run.phase.alpha)
    g = torch.Generator().manual_seed(metric.seed + 1)
    # A conditional G draws its classes with the data's frequencies (the labels of the data set,
    # drawn with replacement): the generated set then matches the real set class for class.
    labels = getattr(run.dataset, "labels", None) if run.num_classes else None

    def generate(k: int) -> torch.Tensor:
        z = torch.randn(k, run.latent_dim, generator=g)
        if not run.num_classes:
            return run.generate(z)
        if labels is None:  # a labelled set that does not expose its labels: uniform classes
            return run.generate(z, labels=torch.randint(run.num_classes, (k,), generator=g))
        return run.generate(z, labels=labels[torch.randint(len(labels), (k,), generator=g)])

    out = metric.compute(generate, reals, run.device)
    if run.num_classes and getattr(getattr(metric, "options", None), "per_class", False):
        out.update(_per_class(run, metric, reals, run.real_labels(reals.shape[0], seed=metric.seed), g))
    return out


def _per_class(run, metric, reals, real_labels, g) -> dict[str, float]:
    """The metric's main value for each class of a conditional run - the class's real images
    against G_ema's images of that class - as ``<key>/class-<c>``, and their mean as
    ``<key>/class-mean``. Classes with fewer real images than the metric's ``min_images`` are
    left out."""
    import torch

    if real_labels is None:
        return {}
    values: dict[str, float] = {}
    key = None
    for c in range(run.num_classes):
        mine = reals[real_labels == c]
        if mine.shape[0] < max(2, metric.min_images):
            continue

        def generate(k: int, c: int = c) -> torch.Tensor:
            z = torch.randn(k, run.latent_dim, generator=g)
            return run.generate(z, labels=torch.full((k,), c, dtype=torch.int64))

        result = metric.compute(generate, mine, run.device)
        key = key or min(result, key=len)  # the main value (Metrics/swd, not its per-scale parts)
        values[f"{key}/class-{c}"] = result[key]
    if values:
        values[f"{key}/class-mean"] = sum(values.values()) / len(values)
    return values


def _metric(run, name: str, num: int | None):
    """The metric ``name`` with the recipe's options for it (defaults if the recipe has none)."""
    from gan_kit.components import BuildContext
    from gan_kit.errors import GankitError

    try:
        comp = run.registry.get("metric", name)
    except KeyError as e:
        raise GankitError(f"--metric: {e.args[0]}") from None
    spec = next((s for s in run.recipe.metrics if s.name == name), None)
    options = spec.options if spec is not None else comp.Options()
    if num is not None and hasattr(options, "num_images"):
        options = attrs.evolve(options, num_images=num)
    return comp.factory(options, BuildContext(run.recipe.resolution, run.channels, run.recipe))


def evaluate_checkpoint(path: str | Path, metrics: tuple[str, ...] = (), num: int | None = None,
                        overrides: tuple[str, ...] = (), device: str | None = None,
                        baselines: bool = False) -> dict[str, Any]:
    """Evaluate ``path``'s G_ema.

    Returns ``{"checkpoint", "kimg", "phase": {...}, "dataset", "dataset_size", "results": {metric:
    {"trained": {...}, and with baselines "real": {...}, "untrained": {...}, "num_images": n}}}``
    where each inner dict maps stat names (``Metrics/swd``, ``Metrics/swd/16``) to values.
    Raises ``GankitError`` (bad checkpoint, recipe problems, unknown metric, missing data/weights).
    """
    from gan_kit import checkpoint as ckpt
    from gan_kit.run import Run
    from gan_kit.phase import Phase, fade_real
    from gan_kit.recipe import load_recipe

    path = Path(path)
    state = ckpt.load(path, map_location="cpu")
    recipe, plugins = load_recipe(Path(f"{path}[recipe]"), list(overrides), text=state["recipe"])
    run_opts = attrs.evolve(recipe.run, progress=False, **({"device": device} if device else {}))
    recipe = attrs.evolve(recipe, run=run_opts)
    run = Run(recipe, plugins)  # builds the data and an untrained G_ema (the recipe's init and seed)
    phase = Phase(**state["phase"]) if state.get("phase") else run.growth.phase_at(int(state["cur_nimg"]))
    run.phase = phase
    run.set_phase(phase)
    names = tuple(metrics) or tuple(dict.fromkeys(s.name for s in recipe.metrics)) or ("swd",)
    built = {name: _metric(run, name, num) for name in names}

    results: dict[str, dict[str, Any]] = {name: {} for name in names}
    if baselines:
        for name, metric in built.items():
            want = num or metric.num_images
            n = max(2, min(want, len(run.dataset) // 2))
            metric = _metric(run, name, n)
            built[name] = metric
            seed = metric.seed
            halves = run.real_images(2 * n, seed=seed + 7)
            halves = fade_real(halves, phase.resolution, phase.alpha)
            a, b = halves[:n], halves[n:2 * n]
            results[name]["num_images"] = n
            results[name]["real"] = metric.compute(lambda k, a=a: a[:k], b, run.device)
            results[name]["untrained"] = evaluate(run, metric, n)
    from gan_kit.errors import GankitError
    from gan_kit.resume import classes_problem

    problem = classes_problem(state, run)
    if problem:
        raise GankitError(f"{path}: {problem}")
    try:
        run.G_ema.load_state_dict(state["G_ema"])
    except RuntimeError as e:  # e.g. --set changed an architecture option
        first = str(e).strip().splitlines()
        detail = next((line.strip() for line in first if "size mismatch" in line or "Missing" in line), first[0])
        raise GankitError(f"{path}: its G_ema does not fit the recipe's networks ({detail[:200]}); "
                          f"--set may change the data and metrics, not the architecture") from None
    run.set_phase(phase)
    for name, metric in built.items():
        results[name]["trained"] = evaluate(run, metric, results[name].get("num_images"))
    return {
        "checkpoint": str(path),
        "kimg": int(state["cur_nimg"]) / 1000.0,
        "phase": {"index": phase.index, "resolution": phase.resolution, "alpha": phase.alpha},
        "dataset": recipe.data.name,
        "dataset_size": len(run.dataset),
        "results": results,
    }


def _fmt(values: dict[str, float], name: str) -> str:
    """``12.34 [32px 10.1, 16px 14.5]`` from ``{"Metrics/swd": .., "Metrics/swd/32": ..}``."""
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
@click.argument("checkpoint", type=click.Path(dir_okay=False, path_type=Path))
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
@_user_errors
def eval_command(checkpoint: Path, metrics: tuple[str, ...], num: int | None, baselines: bool,
                 overrides: tuple[str, ...], device: str | None, as_json: bool) -> None:
    """Print the metrics of CHECKPOINT's G_ema against the recipe's data."""
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
