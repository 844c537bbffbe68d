"""Evaluate a checkpoint's G_ema with the recipe's metrics (what ``gankit eval CHECKPOINT``
prints; the command is ``gan_kit.cli.evaluate``), and a run's G_ema during training.

The recipe saved in the checkpoint rebuilds the networks and the dataset (``--set`` overrides it,
e.g. ``--set data.path=/data/faces`` when a relative image folder no longer resolves). Real images
are drawn and faded exactly as during training (``gan_kit.tools.evaluate.evaluate``), so with the
same ``num_images`` the figure equals the final ``Metrics/...`` value in metrics.jsonl.

``--baselines`` puts the figure in context, all at one image count per set: real vs real (two
disjoint halves of the data: the floor a perfect G would reach at this sample size), the
untrained G_ema (the recipe's initialisation, same seed) vs real, and the trained G_ema vs real.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

__all__ = ["evaluate_checkpoint", "evaluate", "image_batches", "batch_seed"]


def evaluate(run, metric, num_images: int | None = None) -> dict[str, float]:
    """Run ``metric`` on ``run``'s G_ema at the current phase against real images drawn with the
    metric's seed and faded exactly as during training (the same figure as metrics.jsonl): a
    function of G_ema's weights and the metric's seed only.

    A streamed metric (``metric.streamed``: fid, kid, precision-recall, is) reads both sets batch
    by batch (``image_batches``) on every process - a collective, called by all of them; rank 0
    gets the values, the others ``{}``. Any other metric gets the sets as tensors (rank 0 only)."""
    from gan_kit.base.allocator import ordinary_allocation

    # Training's kept blocks (run.retain_cpu_memory) go back to the kernel, and this pass's
    # tensors, of other shapes, are not kept after it.
    with ordinary_allocation():
        return _evaluate(run, metric, num_images)


def _evaluate(run, metric, num_images: int | None) -> dict[str, float]:
    import torch

    from gan_kit.base.phase import fade_real

    n = min(num_images or metric.num_images, len(run.metric_dataset))
    if getattr(metric, "streamed", False):
        fakes, reals = image_batches(run, metric, n)
        return metric.compute_streamed(fakes, reals, run.device)
    reals = run.real_images(n, seed=metric.seed)
    reals = fade_real(reals, run.phase.resolution, run.phase.alpha)
    g = torch.Generator().manual_seed(metric.seed + 1)
    calls = iter(range(1 << 62))

    def generate(k: int) -> torch.Tensor:
        return _fakes(run, k, g, batch_seed(metric.seed, 2, next(calls)))

    out = metric.compute(generate, reals, run.device)
    if run.num_classes and getattr(getattr(metric, "options", None), "per_class", False):
        out.update(_per_class(run, metric, reals, run.real_labels(reals.shape[0], seed=metric.seed), g))
    return out


def batch_seed(seed: int, stream: int, index: int) -> int:
    """A seed for batch ``index`` of a metric's ``stream`` (1: latents and classes, 2: G's own
    draws), from the metric's ``seed`` alone (numpy's SeedSequence), so a figure depends only on
    the weights and the metric's seed - not on the training RNG, the process count or the
    process that generated the batch."""
    import numpy as np

    return int(np.random.SeedSequence([seed, stream, index]).generate_state(1, np.uint64)[0] >> 1)


def _fakes(run, k: int, g, noise_seed: int):
    """``k`` images of G_ema: latents (and, conditional, classes drawn with the data's
    frequencies) from ``g``, G's own draws from ``noise_seed``."""
    import torch

    z = torch.randn(k, run.latent_dim, generator=g)
    labels = None
    if run.num_classes:
        # A conditional G draws its classes with the data's frequencies (the labels of the data
        # set, drawn with replacement): the generated set then matches the real set class for class.
        known = getattr(run.metric_dataset, "labels", None)
        labels = (torch.randint(run.num_classes, (k,), generator=g) if known is None
                  else known[torch.randint(len(known), (k,), generator=g)])
    return run.generate(z, labels=labels, seed=noise_seed, batch=max(1, k))


def image_batches(run, metric, n: int):
    """``(fakes, reals)``: this process's share of G_ema's ``n`` images and of ``n`` real images
    (drawn with the metric's seed, faded as in training), as ``ImageBatches`` of the metric's
    ``batch_size`` (64 without one). Batch ``i`` of the generated set has latents and noise from
    ``batch_seed(metric.seed, ., i)``, so every process count gives the same set."""
    import hashlib

    import torch

    from gan_kit.training.imagesets import ImageBatches
    from gan_kit.base.phase import fade_real

    size = int(getattr(getattr(metric, "options", None), "batch_size", 64))
    phase = run.phase
    indices = run.data.real_indices(n, metric.seed)

    def real(i: int) -> torch.Tensor:
        return fade_real(run.data.real_images_at(indices[i * size:(i + 1) * size]), phase.resolution, phase.alpha)

    def fake(i: int) -> torch.Tensor:
        k = min(size, n - i * size)
        g = torch.Generator().manual_seed(batch_seed(metric.seed, 1, i))
        return _fakes(run, k, g, batch_seed(metric.seed, 2, i))

    # The generated set is known by G_ema's weights and how it was drawn (it cannot be read
    # twice for a digest); the metrics of one tick on one extractor share its features.
    with torch.no_grad():
        sums = [t.detach().double().sum().reshape(1) for t in run.G_ema.state_dict().values() if t.is_floating_point()]
        squares = [t.detach().double().square().sum().reshape(1) for t in run.G_ema.state_dict().values()
                   if t.is_floating_point()]
        weights = hashlib.sha256(torch.cat(sums + squares).cpu().numpy().tobytes()).hexdigest()
    key = ("G_ema", weights, metric.seed, n, size, phase.resolution, float(phase.alpha), run.num_classes,
           run.rank, run.world_size)
    return (ImageBatches(n, size, fake, run.rank, run.world_size, key=key),
            ImageBatches(n, size, real, run.rank, run.world_size))


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
            return run.generate(z, labels=torch.full((k,), c, dtype=torch.int64), seed=batch_seed(metric.seed, 3, c))

        result = metric.compute(generate, mine, run.device)
        key = key or min(result, key=len)  # the main value (Metrics/swd, not its per-scale parts)
        values[f"{key}/class-{c}"] = result[key]
    if values:
        values[f"{key}/class-mean"] = sum(values.values()) / len(values)
    return values


def _metric(run, name: str, num: int | None):
    """The metric ``name`` with the recipe's options for it (defaults if the recipe has none)."""
    from gan_kit.plugin_api.components import BuildContext
    from gan_kit.base.errors import GankitError

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
    """Evaluate ``path``'s G_ema: a checkpoint file, or a run directory (its
    ``checkpoints/latest.pt``).

    Returns ``{"checkpoint", "kimg", "phase": {...}, "dataset", "dataset_size", "results": {metric:
    {"trained": {...}, and with baselines "real": {...}, "untrained": {...}, "num_images": n}}}``
    where each inner dict maps stat names (``Metrics/swd``, ``Metrics/swd/16``) to values.
    Raises ``GankitError`` (bad checkpoint, recipe problems, unknown metric, missing data/weights).
    """
    from gan_kit.runs import checkpoint as ckpt
    from gan_kit.runs.run import build_run
    from gan_kit.base.phase import Phase, fade_real
    from gan_kit.recipe import load_recipe

    from gan_kit.tools.trained import checkpoint_file

    path = checkpoint_file(path, "gankit eval")  # a run directory: its checkpoints/latest.pt
    state = ckpt.load(path, map_location="cpu")
    recipe, plugins = load_recipe(Path(f"{path}[recipe]"), list(overrides), text=state["recipe"])
    run_opts = attrs.evolve(recipe.run, progress=False, **({"device": device} if device else {}))
    recipe = attrs.evolve(recipe, run=run_opts)
    from gan_kit.plugin_api.ownership import frozen_loads_deferred, load_deferred

    # The data and an untrained G_ema (the recipe's init and seed). Only G_ema draws: D's frozen
    # sub-networks are left unread (their files need not exist); G's come from their files.
    with frozen_loads_deferred():
        run = build_run(recipe, plugins)
    load_deferred(run.G)
    load_deferred(run.G_ema)
    ckpt.check_generator_files(state, run.G_ema, path)
    phase = Phase(**state["phase"]) if state.get("phase") else run.growth.phase_at(int(state["cur_nimg"]))
    run.phase = phase
    run.set_phase(phase)
    names = tuple(metrics) or tuple(dict.fromkeys(s.name for s in recipe.metrics)) or ("swd",)
    built = {name: _metric(run, name, num) for name in names}

    results: dict[str, dict[str, Any]] = {name: {} for name in names}
    if baselines:
        for name, metric in built.items():
            want = num or metric.num_images
            n = max(2, min(want, len(run.metric_dataset) // 2))
            metric = _metric(run, name, n)
            built[name] = metric
            seed = metric.seed
            halves = run.real_images(2 * n, seed=seed + 7)
            halves = fade_real(halves, phase.resolution, phase.alpha)
            a, b = halves[:n], halves[n:2 * n]
            results[name]["num_images"] = n
            results[name]["real"] = metric.compute(lambda k, a=a: a[:k], b, run.device)
            results[name]["untrained"] = evaluate(run, metric, n)
    from gan_kit.base.errors import GankitError
    from gan_kit.runs.resume import classes_problem

    problem = classes_problem(state, run)
    if problem:
        raise GankitError(f"{path}: {problem}")
    try:
        from gan_kit.plugin_api.ownership import load_without_frozen

        load_without_frozen(run.G_ema, state["G_ema"])  # a frozen sub-network came from its own file
    except (RuntimeError, KeyError):  # e.g. --set changed an architecture option
        from gan_kit.plugin_api.ownership import frozen_files
        from gan_kit.runs.checkpoint import misfit, written_by

        detail = misfit(run.G_ema.state_dict(), state.get("G_ema"), list(frozen_files(run.G_ema)))
        raise GankitError(f"{path}: {written_by(state)}; its G_ema does not fit the recipe's networks ({detail}); "
                          f"--set may change the data and metrics, not the architecture") from None
    run.set_phase(phase)
    for name, metric in built.items():
        results[name]["trained"] = evaluate(run, metric, results[name].get("num_images"))
    return {
        "checkpoint": str(path),
        "kimg": int(state["cur_nimg"]) / 1000.0,
        "phase": {"index": phase.index, "resolution": phase.resolution, "alpha": phase.alpha},
        "dataset": recipe.data.name,
        "dataset_size": len(run.metric_dataset),
        "results": results,
    }
